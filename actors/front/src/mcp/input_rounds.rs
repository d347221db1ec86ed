//! Multi round-trip requests (protocol 2026-07-28): how a session without server-to-client
//! requests still gets its roots and its approvals.
//!
//! A `tools/call` that needs the client's roots answers `resultType: "input_required"` with a
//! `roots/list` input request before anything runs; the retried call carries the roots, which
//! `mcp/workspace.rs` applies, and then runs. A call whose command needs an approval has already
//! been handed to the runtime, which waits for the answer before running anything: the call is
//! parked here under a fresh `requestState` and answered with an `elicitation/create` input
//! request (the question of `mcp/approvals.rs`). The retried call names that state; it finds the
//! parked call, gives it the client's answer and waits for its result, so the command runs once if
//! approved and never if not. The state is only a handle into this session's table; one that is
//! unknown (never issued, already used, or expired), or a retry with another tool or other
//! arguments, is -32602 and runs nothing.
//!
//! A parked call waits at most [`PARKED_FOR`] for its retry, and at most `--max-in-flight` are
//! parked at once (the oldest gives way); a call that gives way is answered `cancelled`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::prelude::*;
use dsh::actors::process::lock_unpoisoned;
use dsh::{ApprovalOutcome, ApprovalRequest};
use rmcp::RoleServer;
use rmcp::model::{
    ElicitRequest, ElicitResult, InputRequest, InputRequests, InputRequiredResult, InputResponses,
    ProtocolVersion,
};
use rmcp::service::RequestContext;
use serde_json::Value;
use tokio::sync::oneshot;

use crate::mcp::approvals;
use crate::mcp::runs::{Ask, Asking, Run};

/// How long a call parked on an approval waits for the client's retry: long enough for a person to
/// read the question.
pub const PARKED_FOR: Duration = Duration::from_secs(15 * 60);

/// The input request key of the roots.
pub const ROOTS: &str = "roots";
/// The input request key of an approval.
pub const APPROVAL: &str = "approval";

/// How a request reaches the client's capabilities and answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lifecycle {
    /// `initialize` (2025-11-25 and earlier): capabilities from the handshake, server-to-client
    /// requests for roots and approvals.
    Handshake,
    /// 2026-07-28: capabilities from each request's `_meta`, input rounds for roots and approvals.
    Inline,
}

impl Lifecycle {
    /// The lifecycle of the request `context` belongs to.
    pub fn of(context: &RequestContext<RoleServer>) -> Self {
        match context.protocol_version() {
            Some(version) if version.as_str() >= ProtocolVersion::V_2026_07_28.as_str() => {
                Lifecycle::Inline
            }
            _ => Lifecycle::Handshake,
        }
    }
}

/// Why a retried call found nothing to resume.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    /// The state was never issued, was used already, or expired.
    #[error("requestState is unknown or expired (a parked call waits {} s for its retry); nothing was run", PARKED_FOR.as_secs())]
    Unknown,
    /// The retry names another tool or other arguments than the call the state belongs to.
    #[error("the retried call differs from the call its requestState belongs to; nothing was run")]
    OtherCall,
}

/// A call waiting for the client's answer to its approval round.
struct Parked {
    state: String,
    name: String,
    arguments: Value,
    run: Run,
    answer: oneshot::Sender<ApprovalOutcome>,
}

/// The session's calls parked on approval rounds, and the runs whose approvals are asked this way.
pub struct Rounds {
    /// Runs started with an input-round approver.
    pub asking: Arc<Asking>,
    parked: Mutex<VecDeque<Parked>>,
    issued: AtomicU64,
    /// At most this many parked at once.
    limit: usize,
    /// How long one waits for its retry ([`PARKED_FOR`]).
    parked_for: Duration,
    /// Makes each state this session's own.
    session_id: String,
}

impl Rounds {
    pub fn new(session_id: String, limit: usize, parked_for: Duration) -> Self {
        Self {
            asking: Arc::default(),
            parked: Mutex::default(),
            issued: AtomicU64::new(0),
            limit: limit.max(1),
            parked_for,
            session_id,
        }
    }

