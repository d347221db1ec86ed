//! The kill side of a driver: where its escalation stands (SIGTERM, then SIGKILL after the
//! grace) and the guard that kills everything of a process whose driver is dropped unsettled.
//! Kept apart from `mod.rs`, which runs the child's life, because these are the kill's states
//! and its one side effect.

use nix::sys::signal::Signal;
use tokio::time::Instant;

use crate::containment::{Contained, SharedContainment};

/// Where the kill escalation stands (the diagram's second row).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Escalation {
    /// No kill was asked for; the kill token is listened to.
    Idle,
    /// SIGTERM went to every process of the child; SIGKILL is armed for `kill_at`.
    TermSent { kill_at: Instant },
    /// The grace ran out with something still alive: SIGKILL went to what was left.
    KillSent,
    /// The grace ran out with nothing alive: SIGTERM sufficed, no SIGKILL was sent.
    NothingToKill,
}

impl Escalation {
    /// Whether a kill was asked for (the process settles only when all of it is gone).
    pub(super) fn killed(self) -> bool {
        self != Escalation::Idle
    }

    /// The grace ran out; `sigkill_sent`: something was alive and got SIGKILL.
    pub(super) fn grace_over(sigkill_sent: bool) -> Self {
        if sigkill_sent {
            Escalation::KillSent
        } else {
            Escalation::NothingToKill
        }
    }

    /// The signals sent to the process, in order.
    pub(super) fn signals_sent(self) -> Vec<Signal> {
        match self {
            Escalation::Idle => Vec::new(),
            Escalation::TermSent { .. } | Escalation::NothingToKill => vec![Signal::SIGTERM],
            Escalation::KillSent => vec![Signal::SIGTERM, Signal::SIGKILL],
        }
    }
}

/// Kills everything of the process with SIGKILL if the driver is dropped before it settled (the
/// actor system stopped abruptly): nothing is left running behind a dropped driver.
pub(super) struct KillGuard {
    pub(super) pgid: i32,
    pub(super) containment: SharedContainment,
    pub(super) contained: Option<Contained>,
    pub(super) armed: bool,
}

impl KillGuard {
    pub(super) fn contained(&self) -> &Contained {
        self.contained.as_ref().unwrap_or(&Contained::Group)
    }

    pub(super) fn signal(&self, signal: Signal) {
        self.containment.signal(self.pgid, self.contained(), signal);
    }

    /// The armed SIGKILL, sent only if something of the process is still alive (its timer can
    /// fire in the same turn as the last exit). Returns whether it was sent. Asking costs no walk
    /// over `/proc` on this thread (see `Containment::alive`).
    pub(super) async fn sigkill_if_alive(&self) -> bool {
        let alive = self.containment.alive(self.pgid, self.contained()).await;
        if alive {
            self.signal(Signal::SIGKILL);
        }
        alive
    }
}

impl Drop for KillGuard {
    fn drop(&mut self) {
        if self.armed {
            self.signal(Signal::SIGKILL);
        }
    }
}
