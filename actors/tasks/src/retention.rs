//! Retention policies: which finished task the registry discards, and when. The registry consults its
//! stack after every settlement: each policy in order may name one finished task to discard; the first
//! that names one wins, and the stack is asked again until no policy names any. The built-in
//! [`RetentionLimits`] is always first (`--max-finished-tasks`, `--retained-output-bytes`); a host adds
//! its own with `TaskRegistry::with_retention_policy`. Every discard is a tracing event (target
//! `dsh::policy`), and reading a discarded task is an error of its own.
//!
//! A policy runs inside the registry actor: it must be quick and must not panic.

use std::time::SystemTime;

/// A finished task as a retention policy sees it.
#[derive(Clone, Copy, Debug)]
pub struct FinishedTask<'a> {
    /// The task's id (`bash-3`).
    pub id: &'a str,
    /// The owning session, if any.
    pub owner_session: Option<&'a str>,
    /// The owner already saw the task's end (read its final status, or killed it).
    pub reported: bool,
    /// Registration order: smaller is older.
    pub order: u64,
    /// When it finished.
    pub finished_at: Option<SystemTime>,
    /// Output bytes it holds in memory (0 once read to its end).
    pub retained_bytes: usize,
}

/// Totals over every finished task the registry keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetentionLoad {
    /// Finished tasks kept.
    pub finished: usize,
    /// Output bytes they hold in memory.
    pub retained_bytes: usize,
}

/// A retention policy: names a finished task to discard now, or none.
pub trait RetentionPolicy: Send + 'static {
    /// A short name for tracing events.
    fn name(&self) -> &str {
        "custom"
    }

    /// The index in `finished` of the task to discard now, or `None` to keep them all.
    fn discard(&mut self, load: RetentionLoad, finished: &[FinishedTask<'_>]) -> Option<usize>;
}

/// At most `max_finished` finished tasks holding at most `max_retained_bytes` of output in memory;
/// over either, tasks whose end their owner already saw go first, then the oldest (over the byte
/// budget, only tasks that still hold output are candidates).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetentionLimits {
    /// Finished tasks kept.
    pub max_finished: usize,
    /// Output bytes finished tasks keep in memory.
    pub max_retained_bytes: usize,
}

impl RetentionPolicy for RetentionLimits {
    fn name(&self) -> &str {
        "retention-limits"
    }

    fn discard(&mut self, load: RetentionLoad, finished: &[FinishedTask<'_>]) -> Option<usize> {
        let over_count = load.finished > self.max_finished;
        let over_bytes = load.retained_bytes > self.max_retained_bytes;
        if !over_count && !over_bytes {
            return None;
        }
        finished
            .iter()
            .enumerate()
            .filter(|(_, task)| over_count || task.retained_bytes > 0)
            .min_by_key(|(_, task)| (!task.reported, task.order))
            .map(|(index, _)| index)
    }
}
