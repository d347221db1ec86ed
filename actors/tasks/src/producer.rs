//! What the registry needs from the work behind a task. The registry knows nothing about processes or
//! bash: a producer reads its own output (consuming), starts its own kill, and says when it has ended.

use std::path::PathBuf;

use futures::future::BoxFuture;

/// Where a task stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaskStatus {
    /// The work waits for a supervisor policy to admit it; it has not started.
    Queued,
    /// The work has not ended yet.
    Running,
    /// Ended on its own; non-zero exits are still `Completed`.
    Completed {
        /// The exit status the work reported.
        exit_code: i32,
    },
    /// Ended by a kill, an abort or a signal; `signal` is the signal that ended it, once known.
    Killed {
        /// The signal's name (`SIGTERM`); `None` until the work has ended, or when it exited on its
        /// own after the kill.
        signal: Option<String>,
    },
    /// Killed by the kernel because it hit its memory limit.
    OutOfMemory,
}

impl TaskStatus {
    /// Whether the work has not ended yet (it runs, or waits to start).
    pub fn is_running(&self) -> bool {
        matches!(self, TaskStatus::Running | TaskStatus::Queued)
    }

    /// The one rule for "killed stays killed": how work that ended as `self` is reported when a kill
    /// was (`kill_requested`) or was not asked for. Once killed, work is reported killed even if it
    /// trapped the signal and exited 0; the signal that ended it is kept when there was one.
    pub fn stays_killed(self, kill_requested: bool) -> TaskStatus {
        match self {
            TaskStatus::Killed { signal } => TaskStatus::Killed { signal },
            TaskStatus::OutOfMemory => TaskStatus::OutOfMemory,
            _ if kill_requested => TaskStatus::Killed { signal: None },
            end => end,
        }
    }
}

/// One consuming read: what the task produced since the previous read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskOutput {
    /// New output; for bash, stdout then a `[stderr]`-marked section.
    pub delta: String,
    /// Some output between the previous read and this one was dropped from memory.
    pub lossy: bool,
    /// The full-output files that currently exist (stdout first).
    pub spill_paths: Vec<PathBuf>,
    /// The sandbox facts stamped when a confined task settled; `None` while it runs and for
    /// unconfined work.
    pub sandbox: Option<crate::SandboxFacts>,
}

/// Work a task left running when it ended (for bash: a daemon that let go of the command's pipes),
/// which the registry makes a task of the same owner, so that it can still be stopped
/// ([`TaskProducer::left_behind`]).
pub struct LeftBehind {
    /// The work.
    pub producer: Box<dyn TaskProducer>,
    /// What it is, for the ended task's last read and notice (for bash:
    /// `pid 4242 (node server.js)`).
    pub description: String,
    /// The processes, lowest first.
    pub pids: Vec<i32>,
}

/// The task made of what another task left running, as the ended task's snapshot names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeftRunning {
    /// The new task's id.
    pub task_id: String,
    /// [`LeftBehind::description`].
    pub description: String,
    /// [`LeftBehind::pids`].
    pub pids: Vec<i32>,
}

