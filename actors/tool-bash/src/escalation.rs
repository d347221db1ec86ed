//! The escalation flow of a `bash` call (docs/ARCHITECTURE.md, "Sandbox"): a model asks for a
//! wider sandbox mode for one command; the request is checked against the call's standing policy
//! and the composition, then asked of the call's approver as an actor message. Only `allowed-once`
//! returns a policy; every other path is an [`EscalationError`] with the text docs/CONTRACT.md
//! gives, and the caller runs nothing.

use dsh_bash::{SandboxMode, SandboxPolicy};

use crate::approval::{ApprovalOutcome, ApprovalRequest, approval_reason};
use crate::args::Escalation;
use crate::call::ToolCall;
use crate::config::ToolBashConfig;
use crate::error::EscalationError;

/// An escalation is checked, then asked of the call's approver; only a grant returns the wider
/// policy. Every other path is an error and nothing runs.
pub(crate) async fn escalate(
    config: &ToolBashConfig,
    standing: Option<&SandboxPolicy>,
    escalation: &Escalation,
    command: &str,
    call: &ToolCall,
) -> Result<SandboxPolicy, EscalationError> {
    let Some(standing) = standing else {
        return Err(EscalationError::NotOffered);
    };
    let requested = escalation.mode.as_str();
    let Some(mode) = SandboxMode::parse(requested).filter(|m| standing.mode.wider().contains(m))
    else {
        return Err(EscalationError::NotWider {
            requested: requested.to_owned(),
            current: standing.mode,
        });
    };
    if !config.approvals {
        return Err(EscalationError::NoApprovalService(mode));
    }
    if call.caller.is_none() && call.approver.is_none() {
        return Err(EscalationError::NoAgent(mode));
    }
    let Some(approver) = &call.approver else {
        return Err(EscalationError::NoChannel(mode));
    };
    let request = ApprovalRequest {
        tool: "bash",
        call_id: call.id.clone(),
        session: call.caller.as_ref().map(|c| c.session_id.clone()),
        mode,
        command: command.to_owned(),
        justification: escalation.justification.clone(),
        reason: approval_reason(mode, &escalation.justification),
    };
    // An answer that has arrived is honoured first; a cancel after a grant is caught below.
    let outcome = tokio::select! {
        biased;
        answer = approver.send(request) => answer.unwrap_or(ApprovalOutcome::Unavailable),
        () = dsh_bash::wait_abort(call.cancel.as_ref()) => return Err(EscalationError::Cancelled(mode)),
    };
    match outcome {
        ApprovalOutcome::AllowedOnce => Ok(SandboxPolicy {
            mode,
            workspace_root: standing.workspace_root.clone(),
        }),
        ApprovalOutcome::Rejected => Err(EscalationError::Rejected(mode)),
        ApprovalOutcome::Cancelled => Err(EscalationError::Cancelled(mode)),
        ApprovalOutcome::Unavailable => Err(EscalationError::NoChannel(mode)),
        ApprovalOutcome::Other(value) => Err(EscalationError::UnknownOutcome(value)),
    }
}
