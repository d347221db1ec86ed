//! The `ProcessManager` actor: supervises every process a runtime starts.
//!
//! It is a thin owner around a [`ProcessTable`], which keeps the records and makes every decision
//! (admission, queues, stragglers, the spill directory). The actor does what needs a scheduler: it
//! starts children one per turn of its thread, runs each child's driver as a task of its own, sends
//! the signals the table asks for, and awaits shutdown (actor stop hooks cannot await, so
//! [`Shutdown`] is an explicit async message). Its messages are in [`crate::messages`].

use std::sync::Arc;

use actix::prelude::*;
use tokio::sync::oneshot;

use nix::sys::signal::Signal;

use crate::abort::{AbortSignal, wait_abort};
use crate::child_env::AmbientEnv;
use crate::config::ManagerConfig;
use crate::containment::{Containment, ContainmentError};
use crate::driver::Driver;
use crate::errors::{ProcessError, SpawnError};
use crate::ids::ProcessId;
use crate::messages::{
    AdmissionCost, Discard, GetAdmissionCost, Kill, KillAllNow, KillLeftovers, KillOutcome,
    LeftoversAlive, ManagerStats, ProcessSettled, Read, Release, Shutdown, Spawn, SpawnedProcess,
    Stats, Wait, WithdrawAbandoned,
};
use crate::outcome::{ProcessOutcome, ReadResult};
use crate::spawn::{Stdin, start_child};
use crate::spec::InputMode;
use crate::stragglers::kill_stragglers;
use crate::table::{Pacing, ProcessTable, SpawnReply, WaitFor};
use crate::terminal_slots::TerminalSlots;

/// The manager of all processes of one runtime.
pub struct ProcessManager {
    table: ProcessTable,
    /// The terminals in use (`ManagerConfig::max_terminals`).
    terminals: TerminalSlots,
}

impl ProcessManager {
    /// A manager whose children inherit the current environment, scrubbed, as it is now. A
    /// containment the host cannot give falls back to the process group, with a warning; use
    /// [`ProcessManager::try_new`] to refuse instead.
    pub fn new(mut config: ManagerConfig) -> Self {
        let containment = Containment::start(&config.containment).unwrap_or_else(|err| {
            tracing::warn!(%err, "falling back to process-group containment");
            config.containment.mode = Some(dsh_contain::Mode::Group);
            config.containment.limits = dsh_contain::Limits::default();
            Containment::start(&config.containment).unwrap_or_else(|_| Containment::group())
        });
        Self::with(config, containment)
    }

    /// A manager with exactly the containment `config` asks for, or why the host cannot give it.
    pub fn try_new(config: ManagerConfig) -> Result<Self, ContainmentError> {
        let containment = Containment::start(&config.containment)?;
        Ok(Self::with(config, containment))
    }

    fn with(config: ManagerConfig, containment: Containment) -> Self {
        if containment.mode() == dsh_contain::Mode::Subreaper {
            dsh_contain::orphans::reap_on_sigchld();
        }
        let terminals = TerminalSlots::new(config.max_terminals);
        Self {
            terminals,
            table: ProcessTable::with_containment(
                config,
                AmbientEnv::capture(crate::env::with_login_shell(
                    std::env::vars_os(),
                    crate::env::passwd_login_shell,
                )),
                Arc::new(containment),
            ),
        }
    }

    /// Where spill files go (the configured directory, else the private one, created now): what
    /// a sandbox shows its commands read-only, so they can read the full outputs results name.
    pub fn spill_dir(&mut self) -> std::io::Result<std::path::PathBuf> {
        self.table
            .spill_dir_path()
            .map_err(|err| std::io::Error::other(err.to_string()))
    }

    /// The containment mode in force.
    pub fn containment_mode(&self) -> dsh_contain::Mode {
        self.table.containment().mode()
    }

    /// Acts on the table's pacing decision.
    fn pace(&mut self, pacing: Pacing, ctx: &mut Context<Self>) {
        match pacing {
            Pacing::Idle => {}
            Pacing::LaunchNow => self.launch_next(ctx),
            Pacing::LaunchAfterYield => {
                ctx.spawn(
                    tokio::task::yield_now()
                        .into_actor(self)
                        .map(|(), manager, ctx| manager.launch_next(ctx)),
                );
            }
        }
    }

