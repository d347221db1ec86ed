//! The escalation flow of a `bash` call (seed §1.7.4 step 6): a model asks for a wider sandbox
//! mode for one command; the request is checked against the call's standing policy and the
//! composition, then asked of the call's approver as an actor message. Only `allowed-once` returns a
//! policy; every other path is an error with the seeds' text, and the caller runs nothing.

use dsh_bash::{SandboxMode, SandboxPolicy};

use crate::approval::{ApprovalOutcome, ApprovalRequest, approval_reason};
use crate::args::Escalation;
use crate::tool::{ToolBashConfig, ToolCall};

/// Step 6: an escalation is checked, then asked of the call's approver; only a grant returns the
/// wider policy. Every other path is an error and nothing runs.
pub(crate) async fn escalate(
    config: &ToolBashConfig,
    standing: Option<&SandboxPolicy>,
    escalation: &Escalation,
    call: &ToolCall,
) -> Result<SandboxPolicy, String> {
    let Some(standing) = standing else {
        return Err(
            "sandbox_permissions is not available in this composition (no sandboxing executor to escalate)"
                .into(),
        );
    };
    let requested = escalation.mode.as_str();
    let Some(mode) = SandboxMode::parse(requested).filter(|m| standing.mode.wider().contains(m))
    else {
        return Err(format!(
            "sandbox escalation to \"{requested}\" is not strictly wider than this call's current \"{}\" mode",
            standing.mode
        ));
    };
    if !config.approvals {
        return Err(format!(
            "sandbox escalation to \"{mode}\" requires approval, but no approval service is composed"
        ));
    }
    if call.caller.is_none() && call.approver.is_none() {
        return Err(format!(
            "sandbox escalation to \"{mode}\" requires approval, but the call has no agent to route it through"
        ));
    }
    let unavailable = || {
        format!(
            "sandbox escalation to \"{mode}\" requires approval, but no approval channel is available"
        )
    };
    let Some(approver) = &call.approver else {
        return Err(unavailable());
    };
    let request = ApprovalRequest {
        tool: "bash",
        call_id: call.id.clone(),
        session: call.caller.as_ref().map(|c| c.session_id.clone()),
        mode,
        reason: approval_reason(mode, &escalation.justification),
    };
    let cancelled = || format!("approval for escalating to \"{mode}\" was cancelled");
    // An answer that has arrived is honoured first; a cancel after a grant is caught below.
    let outcome = tokio::select! {
        biased;
        answer = approver.send(request) => answer.unwrap_or(ApprovalOutcome::Unavailable),
        () = dsh_bash::wait_abort(call.cancel.as_ref()) => return Err(cancelled()),
    };
    match outcome {
        ApprovalOutcome::AllowedOnce => Ok(SandboxPolicy {
            mode,
            workspace_root: standing.workspace_root.clone(),
        }),
        ApprovalOutcome::Rejected => Err(format!(
            "the user rejected escalating this command to \"{mode}\""
        )),
        ApprovalOutcome::Cancelled => Err(cancelled()),
        ApprovalOutcome::Unavailable => Err(unavailable()),
        ApprovalOutcome::Other(value) => Err(format!(
            "unreachable variant in EscalationOutcome: \"{value}\""
        )),
    }
}
