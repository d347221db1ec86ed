//! The messages of the [`ProcessManager`](crate::ProcessManager) actor, and what they answer.
//!
//! They live apart from the actor so a reader can see the whole protocol at once: a host starts a
//! process with [`Spawn`], reads it with [`Read`] (or through [`SpawnedProcess::output`]), stops it with
//! [`Kill`], waits for it with [`Wait`] and forgets it with [`Release`]. [`Shutdown`] and [`KillAllNow`]
//! end everything; [`Stats`] counts.

use actix::prelude::*;

use crate::errors::{ProcessError, SpawnError};
use crate::ids::ProcessId;
use crate::outcome::{ProcessOutcome, ReadResult, StreamKind};
use crate::shared_output::SharedOutput;
use crate::spec::ProcessSpawnSpec;
use crate::watchdog_link::WatchdogStatus;

/// Start a process. Resolves once it runs (a queued spawn waits for admission). If the spec's abort
/// fires while the spawn waits for admission, it leaves the queue and fails at once with
/// `aborted before spawn: <reason>`.
#[derive(Message, Debug)]
#[rtype(result = "Result<SpawnedProcess, SpawnError>")]
pub struct Spawn(pub ProcessSpawnSpec);

/// A started process.
#[derive(Clone, Debug)]
pub struct SpawnedProcess {
    /// The manager's id for it, for [`Read`], [`Kill`], [`Wait`] and [`Release`].
    pub id: ProcessId,
    /// The leader's pid, which is also its process group and session id.
    pub pid: i32,
    /// Direct, non-consuming access to its output (and outcome once settled), valid after exit.
    pub output: SharedOutput,
}

/// Non-consuming read of one stream from a whole-stream offset; valid while running and after exit.
#[derive(Message, Debug)]
#[rtype(result = "Result<ReadResult, ProcessError>")]
pub struct Read {
    /// The process to read.
    pub id: ProcessId,
    /// Which of its streams.
    pub stream: StreamKind,
    /// Where to start, in bytes since the stream began.
    pub offset: u64,
}

/// Write to an interactive process's input (issue 22): the same as
/// [`SharedOutput::write`](crate::SharedOutput::write) on its output, for callers that hold only
/// its id. Never waits for the program: at most 64 KiB wait in its queue. The outer error is an
/// unknown id; the inner one the refusal.
#[derive(Message, Debug)]
#[rtype(result = "Result<Result<(), crate::InputError>, ProcessError>")]
pub struct Write {
    /// The process to write to.
    pub id: ProcessId,
    /// What to write, in order.
    pub items: Vec<crate::InputItem>,
}

/// Kill a process group: SIGTERM, then SIGKILL after its grace. Idempotent.
#[derive(Message, Debug)]
#[rtype(result = "Result<KillOutcome, ProcessError>")]
pub struct Kill {
    /// The process whose group to kill.
    pub id: ProcessId,
}

/// What a [`Kill`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KillOutcome {
    /// The group was running; the escalation is under way (or already was).
    Requested,
    /// The process had settled; nothing was signalled.
    AlreadySettled,
}

/// Stop what a settled process left running ([`ProcessOutcome::left_running`], remembered under its
/// leader's pid): SIGTERM now, SIGKILL after `grace` to whatever is still alive then. Answers whether
/// anything of it was alive to signal.
#[derive(Message, Debug)]
#[rtype(result = "bool")]
pub struct KillLeftovers {
    /// The settled process's leader pid (its group).
    pub pgid: i32,
    /// How long SIGTERM has before SIGKILL.
    pub grace: std::time::Duration,
}

/// Whether anything a settled process left running ([`KillLeftovers`]) is still alive.
#[derive(Message, Debug)]
#[rtype(result = "bool")]
pub struct LeftoversAlive {
    /// The settled process's leader pid (its group).
    pub pgid: i32,
}

/// Resolves with the outcome once the process settles (and the manager has recorded it). Code that holds
/// the [`SpawnedProcess`] can await [`SharedOutput::settled`] instead, which skips this actor's mailbox:
/// the executor and background tasks do, because under a burst of spawns that mailbox is the slow hop.
#[derive(Message, Debug)]
#[rtype(result = "Result<ProcessOutcome, ProcessError>")]
pub struct Wait {
    /// The process to wait for.
    pub id: ProcessId,
}

/// Forget a record, freeing its slot (the id becomes stale). A live process is killed first.
#[derive(Message, Debug)]
#[rtype(result = "Result<(), ProcessError>")]
pub struct Release {
    /// The record to forget.
    pub id: ProcessId,
}

/// Forget a settled record for good: free its slot and delete its spill files (a background task that
/// retention discarded). A live process is released as by [`Release`] and its files are kept.
#[derive(Message, Debug)]
#[rtype(result = "Result<(), ProcessError>")]
pub struct Discard {
    /// The record to forget.
    pub id: ProcessId,
}

/// Kill and join every process, stragglers included; refuse queued and later spawns. Idempotent.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct Shutdown;

/// SIGKILL every live group and every straggler group now, without waiting for anything: the answer
/// to a second Ctrl-C. A normal [`Shutdown`] should follow (or already be under way) to join them.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct KillAllNow;

/// Counts, for tests, benchmarks and health checks.
#[derive(Message, Debug)]
#[rtype(result = "ManagerStats")]
pub struct Stats;

/// The manager's counters at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq, MessageResponse)]
pub struct ManagerStats {
    /// Processes running (not yet settled).
    pub live: usize,
    /// Settled records not yet released.
    pub settled: usize,
    /// Spawns waiting for admission.
    pub queued: usize,
    /// Most processes ever running at once.
    pub peak_live: usize,
    /// Groups remembered as possibly outliving their leader.
    pub stragglers: usize,
    /// Whether a watchdog guards the runtime against its own SIGKILL right now.
    pub watchdog: WatchdogStatus,
    /// Watchdogs started to replace one that died (an operator's `kill -9`, the OOM killer).
    pub watchdog_restarts: u64,
}

/// How much time the manager has spent deciding admissions: asking the policy stack, booking the
/// load, queueing and dequeuing (not the spawn's own checks and preparation, not starting children).
/// For benchmarks and health checks.
#[derive(Message, Debug)]
#[rtype(result = "AdmissionCost")]
pub struct GetAdmissionCost;

/// Admission work done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, MessageResponse)]
pub struct AdmissionCost {
    /// Spawns submitted (each asks the policy at least once).
    pub submitted: u64,
    /// Policy decisions made (a queued spawn is asked again when load changes).
    pub decisions: u64,
    /// Time spent in admission, in nanoseconds.
    pub nanos: u64,
}

/// Internal: a caller stopped waiting for a queued spawn (its abort fired); forget such spawns.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct WithdrawAbandoned;

/// Internal: the driver of `id` has settled and stored its outcome in the process's [`SharedOutput`].
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct ProcessSettled {
    pub id: ProcessId,
    /// Its containment handle, to recycle or keep as a straggler.
    pub contained: crate::containment::Contained,
    /// Something of it outside its process group was alive when it settled (the driver asked).
    pub remains: bool,
}
