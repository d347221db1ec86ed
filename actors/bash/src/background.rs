//! The handle of a background command: status settled once, consuming merged reads, kill.
//!
//! The process itself belongs to the process manager, not to this handle's creator:
//! stopping the executor leaves it running; shutting the manager down kills it. Dropping the last clone
//! of a handle releases the manager's record (killing the process if it still runs).
//!
//! A command the supervisor policy queued has a handle before it has a process:
//!
//! ```text
//!   queued ──admitted──► running ──settled──► completed | killed
//!     ├──kill──► (abort fired; the manager withdraws the spawn) ──► killed
//!     └──start failed──► killed, one read shows `spawn failed: …`
//! ```

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use actix::Addr;
use dsh_process::{
    AbortSignal, Discard, Kill, ProcessManager, Release, SpawnError, SpawnedProcess, StreamKind,
    StreamScan, lock_unpoisoned,
};
use dsh_tasks::{OutputCondition, OutputScan, SandboxFacts, TaskOutput, TaskProducer, TaskStatus};
use futures::future::BoxFuture;
use tokio::sync::watch;

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
    state: Mutex<HandleState>,
    /// `true` once the spawn is decided (started or failed); a queued handle starts `false`.
    decided: watch::Receiver<bool>,
}

#[derive(Default)]
struct HandleState {
    stdout_offset: u64,
    stderr_offset: u64,
    /// `spawn failed: …`, delivered by exactly one read.
    failure_note: Option<String>,
    kill_requested: bool,
    /// Waiting for admission: no process yet.
    queued: bool,
    /// Decided once, the first time the settled outcome is observed.
    final_status: Option<TaskStatus>,
    /// Stamped together with `final_status` for a confined task.
    sandbox_facts: Option<dsh_tasks::SandboxFacts>,
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
    ) -> Self {
        let handle = Self::with(manager, abort, HandleState::default(), true, sandbox).0;
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
    ) -> Self {
        let state = HandleState {
            queued: true,
            ..HandleState::default()
        };
        let (handle, decided) = Self::with(manager.clone(), Some(abort), state, false, sandbox);
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
        state.queued = false;
        match answer {
            Ok(spawned) => {
                let id = spawned.id;
                let _ = self.inner.process.set(spawned);
                if state.kill_requested {
                    self.inner.manager.do_send(Kill { id });
                }
                tracing::debug!(target: "dsh::policy", "queued task started");
            }
            Err(err) => {
                // A refused confinement is a runner failure, as when the spawn answers at once; any
                // other failure of a confined command is never a denial.
                let confine = matches!(err, SpawnError::Confine(_));
                if !state.kill_requested {
                    state.failure_note = Some(match self.inner.sandbox.as_ref() {
                        Some(facts) if confine => crate::sandbox::sandbox_unavailable_text(
                            facts.mode,
                            Some(&err.to_string()),
                        ),
                        _ => format!("spawn failed: {err}"),
                    });
                }
                state.sandbox_facts = self.inner.sandbox.as_ref().map(|facts| SandboxFacts {
                    runner_failed: confine,
                    ..facts.classify(None, "")
                });
                state.final_status = Some(TaskStatus::Killed { signal: None });
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
        let state = HandleState {
            failure_note: Some(note),
            final_status: Some(TaskStatus::Killed { signal: None }),
            sandbox_facts: sandbox.as_ref().map(|facts| facts.classify(None, "")),
            ..HandleState::default()
        };
        Self::with(manager, None, state, true, sandbox).0
    }

    fn with(
        manager: Addr<ProcessManager>,
        abort: Option<AbortSignal>,
        state: HandleState,
        decided: bool,
        sandbox: Option<crate::sandbox::WrapFacts>,
    ) -> (Self, watch::Sender<bool>) {
        let (tx, rx) = watch::channel(decided);
        let handle = Self {
            inner: Arc::new(Inner {
                manager,
                process: OnceLock::new(),
                abort,
                sandbox,
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
        state.sandbox_facts.clone()
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

    fn status_locked(&self, state: &mut HandleState) -> TaskStatus {
        if let Some(status) = &state.final_status {
            return status.clone();
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
                let status = end.stays_killed(state.kill_requested || aborted);
                state.final_status = Some(status.clone());
                if let Some(facts) = &self.inner.sandbox {
                    // Background work settles without a copy of its text in the outcome (the tail
                    // is kept once, in the output); classify against the kept stderr tail.
                    let stderr = self
                        .inner
                        .process
                        .get()
                        .map(|p| p.output.read(StreamKind::Stderr, 0).text)
                        .unwrap_or_default();
                    state.sandbox_facts = Some(facts.classify(outcome.exit_code, &stderr));
                }
                status
            }
            None if state.kill_requested => TaskStatus::Killed { signal: None },
            None if state.queued => TaskStatus::Queued,
            None => TaskStatus::Running,
        }
    }

    /// Starts the group kill. `true` if this call started it; `false` if the command had already
    /// finished or was already being killed.
    pub fn kill(&self) -> bool {
        let mut state = self.state();
        if !self.status_locked(&mut state).is_running() {
            return false;
        }
        let Some(process) = self.inner.process.get() else {
            if !state.queued {
                return false;
            }
            // Not started yet: the manager withdraws the spawn when its abort fires.
            state.kill_requested = true;
            if let Some(abort) = &self.inner.abort {
                abort.abort("killed while queued");
            }
            return true;
        };
        state.kill_requested = true;
        self.inner.manager.do_send(Kill { id: process.id });
        true
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
                state
                    .final_status
                    .get_or_insert(TaskStatus::Killed { signal: None });
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
            state.failure_note.take().unwrap_or_default()
        } else {
            stderr.text
        };
        let spill_paths: Vec<PathBuf> = [stdout.spill_path, stderr.spill_path]
            .into_iter()
            .flatten()
            .collect();
        TaskOutput {
            delta: merge_streams(stdout.text, &stderr_text),
            lossy: stdout.lossy || stderr.lossy,
            spill_paths,
            sandbox: state.sandbox_facts.clone(),
        }
    }
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

impl TaskProducer for BashProcess {
    fn read(&self) -> TaskOutput {
        self.read_output()
    }

    fn queued(&self) -> bool {
        self.state().queued
    }

    fn retained_bytes(&self) -> usize {
        let output = self
            .inner
            .process
            .get()
            .map_or(0, |process| process.output.retained_bytes());
        output + PROCESS_BYTES
    }

    fn spill_bytes(&self) -> u64 {
        self.inner
            .process
            .get()
            .map_or(0, |process| process.output.spill_bytes())
    }

    fn discard(&self) {
        if let Some(process) = self.inner.process.get() {
            self.inner.manager.do_send(Discard { id: process.id });
        }
    }

    fn kill(&self) {
        BashProcess::kill(self);
    }

    fn finished(&self) -> BoxFuture<'static, TaskStatus> {
        let handle = self.clone();
        Box::pin(async move { handle.done().await })
    }

    /// Registers a scan on each stream from the read cursors now (`SharedOutput::watch`): each
    /// chunk is fed to it as the driver stores it. A queued command is watched from its start.
    fn output_matches(&self, condition: Arc<dyn OutputCondition>) -> BoxFuture<'static, ()> {
        if self.inner.process.get().is_some() {
            return self.watch_streams(&condition);
        }
        // Queued: nothing is written before the start; a spawn that failed has only its note.
        let mut decided = self.inner.decided.clone();
        let handle = self.clone();
        Box::pin(async move {
            if decided.wait_for(|decided| *decided).await.is_err() {
                std::future::pending::<()>().await;
            }
            if handle.inner.process.get().is_some() {
                return handle.watch_streams(&condition).await;
            }
            let note = handle.state().failure_note.clone().unwrap_or_default();
            if !condition.scan().feed(note.as_bytes()) {
                std::future::pending::<()>().await;
            }
        })
    }
}

impl BashProcess {
    /// Resolves once `condition` holds on stdout's or stderr's text since the previous read; the
    /// scans are registered before this returns.
    fn watch_streams(&self, condition: &Arc<dyn OutputCondition>) -> BoxFuture<'static, ()> {
        let Some(process) = self.inner.process.get() else {
            return Box::pin(std::future::pending());
        };
        let state = self.state();
        let [stdout, stderr] = [
            (StreamKind::Stdout, state.stdout_offset),
            (StreamKind::Stderr, state.stderr_offset),
        ]
        .map(|(stream, from)| {
            process
                .output
                .watch(stream, from, Box::new(Scan(condition.scan())))
        });
        Box::pin(async move {
            futures::future::select(stdout, stderr).await;
        })
    }
}

/// A task's output scan, fed by the process layer's collector.
struct Scan(Box<dyn OutputScan>);

impl StreamScan for Scan {
    fn feed(&mut self, bytes: &[u8]) -> bool {
        self.0.feed(bytes)
    }

    fn gap(&mut self) {
        self.0.gap();
    }
}
