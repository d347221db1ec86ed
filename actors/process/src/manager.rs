//! The `ProcessManager` actor: the supervisor of every process a runtime starts.
//!
//! Responsibilities:
//! - validate and admit spawns (the [`SupervisorPolicy`] may queue or refuse them);
//! - start each admitted child under its own [`ProcessGroup`] actor;
//! - keep every process record in a `slab` under a generation-checked [`ProcessId`] until released, so
//!   reads stay valid after exit and a stale id is an error, never another process;
//! - remember groups that outlived their leader (stragglers) and kill them at shutdown;
//! - [`Shutdown`]: kill and join every group, stragglers included, before the actor system stops
//!   (actor stop hooks cannot await, so this is an explicit async message).
//!
//! Record life cycle:
//!
//! ```text
//!   Spawn ──admit──► Live ──GroupSettled──► Settled ──Release──► (slot freed, id stale)
//!     └──queue──► (waits in order for a running child to settle)
//!   Release of a Live record kills it and frees the slot once it settles.
//! ```

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::Duration;

use actix::prelude::*;
use nix::sys::signal::Signal;
use slab::Slab;
use tokio::sync::{mpsc, oneshot};

use crate::child_env::{AmbientEnv, ChildEnv};
use crate::collector::OutputCollector;
use crate::driver::{Driver, SharedOutput};
use crate::errors::{ProcessError, SpawnError};
use crate::group::{GroupSettled, KillGroup, ProcessGroup};
use crate::ids::ProcessId;
use crate::outcome::{ProcessOutcome, ReadResult, StreamKind};
use crate::policy::{Admission, AdmitAll, Load, Settled, StragglerAction, SupervisorPolicy};
use crate::signal::{group_exists, live_group_members, signal_group};
use crate::spawn::{ProgramCache, RawChild, Started, check_workdir, spawn_raw};
use crate::spec::ProcessSpawnSpec;
use crate::spill::create_private_dir;

/// How long shutdown waits for SIGKILLed stragglers to vanish from `/proc`.
const STRAGGLER_REAP_WAIT: Duration = Duration::from_secs(2);

/// Manager configuration. Every per-process limit is on the spawn spec, not here.
pub struct ManagerConfig {
    /// Spill directory; `None`: a private `dsh-proc-XXXXXX` (0700) under the OS temp dir, created at the
    /// first spawn and removed at shutdown unless `keep_spill`.
    pub spill_dir: Option<PathBuf>,
    /// Keep the private spill directory (and its files) after shutdown.
    pub keep_spill: bool,
    /// Admission and straggler policy.
    pub policy: Box<dyn SupervisorPolicy>,
}

impl Default for ManagerConfig {
    fn default() -> Self {
        Self {
            spill_dir: None,
            keep_spill: false,
            policy: Box::new(AdmitAll),
        }
    }
}

impl std::fmt::Debug for ManagerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagerConfig")
            .field("spill_dir", &self.spill_dir)
            .field("keep_spill", &self.keep_spill)
            .finish_non_exhaustive()
    }
}

/// Start a process. Resolves once it runs (a queued spawn waits for admission).
#[derive(Message, Debug)]
#[rtype(result = "Result<SpawnedProcess, SpawnError>")]
pub struct Spawn(pub ProcessSpawnSpec);

/// A started process.
#[derive(Clone, Debug)]
pub struct SpawnedProcess {
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
    pub id: ProcessId,
    pub stream: StreamKind,
    pub offset: u64,
}

