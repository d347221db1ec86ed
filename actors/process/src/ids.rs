//! Generation-checked process ids.
//!
//! The manager keeps its children in a `slab`, whose keys are reused as soon as a slot is freed. A bare
//! slot number held by a caller could therefore name a different process later. Every id carries the
//! generation it was issued with; a slot answers only to the generation it currently holds.

use std::fmt;

/// Names one spawned process of one manager. Stale ids (released slots) are rejected, never aliased.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProcessId {
    pub(crate) slot: usize,
    pub(crate) generation: u64,
}

impl ProcessId {
    /// The spawn sequence number of this process (unique per manager, starts at 1).
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

impl fmt::Display for ProcessId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "process {}#{}", self.slot, self.generation)
    }
}
