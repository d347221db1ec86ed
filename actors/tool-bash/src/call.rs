//! The call and result types of the tool layer: what a front end sends ([`ToolCall`]) and what
//! comes back ([`ToolResult`]: the model's text, the typed outcome and error). A leaf: the actor and
//! the escalation flow both import it.

use actix::prelude::*;
use dsh_bash::{AbortSignal, OutputPeek};
use dsh_tasks::AgentRef;
use serde_json::Value;

use crate::approval::ApprovalRequest;
use crate::error::ToolError;
use crate::outcome::ToolOutcome;
use crate::task_id::TaskId;

/// One model tool call.
#[derive(Message, Clone, Debug)]
#[rtype(result = "ToolResult")]
pub struct ToolCall {
    /// `bash`, `bash_output` or `bash_kill`.
    pub name: String,
    /// The arguments exactly as the model produced them.
    pub arguments: Value,
    /// The calling agent, if any: its session owns background tasks it starts and gets their notices.
    pub caller: Option<AgentRef>,
    /// Cancels a foreground call (reported as `command aborted`). Background tasks ignore it.
    pub cancel: Option<AbortSignal>,
    /// Filled with a foreground `bash` call's output once it runs, so a front end can report progress.
    pub peek: Option<OutputPeek>,
    /// The front end's id for the call (quoted in approval requests).
    pub id: Option<String>,
    /// Where an escalation's approval is asked: the calling agent's (or its front end's) mailbox.
    pub approver: Option<Recipient<ApprovalRequest>>,
}

impl ToolCall {
    /// A call with no caller, no cancel signal and no peek.
    pub fn new(name: impl Into<String>, arguments: Value) -> Self {
        Self {
            name: name.into(),
            arguments,
            caller: None,
            cancel: None,
            peek: None,
            id: None,
            approver: None,
        }
    }

    /// Names the call, for approval requests.
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Routes the call's escalation approvals to `approver`.
    pub fn with_approver(mut self, approver: Recipient<ApprovalRequest>) -> Self {
        self.approver = Some(approver);
        self
    }

    /// Makes the call an agent's: its background tasks belong to that agent and notify it.
    pub fn with_caller(mut self, caller: AgentRef) -> Self {
        self.caller = Some(caller);
        self
    }

    /// Lets `cancel` abort the call while it runs in the foreground.
    pub fn with_cancel(mut self, cancel: AbortSignal) -> Self {
        self.cancel = Some(cancel);
        self
    }

    /// Lets `peek` watch a foreground `bash` call's output while it runs.
    pub fn with_peek(mut self, peek: OutputPeek) -> Self {
        self.peek = Some(peek);
        self
    }
}

/// What the model sees, and the same facts typed for programs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolResult {
    /// The text the model sees.
    pub text: String,
    /// Whether the call failed (bad arguments, spawn error, abort, unknown task); a command's
    /// non-zero exit, timeout or kill is not an error. Set exactly when `error` is.
    pub is_error: bool,
    /// What the call did (exit code, task id, spill paths, …); `None` for errors that have no
    /// such facts (bad arguments, unknown tasks).
    pub outcome: Option<ToolOutcome>,
    /// Why the call failed, with its [`ToolError::code`].
    pub error: Option<ToolError>,
    /// `outcome` serialized: the object matching [`crate::output_schema`] for the tool, which
    /// MCP sends as `structuredContent`.
    pub structured: Option<Value>,
}

impl ToolResult {
    /// A successful result: `text`, rendered from `outcome`.
    pub fn done(text: impl Into<String>, outcome: ToolOutcome) -> Self {
        Self {
            text: text.into(),
            is_error: false,
            structured: Some(outcome.structured()),
            outcome: Some(outcome),
            error: None,
        }
    }

    /// An error result: `Error: <error>`.
    pub fn failed(error: ToolError) -> Self {
        Self {
            text: format!("Error: {error}"),
            is_error: true,
            outcome: None,
            error: Some(error),
            structured: None,
        }
    }

    /// Attaches what the call did before it failed (a cancelled foreground run's facts).
    pub fn with_outcome(mut self, outcome: ToolOutcome) -> Self {
        self.structured = Some(outcome.structured());
        self.outcome = Some(outcome);
        self
    }

    /// The background task the call started, moved to, read or killed.
    pub fn task_id(&self) -> Option<&TaskId> {
        self.outcome.as_ref().and_then(ToolOutcome::task_id)
    }
}
