//! The driver of one running child: reads both pipes into their collectors, waits for the leader,
//! kills the whole process (group and containment) on request, and decides when the process has
//! settled. Plain tokio + nix, no actors.
//!
//! State machine, written out:
//!
//! ```text
//!   leader      Running ──wait()──► Exited{status, drain_until} ──both pipes EOF──┬─ not killed ─► Settled(Closed)
//!                                        └──── drain grace elapsed (drain_until) ──┤─ not killed ─► Settled(DrainGrace)
//!                                                                                  └─ killed ─► AwaitingAllGone
//!               AwaitingAllGone ──every process of it gone──► Settled(Closed | DrainGrace)
//!   escalation  Idle ──kill token──► TermSent{kill_at} ──kill_at──┬─ something alive ─► KillSent
//!                                                                 └─ nothing alive ───► NothingToKill
//! ```
//!
//! Both rows are enums in the code (`Leader`, `Escalation`); the signals an outcome reports
//! sent are read off the escalation's state.
//!
//! A kill arrives one way: its kill token fires (the manager cancelled it, or the spawn's abort signal,
//! its parent, fired). In any leader state that sends SIGTERM to every process of the child (its
//! group, and its cgroup leaf or marked processes) once and arms SIGKILL after `grace`. A killed
//! process settles only when all of it is gone (`AwaitingAllGone`): the SIGKILL stays armed until
//! then, so a descendant that trapped SIGTERM cannot outlive the kill, and the outcome names SIGKILL
//! when it was needed. A process that was not killed settles as before, and a descendant still
//! holding a pipe at `DrainGrace` keeps running; the manager keeps its containment handle and kills
//! it at disposal. On v1 memory limits the kernel OOM-kills only the largest process, so a leader
//! exit after an OOM kill kills the rest of the leaf too. The leader stays a zombie until the
//! process has settled (`dsh_contain::reap`), which keeps its group's number from being reused while the
//! driver may still signal the group; after settlement nothing is signalled by this driver, so a pid
//! the kernel has reused is never hit.

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::net::unix::pipe;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use crate::collector::OutputCollector;
use crate::containment::{Contained, SharedContainment};
use crate::input_driver::{InputDriver, Step as InputStep};
use crate::outcome::{ProcessOutcome, Settlement, StreamKind};
use crate::shared_output::SettleSignal;
use crate::shared_output::SharedOutput;
use crate::signal::signal_name;
use crate::spawn::Started;
use crate::spec::{InputMode, ProcessSpawnSpec};
use crate::spill::SpillDir;
use dsh_contain::reap::ExitWatcher;

mod escalation;

use escalation::{Escalation, KillGuard};
/// Bytes asked for per read; a pipe holds 64 KiB.
const READ_SIZE: usize = 64 * 1024;
/// After a read at least this large the read buffer is kept for the next one (a flood reuses one
/// buffer); after a smaller one it is released, so a quiet child holds none. Either way the bytes are
/// copied into the stream's tail (`tail.rs`), never kept in the buffer.
const KEEP_BUFFER_MIN: usize = 16 * 1024;

/// Where the leader stands (the diagram's first row, up to settlement).
#[derive(Debug)]
enum Leader {
    /// Running: its exit is awaited.
    Running,
    /// It exited (or waiting for it failed); the pipes are drained until `drain_until`.
    Exited {
        status: io::Result<ExitStatus>,
        drain_until: Instant,
    },
}

/// What woke the driver up.
enum Event {
    /// A read filled the stream's buffer (`Ok(true)`), or the pipe reached end of file.
    Output(StreamKind, io::Result<bool>),
    LeaderExited(io::Result<ExitStatus>),
    KillRequested,
    EscalateToKill,
    DrainGraceOver,
    /// The interactive side did something (see `input_driver.rs`).
    Input(InputStep),
}

/// How long a killed process may take to vanish after SIGKILL before it is settled anyway (a process
/// stuck in uninterruptible sleep); the manager keeps its handle as a straggler.
const ALL_GONE_AFTER_SIGKILL: Duration = Duration::from_secs(10);

