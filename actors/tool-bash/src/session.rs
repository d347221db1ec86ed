//! The session messages of the tool actor: a host sets a session's standing sandbox mode and
//! workspace, and asks for its standing policy, outside any tool call. None is shown to the model.

use std::path::PathBuf;

use actix::prelude::*;
use dsh_bash::{SandboxMode, SandboxPolicy};

use crate::error::ToolError;
use crate::tool::ToolBash;

/// Sets (`Some`) or clears (`None`) a session's standing sandbox mode. Never shown to the model. Fails when the executor does not confine.
#[derive(Message, Clone, Debug)]
#[rtype(result = "Result<(), ToolError>")]
pub struct SetSessionSandboxMode {
    /// The agent session.
    pub session: String,
    /// Its new standing mode.
    pub mode: Option<SandboxMode>,
}

impl Handler<SetSessionSandboxMode> for ToolBash {
    type Result = Result<(), ToolError>;

    fn handle(&mut self, msg: SetSessionSandboxMode, _: &mut Self::Context) -> Self::Result {
        let policy = self.policy.as_mut().ok_or(ToolError::NotSandboxed)?;
        policy.set_session_mode(&msg.session, msg.mode);
        Ok(())
    }
}

/// Sets (`Some`) or clears (`None`) one session's own workspace root for the sandbox policy: what
/// `workspace-write` lets its commands write. Without a sandboxing executor there is nothing to
/// confine, and the message does nothing.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct SetSessionWorkspace {
    /// The agent session.
    pub session: String,
    /// Its workspace root.
    pub root: Option<PathBuf>,
}

impl Handler<SetSessionWorkspace> for ToolBash {
    type Result = ();

    fn handle(&mut self, msg: SetSessionWorkspace, _: &mut Self::Context) {
        if let Some(policy) = self.policy.as_mut() {
            policy.set_session_root(&msg.session, msg.root.as_deref());
        }
    }
}

/// The standing sandbox policy of a session (its mode and workspace root, or the defaults), for
/// work a host starts on a session's behalf outside a tool call; `None` without a sandboxing
/// executor.
#[derive(Message, Debug, Clone)]
#[rtype(result = "Option<SandboxPolicy>")]
pub struct StandingSandboxPolicy {
    /// The agent session, if any.
    pub session: Option<String>,
}

impl Handler<StandingSandboxPolicy> for ToolBash {
    type Result = Option<SandboxPolicy>;

    fn handle(&mut self, msg: StandingSandboxPolicy, _: &mut Self::Context) -> Self::Result {
        self.policy
            .as_ref()
            .map(|policy| policy.resolve(msg.session.as_deref(), None))
    }
}