    /// Starts the oldest ready spawn right here. If more are ready, the table asks for a yield first:
    /// a burst of spawns thus interleaves with the drivers of running children (exits, reads) instead
    /// of holding them all back, without a second thread competing for the cores.
    fn launch_next(&mut self, ctx: &mut Context<Self>) {
        let Some(mut launch) = self.table.next_launch() else {
            return;
        };
        let containment = self.table.containment().clone();
        let stdin = Stdin::of(&launch.spec);
        // A terminal holds a slot from its submission until its driver settles.
        let slot = match stdin {
            Stdin::Terminal(_) => match launch
                .take_terminal_slot()
                .or_else(|| self.terminals.take())
            {
                Some(slot) => Ok(Some(slot)),
                None => Err(SpawnError::TooManyTerminals(self.terminals.max())),
            },
            Stdin::Null | Stdin::Bytes(_) | Stdin::Open => Ok(None),
        };
        let started =
            slot.and_then(|slot| containment.prepare().map(|contained| (slot, contained)));
        let started = started.and_then(|(slot, contained)| {
            match start_child(
                &launch.program,
                &launch.spec.argv,
                &launch.spec.cwd,
                &launch.env,
                stdin,
                &contained,
                launch.spec.confinement.as_ref(),
            ) {
                Ok(mut started) => {
                    started.terminal_slot = slot;
                    Ok((started, contained))
                }
                Err(err) => {
                    containment.finish(0, contained);
                    Err(err)
                }
            }
        });
        let launched = self.table.launched(launch, started);
        if let Some((id, driver)) = launched.driver {
            drive(id, driver, ctx.address());
        }
        self.pace(launched.pacing, ctx);
    }
}

/// Runs a child's driver as a task of its own on this arbiter, then tells the manager it settled.
fn drive(id: ProcessId, driver: Driver, manager: Addr<ProcessManager>) {
    actix::spawn(async move {
        let (contained, remains) = driver.run().await;
        manager.do_send(ProcessSettled {
            id,
            contained,
            remains,
        });
    });
}

/// A manager dropped without its shutdown — a runtime whose start failed after the manager was
/// made, or an actix system stopped under it — still leaves nothing behind: what the shutdown
/// would have done is done here, at once (the drivers, dropped with their system, have started
/// killing their groups): every process still in its containment is killed, the cgroup tree and the
/// private spill directory are removed, and the watchdog is told goodbye.
impl Drop for ProcessManager {
    fn drop(&mut self) {
        if self.table.shutting_down() {
            return;
        }
        self.table.remove_private_spill_dir();
        self.table.containment().shut_down();
    }
}

impl Actor for ProcessManager {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // Agents may start many tasks at once; the default mailbox of 16 would push back on them.
        ctx.set_mailbox_capacity(4096);
        // A task of this arbiter, not of the actor's context: it must not keep the actor alive.
        actix::spawn(self.table.containment().watch_watchdog());
    }
}

impl Handler<Spawn> for ProcessManager {
    type Result = ResponseFuture<Result<SpawnedProcess, SpawnError>>;

    /// Answers when the process runs, or at once when the caller's abort fires while it waits for
    /// admission: the answer's receiver is then dropped and the table withdraws the spawn.
    fn handle(&mut self, Spawn(spec): Spawn, ctx: &mut Self::Context) -> Self::Result {
        let (reply, mut rx) = oneshot::channel();
        // A terminal's slot is taken here, at admission: a call beyond `--max-ttys` is refused now,
        // not after waiting in a queue, and queued terminal spawns count against the cap.
        let terminal = match spec.input {
            InputMode::Terminal(_) => match self.terminals.take() {
                Some(slot) => Some(slot),
                None => {
                    let refused = SpawnError::TooManyTerminals(self.terminals.max());
                    return Box::pin(std::future::ready(Err(refused)));
                }
            },
            InputMode::Closed | InputMode::Open => None,
        };
        let abort = spec.abort.clone();
        let pacing = self.table.submit(spec, SpawnReply::new(reply, terminal));
        self.pace(pacing, ctx);
        let me = ctx.address();
        Box::pin(async move {
            tokio::select! {
                biased;
                answer = &mut rx => answer.unwrap_or(Err(SpawnError::ShutDown)),
                () = wait_abort(abort.as_ref()) => {
                    match rx.try_recv() {
                        // Started just now: the abort has fired its kill; nobody will release it.
                        Ok(Ok(spawned)) => me.do_send(Release { id: spawned.id }),
                        Ok(Err(err)) => return Err(err),
                        Err(_) => {
                            drop(rx);
                            me.do_send(WithdrawAbandoned);
                        }
                    }
                    Err(SpawnError::AbortedBeforeSpawn(
                        abort.as_ref().map(AbortSignal::reason_text).unwrap_or_default(),
                    ))
                }
            }
        })
    }
}

impl Handler<WithdrawAbandoned> for ProcessManager {
    type Result = ();

    fn handle(&mut self, _: WithdrawAbandoned, ctx: &mut Self::Context) {
        let pacing = self.table.withdraw_abandoned();
        self.pace(pacing, ctx);
    }
}