/// Kill a process group: SIGTERM, then SIGKILL after its grace. Idempotent.
#[derive(Message, Debug)]
#[rtype(result = "Result<KillOutcome, ProcessError>")]
pub struct Kill {
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

/// Resolves with the outcome once the process settles (and the manager has recorded it). Code that holds
/// the [`SpawnedProcess`] can await [`SharedOutput::settled`] instead, which skips this actor's mailbox:
/// the executor and background tasks do, because under a burst of spawns that mailbox is the slow hop.
#[derive(Message, Debug)]
#[rtype(result = "Result<ProcessOutcome, ProcessError>")]
pub struct Wait {
    pub id: ProcessId,
}

/// Forget a record, freeing its slot (the id becomes stale). A live process is killed first.
#[derive(Message, Debug)]
#[rtype(result = "Result<(), ProcessError>")]
pub struct Release {
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
}

/// One record.
struct Slot {
    generation: u64,
    pid: i32,
    output: SharedOutput,
    state: SlotState,
}

enum SlotState {
    Live {
        group: Addr<ProcessGroup>,
        waiters: Vec<oneshot::Sender<ProcessOutcome>>,
        release_when_settled: bool,
    },
    Settled(ProcessOutcome),
}

type Reply = oneshot::Sender<Result<SpawnedProcess, SpawnError>>;

/// A spawn waiting for admission.
struct Queued {
    spec: ProcessSpawnSpec,
    env: ChildEnv,
    reply: Reply,
}

/// An admitted spawn waiting for its turn (see `launch_next`).
struct Launch {
    spec: ProcessSpawnSpec,
    env: ChildEnv,
    spill_dir: PathBuf,
    program: PathBuf,
    reply: Reply,
}

/// The supervisor of all processes of one runtime.
pub struct ProcessManager {
    config: ManagerConfig,
    slots: Slab<Slot>,
    /// Last generation handed out; every spawn gets the next one.
    generation: u64,
    live: usize,
    peak_live: usize,
    queue: VecDeque<Queued>,
    /// The private spill directory, once created.
    private_spill_dir: Option<PathBuf>,
    /// Group ids of settled processes whose group still had members.
    stragglers: Vec<i32>,
    shutting_down: bool,
    /// The harness environment, scrubbed, as it was when the manager was created.
    ambient: std::sync::Arc<AmbientEnv>,
    /// Where programs were found on `PATH`, so a spawn does not search it again.
    programs: ProgramCache,
    /// Admitted spawns waiting for their turn, oldest first.
    pending: VecDeque<Launch>,
    /// A `launch_next` chain is under way.
    launching: bool,
}

impl ProcessManager {
    pub fn new(config: ManagerConfig) -> Self {
        Self {
            config,
            slots: Slab::new(),
            generation: 0,
            live: 0,
            peak_live: 0,
            queue: VecDeque::new(),
            private_spill_dir: None,
            stragglers: Vec::new(),
            shutting_down: false,
            ambient: std::sync::Arc::new(AmbientEnv::capture(std::env::vars_os())),
            programs: ProgramCache::default(),
            pending: VecDeque::new(),
            launching: false,
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

    /// The directory for this spec's spill files, creating the private one on first use.
    fn spill_dir_for(&mut self, spec: &ProcessSpawnSpec) -> Result<PathBuf, SpawnError> {
        if let Some(dir) = spec.spill_dir.as_ref().or(self.config.spill_dir.as_ref()) {
            return Ok(dir.clone());
        }
        if let Some(dir) = &self.private_spill_dir {
            return Ok(dir.clone());
        }
        let dir = create_private_dir().map_err(SpawnError::SpillDir)?;
        tracing::debug!(dir = %dir.display(), "created private spill directory");
        self.private_spill_dir = Some(dir.clone());
        Ok(dir)
    }

    /// Starts an admitted spawn: checks it, then queues it for [`Self::launch_next`], which spawns one
    /// child per turn of this thread.
    fn launch(
        &mut self,
        spec: ProcessSpawnSpec,
        env: ChildEnv,
        reply: Reply,
        ctx: &mut Context<Self>,
    ) {
        if let Some(abort) = spec.abort.as_ref().filter(|a| a.is_aborted()) {
            let _ = reply.send(Err(SpawnError::AbortedBeforeSpawn(abort.reason_text())));
            return;
        }
        let prepared = self.spill_dir_for(&spec).and_then(|spill_dir| {
            check_workdir(&spec.cwd)?;
            Ok((spill_dir, self.programs.program_for(&spec.argv[0], &env)?))
        });
        let (spill_dir, program) = match prepared {
            Ok(prepared) => prepared,
            Err(err) => {
                let _ = reply.send(Err(err));
                return;
            }
        };
        self.pending.push_back(Launch {
            spec,
            env,
            spill_dir,
            program,
            reply,
        });
        if !self.launching {
            self.launching = true;
            if self.live == 0 && self.pending.len() == 1 {
                // Nothing to supervise yet: spawn at once, with no extra turn.
                self.launch_next(ctx);
            } else {
                self.yield_then_launch(ctx);
            }
        }
    }

    /// Lets the other tasks of this thread run, then spawns the next pending launch.
    fn yield_then_launch(&mut self, ctx: &mut Context<Self>) {
        ctx.spawn(
            tokio::task::yield_now()
                .into_actor(self)
                .map(|(), manager, ctx| manager.launch_next(ctx)),
        );
    }

    /// Spawns the oldest pending launch right here, then, if more are pending, yields to the other
    /// tasks of this thread (the supervisors of running children) before spawning the next. A burst of
    /// spawns thus interleaves with exits and reads instead of holding them all back, without a second
    /// thread competing for the cores. A lone spawn runs at once, with no extra hop.
    fn launch_next(&mut self, ctx: &mut Context<Self>) {
        let Some(launch) = self.pending.pop_front() else {
            self.launching = false;
            return;
        };
        let raw = spawn_raw(
            &launch.program,
            &launch.spec.argv,
            &launch.spec.cwd,
            &launch.env,
            launch.spec.stdin.is_some(),
        );
        self.finish_launch(raw, launch, ctx);
        if self.pending.is_empty() {
            self.launching = false;
            return;
        }
        self.yield_then_launch(ctx);
    }

    /// Attaches a freshly spawned child (or reports why it failed), then lets queued spawns proceed.
    fn finish_launch(
        &mut self,
        raw: Result<RawChild, SpawnError>,
        launch: Launch,
        ctx: &mut Context<Self>,
    ) {
        let Launch {
            spec,
            env,
            spill_dir,
            reply,
            ..
        } = launch;
        let started = raw.and_then(|raw| raw.attach(&spec.argv[0], spec.stdin.clone()));
        match started {
            Err(err) => {
                if matches!(err, SpawnError::Os { .. }) {
                    self.programs.forget_program(&spec.argv[0], &env);
                }
                let _ = reply.send(Err(err));
            }
            Ok(started) => {
                let spawned = self.register(started, spec, spill_dir, ctx);
                // Nobody is waiting for it any more: never leave it unsupervised.
                if reply.send(Ok(spawned.clone())).is_err()
                    && let Ok(slot) = self.slot_mut(spawned.id)
                    && let SlotState::Live {
                        group,
                        release_when_settled,
                        ..
                    } = &mut slot.state
                {
                    *release_when_settled = true;
                    group.do_send(KillGroup);
                }
            }
        }
        self.admit_queued(ctx);
    }

    /// Puts a started child under a new `ProcessGroup` actor and records it.
    fn register(
        &mut self,
        started: Started,
        spec: ProcessSpawnSpec,
        spill_dir: PathBuf,
        ctx: &mut Context<Self>,
    ) -> SpawnedProcess {
        let pid = started.pid;
        let (output, settle_signal) = SharedOutput::new(
            OutputCollector::new(
                StreamKind::Stdout,
                spec.stdout_max_bytes,
                spec.max_spill_bytes,
                Some(spill_dir.clone()),
            ),
            OutputCollector::new(
                StreamKind::Stderr,
                spec.stderr_max_bytes,
                spec.max_spill_bytes,
                Some(spill_dir),
            ),
        );
        let (control_tx, control_rx) = mpsc::unbounded_channel();
        let driver = Driver::new(
            started,
            output.clone(),
            settle_signal,
            spec.grace,
            spec.abort,
            control_rx,
        );
        self.generation += 1;
        let entry = self.slots.vacant_entry();
        let id = ProcessId {
            slot: entry.key(),
            generation: self.generation,
        };
        let group = ProcessGroup::new(id, driver, control_tx, ctx.address().recipient()).start();
        entry.insert(Slot {
            generation: id.generation,
            pid,
            output: output.clone(),
            state: SlotState::Live {
                group,
                waiters: Vec::new(),
                release_when_settled: false,
            },
        });
        self.live += 1;
        self.peak_live = self.peak_live.max(self.live);
        tracing::debug!(%id, pid, argv0 = %spec.argv[0], "spawned");
        SpawnedProcess { id, pid, output }
    }

    /// Starts queued spawns, oldest first, while the policy admits them.
    fn admit_queued(&mut self, ctx: &mut Context<Self>) {
        while !self.shutting_down {
            let Some(front) = self.queue.front() else {
                break;
            };
            if front.reply.is_closed() {
                // Its caller gave up waiting: never start what nobody will supervise.
                self.queue.pop_front();
                continue;
            }
            let load = Load {
                running: self.live + self.pending.len(),
                queued: self.queue.len() - 1,
            };
            let admission = self.config.policy.admit(load);
            if admission == Admission::Queue {
                break;
            }
            let Some(Queued { spec, env, reply }) = self.queue.pop_front() else {
                break;
            };
            match admission {
                Admission::Refuse(reason) => {
                    let _ = reply.send(Err(SpawnError::Refused(reason)));
                }
                _ => self.launch(spec, env, reply, ctx),
            }
        }
    }

    /// Records a settled group that still has members, or kills it now if the policy says so.
    fn note_straggler(&mut self, pid: i32, action: StragglerAction) {
        if action == StragglerAction::KillNow && !live_group_members(pid).is_empty() {
            tracing::debug!(pgid = pid, "policy: killing straggler group now");
            signal_group(pid, Signal::SIGKILL);
        }
        if self.stragglers.len() >= 256 {
            self.stragglers.retain(|pgid| group_exists(*pgid));
        }
        self.stragglers.push(pid);
    }

    fn remove_private_spill_dir(&mut self) {
        if self.config.keep_spill {
            return;
        }
        if let Some(dir) = self.private_spill_dir.take()
            && let Err(err) = std::fs::remove_dir_all(&dir)
        {
            tracing::warn!(dir = %dir.display(), %err, "cannot remove the spill directory");
        }
    }
}

impl Actor for ProcessManager {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // Agents may start many tasks at once; the default mailbox of 16 would push back on them.
        ctx.set_mailbox_capacity(4096);
    }
}

impl Handler<Spawn> for ProcessManager {
    type Result = ResponseFuture<Result<SpawnedProcess, SpawnError>>;

