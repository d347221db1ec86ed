//! The supervisor of one running child: reads both pipes into their collectors, waits for the leader,
//! kills the group on request, and decides when the process has settled. Plain tokio + nix, no actors.
//!
//! State machine, written out:
//!
//! ```text
//!   leader          Running ──wait()──► Exited(status) ──both pipes EOF──► Settled(Closed)
//!                                            └──────── grace elapsed ─────► Settled(DrainGrace)
//!   escalation      Idle ──kill/abort──► TermSent{kill_at} ──kill_at──► KillSent
//! ```
//!
//! A kill in any leader state sends SIGTERM to the group once (later kills are no-ops) and arms SIGKILL
//! after `grace`. Settlement disarms everything: a pending SIGKILL is never sent, and the process is
//! never signalled again by this driver (DESIGN decision 2). A descendant still holding a pipe at
//! `DrainGrace` keeps running; the manager remembers its group and kills it at disposal.

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use nix::sys::signal::Signal;
use tokio::net::unix::pipe;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};

use crate::abort::AbortSignal;
use crate::collector::OutputCollector;
use crate::outcome::{CollectedOutput, ProcessOutcome, ReadResult, Settlement, StreamKind};
use crate::reap::ExitWatcher;
use crate::signal::{signal_group, signal_name};
use crate::spawn::Started;

/// Bytes asked for per read; a pipe holds 64 KiB.
const READ_SIZE: usize = 64 * 1024;
/// Reads at least this large keep their buffer (no copy); smaller ones are copied out (so a tiny chunk
/// never pins a large allocation) and the buffer is released.
const ZERO_COPY_MIN: usize = 16 * 1024;

/// The two collectors of one process and, once it has settled, its outcome: shared between its driver
/// (the only writer) and any number of readers, so reads never wait for an actor's mailbox.
#[derive(Clone, Debug)]
pub struct SharedOutput {
    stdout: Arc<Mutex<OutputCollector>>,
    stderr: Arc<Mutex<OutputCollector>>,
    outcome: Arc<OnceLock<ProcessOutcome>>,
    /// Flips to `true` right after `outcome` is set; closed if the driver is dropped unsettled.
    settled: watch::Receiver<bool>,
}

/// The driver's end of [`SharedOutput::settled`]: dropping it unsettled wakes waiters with `None`.
pub(crate) struct SettleSignal(watch::Sender<bool>);

impl SharedOutput {
    pub(crate) fn new(stdout: OutputCollector, stderr: OutputCollector) -> (Self, SettleSignal) {
        let (tx, rx) = watch::channel(false);
        let output = Self {
            stdout: Arc::new(Mutex::new(stdout)),
            stderr: Arc::new(Mutex::new(stderr)),
            outcome: Arc::new(OnceLock::new()),
            settled: rx,
        };
        (output, SettleSignal(tx))
    }

    /// The outcome, once the process has settled (set before the manager hears of it).
    pub fn outcome(&self) -> Option<&ProcessOutcome> {
        self.outcome.get()
    }

    /// Waits for the process to settle and returns its outcome, straight from its driver: no actor's
    /// mailbox lies between the child's exit and this future waking. `None` if the driver was dropped
    /// before the process settled (its actor system stopped; the driver killed the group as it went).
    pub async fn settled(&self) -> Option<ProcessOutcome> {
        if let Some(outcome) = self.outcome.get() {
            return Some(outcome.clone());
        }
        let mut settled = self.settled.clone();
        // An error means the sender is gone; the outcome may still have been set just before.
        let _ = settled.wait_for(|settled| *settled).await;
        self.outcome.get().cloned()
    }

    fn lock(&self, stream: StreamKind) -> MutexGuard<'_, OutputCollector> {
        let mutex = match stream {
            StreamKind::Stdout => &self.stdout,
            StreamKind::Stderr => &self.stderr,
        };
        // A poisoned lock only means a panic elsewhere mid-push; the collector's state is still usable.
        mutex
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Non-consuming read of `stream` from whole-stream offset `from`.
    pub fn read(&self, stream: StreamKind, from: u64) -> ReadResult {
        self.lock(stream).read_from(from)
    }

    fn push(&self, stream: StreamKind, chunk: Bytes) {
        self.lock(stream).push(chunk)
    }

    pub(crate) fn finalize(&self, stream: StreamKind) -> CollectedOutput {
        self.lock(stream).finalize()
    }
}

/// Requests to a running driver.
#[derive(Debug)]
pub(crate) enum Control {
    Kill,
}