impl Handler<ProcessSettled> for ProcessManager {
    type Result = ();

    fn handle(&mut self, settled: ProcessSettled, ctx: &mut Self::Context) {
        let after = self
            .table
            .settled(settled.id, settled.contained, settled.remains);
        if let Some(pgid) = after.kill_straggler {
            self.table.kill_straggler(pgid);
            tracing::debug!(pgid, "policy: killed straggler now");
        }
        self.pace(after.pacing, ctx);
    }
}

impl Handler<Read> for ProcessManager {
    type Result = Result<ReadResult, ProcessError>;

    fn handle(&mut self, Read { id, stream, offset }: Read, _: &mut Self::Context) -> Self::Result {
        self.table.read(id, stream, offset)
    }
}

impl Handler<crate::messages::Write> for ProcessManager {
    type Result = Result<Result<(), crate::InputError>, ProcessError>;

    fn handle(&mut self, msg: crate::messages::Write, _: &mut Self::Context) -> Self::Result {
        Ok(self.table.output(msg.id)?.write(msg.items))
    }
}

impl Handler<Kill> for ProcessManager {
    type Result = Result<KillOutcome, ProcessError>;

    fn handle(&mut self, Kill { id }: Kill, _: &mut Self::Context) -> Self::Result {
        self.table.kill(id)
    }
}

impl Handler<KillLeftovers> for ProcessManager {
    type Result = bool;

    fn handle(&mut self, kill: KillLeftovers, ctx: &mut Self::Context) -> bool {
        let signalled = self.table.signal_straggler(kill.pgid, Signal::SIGTERM);
        if signalled {
            ctx.run_later(kill.grace, move |manager, _| {
                manager.table.signal_straggler(kill.pgid, Signal::SIGKILL);
            });
        }
        signalled
    }
}

impl Handler<LeftoversAlive> for ProcessManager {
    type Result = bool;

    fn handle(&mut self, LeftoversAlive { pgid }: LeftoversAlive, _: &mut Self::Context) -> bool {
        self.table.straggler_alive(pgid)
    }
}

impl Handler<Wait> for ProcessManager {
    type Result = ResponseFuture<Result<ProcessOutcome, ProcessError>>;

    fn handle(&mut self, Wait { id }: Wait, _: &mut Self::Context) -> Self::Result {
        let wait = self.table.wait(id);
        Box::pin(async move {
            match wait? {
                WaitFor::Settled(outcome) => Ok(outcome),
                WaitFor::Pending(rx) => rx.await.map_err(|_| ProcessError::ShutDown),
            }
        })
    }
}

impl Handler<Release> for ProcessManager {
    type Result = Result<(), ProcessError>;

    fn handle(&mut self, Release { id }: Release, _: &mut Self::Context) -> Self::Result {
        self.table.release(id)
    }
}

impl Handler<GetAdmissionCost> for ProcessManager {
    type Result = AdmissionCost;

    fn handle(&mut self, _: GetAdmissionCost, _: &mut Self::Context) -> AdmissionCost {
        self.table.admission_cost()
    }
}

impl Handler<Discard> for ProcessManager {
    type Result = Result<(), ProcessError>;

    fn handle(&mut self, Discard { id }: Discard, _: &mut Self::Context) -> Self::Result {
        self.table.discard(id)
    }
}

impl Handler<Stats> for ProcessManager {
    type Result = ManagerStats;

    fn handle(&mut self, _: Stats, _: &mut Self::Context) -> ManagerStats {
        self.table.stats()
    }
}

impl Handler<KillAllNow> for ProcessManager {
    type Result = ();

    fn handle(&mut self, _: KillAllNow, _: &mut Self::Context) {
        self.table.kill_all_now();
        self.table.containment().kill_everything();
    }
}

impl Handler<Shutdown> for ProcessManager {
    type Result = ResponseActFuture<Self, ()>;

    /// Refuses queued and ready spawns (spawning is synchronous, so none is half done), then kills
    /// every live group, joins them, kills stragglers and removes the private spill directory.
    fn handle(&mut self, _: Shutdown, _: &mut Self::Context) -> Self::Result {
        let settlements = self.table.begin_shutdown();
        let join_live = async move {
            for settlement in settlements {
                // A dropped sender counts as settled.
                let _ = settlement.await;
            }
        };
        Box::pin(
            join_live
                .into_actor(self)
                .then(|(), manager, _| {
                    let containment = manager.table.containment().clone();
                    kill_stragglers(containment, manager.table.take_stragglers())
                        .into_actor(manager)
                })
                .map(|(), manager, _| {
                    manager.table.remove_private_spill_dir();
                    manager.table.containment().shut_down();
                    tracing::debug!("process manager shut down");
                }),
        )
    }
}
