//! Executor errors: infrastructure failures only. Non-zero exits, timeouts and aborts are results.

use dsh_process::SpawnError;

/// Why the executor could not run or start a command.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// A bad config value or request (`bash-local: <key> must be a positive finite number`, …).
    #[error("{0}")]
    Invalid(String),
    /// The process could not be started (bad workdir, env channel violation, pre-aborted call, …).
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    /// A foreground call waited for admission until its whole timeout had passed: it never started.
    #[error("timed out after {timeout_ms}ms waiting to start")]
    TimedOutWaitingToStart {
        /// The call's timeout.
        timeout_ms: u64,
    },
    /// A foreground call was cancelled while it waited for admission: it never started.
    #[error("command aborted")]
    AbortedWaitingToStart,
    /// The process manager's mailbox is closed: the runtime is shutting down.
    #[error("the process manager is not running")]
    ManagerGone,
    /// A confined mode was asked for and no sandbox backend can give it, or the sandbox runner
    /// itself failed (code `SANDBOX_UNAVAILABLE`); nothing ran unconfined. The text is
    /// [`crate::sandbox_unavailable_text`]'s, as docs/CONTRACT.md#bash gives it.
    #[error("{0}")]
    SandboxUnavailable(String),
}

impl ExecError {
    /// The error code a result carries (docs/CONTRACT.md#bash): `SANDBOX_UNAVAILABLE` for a
    /// sandbox failure, else `None`.
    pub fn code(&self) -> Option<&'static str> {
        match self {
            ExecError::SandboxUnavailable(_) => Some("SANDBOX_UNAVAILABLE"),
            _ => None,
        }
    }
}
