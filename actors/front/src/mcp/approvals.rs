//! Escalation approvals over MCP: an `elicitation/create` (form mode) to the client, when the client
//! declared the elicitation capability — sent as a request in a handshake-era session (declared at
//! `initialize`), or as an input request of the call in a 2026-07-28 one (declared in the call's
//! `_meta`; `mcp/input_rounds.rs`), with the same question either way. Accept → `allowed-once` (unless the form
//! says `approve: false`), decline → `rejected`, cancel → `cancelled`; a failed request →
//! `unavailable`. Without the capability a call has no approver, so an escalation gets the
//! "no approval channel is available" text (docs/CONTRACT.md, "`bash`").

use std::sync::{Arc, Mutex};

use actix::prelude::*;
use dsh::actors::process::lock_unpoisoned;
use dsh::{ApprovalOutcome, ApprovalRequest};
use rmcp::RoleServer;
use rmcp::model::{
    ClientResult, ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationSchema, ServerRequest,
};
use rmcp::service::Peer;

/// Whether the client declared the elicitation capability.
pub fn client_elicits(peer: &Peer<RoleServer>) -> bool {
    peer.peer_info()
        .is_some_and(|info| info.capabilities.elicitation.is_some())
}

/// Asks the connection's MCP client (its peer, once known).
pub struct McpApprover {
    pub peer: Arc<Mutex<Option<Peer<RoleServer>>>>,
}

impl Actor for McpApprover {
    type Context = Context<Self>;
}

impl Handler<ApprovalRequest> for McpApprover {
    type Result = ResponseFuture<ApprovalOutcome>;

    fn handle(&mut self, request: ApprovalRequest, _: &mut Self::Context) -> Self::Result {
        let peer = lock_unpoisoned(&self.peer).clone();
        Box::pin(async move {
            let Some(peer) = peer else {
                return ApprovalOutcome::Unavailable;
            };
            let Some(params) = form(&request) else {
                return ApprovalOutcome::Unavailable;
            };
            let answer = peer
                .send_request(ServerRequest::ElicitRequest(ElicitRequest::new(params)))
                .await;
            match answer {
                Ok(ClientResult::ElicitResult(result)) => outcome(&result),
                Ok(_) | Err(_) => ApprovalOutcome::Unavailable,
            }
        })
    }
}

/// The elicitation form that asks for `request`: the question and an optional `approve` box.
pub fn form(request: &ApprovalRequest) -> Option<ElicitRequestParams> {
    let schema = ElicitationSchema::builder()
        .optional_bool("approve", true)
        .build()
        .ok()?;
    Some(ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: question(request),
        requested_schema: schema,
    })
}

/// What the client's answer to the form means.
pub fn outcome(result: &ElicitResult) -> ApprovalOutcome {
    match result.action {
        ElicitationAction::Accept
            if result
                .content
                .as_ref()
                .and_then(|c| c.get("approve"))
                .and_then(serde_json::Value::as_bool)
                != Some(false) =>
        {
            ApprovalOutcome::AllowedOnce
        }
        ElicitationAction::Accept | ElicitationAction::Decline => ApprovalOutcome::Rejected,
        ElicitationAction::Cancel => ApprovalOutcome::Cancelled,
        _ => ApprovalOutcome::Unavailable,
    }
}

/// How long a command may be in the question; a longer one is cut, and says so.
const COMMAND_SHOWN: usize = 400;

/// The question the user sees: the command first, then the mode it asks for, then the model's
/// justification (which the model wrote, so it comes last and cannot pose as the command).
fn question(request: &ApprovalRequest) -> String {
    let command = request.command.trim();
    let shown = match command.char_indices().nth(COMMAND_SHOWN) {
        Some((cut, _)) => format!(
            "{}… ({} more characters)",
            &command[..cut],
            command[cut..].chars().count()
        ),
        None => command.to_owned(),
    };
    format!(
        "dsh asks to run this command once with {mode} sandbox access:\n\n{shown}\n\n\
         The model's reason: {justification}\n\nAllow it once?",
        mode = request.mode,
        justification = request.justification.trim(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh::SandboxMode;

    fn request(command: &str) -> ApprovalRequest {
        ApprovalRequest {
            tool: "bash",
            call_id: None,
            session: None,
            mode: SandboxMode::WorkspaceWrite,
            command: command.to_owned(),
            justification: "it writes a file".to_owned(),
            reason: String::new(),
        }
    }

    #[test]
    fn the_question_shows_the_command_then_the_mode_then_the_reason() {
        assert_eq!(
            question(&request("touch out")),
            "dsh asks to run this command once with workspace-write sandbox access:\n\ntouch out\n\n\
             The model's reason: it writes a file\n\nAllow it once?"
        );
    }

    #[test]
    fn a_long_command_is_cut_on_a_character_boundary_and_says_how_much_is_left() {
        let long = "é".repeat(COMMAND_SHOWN + 10);
        let asked = question(&request(&long));
        assert!(asked.contains(&format!(
            "{}… (10 more characters)",
            "é".repeat(COMMAND_SHOWN)
        )));
    }
}