    /// Parks `run`, which asked `ask`, and returns the input-required answer for its request.
    pub fn park(
        self: &Arc<Self>,
        name: String,
        arguments: Value,
        run: Run,
        ask: Ask,
    ) -> InputRequiredResult {
        let n = self.issued.fetch_add(1, Ordering::Relaxed) + 1;
        let state = format!("{}/approval-{n}", self.session_id);
        let mut requests = InputRequests::new();
        if let Some(form) = approvals::form(&ask.request) {
            requests.insert(
                APPROVAL.to_owned(),
                InputRequest::Elicitation(ElicitRequest::new(form)),
            );
        }
        let gave_way = {
            let mut parked = lock_unpoisoned(&self.parked);
            parked.push_back(Parked {
                state: state.clone(),
                name,
                arguments,
                run,
                answer: ask.answer,
            });
            (parked.len() > self.limit).then(|| parked.pop_front())
        };
        if let Some(Some(oldest)) = gave_way {
            tracing::info!(state = %oldest.state, "too many calls parked on approvals; the oldest is cancelled");
            let _ = oldest.answer.send(ApprovalOutcome::Cancelled);
        }
        let rounds = Arc::downgrade(self);
        let (expiring, parked_for) = (state.clone(), self.parked_for);
        tokio::spawn(async move {
            tokio::time::sleep(parked_for).await;
            if let Some(rounds) = rounds.upgrade()
                && let Some(parked) = rounds.take(&expiring)
            {
                tracing::info!(state = %expiring, "no retry for a parked call in time; cancelled");
                let _ = parked.answer.send(ApprovalOutcome::Cancelled);
            }
        });
        InputRequiredResult::new(Some(requests), Some(state))
    }

    /// The parked call `state` names, answered with the approval in `responses`, for the retried
    /// call `name(arguments)` to finish.
    pub fn resume(
        &self,
        state: &str,
        name: &str,
        arguments: &Value,
        responses: Option<&InputResponses>,
    ) -> Result<Run, ResumeError> {
        let mut parked = lock_unpoisoned(&self.parked);
        let at = parked
            .iter()
            .position(|p| p.state == state)
            .ok_or(ResumeError::Unknown)?;
        if parked[at].name != name || parked[at].arguments != *arguments {
            return Err(ResumeError::OtherCall);
        }
        let Some(call) = parked.remove(at) else {
            return Err(ResumeError::Unknown);
        };
        drop(parked);
        let outcome = responses
            .and_then(|r| r.get(APPROVAL))
            .and_then(|answer| serde_json::from_value::<ElicitResult>(answer.clone()).ok())
            .map_or(ApprovalOutcome::Unavailable, |answer| {
                approvals::outcome(&answer)
            });
        tracing::info!(state, ?outcome, "approval answered through an input round");
        let _ = call.answer.send(outcome);
        Ok(call.run)
    }

    fn take(&self, state: &str) -> Option<Parked> {
        let mut parked = lock_unpoisoned(&self.parked);
        let at = parked.iter().position(|p| p.state == state)?;
        parked.remove(at)
    }
}

/// The input-required answer that asks for the client's roots.
#[allow(deprecated, reason = "roots are how MCP clients name the workspace")]
pub fn ask_roots() -> InputRequiredResult {
    let mut requests = InputRequests::new();
    requests.insert(
        ROOTS.to_owned(),
        InputRequest::ListRoots(rmcp::model::ListRootsRequest::default()),
    );
    InputRequiredResult::from_input_requests(requests)
}

/// The approver of a 2026-07-28 session's calls: hands each approval back to the call's run, by
/// the call id the runtime names.
pub struct RoundApprover {
    pub asking: Arc<Asking>,
}

impl Actor for RoundApprover {
    type Context = Context<Self>;
}

impl Handler<ApprovalRequest> for RoundApprover {
    type Result = ResponseFuture<ApprovalOutcome>;

