//! Registry errors; their texts are part of the contract (docs/CONTRACT.md#errors lists them).

/// Why a task operation was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TaskError {
    /// No task has this id (or it was forgotten).
    #[error("unknown bash task \"{0}\"")]
    Unknown(String),
    /// The task finished and retention discarded it (or its owner was released).
    #[error("{kind} task {id} finished and was discarded (retention limit)")]
    Discarded {
        /// The task's kind (`bash`).
        kind: String,
        /// The task's id.
        id: String,
    },
    /// The task has an owner and the caller is not it.
    #[error("task {0} belongs to another session")]
    Foreign(String),
    /// [`Register`](crate::Register) with a blank `kind`.
    #[error("invalid task kind: expected a non-empty string")]
    EmptyKind,
    /// [`Register`](crate::Register) with a blank `label`.
    #[error("invalid task label: expected a non-empty string")]
    EmptyLabel,
    /// The task was started without input (issue 22).
    #[error("task {0} takes no input (start it with tty: true or stdin: \"open\")")]
    NoInput(String),
    /// The task has ended, or its input was closed.
    #[error("task {0} has finished; its input is closed")]
    InputClosed(String),
    /// More than 64 KiB of input would wait for the program.
    #[error("input buffer full")]
    InputFull,
    /// The registry has begun shutting down and takes no new tasks.
    #[error("task registry is shut down")]
    ShutDown,
}