/// The work behind a task.
pub trait TaskProducer: Send + 'static {
    /// Returns the output produced since the previous call and advances the cursor. Must be cheap and
    /// must never block: the registry calls it inside its actor.
    fn read(&self) -> TaskOutput;

    /// Starts stopping the work (for bash: SIGTERM to the group, SIGKILL after the grace; a queued
    /// command leaves the queue). Idempotent.
    fn kill(&self);

    /// Whether the work still waits to start (shown as `queued` while the task has not settled).
    fn queued(&self) -> bool {
        false
    }

    /// Resolves once, when the work has ended and its output is final, with its terminal status.
    fn finished(&self) -> BoxFuture<'static, TaskStatus>;

    /// Asked once, right after [`finished`](TaskProducer::finished) resolved (never during
    /// shutdown): what the work left running, to become a task of the same owner. The default
    /// leaves nothing.
    fn left_behind(&self) -> Option<LeftBehind> {
        None
    }

    /// Resolves once `condition` holds on the output produced since the previous read (each stream
    /// scanned on its own, from the read cursor on, every byte in the order it was written, also
    /// what has left memory since), without consuming anything. It must start watching when called,
    /// not when first polled: no write after the call may be missed. Dropping the future stops the
    /// watch. The default never resolves: a wait on such a producer ends when the work does.
    fn output_matches(
        &self,
        condition: std::sync::Arc<dyn crate::OutputCondition>,
    ) -> BoxFuture<'static, ()> {
        let _ = condition;
        Box::pin(std::future::pending())
    }

    /// Whether the work takes input and waits for it now (issue 22). The default takes none.
    fn input(&self) -> crate::TaskInput {
        crate::TaskInput::None
    }
    /// Writes to the work's input, in order; never blocks. The default takes none.
    fn write(&self, items: Vec<crate::TaskInputItem>) -> Result<(), crate::WriteRefusal> {
        let _ = items;
        Err(crate::WriteRefusal::NoInput)
    }
    /// Resolves once the work waits for input (now or later). Like
    /// [`output_matches`](TaskProducer::output_matches), it must start watching when called. The
    /// default never resolves.
    fn input_waiting(&self) -> BoxFuture<'static, ()> {
        Box::pin(std::future::pending())
    }
    /// A look at the output so far for progress reports (see [`crate::OutputGlance`]); the default
    /// has none.
    fn glance(&self) -> Option<std::sync::Arc<dyn crate::OutputGlance>> {
        None
    }
    /// Bytes of memory this work holds once it has ended: its output in memory (the buffers, not
    /// just the bytes in them) and its own records, in [`heap_block_bytes`](crate::heap_block_bytes)
    /// terms; the registry adds what its own record costs. Retention bounds the sum over finished
    /// tasks, so an honest answer is what makes `--retained-output-bytes` a bound on memory.
    fn retained_bytes(&self) -> usize {
        0
    }

    /// Bytes of its files on disk (for bash, its spill files), asked once the work has ended;
    /// retention bounds their sum over finished tasks and [`TaskProducer::discard`] removes them.
    fn spill_bytes(&self) -> u64 {
        0
    }

    /// The registry forgets the finished task for good (retention): remove what it keeps elsewhere
    /// (for bash, its spill files). The default keeps nothing.
    fn discard(&self) {}
}

/// What a [`Drained`] stand-in costs: its `Arc` block and its paths (the sandbox facts are a few
/// words inline).
fn drained_bytes(spill_paths: &[PathBuf]) -> usize {
    use crate::retention::heap_block_bytes;
    // The Arc's two counters, the trait object's data, inline.
    let own = heap_block_bytes(16 + std::mem::size_of::<Drained>());
    let paths = heap_block_bytes(std::mem::size_of_val(spill_paths))
        + spill_paths
            .iter()
            .map(|p| heap_block_bytes(p.as_os_str().len()))
            .sum::<usize>();
    own + paths
}

/// What stays of a finished task once its owner has read all of it: the final status lives in the
/// registry's record, so this keeps only the full-output files (removed when the task is discarded)
/// and the sandbox facts, which every later read still ends with.
pub(crate) struct Drained {
    pub spill_paths: Vec<PathBuf>,
    pub sandbox: Option<crate::SandboxFacts>,
    /// `Closed` for work that took input (a write says "finished", not "takes no input"), else
    /// `None`.
    pub input: crate::TaskInput,
}

impl TaskProducer for Drained {
    fn read(&self) -> TaskOutput {
        TaskOutput {
            sandbox: self.sandbox.clone(),
            ..TaskOutput::default()
        }
    }

    fn kill(&self) {}

    fn finished(&self) -> BoxFuture<'static, TaskStatus> {
        Box::pin(std::future::pending())
    }

    fn input(&self) -> crate::TaskInput {
        self.input
    }

    fn retained_bytes(&self) -> usize {
        drained_bytes(&self.spill_paths)
    }

    fn discard(&self) {
        for path in &self.spill_paths {
            if let Err(err) = std::fs::remove_file(path) {
                tracing::debug!(path = %path.display(), %err, "cannot remove a discarded spill file");
            }
        }
    }
}
