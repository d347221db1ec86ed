//! The handle of a background command: status settled once, consuming merged reads, kill.
//!
//! The process itself belongs to the process manager, not to this handle's creator:
//! stopping the executor leaves it running; shutting the manager down kills it. Dropping the last clone
//! of a handle releases the manager's record (killing the process if it still runs).
//!
//! A command the supervisor policy queued has a handle before it has a process. The handle's state
//! is one [`Phase`]; "settled" is decided once, the first time the ended process is looked at:
//!
//! ```text
//!   queued ──admitted──► running ──ended──► settled: completed | killed by SIG… | out of memory
//!     │                    └──kill──► killing ──ended──► settled: killed (by SIG…) | out of memory
//!     ├──kill──► withdrawing (abort fired) ──withdrawn──► settled: killed
//!     │              └──admitted anyway──► killing
//!     └──start failed──► settled: killed; one read shows `spawn failed: …`
//! ```
//!
//! A start that fails at once (an unusable working directory) is settled from the outset, with the
//! same one-read note. [`TaskProducer`] for the handle is in `producer.rs`.

mod phase;
mod producer;

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use actix::Addr;
use dsh_process::{
    AbortSignal, Kill, ProcessManager, Release, SpawnError, SpawnedProcess, StreamKind,
    lock_unpoisoned,
};
use dsh_tasks::{SandboxFacts, TaskOutput, TaskStatus};
use futures::future::BoxFuture;
use tokio::sync::watch;

use phase::{Phase, Settled};

/// What a finished background command costs in memory besides its kept output, in
/// [`heap_block_bytes`](dsh_tasks::heap_block_bytes) terms: this handle and its state, the process
/// manager's record of the process (its table slot, counted at the table's emptiest), the output's
/// shared state (two collectors, the outcome with its spill paths, the settle and progress
/// channels). Measured with a counting allocator (`tests/it/retained_bytes.rs`, which fails when this
/// falls short of what a task really keeps) and rounded up.
pub const PROCESS_BYTES: usize = 2560;

/// A background `bash -c` command. Cheap to clone; clones share state.
#[derive(Clone)]
pub struct BashProcess {
    inner: Arc<Inner>,
}

struct Inner {
    manager: Addr<ProcessManager>,
    /// Set once the process has started; never, when the spawn failed.
    process: OnceLock<SpawnedProcess>,
    abort: Option<AbortSignal>,
    /// This task's own confinement facts (never "the latest wrap"), classified at settlement.
    sandbox: Option<crate::sandbox::WrapFacts>,
    /// The kill grace (`grace_ms`) for what the command leaves running ([`crate::Leftovers`]).
    grace: std::time::Duration,
    state: Mutex<HandleState>,
    /// `true` once the spawn is decided (started or failed); a queued handle starts `false`.
    decided: watch::Receiver<bool>,
}

/// The read cursors and the phase.
struct HandleState {
    stdout_offset: u64,
    stderr_offset: u64,
    phase: Phase,
}

impl HandleState {
    fn new(phase: Phase) -> Self {
        Self {
            stdout_offset: 0,
            stderr_offset: 0,
            phase,
        }
    }
}

impl std::fmt::Debug for BashProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BashProcess")
            .field("pid", &self.pid())
            .field("status", &self.status())
            .finish()
    }
}

impl BashProcess {
    /// A running command; a confined one carries its own `sandbox` facts, classified against its
    /// stderr when it settles.
    pub(crate) fn running(
        manager: Addr<ProcessManager>,
        process: SpawnedProcess,
        abort: Option<AbortSignal>,
        sandbox: Option<crate::sandbox::WrapFacts>,
        grace: std::time::Duration,
    ) -> Self {
        let state = HandleState::new(Phase::Running);
        let handle = Self::with(manager, abort, state, true, sandbox, grace).0;
        let _ = handle.inner.process.set(process);
        handle
    }

    /// A handle for a command waiting for admission: status `queued` until `spawn` answers. Killing
    /// it fires `abort`, which makes the manager withdraw the spawn.
    pub(crate) fn queued(
        manager: Addr<ProcessManager>,
        spawn: BoxFuture<'static, Result<SpawnedProcess, SpawnError>>,
        abort: AbortSignal,
        sandbox: Option<crate::sandbox::WrapFacts>,
        grace: std::time::Duration,
    ) -> Self {
        let state = HandleState::new(Phase::Queued);
        let (handle, decided) =
            Self::with(manager.clone(), Some(abort), state, false, sandbox, grace);
        let weak = Arc::downgrade(&handle.inner);
        actix::spawn(async move {
            let answer = spawn.await;
            match weak.upgrade() {
                Some(inner) => BashProcess { inner }.decide(answer),
                // Nobody holds the task any more: never leave its process unsupervised.
                None => {
                    if let Ok(spawned) = answer {
                        manager.do_send(Release { id: spawned.id });
                    }
                }
            }
            let _ = decided.send(true);
        });
        handle
    }

