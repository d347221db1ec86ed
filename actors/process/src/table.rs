//! The process table: every record a manager keeps, and every decision about them, with no actor in
//! sight.
//!
//! The [`ProcessManager`](crate::ProcessManager) actor owns one table and does only what the table
//! cannot: start children, run their drivers, pace launches across scheduler turns, send signals and
//! await. Each method here changes the records and returns what the actor must do next (a [`Pacing`],
//! groups to kill, a driver to run), so the rules can be read and tested on their own.
//!
//! Two queues, named for what they hold:
//! - `awaiting_admission`: spawns the policy said to [`Admission::Queue`](crate::Admission::Queue),
//!   one first-come lane per session, served round-robin (`fair_queue`);
//! - `ready_to_launch`: admitted and checked spawns waiting for their scheduler turn.
//!
//! Record life cycle:
//!
//! ```text
//!   submit ──admit──► ready_to_launch ──launched──► Live ──settled──► Settled ──release──► (freed)
//!     └──queue──► awaiting_admission ──(a child settles or launches)──► admit again, fairly
//!                      └──(the caller gave up: cancel, timeout)──► withdrawn
//!   release of a Live record kills it and frees the slot once it settles.
//! ```
//!
//! The outcome of a process is stored once, in its [`SharedOutput`]; a settled record only says so.

use std::collections::VecDeque;
use std::sync::Arc;

use slab::Slab;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::child_env::AmbientEnv;
use crate::config::ManagerConfig;
#[cfg(test)]
use crate::containment::Containment;
use crate::containment::{Contained, SharedContainment};
use crate::errors::{ProcessError, SpawnError};
use crate::ids::ProcessId;
use crate::messages::{AdmissionCost, KillOutcome, ManagerStats};
use crate::outcome::{ProcessOutcome, ReadResult, StreamKind};
use crate::policy::{SettledProcess, StragglerAction};
use crate::shared_output::SharedOutput;
use crate::spawn::ProgramCache;
use crate::spill::SpillDir;
use crate::stragglers::Straggler;

mod admission;
mod fair_queue;
mod load_book;
mod spawn_reply;
mod spill_dir;

use admission::AwaitingAdmission;
use admission::Launch;
pub(crate) use admission::Pacing;
use fair_queue::FairQueue;
use load_book::{Count, LoadBook};
pub(crate) use spawn_reply::SpawnReply;

/// Stragglers kept before the list is pruned of groups that have gone.
const STRAGGLER_PRUNE_AT: usize = 256;

/// What the actor must do after a settlement.
pub(crate) struct AfterSettle {
    /// A straggler group the policy wants killed now (if it still has live members).
    pub kill_straggler: Option<i32>,
    pub pacing: Pacing,
}

/// The answer to a wait.
pub(crate) enum WaitFor {
    Settled(ProcessOutcome),
    Pending(oneshot::Receiver<ProcessOutcome>),
}

/// One record.
struct Slot {
    generation: u64,
    pid: i32,
    /// Who the process is for, as admission counted it.
    session: Option<String>,
    background: bool,
    output: SharedOutput,
    state: SlotState,
}

enum SlotState {
    Live {
        /// Cancelling it starts the driver's kill escalation: the one way in to kill a process.
        kill: CancellationToken,
        waiters: Vec<oneshot::Sender<ProcessOutcome>>,
        release_when_settled: bool,
    },
    /// The outcome is in `output`.
    Settled,
}

/// Every record of one manager, its queues, its stragglers and its spill directory.
pub(crate) struct ProcessTable {
    config: ManagerConfig,
    slots: Slab<Slot>,
    /// Last generation handed out; every spawn gets the next one.
    generation: u64,
    live: usize,
    peak_live: usize,
    awaiting_admission: FairQueue<AwaitingAdmission>,
    /// Running and queued counts, in total and per session, as policies see them.
    load: LoadBook,
    /// Time spent deciding admissions (policy calls and queue work), for benchmarks.
    admission_cost: AdmissionCost,
    /// Time spent preparing launches (inside admission calls, but not admission work).
    preparation_nanos: u64,
    /// An admission call is being timed (nested calls are not timed again).
    timing: bool,
    ready_to_launch: VecDeque<Launch>,
    /// A launch chain is under way: the actor will come back for the next ready spawn.
    launching: bool,
    /// Settled processes of which something still ran (group members, leaf or marked processes).
    stragglers: Vec<Straggler>,
    /// How processes are kept together; shared with the drivers.
    containment: SharedContainment,
    /// The private spill directory, once created.
    private_spill_dir: Option<SpillDir>,
    shutting_down: bool,
    /// The harness environment, scrubbed, as it was when the table was created.
    ambient: Arc<AmbientEnv>,
    /// Where programs were found on `PATH`, so a spawn does not search it again.
    programs: ProgramCache,
    /// Whether a process group still has members (a `/proc` probe; replaced in unit tests).
    group_exists: fn(i32) -> bool,
}

