//! Retention policies: which finished task the registry discards, and when. The registry consults its
//! stack after every settlement: each policy in order may name one finished task to discard; the first
//! that names one wins, and the stack is asked again until no policy names any. The built-in
//! [`RetentionLimits`] is always first (`--max-finished-tasks`, `--retained-output-bytes`,
//! `--retained-spill-bytes`); a host adds its own with `TaskRegistry::with_retention_policy`. Every discard is a tracing event (target
//! `dsh::policy`), and reading a discarded task is an error of its own.
//!
//! A policy runs inside the registry actor: it must be quick and must not panic.

use std::time::SystemTime;

/// What a heap allocation of `len` bytes really costs (0 for none): glibc's malloc adds an 8-byte
/// header and rounds each block up to 16 bytes, 32 at least. What a task holds is counted in these
/// terms, so the memory budget bounds the heap it takes, not the sum of the lengths asked for.
pub fn heap_block_bytes(len: usize) -> usize {
    if len == 0 {
        0
    } else {
        (len + 8).div_ceil(16).max(2) * 16
    }
}

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
    /// Bytes of memory it holds: its output in memory and what its records cost (once read to its
    /// end, only the small record that keeps its status and spill paths).
    pub retained_bytes: usize,
    /// Bytes of its spill files on disk (they stay after a read to the end, until it is discarded).
    pub spill_bytes: u64,
}

/// Totals over every finished task the registry keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, actix::MessageResponse)]
pub struct RetentionLoad {
    /// Finished tasks kept.
    pub finished: usize,
    /// Bytes of memory they hold (output and records).
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
    /// Bytes of memory finished tasks keep (output and records).
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