    /// A queued spawn's answer: the process to run, or why it never started.
    fn decide(&self, answer: Result<SpawnedProcess, SpawnError>) {
        let mut state = self.state();
        // Killed while queued: the end is `killed`, whatever the answer.
        let killed = state.phase.killing();
        match answer {
            Ok(spawned) => {
                let id = spawned.id;
                let _ = self.inner.process.set(spawned);
                state.phase = if killed {
                    self.inner.manager.do_send(Kill { id });
                    Phase::Killing
                } else {
                    Phase::Running
                };
                tracing::debug!(target: "dsh::policy", "queued task started");
            }
            Err(err) => {
                // A refused confinement is a runner failure, as when the spawn answers at once; any
                // other failure of a confined command is never a denial.
                let confine = matches!(err, SpawnError::Confine { .. });
                let note = (!killed).then(|| match self.inner.sandbox.as_ref() {
                    Some(facts) if confine => {
                        crate::sandbox::sandbox_unavailable_text(facts.mode, Some(&err.to_string()))
                    }
                    _ => format!("spawn failed: {err}"),
                });
                let sandbox = self.inner.sandbox.as_ref().map(|facts| SandboxFacts {
                    runner_failed: confine,
                    ..facts.classify(None, "")
                });
                state.phase = Phase::killed(note, sandbox);
            }
        }
    }

    /// A handle for a command that never started: status `killed`, one read shows `note`. A
    /// confined one has its facts stamped at once, never a denial.
    pub(crate) fn failed(
        manager: Addr<ProcessManager>,
        note: String,
        sandbox: Option<crate::sandbox::WrapFacts>,
    ) -> Self {
        let facts = sandbox.as_ref().map(|facts| facts.classify(None, ""));
        let state = HandleState::new(Phase::killed(Some(note), facts));
        // Never started: nothing of it can be left running.
        Self::with(
            manager,
            None,
            state,
            true,
            sandbox,
            std::time::Duration::ZERO,
        )
        .0
    }

    fn with(
        manager: Addr<ProcessManager>,
        abort: Option<AbortSignal>,
        state: HandleState,
        decided: bool,
        sandbox: Option<crate::sandbox::WrapFacts>,
        grace: std::time::Duration,
    ) -> (Self, watch::Sender<bool>) {
        let (tx, rx) = watch::channel(decided);
        let handle = Self {
            inner: Arc::new(Inner {
                manager,
                process: OnceLock::new(),
                abort,
                sandbox,
                grace,
                state: Mutex::new(state),
                decided: rx,
            }),
        };
        (handle, tx)
    }

    /// The sandbox facts, once a confined command has settled (`None` while it runs, and always
    /// for an unconfined one).
    pub fn sandbox(&self) -> Option<dsh_tasks::SandboxFacts> {
        let mut state = self.state();
        self.status_locked(&mut state);
        state
            .phase
            .settled()
            .and_then(|settled| settled.sandbox.clone())
    }

