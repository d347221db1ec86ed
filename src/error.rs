//! [`RuntimeError`]: why a runtime could not start, or a session operation failed.

use dsh_bash::ExecError;
use dsh_process::ContainmentError;
use dsh_tasks::TaskError;
use dsh_tool_bash::ToolError;

/// Why a runtime could not start, or why a host's session operation failed.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// A bash setting was refused (`bash-local: <key> must be a positive finite number`), or a
    /// command a host started could not be resolved or started.
    #[error(transparent)]
    Config(#[from] ExecError),
    /// The operating system would not start the thread the actors run on.
    #[error("cannot start the runtime thread: {0}")]
    Thread(std::io::Error),
    /// The actor thread ended without saying whether the actors started.
    #[error("the runtime thread exited before it was ready")]
    ThreadExited,
    /// The requested containment mode or a per-task limit is impossible on this host.
    #[error(transparent)]
    Containment(#[from] ContainmentError),
    /// A confined sandbox mode was asked for and no backend can give it here (the fail-closed
    /// text of docs/CONTRACT.md, "bash"), or the sandbox settings are invalid.
    #[error("{0}")]
    Sandbox(String),
    /// The runtime has shut down: its actors take no more work.
    #[error("the dsh runtime is shut down")]
    ShutDown,
    /// The task registry has stopped (the runtime is shutting down).
    #[error("the task registry is not running")]
    RegistryGone,
    /// The tool layer refused (a sandbox mode set on a runtime that does not sandbox, a
    /// composition without a sandbox policy); [`ToolError::code`] names which.
    #[error(transparent)]
    Tool(#[from] ToolError),
    /// The task registry refused a task a host started.
    #[error(transparent)]
    Task(#[from] TaskError),
}
