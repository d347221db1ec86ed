//! Admission and launch: the half of the table that turns a submitted spawn into a started child.
//!
//! A spawn is checked, then the policy admits, queues or refuses it, seeing who asks (session,
//! foreground or background) and the load in total and of that session ([`LoadBook`]). Admitted spawns
//! wait in `ready_to_launch` for their scheduler turn; queued ones wait in `awaiting_admission` (a
//! [`FairQueue`]: round-robin between sessions) until a child settles or launches, or until their caller
//! gives up ([`ProcessTable::withdraw_abandoned`]). The actor calls [`ProcessTable::next_launch`],
//! starts the child, and hands the result to [`ProcessTable::launched`]; each call returns the
//! [`Pacing`] of the launch chain. Every decision is a tracing event with target `dsh::policy`.
//!
//! [`LoadBook`]: super::load_book::LoadBook
//! [`FairQueue`]: super::fair_queue::FairQueue

use std::path::PathBuf;

use tokio_util::sync::CancellationToken;

use super::{ProcessTable, Slot, SlotState};
use crate::abort::ensure_not_aborted;
use crate::child_env::ChildEnv;
use crate::containment::Contained;
use crate::driver::Driver;
use crate::errors::SpawnError;
use crate::ids::ProcessId;
use crate::messages::SpawnedProcess;
use crate::policy::{Admission, AdmissionRequest};

use super::load_book::{Count, Session};
use crate::spawn::{Started, check_workdir};
use crate::spec::ProcessSpawnSpec;
use crate::spill::SpillDir;

pub(crate) use super::spawn_reply::SpawnReply;

/// What the actor must do about launches after a table call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pacing {
    /// Nothing: no launch is ready, or a launch chain is already under way.
    Idle,
    /// Launch the next ready spawn right now (nothing is running, so no one waits behind it).
    LaunchNow,
    /// Let the other tasks of this thread run, then launch the next ready spawn.
    LaunchAfterYield,
}

impl Pacing {
    /// The one of two pacings that starts a chain (at most one of them can).
    fn or(self, other: Pacing) -> Pacing {
        if self == Pacing::Idle { other } else { self }
    }
}

/// An admitted, checked spawn waiting for its scheduler turn.
pub(crate) struct Launch {
    pub spec: ProcessSpawnSpec,
    pub env: ChildEnv,
    pub program: PathBuf,
    spill_dir: SpillDir,
    pub(super) reply: SpawnReply,
}

impl Launch {
    /// The terminal slot taken at submission (see [`SpawnReply`]).
    pub(crate) fn take_terminal_slot(&mut self) -> Option<crate::terminal_slots::TerminalSlot> {
        self.reply.take_terminal_slot()
    }
}

/// A spawn the policy asked to wait.
pub(super) struct AwaitingAdmission {
    spec: ProcessSpawnSpec,
    env: ChildEnv,
    pub(super) reply: SpawnReply,
}

/// What the actor must do after a launch.
pub(crate) struct Launched {
    /// The new child's driver, to run until it settles and then report [`ProcessSettled`].
    ///
    /// [`ProcessSettled`]: crate::messages::ProcessSettled
    pub driver: Option<(ProcessId, Driver)>,
    pub pacing: Pacing,
}

impl ProcessTable {
    /// Asks the policy about a spawn of `session`; `queued_self` when it is already waiting (it is
    /// then not counted among the queued it sees). Logs the decision.
    fn ask_policy(&mut self, session: &Session, background: bool, queued_self: bool) -> Admission {
        self.admission_cost.decisions += 1;
        let (total, session_load) = self.load.seen_by(session, background, queued_self);
        let admission = self.config.policy.admit(&AdmissionRequest {
            session: session.as_deref(),
            background,
            total,
            session_load,
        });
        let reason = match &admission {
            Admission::Refuse(reason) => reason.as_str(),
            _ => "",
        };
        tracing::debug!(
            target: "dsh::policy",
            decision = admission.label(),
            session = session.as_deref().unwrap_or("-"),
            background,
            running = total.running,
            queued = total.queued,
            session_running = session_load.running,
            session_queued = session_load.queued,
            reason,
            "admission"
        );
        admission
    }

    /// A new spawn: checked, then admitted, queued or refused. Errors go to `reply`.
    pub(crate) fn submit(&mut self, spec: ProcessSpawnSpec, reply: SpawnReply) -> Pacing {
        // Checks and the environment merge are the spawn's own work, not admission.
        let env = match self.validate(&spec) {
            Ok(env) => env,
            Err(err) => {
                let _ = reply.send(Err(err));
                return Pacing::Idle;
            }
        };
        self.admission_cost.submitted += 1;
        self.timed(|table| table.decide_new(spec, env, reply))
    }