/// Everything the driver owns for one child.
pub(crate) struct Driver {
    exit: ExitWatcher,
    pgid: i32,
    stdout: Option<pipe::Receiver>,
    stderr: Option<pipe::Receiver>,
    stdin_writer: Option<JoinHandle<()>>,
    /// The input and terminal of an interactive process.
    input: Option<InputDriver>,
    /// Its slot of the manager's terminal cap, given back when the driver is done.
    _terminal_slot: Option<crate::terminal_slots::TerminalSlot>,
    output: SharedOutput,
    settle_signal: SettleSignal,
    grace: Duration,
    /// Background work is read through its output: its outcome carries no second copy of the text.
    text_in_outcome: bool,
    /// Whether something the command started can outlive it once the pipes are closed: not under a
    /// launcher (bubblewrap), whose pid namespace ends with the command, killing what is in it;
    /// there the namespace's own last process, still exiting when the pipes close, is no daemon.
    daemons_outlive: bool,
    /// Fires once to start the kill escalation (see the module doc).
    kill: CancellationToken,
    guard: KillGuard,
}

impl Driver {
    /// The driver of a started child, with its output (collectors capped as `spec` says, spilling into
    /// `spill_dir`) for readers.
    pub(crate) fn new(
        started: Started,
        spec: &ProcessSpawnSpec,
        spill_dir: SpillDir,
        kill: CancellationToken,
        containment: SharedContainment,
        contained: Contained,
    ) -> (SharedOutput, Self) {
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
        let size = match spec.input {
            InputMode::Terminal(size) => Some(size),
            InputMode::Closed | InputMode::Open => None,
        };
        let (input, output) = match InputDriver::new(started.input, size) {
            Some((input, interaction)) => (Some(input), output.with_interaction(interaction)),
            None => (None, output),
        };
        let driver = Self {
            pgid: started.pid,
            guard: KillGuard {
                pgid: started.pid,
                containment,
                contained: Some(contained),
                armed: true,
            },
            exit: started.exit,
            stdout: started.stdout,
            stderr: started.stderr,
            stdin_writer: started.stdin_writer,
            input,
            _terminal_slot: started.terminal_slot,
            output: output.clone(),
            settle_signal,
            grace: spec.grace,
            text_in_outcome: !spec.background,
            daemons_outlive: !matches!(
                spec.confinement,
                Some(dsh_contain::confine::Confinement::Launcher { .. })
            ),
            kill,
        };
        (output, driver)
    }

