//! The handle of a background command: status settled once, consuming merged reads, kill.
//!
//! The process itself belongs to the process manager, not to this handle's creator:
//! stopping the executor leaves it running; shutting the manager down kills it. Dropping the last clone
//! of a handle releases the manager's record (killing the process if it still runs).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use actix::Addr;
use dsh_process::{
    AbortSignal, Kill, ProcessManager, Release, SpawnedProcess, StreamKind, lock_unpoisoned,
};
use dsh_tasks::{TaskOutput, TaskProducer, TaskStatus};
use futures::future::BoxFuture;

/// A background `bash -c` command. Cheap to clone; clones share state.
#[derive(Clone)]
pub struct BashProcess {
    inner: Arc<Inner>,
}

struct Inner {
    manager: Addr<ProcessManager>,
    /// `None` when the spawn failed.
    process: Option<SpawnedProcess>,
    abort: Option<AbortSignal>,
    /// This task's own confinement facts (never "the latest wrap"), classified at settlement.
    sandbox: Option<crate::sandbox::WrapFacts>,
    state: Mutex<HandleState>,
}

#[derive(Default)]
struct HandleState {
    stdout_offset: u64,
    stderr_offset: u64,
    /// `spawn failed: …`, delivered by exactly one read.
    failure_note: Option<String>,
    kill_requested: bool,
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
        Self::with(
            manager,
            Some(process),
            abort,
            HandleState::default(),
            sandbox,
        )
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
        Self::with(manager, None, None, state, sandbox)
    }

    fn with(
        manager: Addr<ProcessManager>,
        process: Option<SpawnedProcess>,
        abort: Option<AbortSignal>,
        state: HandleState,
        sandbox: Option<crate::sandbox::WrapFacts>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                manager,
                process,
                abort,
                sandbox,
                state: Mutex::new(state),
            }),
        }
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
        self.inner.process.as_ref().map(|p| p.pid)
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
        let outcome = self.inner.process.as_ref().and_then(|p| p.output.outcome());
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
                    state.sandbox_facts =
                        Some(facts.classify(outcome.exit_code, &outcome.stderr.text));
                }
                status
            }
            None if state.kill_requested => TaskStatus::Killed { signal: None },
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
        let Some(process) = &self.inner.process else {
            return false;
        };
        state.kill_requested = true;
        self.inner.manager.do_send(Kill { id: process.id });
        true
    }

    /// Waits until the command has ended and returns its final status.
    pub async fn done(&self) -> TaskStatus {
        if let Some(process) = &self.inner.process {
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
        let (stdout, stderr) = match &self.inner.process {
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
        if let Some(process) = &self.process {
            self.manager.do_send(Release { id: process.id });
        }
    }
}

impl TaskProducer for BashProcess {
    fn read(&self) -> TaskOutput {
        self.read_output()
    }

    fn kill(&self) {
        BashProcess::kill(self);
    }

    fn finished(&self) -> BoxFuture<'static, TaskStatus> {
        let handle = self.clone();
        Box::pin(async move { handle.done().await })
    }
}
