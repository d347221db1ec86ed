//! What the registry needs from the work behind a task. The registry knows nothing about processes or
//! bash: a producer reads its own output (consuming), starts its own kill, and says when it has ended.

use std::path::PathBuf;

use futures::future::BoxFuture;

/// Where a task stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaskStatus {
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
    /// Whether the work has not ended yet.
    pub fn is_running(&self) -> bool {
        matches!(self, TaskStatus::Running)
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

/// The work behind a task.
pub trait TaskProducer: Send + 'static {
    /// Returns the output produced since the previous call and advances the cursor. Must be cheap and
    /// must never block: the registry calls it inside its actor.
    fn read(&self) -> TaskOutput;

    /// Starts stopping the work (for bash: SIGTERM to the group, SIGKILL after the grace). Idempotent.
    fn kill(&self);

    /// Resolves once, when the work has ended and its output is final, with its terminal status.
    fn finished(&self) -> BoxFuture<'static, TaskStatus>;
}