    /// Drives the child until it settles, then stores its outcome in its [`SharedOutput`]. Returns
    /// the containment handle, for the manager to recycle or keep as a straggler, and whether
    /// anything of it outside its group was still alive then.
    pub(crate) async fn run(mut self) -> (Contained, bool) {
        let mut leader = Leader::Running;
        let mut escalation = Escalation::Idle;
        let mut out_buf = Vec::new();
        let mut err_buf = Vec::new();
        let far_future = Instant::now() + Duration::from_secs(86400 * 365);

        let settlement = loop {
            let drain_until = match &leader {
                Leader::Running => None,
                Leader::Exited { drain_until, .. } => Some(*drain_until),
            };
            let terminal_done = self.input.as_ref().is_none_or(InputDriver::output_done);
            if drain_until.is_some()
                && self.stdout.is_none()
                && self.stderr.is_none()
                && terminal_done
            {
                break Settlement::Closed;
            }
            let kill_at = match escalation {
                Escalation::TermSent { kill_at } => Some(kill_at),
                _ => None,
            };
            // A fired token stays fired: listening again after the kill would spin.
            let listening_for_kill = escalation == Escalation::Idle;
            // Unbiased on purpose: a flooding stdout must not starve a kill request or a timer.
            let event = tokio::select! {
                read = read_chunk(self.stdout.as_ref(), &mut out_buf), if self.stdout.is_some() =>
                    Event::Output(StreamKind::Stdout, read),
                read = read_chunk(self.stderr.as_ref(), &mut err_buf), if self.stderr.is_some() =>
                    Event::Output(StreamKind::Stderr, read),
                status = self.exit.wait(), if matches!(leader, Leader::Running) => Event::LeaderExited(status),
                () = self.kill.cancelled(), if listening_for_kill => Event::KillRequested,
                () = sleep_until(kill_at.unwrap_or(far_future)), if kill_at.is_some() => Event::EscalateToKill,
                () = sleep_until(drain_until.unwrap_or(far_future)), if drain_until.is_some() => Event::DrainGraceOver,
                step = input_step(self.input.as_mut(), &self.output, self.guard.contained(), self.pgid),
                    if self.input.as_ref().is_some_and(InputDriver::active) => Event::Input(step),
            };
            match event {
                Event::Output(stream, Ok(true)) => {
                    let buf = match stream {
                        StreamKind::Stdout => &mut out_buf,
                        StreamKind::Stderr => &mut err_buf,
                    };
                    self.output.push(stream, buf);
                    if let Some(input) = &mut self.input {
                        input.saw_output();
                    }
                    if buf.len() >= KEEP_BUFFER_MIN {
                        buf.clear();
                    } else {
                        *buf = Vec::new();
                    }
                }
                Event::Output(stream, result) => {
                    if let Err(err) = result {
                        tracing::warn!(pgid = self.pgid, stream = stream.label(), %err, "pipe read failed; treating as EOF");
                    }
                    match stream {
                        StreamKind::Stdout => self.stdout = None,
                        StreamKind::Stderr => self.stderr = None,
                    }
                }
                Event::LeaderExited(status) => {
                    tracing::trace!(pgid = self.pgid, ?status, "leader exited");
                    if self.guard.containment.oom_killed(self.guard.contained()) {
                        // v1 killed only the largest process: end the rest of the leaf too.
                        self.guard.signal(Signal::SIGKILL);
                    }
                    leader = Leader::Exited {
                        status,
                        drain_until: Instant::now() + self.grace,
                    };
                }
                Event::KillRequested => {
                    self.guard.signal(Signal::SIGTERM);
                    tracing::debug!(
                        pgid = self.pgid,
                        grace_ms = self.grace.as_millis() as u64,
                        "sent SIGTERM; SIGKILL armed"
                    );
                    escalation = Escalation::TermSent {
                        kill_at: Instant::now() + self.grace,
                    };
                }
                Event::EscalateToKill => {
                    let sigkill_sent = self.guard.sigkill_if_alive().await;
                    if sigkill_sent {
                        tracing::debug!(pgid = self.pgid, "grace over; sent SIGKILL");
                    }
                    escalation = Escalation::grace_over(sigkill_sent);
                }
                Event::Input(InputStep::Interrupt) => self.guard.signal(Signal::SIGINT),
                Event::Input(InputStep::Quiet | InputStep::EndOfOutput) => {}
                Event::DrainGraceOver => {
                    tracing::debug!(
                        pgid = self.pgid,
                        "a descendant still holds the pipes after the drain grace"
                    );
                    break Settlement::DrainGrace;
                }
            }
        };

        // A killed process settles once all of it is gone: then nothing of it remains anywhere.
        let all_gone = escalation.killed() && self.await_all_gone(&mut escalation).await;
        self.guard.armed = false;
        // Settled: nothing more is signalled, so the leader's pid (the group's number) may go.
        self.exit.reap();
        let oom_killed = self.guard.containment.oom_killed(self.guard.contained());
        if let Some(writer) = self.stdin_writer.take() {
            writer.abort();
        }
        // The input closes and the master with it: later writes are refused.
        if let Some(input) = self.input.take() {
            input.close();
        }
        // Dropping our read ends: a descendant that writes later gets EPIPE, and one that holds
        // them runs on as a straggler (docs/ARCHITECTURE.md, "Settlement").
        self.stdout = None;
        self.stderr = None;
        let (exit_code, signal) = match (&leader, escalation) {
            // SIGKILL was needed: it is what ended the process, whatever ended the leader.
            (_, Escalation::KillSent) => (None, Some(Signal::SIGKILL.as_str().to_owned())),
            (
                Leader::Exited {
                    status: Ok(status), ..
                },
                _,
            ) => (status.code(), status.signal().map(signal_name)),
            _ => (None, None),
        };
        tracing::debug!(
            pgid = self.pgid,
            ?settlement,
            ?exit_code,
            ?signal,
            "process settled"
        );
        let mut stdout = self.output.finalize(StreamKind::Stdout);
        let mut stderr = self.output.finalize(StreamKind::Stderr);
        if !self.text_in_outcome {
            stdout.text = String::new();
            stderr.text = String::new();
        }
        // What still runs, named for the caller, who may stop it later (`KillLeftovers`): who holds
        // the pipes, or, with the pipes closed, a daemon that let go of them (`nohup … > log &`),
        // asked about only where one cheap look says something may be left.
        let left_running = match (settlement, &self.guard.contained) {
            (Settlement::DrainGrace, Some(contained)) => {
                crate::stragglers::left_running(self.pgid, contained)
            }
            (Settlement::Closed, Some(contained))
                if self.daemons_outlive
                    && !escalation.killed()
                    && self.guard.containment.may_remain(self.pgid, contained) =>
            {
                match contained {
                    Contained::Leaf(_) => crate::stragglers::left_running(self.pgid, contained),
                    // The group's members (zombies count as the group's too) are found by a walk
                    // of `/proc`, kept off the runtime's thread; a subreaper's marked processes
                    // outside the group are not looked for here.
                    Contained::Group | Contained::Marker(_) => {
                        let pgid = self.pgid;
                        tokio::task::spawn_blocking(move || crate::stragglers::left_in_group(pgid))
                            .await
                            .unwrap_or_default()
                    }
                }
            }
            _ => Vec::new(),
        };
        let outcome = ProcessOutcome {
            exit_code,
            signal,
            stdout,
            stderr,
            settlement,
            signals_sent: escalation.signals_sent(),
            oom_killed,
            left_running,
        };
        let contained = self.guard.contained.take().unwrap_or(Contained::Group);
        let contained = self.guard.containment.recycle_if_empty(contained);
        self.output.settle(self.settle_signal, outcome);
        // Settled and told: whether something outlived the group is the manager's to judge (a
        // straggler), asked after, so no reader waits for it.
        let remains = !all_gone
            && self
                .guard
                .containment
                .remains_beyond_group(self.pgid, &contained)
                .await;
        (contained, remains)
    }

