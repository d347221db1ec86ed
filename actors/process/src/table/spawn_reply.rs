//! A spawn's answer channel, carrying the terminal slot the spawn took when it was submitted (issue
//! 22, `--max-ttys`). The slot travels with the spawn through the admission and launch queues, so
//! queued terminal spawns count against the cap and a call beyond it is refused at once, not when
//! its turn to launch comes; a spawn that never starts (refused, withdrawn, shut down) gives the slot
//! back with its answer.

use tokio::sync::oneshot;

use crate::errors::SpawnError;
use crate::messages::SpawnedProcess;
use crate::terminal_slots::TerminalSlot;

/// What a spawn's caller is answered.
pub(crate) type SpawnAnswer = Result<SpawnedProcess, SpawnError>;

/// Where a spawn's answer goes, and the terminal slot it holds until it starts or is answered.
#[derive(Debug)]
pub(crate) struct SpawnReply {
    answer: oneshot::Sender<SpawnAnswer>,
    terminal: Option<TerminalSlot>,
}

impl SpawnReply {
    /// A reply for a spawn holding `terminal` (a `tty` spawn) or nothing.
    pub(crate) fn new(
        answer: oneshot::Sender<SpawnAnswer>,
        terminal: Option<TerminalSlot>,
    ) -> Self {
        Self { answer, terminal }
    }

    /// Answers the caller (and frees a slot the spawn did not start with).
    pub(crate) fn send(self, answer: SpawnAnswer) -> Result<(), SpawnAnswer> {
        self.answer.send(answer)
    }

    /// The terminal slot taken at submission, for the child to hold until its driver settles.
    pub(crate) fn take_terminal_slot(&mut self) -> Option<TerminalSlot> {
        self.terminal.take()
    }

    /// Whether the caller stopped waiting.
    pub(crate) fn is_closed(&self) -> bool {
        self.answer.is_closed()
    }
}

impl From<oneshot::Sender<SpawnAnswer>> for SpawnReply {
    fn from(answer: oneshot::Sender<SpawnAnswer>) -> Self {
        Self::new(answer, None)
    }
}
