//! Escalation approvals over `dsh jsonl`: the client is the user's agent, so the question goes to it
//! as a line and its answer comes back as a line.
//!
//! Server: `{"approval": <n>, "id": <the call's id>, "session": <session or null>, "reason":
//! "escalate sandbox to <mode>: <justification>"}`. Client: `{"approve": <n>, "outcome":
//! "allowed-once" | "rejected" | "cancelled"}` (any other outcome is reported, never a grant). A
//! cancel of the call while it waits ends the wait (the tool's cancelled text). End of input
//! answers every open question `cancelled`, and any later one too: nobody is left to ask.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use actix::prelude::*;
use dsh::actors::process::lock_unpoisoned;
use dsh::{ApprovalOutcome, ApprovalRequest};
use serde_json::Value;
use tokio::sync::oneshot;

use crate::outbox::Outbox;

/// Open questions by number, shared by the approver actor and the input loop.
#[derive(Clone, Default)]
pub struct Pending {
    inner: Arc<Mutex<PendingState>>,
}

#[derive(Default)]
struct PendingState {
    next: u64,
    /// Open questions: the asking call's id (raw JSON text) and where the answer goes.
    open: HashMap<u64, (Option<String>, oneshot::Sender<ApprovalOutcome>)>,
    closed: bool,
}

impl Pending {
    /// Delivers the client's answer to question `n`; `false` when no such question is open.
    pub fn answer(&self, n: u64, outcome: &str) -> bool {
        let sender = lock_unpoisoned(&self.inner).open.remove(&n);
        match sender {
            Some((_, sender)) => {
                let _ = sender.send(ApprovalOutcome::parse(outcome));
                true
            }
            None => false,
        }
    }

    /// The call `id` (raw JSON text) was cancelled: its open question is withdrawn (the call itself
    /// has already stopped waiting), so a late answer to it is an error line.
    pub fn withdraw(&self, id: &str) {
        let mut state = lock_unpoisoned(&self.inner);
        let withdrawn: Vec<u64> = state
            .open
            .iter()
            .filter(|(_, (call, _))| call.as_deref() == Some(id))
            .map(|(n, _)| *n)
            .collect();
        for n in withdrawn {
            if let Some((_, sender)) = state.open.remove(&n) {
                let _ = sender.send(ApprovalOutcome::Cancelled);
            }
        }
    }

    /// End of input: every open and every later question is `cancelled`.
    pub fn close(&self) {
        let mut state = lock_unpoisoned(&self.inner);
        state.closed = true;
        for (_, (_, sender)) in state.open.drain() {
            let _ = sender.send(ApprovalOutcome::Cancelled);
        }
    }
}

/// The approver actor of one `dsh jsonl` connection.
pub struct JsonlApprover {
    pub out: Outbox,
    pub pending: Pending,
}

impl Actor for JsonlApprover {
    type Context = Context<Self>;
}

impl Handler<ApprovalRequest> for JsonlApprover {
    type Result = ResponseFuture<ApprovalOutcome>;

    fn handle(&mut self, request: ApprovalRequest, _: &mut Self::Context) -> Self::Result {
        let (tx, rx) = oneshot::channel();
        let n = {
            let mut state = lock_unpoisoned(&self.pending.inner);
            if state.closed {
                return Box::pin(async { ApprovalOutcome::Cancelled });
            }
            state.next += 1;
            let n = state.next;
            state.open.insert(n, (request.call_id.clone(), tx));
            n
        };
        // The id is the call's id as the client wrote it (raw JSON text), or null.
        let id = request.call_id.as_deref().unwrap_or("null");
        let line = format!(
            "{{\"approval\":{n},\"id\":{id},\"session\":{},\"reason\":{}}}",
            request.session.map_or(Value::Null, Value::String),
            Value::String(request.reason)
        );
        if self.out.send(line).is_err() {
            lock_unpoisoned(&self.pending.inner).open.remove(&n);
            return Box::pin(async { ApprovalOutcome::Cancelled });
        }
        // A dropped sender (the connection is going away) counts as cancelled.
        Box::pin(async move { rx.await.unwrap_or(ApprovalOutcome::Cancelled) })
    }
}
