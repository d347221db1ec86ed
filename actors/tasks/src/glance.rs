//! A look at a task's output so far that consumes nothing and asks no actor, for a front end's
//! progress reports while a caller waits on the task (MCP `notifications/progress` during a
//! `bash_write`, as during a foreground `bash`). A producer that can be looked at hands out an
//! [`OutputGlance`] when it is written to ([`TaskProducer::glance`](crate::TaskProducer::glance)).

/// What a look saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeekSnapshot {
    /// Bytes the work has written to stdout so far (whole stream, not just what is kept).
    pub stdout_bytes: u64,
    /// Bytes written to stderr so far.
    pub stderr_bytes: u64,
    /// The last non-empty line of stdout, else of stderr (empty when neither has one yet).
    pub last_line: String,
}

/// A running task's output, looked at without a read cursor: cheap and never blocking.
pub trait OutputGlance: std::fmt::Debug + Send + Sync + 'static {
    /// The output so far.
    fn snapshot(&self) -> PeekSnapshot;
}
