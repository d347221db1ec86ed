//! Executor errors: infrastructure failures only. Non-zero exits, timeouts and aborts are results.

use dsh_process::SpawnError;

/// Why the executor could not run or start a command.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// A bad config value or request (the seeds' `bash-local: …` messages).
    #[error("{0}")]
    Invalid(String),
    /// The process could not be started (bad workdir, env channel violation, pre-aborted call, …).
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    /// The process manager's mailbox is closed: the runtime is shutting down.
    #[error("the process manager is not running")]
    ManagerGone,
}