    /// `AwaitingAllGone`: a killed process whose leader and pipes are done waits until every process
    /// of it is gone, sending the armed SIGKILL when its time comes. Returns whether all of it is
    /// gone (`false`: it survived SIGKILL, and is settled anyway).
    async fn await_all_gone(&mut self, escalation: &mut Escalation) -> bool {
        loop {
            let deadline = match *escalation {
                Escalation::TermSent { kill_at } => kill_at,
                _ => Instant::now() + ALL_GONE_AFTER_SIGKILL,
            };
            let guard = &self.guard;
            tokio::select! {
                // All gone wins over a timer that fired in the same turn.
                biased;
                () = guard.containment.all_gone(guard.pgid, guard.contained()) => return true,
                () = sleep_until(deadline) => {}
            }
            if let Escalation::TermSent { .. } = escalation {
                let sigkill_sent = self.guard.sigkill_if_alive().await;
                if sigkill_sent {
                    tracing::debug!(pgid = self.pgid, "grace over; sent SIGKILL to what is left");
                }
                *escalation = Escalation::grace_over(sigkill_sent);
            } else {
                tracing::warn!(
                    pgid = self.pgid,
                    "processes survive SIGKILL; settling anyway"
                );
                return false;
            }
        }
    }
}

/// One step of the interactive side; pending forever without one (its branch is off).
async fn input_step(
    input: Option<&mut InputDriver>,
    output: &SharedOutput,
    contained: &Contained,
    pgid: i32,
) -> InputStep {
    match input {
        Some(input) => input.step(output, contained, pgid).await,
        None => std::future::pending().await,
    }
}

/// Reads one chunk into the empty `buf`; `Ok(false)` at end of file. Pending forever for a closed
/// pipe (its branch is off).
///
/// Waits for readability first and only then makes room in `buf` (the caller gives the buffer back
/// after a small read: a quiet child holds no read buffer, a chatty one reuses a 64 KiB one).
async fn read_chunk(pipe: Option<&pipe::Receiver>, buf: &mut Vec<u8>) -> io::Result<bool> {
    let Some(pipe) = pipe else {
        return std::future::pending().await;
    };
    loop {
        pipe.readable().await?;
        buf.reserve(READ_SIZE);
        match pipe.try_read_buf(buf) {
            Ok(0) => return Ok(false),
            Ok(_) => return Ok(true),
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => continue,
            Err(err) => return Err(err),
        }
    }
}