    fn handle(&mut self, Spawn(spec): Spawn, ctx: &mut Self::Context) -> Self::Result {
        let (reply, rx) = oneshot::channel();
        match self.validate(&spec) {
            Err(err) => {
                let _ = reply.send(Err(err));
            }
            Ok(env) => {
                let load = Load {
                    running: self.live + self.pending.len(),
                    queued: self.queue.len(),
                };
                match self.config.policy.admit(load) {
                    Admission::Admit if self.queue.is_empty() => self.launch(spec, env, reply, ctx),
                    Admission::Admit | Admission::Queue => {
                        self.queue.push_back(Queued { spec, env, reply });
                        self.admit_queued(ctx);
                    }
                    Admission::Refuse(reason) => {
                        let _ = reply.send(Err(SpawnError::Refused(reason)));
                    }
                }
            }
        }
        Box::pin(async move { rx.await.unwrap_or(Err(SpawnError::ShutDown)) })
    }
}

impl ProcessManager {
    /// The synchronous checks of a spawn, in the seeds' order; returns the child's environment.
    fn validate(&self, spec: &ProcessSpawnSpec) -> Result<ChildEnv, SpawnError> {
        if self.shutting_down {
            return Err(SpawnError::ShutDown);
        }
        if let Some(abort) = spec.abort.as_ref().filter(|a| a.is_aborted()) {
            return Err(SpawnError::AbortedBeforeSpawn(abort.reason_text()));
        }
        if spec.argv.first().is_none_or(|program| program.is_empty()) {
            return Err(SpawnError::EmptyArgv);
        }
        ChildEnv::new(&self.ambient, &spec.env, &spec.dsh_env)
    }
}

impl Handler<GroupSettled> for ProcessManager {
    type Result = ();

