//! Retention policies: which finished task the registry discards, and when. The registry consults its
//! stack after every settlement: each policy in order may name one finished task to discard; the first
//! that names one wins, and the stack is asked again until no policy names any. The built-in
//! [`RetentionLimits`] is always first (`--max-finished-tasks`, `--retained-output-bytes`,
//! `--retained-spill-bytes`); a host adds its own with `TaskRegistry::with_retention_policy`. Every discard is a tracing event (target
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
    /// Bytes of its spill files on disk (they stay after a read to the end, until it is discarded).
    pub spill_bytes: u64,
}

/// Totals over every finished task the registry keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetentionLoad {
    /// Finished tasks kept.
    pub finished: usize,
    /// Output bytes they hold in memory.
    pub retained_bytes: usize,
    /// Bytes of their spill files on disk.
    pub spill_bytes: u64,
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

/// At most `max_finished` finished tasks holding at most `max_retained_bytes` of output in memory
/// and at most `max_spill_bytes` of spill files on disk; over any of them, tasks whose end their
/// owner already saw go first, then the oldest (over a byte budget, only tasks that hold bytes of
/// that kind are candidates).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetentionLimits {
    /// Finished tasks kept.
    pub max_finished: usize,
    /// Output bytes finished tasks keep in memory.
    pub max_retained_bytes: usize,
    /// Bytes of spill files finished tasks keep on disk.
    pub max_spill_bytes: u64,
}

impl RetentionLimits {
    /// Whether `load` is within every limit.
    pub fn holds(&self, load: RetentionLoad) -> bool {
        load.finished <= self.max_finished
            && load.retained_bytes <= self.max_retained_bytes
            && load.spill_bytes <= self.max_spill_bytes
    }
}

impl RetentionPolicy for RetentionLimits {
    fn name(&self) -> &str {
        "retention-limits"
    }

    fn discard(&mut self, load: RetentionLoad, finished: &[FinishedTask<'_>]) -> Option<usize> {
        let over_count = load.finished > self.max_finished;
        let over_bytes = load.retained_bytes > self.max_retained_bytes;
        let over_spill = load.spill_bytes > self.max_spill_bytes;
        if !over_count && !over_bytes && !over_spill {
            return None;
        }
        finished
            .iter()
            .enumerate()
            .filter(|(_, task)| {
                over_count
                    || (over_bytes && task.retained_bytes > 0)
                    || (over_spill && task.spill_bytes > 0)
            })
            .min_by_key(|(_, task)| (!task.reported, task.order))
            .map(|(index, _)| index)
    }
}
