//! Waiting on a task instead of polling it: until it settles, or until the output produced since the
//! previous read matches a condition, or until time runs out, or until the caller gives up.
//!
//! The wait is event-driven: it listens to the task's settlement (the record's settle waiters, so a
//! read after a `Settled` wait sees the final status) and, with a condition, to its producer's
//! [`output_matches`](crate::TaskProducer::output_matches), which for a bash task feeds the condition
//! every chunk of each stream as the driver stores it, from the read cursor on (reading back from the
//! spill file what has left memory). It never consumes output: the caller reads afterwards, as it
//! would without waiting.
//!
//! ```text
//!   watch the output ─► wait for: holds ► Matched · settled ► Settled (Matched if it held by then)
//!                                 waits for input ► WaitingForInput (when asked)
//!                                 deadline ► TimedOut · cancel ► Aborted
//! ```

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use futures::FutureExt;
use futures::future::BoxFuture;

use crate::condition::OutputCondition;
use crate::errors::TaskError;
use crate::table::Watch;

/// Wait until task `id` settles (or `until` holds on its unread output), at most `timeout`, or until
/// `cancel` resolves. Does not read: send a [`ReadTask`](crate::ReadTask) afterwards.
#[derive(Message)]
#[rtype(result = "Result<WaitOutcome, TaskError>")]
pub struct WaitTask {
    /// The task to wait on.
    pub id: String,
    /// The caller's session id; `None` for a caller with no agent.
    pub caller: Option<String>,
    /// The longest the wait may last.
    pub timeout: Duration,
    /// Also stop waiting once this holds on the output produced since the previous read.
    pub until: Option<Arc<dyn OutputCondition>>,
    /// Also stop waiting once the task waits for input (issue 22: `bash_write`, and `bash_output`
    /// on a task that takes input).
    pub for_input: bool,
    /// Resolving ends the wait with [`WaitOutcome::Aborted`] (the tool call was cancelled).
    pub cancel: BoxFuture<'static, ()>,
}

/// Why a wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitOutcome {
    /// The task has settled; a read now shows its final status.
    Settled,
    /// The condition holds on the unread output.
    Matched,
    /// The task waits for input (only with [`WaitTask::for_input`]).
    WaitingForInput,
    /// The time ran out; the task is left as it is.
    TimedOut,
    /// The caller cancelled.
    Aborted,
}

/// The wait itself, outside the registry actor (it never touches the table again).
pub(crate) async fn wait(
    watch: Watch,
    timeout: Duration,
    until: Option<Arc<dyn OutputCondition>>,
    for_input: bool,
    cancel: BoxFuture<'static, ()>,
) -> WaitOutcome {
    let Watch { producer, settled } = watch;
    // Watching starts here, before anything else is looked at.
    let mut matched: BoxFuture<'static, ()> = match until {
        Some(condition) => producer.output_matches(condition),
        None => Box::pin(std::future::pending()),
    };
    let mut waiting: BoxFuture<'static, ()> = if for_input {
        producer.input_waiting()
    } else {
        Box::pin(std::future::pending())
    };
    let held_or_settled = |matched: &mut BoxFuture<'static, ()>| {
        if matched.now_or_never().is_some() {
            WaitOutcome::Matched
        } else {
            WaitOutcome::Settled
        }
    };
    let Some(mut settled) = settled else {
        return held_or_settled(&mut matched);
    };
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let mut cancel = cancel;
    tokio::select! {
        biased;
        _ = &mut settled => held_or_settled(&mut matched),
        () = &mut cancel => WaitOutcome::Aborted,
        () = &mut matched => WaitOutcome::Matched,
        () = &mut waiting => WaitOutcome::WaitingForInput,
        () = &mut deadline => WaitOutcome::TimedOut,
    }
}