    /// Runs `work` and counts its time as admission, less the launch preparation inside it (the
    /// workdir check, the program lookup) and without counting nested calls twice.
    fn timed(&mut self, work: impl FnOnce(&mut Self) -> Pacing) -> Pacing {
        if self.timing {
            return work(self);
        }
        self.timing = true;
        let began = std::time::Instant::now();
        let prepared_before = self.preparation_nanos;
        let pacing = work(self);
        let preparation = self.preparation_nanos - prepared_before;
        let spent = u64::try_from(began.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.admission_cost.nanos += spent.saturating_sub(preparation);
        self.timing = false;
        pacing
    }

    fn decide_new(&mut self, spec: ProcessSpawnSpec, env: ChildEnv, reply: SpawnReply) -> Pacing {
        let session = spec.session.clone();
        let background = spec.background;
        match self.ask_policy(&session, background, false) {
            // Spawns that wait were asked at this same load after the last change and held back
            // for reasons of their own (a session's limit): a spawn the policy admits goes now.
            Admission::Admit => self.prepare_launch(spec, env, reply),
            Admission::Queue => {
                if let Some(notice) = &spec.queued {
                    notice.fire();
                }
                self.load.add(&session, Count::Queued, background);
                self.awaiting_admission.push(
                    (session, background),
                    AwaitingAdmission { spec, env, reply },
                );
                self.admit_waiting()
            }
            Admission::Refuse(reason) => {
                let _ = reply.send(Err(SpawnError::Refused(reason)));
                Pacing::Idle
            }
        }
    }

    /// Forgets waiting spawns whose caller gave up (cancelled, or timed out while queued), so they
    /// neither start nor count as queued.
    pub(crate) fn withdraw_abandoned(&mut self) -> Pacing {
        let gone = self
            .awaiting_admission
            .remove_where(|waiting| waiting.reply.is_closed());
        for waiting in &gone {
            self.load.remove(
                &waiting.spec.session,
                Count::Queued,
                waiting.spec.background,
            );
            tracing::debug!(
                target: "dsh::policy",
                session = waiting.spec.session.as_deref().unwrap_or("-"),
                "withdrawn from the queue"
            );
        }
        if gone.is_empty() {
            Pacing::Idle
        } else {
            self.admit_waiting()
        }
    }

    /// The synchronous checks of a spawn, in a fixed order (shut down, aborted, empty argv, then the
    /// environment's channel rules), so the first that fails names the error; returns the child's
    /// environment.
    fn validate(&self, spec: &ProcessSpawnSpec) -> Result<ChildEnv, SpawnError> {
        if self.shutting_down {
            return Err(SpawnError::ShutDown);
        }
        ensure_not_aborted(spec.abort.as_ref())?;
        if spec.argv.first().is_none_or(|program| program.is_empty()) {
            return Err(SpawnError::EmptyArgv);
        }
        ChildEnv::new(&self.ambient, &spec.env, &spec.dsh_env)
    }

    /// Admits waiting spawns while the policy agrees: the head of each session's lane in turn
    /// (round-robin), until a full round of lanes admits nothing.
    pub(super) fn admit_waiting(&mut self) -> Pacing {
        if self.awaiting_admission.lanes_waiting() == 0 {
            return Pacing::Idle;
        }
        self.timed(Self::admit_round_robin)
    }

    fn admit_round_robin(&mut self) -> Pacing {
        let mut pacing = Pacing::Idle;
        let mut held_in_a_row = 0;
        while !self.shutting_down && held_in_a_row < self.awaiting_admission.lanes_waiting() {
            let Some((lane, head)) = self.awaiting_admission.head() else {
                break;
            };
            let ((session, background), abandoned) = (lane.clone(), head.reply.is_closed());
            let admission = if abandoned {
                // Its caller gave up waiting: never start what nobody waits for.
                None
            } else {
                Some(self.ask_policy(&session, background, true))
            };
            if admission == Some(Admission::Queue) {
                self.awaiting_admission.skip_head();
                held_in_a_row += 1;
                continue;
            }
            held_in_a_row = 0;
            let Some(AwaitingAdmission { spec, env, reply }) = self.awaiting_admission.pop_head()
            else {
                break;
            };
            self.load.remove(&session, Count::Queued, background);
            match admission {
                None => {}
                Some(Admission::Refuse(reason)) => {
                    let _ = reply.send(Err(SpawnError::Refused(reason)));
                }
                Some(_) => pacing = pacing.or(self.prepare_launch(spec, env, reply)),
            }
        }
        pacing
    }

    /// Checks an admitted spawn (abort, spill directory, workdir, program) and makes it ready.
    fn prepare_launch(
        &mut self,
        spec: ProcessSpawnSpec,
        env: ChildEnv,
        reply: SpawnReply,
    ) -> Pacing {
        let began = std::time::Instant::now();
        let pacing = self.prepare_launch_untimed(spec, env, reply);
        self.preparation_nanos += u64::try_from(began.elapsed().as_nanos()).unwrap_or(u64::MAX);
        pacing
    }

    fn prepare_launch_untimed(
        &mut self,
        spec: ProcessSpawnSpec,
        env: ChildEnv,
        reply: SpawnReply,
    ) -> Pacing {
        let prepared = ensure_not_aborted(spec.abort.as_ref())
            .and_then(|()| self.spill_dir_for(&spec))
            .and_then(|spill_dir| {
                check_workdir(&spec.cwd)?;
                Ok((spill_dir, self.programs.program_for(&spec.argv[0], &env)?))
            });
        let (spill_dir, program) = match prepared {
            Ok(prepared) => prepared,
            Err(err) => {
                let _ = reply.send(Err(err));
                return Pacing::Idle;
            }
        };
        self.load
            .add(&spec.session, Count::Running, spec.background);
        self.ready_to_launch.push_back(Launch {
            spec,
            env,
            program,
            spill_dir,
            reply,
        });
        if self.launching {
            return Pacing::Idle;
        }
        self.launching = true;
        if self.live == 0 && self.ready_to_launch.len() == 1 {
            // Nothing is running yet: spawn at once, with no extra turn.
            Pacing::LaunchNow
        } else {
            Pacing::LaunchAfterYield
        }
    }

    /// The oldest ready spawn; `None` ends the launch chain.
    pub(crate) fn next_launch(&mut self) -> Option<Launch> {
        let launch = self.ready_to_launch.pop_front();
        if launch.is_none() {
            self.launching = false;
        }
        launch
    }

    /// Records the result of starting `launch`, answers its caller and admits waiting spawns.
    pub(crate) fn launched(
        &mut self,
        launch: Launch,
        started: Result<(Started, Contained), SpawnError>,
    ) -> Launched {
        let Launch {
            spec,
            env,
            spill_dir,
            reply,
            ..
        } = launch;
        let driver = match started {
            Err(err) => {
                self.load
                    .remove(&spec.session, Count::Running, spec.background);
                if matches!(err, SpawnError::Os { .. }) {
                    self.programs.forget_program(&spec.argv[0], &env);
                }
                let _ = reply.send(Err(err));
                None
            }
            Ok((started, contained)) => {
                let (spawned, driver, kill) = self.register(started, contained, spec, spill_dir);
                let id = spawned.id;
                if reply.send(Ok(spawned)).is_err() {
                    // Nobody is waiting for it any more: never leave it unsupervised.
                    self.release_when_settled(id);
                    kill.cancel();
                }
                Some((id, driver))
            }
        };
        let mut pacing = self.admit_waiting();
        if self.launching {
            pacing = if self.ready_to_launch.is_empty() {
                self.launching = false;
                Pacing::Idle
            } else {
                Pacing::LaunchAfterYield
            };
        }
        Launched { driver, pacing }
    }

    /// A new Live record for a started child, with the driver that will run it.
    fn register(
        &mut self,
        started: Started,
        contained: Contained,
        spec: ProcessSpawnSpec,
        spill_dir: SpillDir,
    ) -> (SpawnedProcess, Driver, CancellationToken) {
        let pid = started.pid;
        self.containment.started(pid, &contained);
        let kill = spec
            .abort
            .as_ref()
            .map(|abort| abort.kill_token())
            .unwrap_or_default();
        let (output, driver) = Driver::new(
            started,
            &spec,
            spill_dir,
            kill.clone(),
            self.containment.clone(),
            contained,
        );
        self.generation += 1;
        let entry = self.slots.vacant_entry();
        let id = ProcessId {
            slot: entry.key(),
            generation: self.generation,
        };
        entry.insert(Slot {
            generation: id.generation,
            pid,
            session: spec.session.clone(),
            background: spec.background,
            output: output.clone(),
            state: SlotState::Live {
                kill: kill.clone(),
                waiters: Vec::new(),
                release_when_settled: false,
            },
        });
        self.live += 1;
        self.peak_live = self.peak_live.max(self.live);
        tracing::debug!(%id, pid, argv0 = %spec.argv[0], "spawned");
        (SpawnedProcess { id, pid, output }, driver, kill)
    }

    fn release_when_settled(&mut self, id: ProcessId) {
        if let Ok(Slot {
            state:
                SlotState::Live {
                    release_when_settled,
                    ..
                },
            ..
        }) = self.slot_mut(id)
        {
            *release_when_settled = true;
        }
    }
}
