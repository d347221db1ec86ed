//! Registry errors, with the seeds' exact texts (docs/CONTRACT.md lists them).

/// Why a task operation was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TaskError {
    #[error("unknown bash task \"{0}\"")]
    Unknown(String),
    #[error("task {0} belongs to another session")]
    Foreign(String),
    #[error("invalid task kind: expected a non-empty string")]
    EmptyKind,
    #[error("invalid task label: expected a non-empty string")]
    EmptyLabel,
    #[error("task registry is shut down")]
    ShutDown,
}
