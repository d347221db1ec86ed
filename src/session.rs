//! [`Session`]: one agent session of a runtime, as a host holds it. The session's id decides
//! which background tasks it may see; its inbox gets their completion notices; its standing
//! sandbox mode and workspace shape its commands. A front end keeps one per session instead of
//! rebuilding the pieces per call.

use std::path::PathBuf;

use actix::prelude::*;
use dsh_bash::{BashExecRequest, RestartPolicy, SandboxMode};
use dsh_tasks::{AgentRef, Inject, Lease, TaskSnapshot};
use dsh_tool_bash::{ApprovalRequest, TaskId, ToolCall, ToolResult};

use crate::error::RuntimeError;
use crate::runtime::Runtime;

/// One agent session of a runtime (see [`Runtime::session`]). `Clone`: clones are the same session.
#[derive(Clone)]
pub struct Session {
    runtime: Runtime,
    agent: AgentRef,
    /// Where the session's escalations are asked, for calls that name no approver of their own.
    approver: Option<Recipient<ApprovalRequest>>,
}

impl Runtime {
    /// A handle on the agent session `id`, whose completion notices go to `inbox`: its calls run
    /// as that session's, and its background tasks belong to it.
    pub fn session(&self, id: impl Into<String>, inbox: Recipient<Inject>) -> Session {
        Session::new(self.clone(), AgentRef::new(id, inbox))
    }

    /// [`Runtime::session`] for an agent named in full (with a lease, see
    /// [`AgentRef::with_lease`]).
    pub fn session_of(&self, agent: AgentRef) -> Session {
        Session::new(self.clone(), agent)
    }
}

impl Session {
    fn new(runtime: Runtime, agent: AgentRef) -> Self {
        Self {
            runtime,
            agent,
            approver: None,
        }
    }

    /// Asks `approver` for this session's escalations, unless a call names its own.
    pub fn with_approver(mut self, approver: Recipient<ApprovalRequest>) -> Self {
        self.approver = Some(approver);
        self
    }

    /// Every task this session starts holds `lease` (see [`AgentRef::with_lease`]).
    pub fn with_lease(mut self, lease: Lease) -> Self {
        self.agent = self.agent.with_lease(lease);
        self
    }

    /// The session id.
    pub fn id(&self) -> &str {
        &self.agent.session_id
    }

    /// The session as the actors name it: its id and its inbox.
    pub fn agent(&self) -> &AgentRef {
        &self.agent
    }

    /// The runtime the session belongs to.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// Runs `call` as this session's: its background tasks belong to the session and notify its
    /// inbox; its escalations go to the call's approver, else the session's. Build the call with
    /// [`ToolCall::new`] (and `with_cancel`, `with_peek`, `with_id` as needed); its caller is
    /// set here.
    pub async fn call(&self, call: ToolCall) -> ToolResult {
        let mut call = call.with_caller(self.agent.clone());
        if call.approver.is_none() {
            call.approver = self.approver.clone();
        }
        self.runtime.call(call).await
    }

    /// Sets (`Some`) or clears (`None`) the session's standing sandbox mode: its ordinary calls
    /// run under it and escalations widen from it. Never shown to the model.
    /// [`RuntimeError::Tool`] with code `NOT_SANDBOXED` when the runtime does not sandbox.
    pub async fn set_sandbox_mode(&self, mode: Option<SandboxMode>) -> Result<(), RuntimeError> {
        self.runtime.set_session_sandbox_mode(self.id(), mode).await
    }

    /// Sets (`Some`) or clears (`None`) the session's workspace root: under `workspace-write` its
    /// commands may write there instead of the runtime's `cwd`. Does nothing without a sandbox.
    pub async fn set_workspace(&self, root: Option<PathBuf>) -> Result<(), RuntimeError> {
        self.runtime.set_session_workspace(self.id(), root).await
    }

    /// Starts `command` as a background task of this session that `policy` restarts when it
    /// ends, confined as the session's own commands are. The session hears when the supervisor
    /// gives up.
    pub async fn start_supervised(
        &self,
        command: BashExecRequest,
        policy: RestartPolicy,
    ) -> Result<TaskId, RuntimeError> {
        self.runtime
            .start_supervised(command, policy, Some(self.agent.clone()))
            .await
    }

    /// The background tasks this session may see, in start order.
    pub async fn tasks(&self) -> Vec<TaskSnapshot> {
        self.runtime.tasks(Some(self.id())).await
    }

    /// Kills and joins the session's background tasks and forgets them, with its standing
    /// sandbox mode and workspace: a later session with the same id starts from the runtime's
    /// defaults.
    pub async fn release(&self) {
        self.runtime.release_session(self.id()).await;
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id())
            .field("approver", &self.approver.is_some())
            .finish()
    }
}
