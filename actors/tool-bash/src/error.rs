//! Why a tool call failed, typed: each variant's `Display` is the exact text docs/CONTRACT.md
//! ("Errors") gives the model after `Error: `, and [`ToolError::code`] names the kind of failure,
//! so a host tells a sandbox failure from a bad argument without reading the text.

use dsh_bash::{ExecError, SandboxMode};
use dsh_tasks::TaskError;

/// A failed tool call (or session operation) of the tool layer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// The model's arguments failed the schema or a value check (`invalid arguments: …`,
    /// `invalid command: …`, `invalid task_id: …`, …).
    #[error("{0}")]
    InvalidArguments(String),
    /// A tool this composition does not offer.
    #[error("unknown tool \"{name}\"; available tools: {available}")]
    UnknownTool {
        /// The name the model used.
        name: String,
        /// The offered tools, comma-separated.
        available: String,
    },
    /// The call's cancel had fired before it was dispatched.
    #[error("tool call aborted before dispatch")]
    AbortedBeforeDispatch,
    /// The call was cancelled after its escalation was granted; nothing ran.
    #[error("tool call aborted")]
    Aborted,
    /// A foreground command was cancelled while it ran (its facts are in the result's outcome).
    #[error("command aborted")]
    CommandAborted,
    /// A `bash_output` wait was cancelled.
    #[error("wait aborted")]
    WaitAborted,
    /// `run_in_background` asked of a composition without background tasks.
    #[error("run_in_background is disabled for this deployment (enableRunInBackground: false)")]
    BackgroundDisabled,
    /// `tty` or `stdin: "open"` without background tasks: a command that waits for input becomes a
    /// background task, answered with `bash_write`, which this deployment does not offer.
    #[error(
        "tty and stdin \"open\" need background tasks, which are disabled for this deployment (enableRunInBackground: false)"
    )]
    InputDisabled,
    /// A one-shot escalation was refused; nothing ran.
    #[error(transparent)]
    Escalation(#[from] EscalationError),
    /// The executor could not run or start the command (code `SANDBOX_UNAVAILABLE` for a sandbox
    /// failure, else `EXEC_FAILED`).
    #[error("{message}")]
    Exec {
        /// [`ExecError::code`], or `EXEC_FAILED`.
        code: &'static str,
        /// The executor's text.
        message: String,
    },
    /// The task registry refused (unknown, foreign or discarded task, …).
    #[error(transparent)]
    Task(#[from] TaskError),
    /// `bash_write` named a key that does not exist (the contract's `invalid keys: …` text).
    #[error(transparent)]
    InvalidKeys(#[from] crate::keys::UnknownKey),
    /// An actor's mailbox is closed: the runtime is shutting down (`the bash executor is not
    /// running`, `the task registry is not running`).
    #[error("the {0} is not running")]
    NotRunning(&'static str),
    /// The runtime has shut down.
    #[error("the dsh runtime is shut down")]
    ShutDown,
    /// A confining executor was composed without a sandbox policy resolver.
    #[error("tool-bash: the mounted bash executor confines but ctx.sandboxPolicy is missing")]
    MissingSandboxPolicy,
    /// A session sandbox mode was set on a composition that does not sandbox.
    #[error("the bash executor does not sandbox; there is no mode to set")]
    NotSandboxed,
}

impl ToolError {
    /// The kind of failure: `INVALID_ARGUMENTS`, `UNKNOWN_TOOL`, `ABORTED`,
    /// `BACKGROUND_DISABLED`, `ESCALATION_REFUSED`, `SANDBOX_UNAVAILABLE`, `EXEC_FAILED`,
    /// `UNKNOWN_TASK`, `FOREIGN_TASK`, `TASK_DISCARDED`, `NO_INPUT`, `INPUT_CLOSED`,
    /// `INPUT_FULL`, `TASK_REFUSED`, `SHUT_DOWN`, `NOT_SANDBOXED` or `MISCONFIGURED`.
    pub fn code(&self) -> &'static str {
        match self {
            ToolError::InvalidArguments(_) | ToolError::InvalidKeys(_) => "INVALID_ARGUMENTS",
            ToolError::UnknownTool { .. } => "UNKNOWN_TOOL",
            ToolError::AbortedBeforeDispatch
            | ToolError::Aborted
            | ToolError::CommandAborted
            | ToolError::WaitAborted => "ABORTED",
            ToolError::BackgroundDisabled | ToolError::InputDisabled => "BACKGROUND_DISABLED",
            ToolError::Escalation(_) => "ESCALATION_REFUSED",
            ToolError::Exec { code, .. } => code,
            ToolError::Task(TaskError::Unknown(_)) => "UNKNOWN_TASK",
            ToolError::Task(TaskError::Foreign(_)) => "FOREIGN_TASK",
            ToolError::Task(TaskError::Discarded { .. }) => "TASK_DISCARDED",
            ToolError::Task(TaskError::ShutDown) => "SHUT_DOWN",
            ToolError::Task(TaskError::NoInput(_)) => "NO_INPUT",
            ToolError::Task(TaskError::InputClosed(_)) => "INPUT_CLOSED",
            ToolError::Task(TaskError::InputFull) => "INPUT_FULL",
            ToolError::Task(_) => "TASK_REFUSED",
            ToolError::NotRunning(_) | ToolError::ShutDown => "SHUT_DOWN",
            ToolError::NotSandboxed => "NOT_SANDBOXED",
            ToolError::MissingSandboxPolicy => "MISCONFIGURED",
        }
    }
}

impl From<ExecError> for ToolError {
    fn from(err: ExecError) -> Self {
        ToolError::Exec {
            code: err.code().unwrap_or("EXEC_FAILED"),
            message: err.to_string(),
        }
    }
}

/// Why an escalation (`sandbox_permissions` + `justification`) was refused; the texts are the
/// escalation flow's (docs/ARCHITECTURE.md, "Sandbox").
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EscalationError {
    /// The executor does not sandbox: there is nothing to widen.
    #[error(
        "sandbox_permissions is not available in this composition (no sandboxing executor to escalate)"
    )]
    NotOffered,
    /// The requested mode is not strictly wider than the call's standing mode.
    #[error(
        "sandbox escalation to \"{requested}\" is not strictly wider than this call's current \"{current}\" mode"
    )]
    NotWider {
        /// The mode as the model wrote it.
        requested: String,
        /// The call's standing mode.
        current: SandboxMode,
    },
    /// No approval service is composed.
    #[error("sandbox escalation to \"{0}\" requires approval, but no approval service is composed")]
    NoApprovalService(SandboxMode),
    /// The call has neither an agent nor an approver.
    #[error(
        "sandbox escalation to \"{0}\" requires approval, but the call has no agent to route it through"
    )]
    NoAgent(SandboxMode),
    /// The approver is missing or could not ask.
    #[error(
        "sandbox escalation to \"{0}\" requires approval, but no approval channel is available"
    )]
    NoChannel(SandboxMode),
    /// The user said no.
    #[error("the user rejected escalating this command to \"{0}\"")]
    Rejected(SandboxMode),
    /// The approval, or the call, was cancelled first.
    #[error("approval for escalating to \"{0}\" was cancelled")]
    Cancelled(SandboxMode),
    /// An approver answered with an outcome this version does not know.
    #[error("unreachable variant in EscalationOutcome: \"{0}\"")]
    UnknownOutcome(String),
}