/// Where the kill escalation stands.
#[derive(Clone, Copy, Debug)]
enum Escalation {
    Idle,
    TermSent { kill_at: Instant },
    KillSent,
}

/// What woke the driver up.
enum Event {
    Output(StreamKind, io::Result<Option<Bytes>>),
    LeaderExited(io::Result<ExitStatus>),
    KillRequested,
    ControlClosed,
    EscalateToKill,
    DrainGraceOver,
}

/// Kills the whole group with SIGKILL if the driver is dropped before the process settled (the actor
/// system stopped abruptly): nothing is left running behind a dropped supervisor.
struct GroupGuard {
    pgid: i32,
    armed: bool,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed {
            signal_group(self.pgid, Signal::SIGKILL);
        }
    }
}

/// Everything the driver owns for one child.
pub(crate) struct Driver {
    exit: ExitWatcher,
    pgid: i32,
    stdout: Option<pipe::Receiver>,
    stderr: Option<pipe::Receiver>,
    stdin_writer: Option<JoinHandle<()>>,
    output: SharedOutput,
    settle_signal: SettleSignal,
    grace: Duration,
    abort: Option<AbortSignal>,
    control: mpsc::UnboundedReceiver<Control>,
    guard: GroupGuard,
}

impl Driver {
    pub(crate) fn new(
        started: Started,
        output: SharedOutput,
        settle_signal: SettleSignal,
        grace: Duration,
        abort: Option<AbortSignal>,
        control: mpsc::UnboundedReceiver<Control>,
    ) -> Self {
        Self {
            pgid: started.pid,
            guard: GroupGuard {
                pgid: started.pid,
                armed: true,
            },
            exit: started.exit,
            stdout: Some(started.stdout),
            stderr: Some(started.stderr),
            stdin_writer: started.stdin_writer,
            output,
            settle_signal,
            grace,
            abort,
            control,
        }
    }

    /// Supervises the child until it settles and returns its outcome.
    pub(crate) async fn run(mut self) -> ProcessOutcome {
        let mut exit: Option<io::Result<ExitStatus>> = None;
        let mut drain_until: Option<Instant> = None;
        let mut escalation = Escalation::Idle;
        let mut signals_sent = Vec::new();
        let mut control_open = true;
        let mut abort_armed = self.abort.is_some();
        let mut out_buf = BytesMut::new();
        let mut err_buf = BytesMut::new();
        let far_future = Instant::now() + Duration::from_secs(86400 * 365);

        let settlement = loop {
            if exit.is_some() && self.stdout.is_none() && self.stderr.is_none() {
                break Settlement::Closed;
            }
            let kill_at = match escalation {
                Escalation::TermSent { kill_at } => Some(kill_at),
                _ => None,
            };
            // Unbiased on purpose: a flooding stdout must not starve a kill request or a timer.
            let event = tokio::select! {
                read = read_chunk(self.stdout.as_ref(), &mut out_buf), if self.stdout.is_some() =>
                    Event::Output(StreamKind::Stdout, read),
                read = read_chunk(self.stderr.as_ref(), &mut err_buf), if self.stderr.is_some() =>
                    Event::Output(StreamKind::Stderr, read),
                status = self.exit.wait(), if exit.is_none() => Event::LeaderExited(status),
                request = self.control.recv(), if control_open => match request {
                    Some(Control::Kill) => Event::KillRequested,
                    None => Event::ControlClosed,
                },
                () = wait_abort(self.abort.as_ref()), if abort_armed => Event::KillRequested,
                () = sleep_until(kill_at.unwrap_or(far_future)), if kill_at.is_some() => Event::EscalateToKill,
                () = sleep_until(drain_until.unwrap_or(far_future)), if drain_until.is_some() => Event::DrainGraceOver,
            };
            match event {
                Event::Output(stream, Ok(Some(chunk))) => self.output.push(stream, chunk),
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
                    exit = Some(status);
                    drain_until = Some(Instant::now() + self.grace);
                }
                Event::KillRequested => {
                    if self.abort.as_ref().is_some_and(AbortSignal::is_aborted) {
                        abort_armed = false;
                    }
                    if let Escalation::Idle = escalation {
                        signal_group(self.pgid, Signal::SIGTERM);
                        signals_sent.push("SIGTERM");
                        tracing::debug!(
                            pgid = self.pgid,
                            grace_ms = self.grace.as_millis() as u64,
                            "sent SIGTERM; SIGKILL armed"
                        );
                        escalation = Escalation::TermSent {
                            kill_at: Instant::now() + self.grace,
                        };
                    }
                }
                Event::ControlClosed => control_open = false,
                Event::EscalateToKill => {
                    signal_group(self.pgid, Signal::SIGKILL);
                    signals_sent.push("SIGKILL");
                    tracing::debug!(pgid = self.pgid, "grace over; sent SIGKILL");
                    escalation = Escalation::KillSent;
                }
                Event::DrainGraceOver => {
                    tracing::debug!(
                        pgid = self.pgid,
                        "a descendant still holds the pipes after the drain grace"
                    );
                    break Settlement::DrainGrace;
                }
            }
        };

