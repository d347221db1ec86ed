//! One `tools/call` handed to the runtime, held as a value so its answer can outlive the request
//! that started it: a call waiting on an approval asked through an input round is parked and
//! resumed by the retried request (`mcp/input_rounds.rs`) instead of being run again.
//!
//! The runtime asks a call's approvals of its approver; a run started with an [`Asking`] entry gets
//! them as [`Ask`]s from [`Run::step`], for the front end to put to the client however the
//! protocol allows.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use dsh::actors::process::lock_unpoisoned;
use dsh::actors::tool_bash::OutputPeek;
use dsh::{AbortSignal, ApprovalOutcome, ApprovalRequest, ToolCall, ToolResult};
use tokio::sync::{mpsc, oneshot};

/// An approval the runtime asks of a run, and where its outcome goes.
pub struct Ask {
    /// What is asked.
    pub request: ApprovalRequest,
    /// Where the outcome goes; dropping it answers `cancelled`.
    pub answer: oneshot::Sender<ApprovalOutcome>,
}

/// What a run did next.
pub enum Step {
    /// It ended with this result.
    Done(ToolResult),
    /// It waits for an approval.
    Asks(Ask),
}

/// The runs whose approvals come back to the front end, by the call id the runtime names in an
/// [`ApprovalRequest`].
#[derive(Default)]
pub struct Asking {
    runs: Mutex<HashMap<String, mpsc::UnboundedSender<Ask>>>,
    next: AtomicU64,
}

impl Asking {
    /// Where the approvals of call `call_id` go, while its run exists.
    pub fn of(&self, call_id: &str) -> Option<mpsc::UnboundedSender<Ask>> {
        lock_unpoisoned(&self.runs).get(call_id).cloned()
    }

    fn enter(self: &Arc<Self>) -> (Listed, mpsc::UnboundedReceiver<Ask>) {
        let id = format!("mcp-call-{}", self.next.fetch_add(1, Ordering::Relaxed) + 1);
        let (asks, asked) = mpsc::unbounded_channel();
        lock_unpoisoned(&self.runs).insert(id.clone(), asks);
        (
            Listed {
                asking: self.clone(),
                id,
            },
            asked,
        )
    }
}

/// A run's entry in [`Asking`], removed when the run is dropped.
struct Listed {
    asking: Arc<Asking>,
    id: String,
}

impl Drop for Listed {
    fn drop(&mut self) {
        lock_unpoisoned(&self.asking.runs).remove(&self.id);
    }
}

/// A call the runtime is running.
pub struct Run {
    running: Pin<Box<dyn Future<Output = ToolResult> + Send>>,
    asked: Option<mpsc::UnboundedReceiver<Ask>>,
    _listed: Option<Listed>,
    /// Aborts the call, as an MCP cancel does.
    pub cancel: AbortSignal,
    /// The call's output so far, for progress.
    pub peek: OutputPeek,
}

impl Run {
    /// Starts `call` (built without cancel or peek, which are added here) as the session's. With
    /// `asking`, the call's approvals come back from [`Run::step`]; the caller must then have given
    /// it an approver that routes by call id (`mcp/input_rounds.rs`).
    pub fn start(session: &dsh::Session, call: ToolCall, asking: Option<&Arc<Asking>>) -> Self {
        let cancel = AbortSignal::new();
        let peek = OutputPeek::new();
        let mut call = call.with_cancel(cancel.clone()).with_peek(peek.clone());
        let (listed, asked) = match asking {
            Some(asking) => {
                let (listed, asked) = asking.enter();
                call = call.with_id(listed.id.clone());
                (Some(listed), Some(asked))
            }
            None => (None, None),
        };
        let session = session.clone();
        Self {
            running: Box::pin(async move { session.call(call).await }),
            asked,
            _listed: listed,
            cancel,
            peek,
        }
    }

    /// Runs until the call ends or asks for an approval.
    pub async fn step(&mut self) -> Step {
        let (running, asked) = (&mut self.running, &mut self.asked);
        let asked = async {
            match asked.as_mut() {
                Some(asked) => asked.recv().await,
                None => None,
            }
        };
        tokio::select! {
            biased;
            result = running => Step::Done(result),
            Some(ask) = asked => Step::Asks(ask),
        }
    }
}

#[cfg(test)]
impl Run {
    /// A run that ends at once with `text`, for the tests of what holds runs.
    pub fn ended(text: &str) -> Self {
        let result = ToolResult {
            text: text.to_owned(),
            is_error: false,
            outcome: None,
            error: None,
            structured: None,
        };
        Self {
            running: Box::pin(async move { result }),
            asked: None,
            _listed: None,
            cancel: AbortSignal::new(),
            peek: OutputPeek::new(),
        }
    }
}