impl ProcessTable {
    /// A table in group mode (no host probing), for unit tests.
    #[cfg(test)]
    pub(crate) fn new(config: ManagerConfig, ambient: AmbientEnv) -> Self {
        Self::with_containment(config, ambient, Arc::new(Containment::group()))
    }

    pub(crate) fn with_containment(
        config: ManagerConfig,
        ambient: AmbientEnv,
        containment: SharedContainment,
    ) -> Self {
        Self {
            containment,
            config,
            slots: Slab::new(),
            generation: 0,
            live: 0,
            peak_live: 0,
            awaiting_admission: FairQueue::default(),
            load: LoadBook::default(),
            admission_cost: AdmissionCost::default(),
            preparation_nanos: 0,
            timing: false,
            ready_to_launch: VecDeque::new(),
            launching: false,
            stragglers: Vec::new(),
            private_spill_dir: None,
            shutting_down: false,
            ambient: Arc::new(ambient),
            programs: ProgramCache::default(),
            group_exists: crate::signal::group_exists,
        }
    }

    fn slot(&self, id: ProcessId) -> Result<&Slot, ProcessError> {
        self.slots
            .get(id.slot)
            .filter(|slot| slot.generation == id.generation)
            .ok_or(ProcessError::Unknown(id))
    }

    fn slot_mut(&mut self, id: ProcessId) -> Result<&mut Slot, ProcessError> {
        self.slots
            .get_mut(id.slot)
            .filter(|slot| slot.generation == id.generation)
            .ok_or(ProcessError::Unknown(id))
    }

    /// The containment shared with the drivers.
    pub(crate) fn containment(&self) -> &SharedContainment {
        &self.containment
    }

    /// The driver of `id` has settled: wake waiters, free a released slot, ask the policy about its
    /// group, and admit waiting spawns. Something still running (its group, or `remains`: the
    /// driver found some of it alive outside the group) keeps `contained` as a straggler; otherwise
    /// it is finished.
    pub(crate) fn settled(
        &mut self,
        id: ProcessId,
        contained: Contained,
        remains: bool,
    ) -> AfterSettle {
        let Ok(slot) = self.slot_mut(id) else {
            tracing::warn!(%id, "settlement for an unknown record");
            self.containment.finish(0, contained);
            return AfterSettle {
                kill_straggler: None,
                pacing: Pacing::Idle,
            };
        };
        let pid = slot.pid;
        let (session, background) = (slot.session.clone(), slot.background);
        let outcome = slot.output.outcome().cloned();
        let previous = std::mem::replace(&mut slot.state, SlotState::Settled);
        let SlotState::Live {
            waiters,
            release_when_settled,
            ..
        } = previous
        else {
            // Already settled: a process settles once.
            slot.state = previous;
            self.containment.finish(pid, contained);
            return AfterSettle {
                kill_straggler: None,
                pacing: Pacing::Idle,
            };
        };
        self.live -= 1;
        self.load.remove(&session, Count::Running, background);
        if let Some(outcome) = &outcome {
            for waiter in waiters {
                let _ = waiter.send(outcome.clone());
            }
        }
        if release_when_settled {
            self.slots.remove(id.slot);
        }
        let mut kill_straggler = None;
        let group_remains = (self.group_exists)(pid) || remains;
        if let Some(outcome) = &outcome {
            let action = self.config.policy.on_settled(&SettledProcess {
                pid,
                outcome,
                group_remains,
            });
            if group_remains && action == StragglerAction::KillNow {
                kill_straggler = Some(pid);
            }
        }
        if group_remains {
            self.remember_straggler(Straggler {
                pgid: pid,
                contained,
            });
        } else {
            self.containment.finish(pid, contained);
        }
        AfterSettle {
            kill_straggler,
            pacing: self.admit_waiting(),
        }
    }

    fn remember_straggler(&mut self, straggler: Straggler) {
        if self.stragglers.len() >= STRAGGLER_PRUNE_AT {
            crate::stragglers::prune(&mut self.stragglers, &self.containment, self.group_exists);
        }
        self.stragglers.push(straggler);
    }

    /// SIGKILLs everything of the straggler `pgid` now (the policy asked for it).
    pub(crate) fn kill_straggler(&self, pgid: i32) {
        self.signal_straggler(pgid, nix::sys::signal::Signal::SIGKILL);
    }

    /// Sends `signal` to what is left of the straggler led by `pgid`; whether one was remembered
    /// and still had something alive.
    pub(crate) fn signal_straggler(&self, pgid: i32, signal: nix::sys::signal::Signal) -> bool {
        let exists = self.group_exists;
        crate::stragglers::find_alive(&self.stragglers, &self.containment, pgid, exists)
            .inspect(|s| {
                self.containment
                    .signal_straggler(pgid, &s.contained, signal)
            })
            .is_some()
    }

    /// Whether the straggler led by `pgid` is remembered and has something alive.
    pub(crate) fn straggler_alive(&self, pgid: i32) -> bool {
        let exists = self.group_exists;
        crate::stragglers::find_alive(&self.stragglers, &self.containment, pgid, exists).is_some()
    }