    fn handle(&mut self, request: ApprovalRequest, _: &mut Self::Context) -> Self::Result {
        let run = request.call_id.as_deref().and_then(|id| self.asking.of(id));
        Box::pin(async move {
            let Some(run) = run else {
                return ApprovalOutcome::Unavailable;
            };
            let (answer, answered) = oneshot::channel();
            if run.send(Ask { request, answer }).is_err() {
                return ApprovalOutcome::Unavailable;
            }
            answered.await.unwrap_or(ApprovalOutcome::Cancelled)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::runs::Step;
    use dsh::SandboxMode;
    use serde_json::json;

    fn ask() -> (Ask, oneshot::Receiver<ApprovalOutcome>) {
        let (answer, answered) = oneshot::channel();
        let request = ApprovalRequest {
            tool: "bash",
            call_id: None,
            session: None,
            mode: SandboxMode::WorkspaceWrite,
            command: "touch out".to_owned(),
            justification: "it writes a file".to_owned(),
            reason: String::new(),
        };
        (Ask { request, answer }, answered)
    }

    #[tokio::test]
    async fn a_state_resumes_its_own_call_once_and_the_oldest_gives_way_past_the_limit() {
        let rounds = Arc::new(Rounds::new("s".to_owned(), 1, PARKED_FOR));
        let (a, b) = (json!({"command": "a"}), json!({"command": "b"}));
        let (first_ask, first_answered) = ask();
        let first = rounds.park("bash".to_owned(), a.clone(), Run::ended("a"), first_ask);
        let first_state = first.request_state.unwrap();
        assert!(first.input_requests.unwrap().contains_key(APPROVAL));
        let other = rounds.resume(&first_state, "bash", &b, None);
        assert!(matches!(other, Err(ResumeError::OtherCall)));

        let (second_ask, second_answered) = ask();
        let second = rounds.park("bash".to_owned(), b.clone(), Run::ended("b"), second_ask);
        let second_state = second.request_state.unwrap();
        assert_ne!(first_state, second_state);
        // One may be parked: the first gave way, cancelled, and its state is gone.
        assert_eq!(first_answered.await.unwrap(), ApprovalOutcome::Cancelled);
        let gone = rounds.resume(&first_state, "bash", &a, None);
        assert!(matches!(gone, Err(ResumeError::Unknown)));

        let responses: InputResponses = [(APPROVAL.to_owned(), json!({"action": "accept"}))].into();
        let mut run = rounds
            .resume(&second_state, "bash", &b, Some(&responses))
            .unwrap();
        assert_eq!(second_answered.await.unwrap(), ApprovalOutcome::AllowedOnce);
        assert!(matches!(run.step().await, Step::Done(result) if result.text == "b"));
        let again = rounds.resume(&second_state, "bash", &b, Some(&responses));
        assert!(matches!(again, Err(ResumeError::Unknown)));
    }

    #[tokio::test]
    async fn a_retry_without_an_answer_is_no_approval_channel() {
        let rounds = Arc::new(Rounds::new("s".to_owned(), 4, PARKED_FOR));
        let (asked, answered) = ask();
        let parked = rounds.park("bash".to_owned(), json!({}), Run::ended(""), asked);
        let state = parked.request_state.unwrap();
        rounds.resume(&state, "bash", &json!({}), None).unwrap();
        assert_eq!(answered.await.unwrap(), ApprovalOutcome::Unavailable);
    }

    #[tokio::test]
    async fn a_call_not_retried_in_time_is_cancelled_and_its_state_forgotten() {
        let rounds = Arc::new(Rounds::new("s".to_owned(), 4, Duration::from_millis(50)));
        let (asked, answered) = ask();
        let parked = rounds.park("bash".to_owned(), json!({}), Run::ended(""), asked);
        assert_eq!(answered.await.unwrap(), ApprovalOutcome::Cancelled);
        let state = parked.request_state.unwrap();
        let late = rounds.resume(&state, "bash", &json!({}), None);
        assert!(matches!(late, Err(ResumeError::Unknown)));
    }
}
