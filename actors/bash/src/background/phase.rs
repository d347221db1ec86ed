//! Where a background handle is in its life, as one value: the states of the diagram in the
//! handle's module doc, each carrying only what it can have.

use dsh_tasks::{SandboxFacts, TaskStatus};

/// The state of one [`BashProcess`](crate::BashProcess). A process exists (in the handle's
/// `process` cell) exactly in `Running` and `Killing`, and in `Settled` when the command started.
pub(super) enum Phase {
    /// Waiting for admission: no process yet.
    Queued,
    /// Killed while queued: the abort has fired and the manager withdraws the spawn (one it had
    /// already admitted is killed as it arrives).
    Withdrawing,
    /// The process runs (or has ended and nobody has looked yet: the first look settles it).
    Running,
    /// A kill was sent to the process; it reads `killed` until it has ended.
    Killing,
    /// Decided once: the first time the ended process was observed, or when it never started.
    Settled(Settled),
}

/// What a settled handle keeps.
pub(super) struct Settled {
    /// The final status.
    pub status: TaskStatus,
    /// A confined task's facts, stamped with the status.
    pub sandbox: Option<SandboxFacts>,
    /// Why the command never started (`spawn failed: …`), delivered by exactly one read.
    pub note: Option<String>,
}

impl Phase {
    /// Settled as `killed` with no signal known: a command that never started (with the note its
    /// one read shows, unless a kill withdrew it), or one whose driver was dropped unsettled.
    pub(super) fn killed(note: Option<String>, sandbox: Option<SandboxFacts>) -> Self {
        Phase::Settled(Settled {
            status: TaskStatus::Killed { signal: None },
            sandbox,
            note,
        })
    }

    /// Whether the command still waits for admission (a kill may be withdrawing it).
    pub(super) fn queued(&self) -> bool {
        matches!(self, Phase::Queued | Phase::Withdrawing)
    }

    /// Whether a kill was asked for and the end is not known yet.
    pub(super) fn killing(&self) -> bool {
        matches!(self, Phase::Withdrawing | Phase::Killing)
    }

    /// The settled state, once there is one.
    pub(super) fn settled(&self) -> Option<&Settled> {
        match self {
            Phase::Settled(settled) => Some(settled),
            _ => None,
        }
    }

    /// What the handle reads as in this phase, the process not looked at: `queued`, `running`,
    /// `killed` (signal unknown yet) once a kill was asked for, or the settled status.
    pub(super) fn status(&self) -> TaskStatus {
        match self {
            Phase::Queued => TaskStatus::Queued,
            Phase::Running => TaskStatus::Running,
            Phase::Withdrawing | Phase::Killing => TaskStatus::Killed { signal: None },
            Phase::Settled(settled) => settled.status.clone(),
        }
    }

    /// The never-started note, taken by the one read that shows it.
    pub(super) fn take_note(&mut self) -> Option<String> {
        match self {
            Phase::Settled(settled) => settled.note.take(),
            _ => None,
        }
    }
}
