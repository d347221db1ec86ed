//! Waiting on a task instead of polling it: until it settles, or until the output produced since the
//! previous read matches a condition, or until time runs out, or until the caller gives up.
//!
//! The wait is event-driven: it listens to the task's settlement (the record's settle waiters, so a
//! read after a `Settled` wait sees the final status) and, with a condition, to its producer's
//! [`changed`](crate::TaskProducer::changed) signal, which a bash task fires on every stored chunk.
//! It never consumes output: the caller reads afterwards, as it would without waiting.
//!
//! ```text
//!   subscribe to changes ─► condition holds on pending output? ──yes──► Matched
//!          ▲                        │ no
//!          └──── output changed ◄── wait for: settled ► Settled · deadline ► TimedOut · cancel ► Aborted
//! ```

use std::time::Duration;

use actix::prelude::*;
use futures::future::BoxFuture;

use crate::errors::TaskError;
use crate::table::Watch;

/// A condition on the output produced since the previous read; called once per stream's text.
pub type OutputCondition = Box<dyn Fn(&str) -> bool + Send>;

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
    pub until: Option<OutputCondition>,
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
    /// The time ran out; the task is left as it is.
    TimedOut,
    /// The caller cancelled.
    Aborted,
}

/// The wait itself, outside the registry actor (it never touches the table again).
pub(crate) async fn wait(
    watch: Watch,
    timeout: Duration,
    until: Option<OutputCondition>,
    cancel: BoxFuture<'static, ()>,
) -> WaitOutcome {
    let Watch { producer, settled } = watch;
    let holds = |until: &OutputCondition| producer.pending().iter().any(|text| until(text));
    let Some(mut settled) = settled else {
        return match &until {
            Some(until) if holds(until) => WaitOutcome::Matched,
            _ => WaitOutcome::Settled,
        };
    };
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let mut cancel = cancel;
    loop {
        // Listen first, then look: a chunk stored between the two still wakes the next wait.
        let changed: BoxFuture<'static, ()> = match &until {
            Some(until) => {
                let changed = producer.changed();
                if holds(until) {
                    return WaitOutcome::Matched;
                }
                changed
            }
            None => Box::pin(std::future::pending()),
        };
        tokio::select! {
            biased;
            _ = &mut settled => {
                return match &until {
                    Some(until) if holds(until) => WaitOutcome::Matched,
                    _ => WaitOutcome::Settled,
                };
            }
            () = &mut cancel => return WaitOutcome::Aborted,
            () = changed => {}
            () = &mut deadline => return WaitOutcome::TimedOut,
        }
    }
}