    fn state(&self) -> MutexGuard<'_, HandleState> {
        lock_unpoisoned(&self.inner.state)
    }

    /// The leader's pid (also its group id); `None` if the spawn failed.
    pub fn pid(&self) -> Option<i32> {
        self.inner.process.get().map(|p| p.pid)
    }

    /// `Running` → `Completed` | `Killed`, settled once. A kill shows as `Killed` at once; its signal
    /// appears when the process has ended.
    pub fn status(&self) -> TaskStatus {
        let mut state = self.state();
        self.status_locked(&mut state)
    }

    /// The status, settling the phase if the process has ended since the last look.
    fn status_locked(&self, state: &mut HandleState) -> TaskStatus {
        if !matches!(state.phase, Phase::Running | Phase::Killing) {
            return state.phase.status();
        }
        let outcome = self.inner.process.get().and_then(|p| p.output.outcome());
        match outcome {
            Some(outcome) => {
                let aborted = self
                    .inner
                    .abort
                    .as_ref()
                    .is_some_and(AbortSignal::is_aborted);
                let end = match &outcome.signal {
                    _ if outcome.oom_killed => TaskStatus::OutOfMemory,
                    Some(signal) => TaskStatus::Killed {
                        signal: Some(signal.clone()),
                    },
                    None => TaskStatus::Completed {
                        exit_code: outcome.exit_code.unwrap_or(0),
                    },
                };
                let status = end.stays_killed(state.phase.killing() || aborted);
                let sandbox = self.inner.sandbox.as_ref().map(|facts| {
                    // Background work settles without a copy of its text in the outcome (the tail
                    // is kept once, in the output); classify against the kept stderr tail.
                    let stderr = self
                        .inner
                        .process
                        .get()
                        .map(|p| p.output.read(StreamKind::Stderr, 0).text)
                        .unwrap_or_default();
                    facts.classify(outcome.exit_code, &stderr)
                });
                state.phase = Phase::Settled(Settled {
                    status: status.clone(),
                    sandbox,
                    note: None,
                });
                status
            }
            None => state.phase.status(),
        }
    }

    /// Starts the group kill. `true` if this call started it; `false` if the command had already
    /// finished or was already being killed.
    pub fn kill(&self) -> bool {
        let mut state = self.state();
        if !self.status_locked(&mut state).is_running() {
            return false;
        }
        match state.phase {
            Phase::Queued => {
                // Not started yet: the manager withdraws the spawn when its abort fires.
                state.phase = Phase::Withdrawing;
                if let Some(abort) = &self.inner.abort {
                    abort.abort("killed while queued");
                }
                true
            }
            Phase::Running => {
                let Some(process) = self.inner.process.get() else {
                    return false;
                };
                state.phase = Phase::Killing;
                self.inner.manager.do_send(Kill { id: process.id });
                true
            }
            // Already being killed, or settled (neither reads as running).
            Phase::Withdrawing | Phase::Killing | Phase::Settled(_) => false,
        }
    }

    /// Waits until the command has ended and returns its final status.
    pub async fn done(&self) -> TaskStatus {
        // A queued command first waits for its start (or for why it never started).
        let _ = self
            .inner
            .decided
            .clone()
            .wait_for(|decided| *decided)
            .await;
        if let Some(process) = self.inner.process.get() {
            // Straight from the process's driver, not through the manager's mailbox: this is the
            // first step of the completion notice, so every hop saved here is latency saved there.
            if process.output.settled().await.is_none() {
                // The driver was dropped unsettled (its actor system stopped); it killed the group.
                let mut state = self.state();
                if state.phase.settled().is_none() {
                    state.phase = Phase::killed(None, None);
                }
            }
        }
        self.status()
    }

    /// Everything printed since the previous read: stdout, then a `[stderr]` section.
    pub fn read_output(&self) -> TaskOutput {
        let mut state = self.state();
        // Settles the status (and stamps the sandbox facts) if the process has ended.
        self.status_locked(&mut state);
        let (stdout, stderr) = match self.inner.process.get() {
            Some(process) => (
                process.output.read(StreamKind::Stdout, state.stdout_offset),
                process.output.read(StreamKind::Stderr, state.stderr_offset),
            ),
            None => Default::default(),
        };
        state.stdout_offset = stdout.next_offset;
        state.stderr_offset = stderr.next_offset;
        let stderr_text = if stderr.text.is_empty() {
            state.phase.take_note().unwrap_or_default()
        } else {
            stderr.text
        };
        let spill_paths: Vec<PathBuf> = [stdout.spill_path, stderr.spill_path]
            .into_iter()
            .flatten()
            .collect();
        let mut delta = merge_streams(stdout.text, &stderr_text);
        if let Some(process) = self.inner.process.get() {
            append_live(&mut delta, process.output.live());
        }
        TaskOutput {
            delta,
            lossy: stdout.lossy || stderr.lossy,
            spill_paths,
            sandbox: state.phase.settled().and_then(|s| s.sandbox.clone()),
        }
    }
}

/// A terminal's live part after the stream's new lines (not consumed: the next read shows it
/// again, or the completed line in the stream): the cursor's line (a prompt), or the whole screen
/// of a full-screen program.
pub fn append_live(delta: &mut String, live: dsh_process::Live) {
    let text = match live {
        dsh_process::Live::Empty => return,
        dsh_process::Live::Line(text) | dsh_process::Live::Screen(text) => text,
    };
    if !delta.is_empty() && !delta.ends_with('\n') {
        delta.push('\n');
    }
    delta.push_str(&text);
}

/// `out` then, if there is stderr, `[stderr]\n` and the stderr text, with a newline between only when
/// `out` does not already end with one.
pub fn merge_streams(mut out: String, err: &str) -> String {
    if !err.is_empty() {
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str("[stderr]\n");
        out.push_str(err);
    }
    out
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(process) = self.process.get() {
            self.manager.do_send(Release { id: process.id });
        }
    }
}