    pub(crate) fn read(
        &self,
        id: ProcessId,
        stream: StreamKind,
        offset: u64,
    ) -> Result<ReadResult, ProcessError> {
        Ok(self.slot(id)?.output.read(stream, offset))
    }

    /// The shared output of a process (its input too, when it has one).
    pub(crate) fn output(&self, id: ProcessId) -> Result<&SharedOutput, ProcessError> {
        Ok(&self.slot(id)?.output)
    }

    /// Starts the kill of a live process (idempotent: the driver escalates once).
    pub(crate) fn kill(&self, id: ProcessId) -> Result<KillOutcome, ProcessError> {
        match &self.slot(id)?.state {
            SlotState::Live { kill, .. } => {
                kill.cancel();
                Ok(KillOutcome::Requested)
            }
            SlotState::Settled => Ok(KillOutcome::AlreadySettled),
        }
    }

    pub(crate) fn wait(&mut self, id: ProcessId) -> Result<WaitFor, ProcessError> {
        let slot = self.slot_mut(id)?;
        match &mut slot.state {
            SlotState::Settled => slot
                .output
                .outcome()
                .cloned()
                .map(WaitFor::Settled)
                .ok_or(ProcessError::ShutDown),
            SlotState::Live { waiters, .. } => {
                let (tx, rx) = oneshot::channel();
                waiters.push(tx);
                Ok(WaitFor::Pending(rx))
            }
        }
    }

    /// Frees a settled record now; kills a live one and frees it once it settles.
    pub(crate) fn release(&mut self, id: ProcessId) -> Result<(), ProcessError> {
        match &mut self.slot_mut(id)?.state {
            SlotState::Settled => {
                self.slots.remove(id.slot);
            }
            SlotState::Live {
                kill,
                release_when_settled,
                ..
            } => {
                *release_when_settled = true;
                kill.cancel();
            }
        }
        Ok(())
    }

    /// Frees a settled record and deletes its spill files; a live one is released as by `release`.
    pub(crate) fn discard(&mut self, id: ProcessId) -> Result<(), ProcessError> {
        let slot = self.slot(id)?;
        if matches!(slot.state, SlotState::Live { .. }) {
            return self.release(id);
        }
        for path in slot.output.spill_paths() {
            if let Err(err) = std::fs::remove_file(&path) {
                tracing::warn!(path = %path.display(), %err, "cannot remove a discarded spill file");
            }
        }
        self.slots.remove(id.slot);
        Ok(())
    }

    /// Time spent on admission so far.
    pub(crate) fn admission_cost(&self) -> AdmissionCost {
        self.admission_cost
    }

    pub(crate) fn stats(&self) -> ManagerStats {
        let (watchdog, watchdog_restarts) = self.containment.watchdog_status();
        ManagerStats {
            live: self.live,
            settled: self.slots.len() - self.live,
            queued: self.awaiting_admission.len(),
            peak_live: self.peak_live,
            stragglers: self.stragglers.len(),
            watchdog,
            watchdog_restarts,
        }
    }

    /// SIGKILLs every live process's group and every straggler (what
    /// [`KillAllNow`](crate::KillAllNow) does before the containment-wide kill).
    pub(crate) fn kill_all_now(&self) {
        for (_, slot) in self.slots.iter() {
            if matches!(slot.state, SlotState::Live { .. }) {
                crate::signal::signal_group(slot.pid, nix::sys::signal::Signal::SIGKILL);
            }
        }
        for straggler in &self.stragglers {
            self.containment.signal_straggler(
                straggler.pgid,
                &straggler.contained,
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }

    /// Whether [`ProcessTable::begin_shutdown`] has run.
    pub(crate) fn shutting_down(&self) -> bool {
        self.shutting_down
    }

    /// Refuses every queued and ready spawn and later ones, starts the kill of every live process,
    /// and returns one receiver per live process that fires when it settles.
    pub(crate) fn begin_shutdown(&mut self) -> Vec<oneshot::Receiver<ProcessOutcome>> {
        self.shutting_down = true;
        for waiting in self.awaiting_admission.drain_all() {
            let _ = waiting.reply.send(Err(SpawnError::ShutDown));
        }
        self.load.clear_queued();
        for launch in self.ready_to_launch.drain(..) {
            let _ = launch.reply.send(Err(SpawnError::ShutDown));
        }
        let mut settlements = Vec::new();
        for (_, slot) in self.slots.iter_mut() {
            if let SlotState::Live { kill, waiters, .. } = &mut slot.state {
                let (tx, rx) = oneshot::channel();
                waiters.push(tx);
                settlements.push(rx);
                kill.cancel();
            }
        }
        tracing::debug!(
            live = settlements.len(),
            stragglers = self.stragglers.len(),
            "shutting down"
        );
        settlements
    }

    /// The remembered stragglers, forgotten here (shutdown kills them).
    pub(crate) fn take_stragglers(&mut self) -> Vec<Straggler> {
        std::mem::take(&mut self.stragglers)
    }
}

#[cfg(test)]
mod tests;
