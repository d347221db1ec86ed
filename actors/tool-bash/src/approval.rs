//! Asking the calling agent to approve a sandbox escalation (docs/ARCHITECTURE.md, "Sandbox"), as an actor
//! message: the tool sends an [`ApprovalRequest`] to the call's approver (a front end's bridge to
//! its user, or an embedding agent) and acts on the [`ApprovalOutcome`]. Only `allowed-once` runs
//! anything.

use actix::prelude::*;
use dsh_bash::SandboxMode;

/// One approval question.
#[derive(Message, Clone, Debug)]
#[rtype(result = "ApprovalOutcome")]
pub struct ApprovalRequest {
    /// The tool asking (`bash`).
    pub tool: &'static str,
    /// The front end's id of the call, when it gave one ([`crate::ToolCall::id`]).
    pub call_id: Option<String>,
    /// The calling agent's session, if any.
    pub session: Option<String>,
    /// The mode asked for.
    pub mode: SandboxMode,
    /// The command the model wants to run under `mode`, as it wrote it.
    pub command: String,
    /// The model's justification, as it wrote it.
    pub justification: String,
    /// `escalate sandbox to <mode>: <justification>`.
    pub reason: String,
}

/// The approver's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApprovalOutcome {
    /// Run this call once under the requested mode.
    AllowedOnce,
    /// The user said no.
    Rejected,
    /// The question was withdrawn or abandoned (a cancel, end of input).
    Cancelled,
    /// There is nobody to ask.
    Unavailable,
    /// An answer outside the vocabulary (reported, never treated as a grant).
    Other(String),
}

impl ApprovalOutcome {
    /// `allowed-once`, `rejected`, `cancelled`, `unavailable`; anything else is [`Self::Other`].
    pub fn parse(text: &str) -> Self {
        match text {
            "allowed-once" => Self::AllowedOnce,
            "rejected" => Self::Rejected,
            "cancelled" => Self::Cancelled,
            "unavailable" => Self::Unavailable,
            other => Self::Other(other.to_owned()),
        }
    }
}

impl<A, M> actix::dev::MessageResponse<A, M> for ApprovalOutcome
where
    A: Actor,
    M: Message<Result = ApprovalOutcome>,
{
    fn handle(self, _: &mut A::Context, tx: Option<actix::dev::OneshotSender<M::Result>>) {
        if let Some(tx) = tx {
            let _ = tx.send(self);
        }
    }
}

/// `escalate sandbox to <mode>: <justification>`.
pub fn approval_reason(mode: SandboxMode, justification: &str) -> String {
    format!("escalate sandbox to {mode}: {justification}")
}

/// An approver that always answers `unavailable`: a front end with no way to ask (`dsh run`).
pub struct NoApprovalChannel;

impl Actor for NoApprovalChannel {
    type Context = Context<Self>;
}

impl Handler<ApprovalRequest> for NoApprovalChannel {
    type Result = ApprovalOutcome;

    fn handle(&mut self, _: ApprovalRequest, _: &mut Self::Context) -> ApprovalOutcome {
        ApprovalOutcome::Unavailable
    }
}
