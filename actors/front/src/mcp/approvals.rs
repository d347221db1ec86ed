//! Escalation approvals over MCP: an `elicitation/create` (form mode) to the client, when the client
//! declared the elicitation capability at `initialize`. Accept → `allowed-once` (unless the form
//! says `approve: false`), decline → `rejected`, cancel → `cancelled`; a failed request →
//! `unavailable`. Without the capability a call has no approver, so an escalation gets the
//! "no approval channel is available" text (docs/CONTRACT.md, "`bash`").

use std::sync::{Arc, Mutex};

use actix::prelude::*;
use dsh::actors::process::lock_unpoisoned;
use dsh::{ApprovalOutcome, ApprovalRequest};
use rmcp::RoleServer;
use rmcp::model::{
    ClientResult, ElicitRequest, ElicitRequestParams, ElicitationAction, ElicitationSchema,
    ServerRequest,
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
            let Ok(schema) = ElicitationSchema::builder()
                .optional_bool("approve", true)
                .build()
            else {
                return ApprovalOutcome::Unavailable;
            };
            let params = ElicitRequestParams::FormElicitationParams {
                meta: None,
                message: format!(
                    "dsh asks to run one command with wider sandbox access. {}. Allow it once?",
                    request.reason
                ),
                requested_schema: schema,
            };
            let answer = peer
                .send_request(ServerRequest::ElicitRequest(ElicitRequest::new(params)))
                .await;
            match answer {
                Ok(ClientResult::ElicitResult(result)) => match result.action {
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
                    ElicitationAction::Accept | ElicitationAction::Decline => {
                        ApprovalOutcome::Rejected
                    }
                    ElicitationAction::Cancel => ApprovalOutcome::Cancelled,
                    _ => ApprovalOutcome::Unavailable,
                },
                Ok(_) | Err(_) => ApprovalOutcome::Unavailable,
            }
        })
    }
}