    fn handle(&mut self, GroupSettled { id, outcome }: GroupSettled, ctx: &mut Self::Context) {
        let Ok(slot) = self.slot_mut(id) else {
            tracing::warn!(%id, "settlement for an unknown record");
            return;
        };
        let pid = slot.pid;
        let previous = std::mem::replace(&mut slot.state, SlotState::Settled(outcome.clone()));
        self.live -= 1;
        if let SlotState::Live {
            waiters,
            release_when_settled,
            ..
        } = previous
        {
            for waiter in waiters {
                let _ = waiter.send(outcome.clone());
            }
            if release_when_settled {
                self.slots.remove(id.slot);
            }
        }
        let group_remains = group_exists(pid);
        let action = self.config.policy.on_settled(&Settled {
            pid,
            outcome: &outcome,
            group_remains,
        });
        if group_remains {
            self.note_straggler(pid, action);
        }
        self.admit_queued(ctx);
    }
}

impl Handler<Read> for ProcessManager {
    type Result = Result<ReadResult, ProcessError>;

    fn handle(&mut self, Read { id, stream, offset }: Read, _: &mut Self::Context) -> Self::Result {
        Ok(self.slot(id)?.output.read(stream, offset))
    }
}

impl Handler<Kill> for ProcessManager {
    type Result = Result<KillOutcome, ProcessError>;

    fn handle(&mut self, Kill { id }: Kill, _: &mut Self::Context) -> Self::Result {
        match &self.slot(id)?.state {
            SlotState::Live { group, .. } => {
                group.do_send(KillGroup);
                Ok(KillOutcome::Requested)
            }
            SlotState::Settled(_) => Ok(KillOutcome::AlreadySettled),
        }
    }
}

impl Handler<Wait> for ProcessManager {
    type Result = ResponseFuture<Result<ProcessOutcome, ProcessError>>;