        self.guard.armed = false;
        if let Some(writer) = self.stdin_writer.take() {
            writer.abort();
        }
        // Dropping our read ends: a descendant that writes later gets EPIPE, as in the seeds.
        self.stdout = None;
        self.stderr = None;
        let (exit_code, signal) = match &exit {
            Some(Ok(status)) => (status.code(), status.signal().map(signal_name)),
            _ => (None, None),
        };
        tracing::debug!(
            pgid = self.pgid,
            ?settlement,
            ?exit_code,
            ?signal,
            "process settled"
        );
        let outcome = ProcessOutcome {
            exit_code,
            signal,
            stdout: self.output.finalize(StreamKind::Stdout),
            stderr: self.output.finalize(StreamKind::Stderr),
            settlement,
            signals_sent,
        };
        let _ = self.output.outcome.set(outcome.clone());
        self.settle_signal.0.send_replace(true);
        outcome
    }
}

/// Reads one chunk; `Ok(None)` at end of file. Pending forever for a closed pipe (its branch is off).
///
/// Waits for readability first and only then makes room in `buf`, and gives a buffer back after a
/// small read: a quiet child holds no read buffer, a chatty one reuses a 64 KiB one.
async fn read_chunk(
    pipe: Option<&pipe::Receiver>,
    buf: &mut BytesMut,
) -> io::Result<Option<Bytes>> {
    let Some(pipe) = pipe else {
        return std::future::pending().await;
    };
    loop {
        pipe.readable().await?;
        if buf.capacity() - buf.len() < READ_SIZE / 4 {
            buf.reserve(READ_SIZE);
        }
        let n = match pipe.try_read_buf(buf) {
            Ok(0) => return Ok(None),
            Ok(n) => n,
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => continue,
            Err(err) => return Err(err),
        };
        if n >= ZERO_COPY_MIN {
            return Ok(Some(buf.split().freeze()));
        }
        let chunk = Bytes::copy_from_slice(buf);
        *buf = BytesMut::new();
        return Ok(Some(chunk));
    }
}

/// Resolves when the abort signal fires; pending forever without one.
async fn wait_abort(abort: Option<&AbortSignal>) {
    match abort {
        Some(signal) => signal.aborted().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared_output() -> (SharedOutput, SettleSignal) {
        SharedOutput::new(
            OutputCollector::new(StreamKind::Stdout, 1024, 0, None),
            OutputCollector::new(StreamKind::Stderr, 1024, 0, None),
        )
    }

    #[actix_rt::test]
    async fn settled_is_none_when_the_driver_goes_away_unsettled() {
        let (output, signal) = shared_output();
        let waiter = actix_rt::spawn({
            let output = output.clone();
            async move { output.settled().await }
        });
        drop(signal);
        let settled = tokio::time::timeout(Duration::from_secs(30), waiter)
            .await
            .expect("a waiter must wake when the driver is dropped")
            .unwrap();
        assert!(settled.is_none());
    }

    #[actix_rt::test]
    async fn settled_wakes_every_waiter_with_the_outcome() {
        let (output, signal) = shared_output();
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let output = output.clone();
                actix_rt::spawn(async move { output.settled().await })
            })
            .collect();
        let outcome = ProcessOutcome {
            exit_code: Some(7),
            signal: None,
            stdout: output.finalize(StreamKind::Stdout),
            stderr: output.finalize(StreamKind::Stderr),
            settlement: Settlement::Closed,
            signals_sent: Vec::new(),
        };
        output.outcome.set(outcome).unwrap();
        signal.0.send_replace(true);
        for waiter in waiters {
            let settled = tokio::time::timeout(Duration::from_secs(30), waiter)
                .await
                .expect("every waiter wakes")
                .unwrap();
            assert_eq!(settled.and_then(|o| o.exit_code), Some(7));
        }
        // A late caller gets the outcome at once, and the signal's end no longer matters.
        drop(signal);
        assert_eq!(output.settled().await.and_then(|o| o.exit_code), Some(7));
    }
}
