//! The per-manager cap on terminals (issue 22, `--max-ttys`): each `tty` spawn holds a slot from
//! its admission (`table/spawn_reply.rs` carries it through the queues) until its driver has settled
//! (the master is closed by then). A terminal
//! costs a pty pair from the kernel's `pty.max` and an emulator's memory, so their number is
//! bounded apart from the process limits.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The default cap (`--max-ttys`).
pub const DEFAULT_MAX_TERMINALS: usize = 64;

/// The slots of one manager.
#[derive(Clone, Debug)]
pub(crate) struct TerminalSlots {
    used: Arc<AtomicUsize>,
    max: usize,
}

/// One terminal's slot, given back when dropped.
#[derive(Debug)]
pub(crate) struct TerminalSlot(Arc<AtomicUsize>);

impl TerminalSlots {
    pub(crate) fn new(max: usize) -> Self {
        TerminalSlots {
            used: Arc::new(AtomicUsize::new(0)),
            max,
        }
    }

    /// A slot, or `None` when `max` terminals run already.
    pub(crate) fn take(&self) -> Option<TerminalSlot> {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                (used < self.max).then_some(used + 1)
            })
            .ok()
            .map(|_| TerminalSlot(self.used.clone()))
    }

    /// The cap.
    pub(crate) fn max(&self) -> usize {
        self.max
    }
}

impl Drop for TerminalSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}