    fn handle(&mut self, Wait { id }: Wait, _: &mut Self::Context) -> Self::Result {
        let slot = match self.slot_mut(id) {
            Ok(slot) => slot,
            Err(err) => return Box::pin(std::future::ready(Err(err))),
        };
        match &mut slot.state {
            SlotState::Settled(outcome) => Box::pin(std::future::ready(Ok(outcome.clone()))),
            SlotState::Live { waiters, .. } => {
                let (tx, rx) = oneshot::channel();
                waiters.push(tx);
                Box::pin(async move { rx.await.map_err(|_| ProcessError::ShutDown) })
            }
        }
    }
}

impl Handler<Release> for ProcessManager {
    type Result = Result<(), ProcessError>;

    fn handle(&mut self, Release { id }: Release, _: &mut Self::Context) -> Self::Result {
        match &mut self.slot_mut(id)?.state {
            SlotState::Settled(_) => {
                self.slots.remove(id.slot);
            }
            SlotState::Live {
                group,
                release_when_settled,
                ..
            } => {
                *release_when_settled = true;
                group.do_send(KillGroup);
            }
        }
        Ok(())
    }
}

impl Handler<Stats> for ProcessManager {
    type Result = ManagerStats;

    fn handle(&mut self, _: Stats, _: &mut Self::Context) -> ManagerStats {
        ManagerStats {
            live: self.live,
            settled: self.slots.len() - self.live,
            queued: self.queue.len(),
            peak_live: self.peak_live,
            stragglers: self.stragglers.len(),
        }
    }
}

impl Handler<KillAllNow> for ProcessManager {
    type Result = ();

    fn handle(&mut self, _: KillAllNow, _: &mut Self::Context) {
        for (_, slot) in self.slots.iter() {
            if let SlotState::Live { .. } = slot.state {
                signal_group(slot.pid, Signal::SIGKILL);
            }
        }
        for pgid in &self.stragglers {
            if !live_group_members(*pgid).is_empty() {
                signal_group(*pgid, Signal::SIGKILL);
            }
        }
    }
}

impl Handler<Shutdown> for ProcessManager {
    type Result = ResponseActFuture<Self, ()>;

    /// Refuses queued and pending spawns (spawning is synchronous, so none is half done), then kills
    /// every live group, joins them, kills stragglers and removes the private spill directory.
    fn handle(&mut self, _: Shutdown, _: &mut Self::Context) -> Self::Result {
        self.shutting_down = true;
        for queued in self.queue.drain(..) {
            let _ = queued.reply.send(Err(SpawnError::ShutDown));
        }
        for launch in self.pending.drain(..) {
            let _ = launch.reply.send(Err(SpawnError::ShutDown));
        }
        Box::pin(
            self.kill_and_join_live()
                .into_actor(self)
                .then(|(), manager, _| {
                    kill_stragglers(std::mem::take(&mut manager.stragglers)).into_actor(manager)
                })
                .map(|(), manager, _| {
                    manager.remove_private_spill_dir();
                    tracing::debug!("process manager shut down");
                }),
        )
    }
}

impl ProcessManager {
    /// Kills every live group; resolves when all of them have settled.
    fn kill_and_join_live(&mut self) -> impl std::future::Future<Output = ()> + use<> {
        let mut settlements = Vec::new();
        for (_, slot) in self.slots.iter_mut() {
            if let SlotState::Live { group, waiters, .. } = &mut slot.state {
                let (tx, rx) = oneshot::channel();
                waiters.push(tx);
                settlements.push(rx);
                group.do_send(KillGroup);
            }
        }
        tracing::debug!(
            live = settlements.len(),
            stragglers = self.stragglers.len(),
            "shutting down"
        );
        futures_join_all(settlements)
    }
}

/// Awaits every receiver (a dropped sender counts as done).
async fn futures_join_all(receivers: Vec<oneshot::Receiver<ProcessOutcome>>) {
    for rx in receivers {
        let _ = rx.await;
    }
}

/// SIGKILLs every remembered group that still has live members, then waits (bounded) until `/proc`
/// shows none of them.
async fn kill_stragglers(pgids: Vec<i32>) {
    let mut remaining: Vec<i32> = pgids
        .into_iter()
        .filter(|pgid| {
            let members = live_group_members(*pgid);
            if members.is_empty() {
                return false;
            }
            tracing::debug!(pgid, ?members, "killing straggler group");
            signal_group(*pgid, Signal::SIGKILL)
        })
        .collect();
    let deadline = tokio::time::Instant::now() + STRAGGLER_REAP_WAIT;
    while !remaining.is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
        remaining.retain(|pgid| !live_group_members(*pgid).is_empty());
    }
    if !remaining.is_empty() {
        tracing::warn!(?remaining, "straggler groups still alive after SIGKILL");
    }
}
