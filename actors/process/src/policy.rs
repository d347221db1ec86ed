//! Process policies: what the manager asks before it admits a spawn and after a child settles.
//!
//! A policy is consulted synchronously inside the manager actor, so it must be quick and must not
//! panic (a panicking actix actor is never restarted). Policies act on explicit facts, never on panics.

use crate::outcome::ProcessOutcome;

/// The manager's load when a spawn asks to be admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Load {
    /// Processes started and not yet settled.
    pub running: usize,
    /// Spawns waiting for admission (not counting the one asking).
    pub queued: usize,
}

/// The answer to a spawn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Start it now.
    Admit,
    /// Hold it; the manager asks again, oldest first, whenever a child settles.
    Queue,
    /// Fail the spawn with this reason.
    Refuse(String),
}

/// What to do with the group of a settled child that still has live members (a descendant that held
/// the pipes past the drain grace, or survived the kill).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StragglerAction {
    /// Leave it running (as the seeds do) and kill it when the manager shuts down.
    KeepUntilShutdown,
    /// SIGKILL the group now.
    KillNow,
}

/// Facts about a child that just settled.
#[derive(Debug)]
pub struct SettledProcess<'a> {
    /// The leader's pid, which is also its process group id.
    pub pid: i32,
    /// How it ended.
    pub outcome: &'a ProcessOutcome,
    /// Whether the group still had members at settlement (zombies included).
    pub group_remains: bool,
}

/// A process policy: the manager supervises, the policy decides. The default methods admit
/// everything and keep stragglers until shutdown.
pub trait ProcessPolicy: Send + 'static {
    /// Decides whether a new spawn starts now, waits, or fails.
    fn admit(&mut self, load: Load) -> Admission {
        let _ = load;
        Admission::Admit
    }

    /// Told about every settled child; decides about its stragglers.
    fn on_settled(&mut self, settled: &SettledProcess<'_>) -> StragglerAction {
        let _ = settled;
        StragglerAction::KeepUntilShutdown
    }
}

/// Admits every spawn at once.
#[derive(Clone, Copy, Debug, Default)]
pub struct AdmitAll;

impl ProcessPolicy for AdmitAll {}

/// Runs at most `n` children at a time; further spawns queue and start in order as others settle.
#[derive(Clone, Copy, Debug)]
pub struct MaxConcurrent(pub usize);

impl ProcessPolicy for MaxConcurrent {
    fn admit(&mut self, load: Load) -> Admission {
        if self.0 == 0 {
            Admission::Refuse("MaxConcurrent(0) admits no process".to_owned())
        } else if load.running < self.0 {
            Admission::Admit
        } else {
            Admission::Queue
        }
    }
}
