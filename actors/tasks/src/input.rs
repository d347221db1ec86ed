//! A task's input (issue 22): what can be written to the work behind a task, whether it waits for
//! input, and the refusals. The registry knows nothing about terminals or pipes: a producer says
//! whether it takes input and how it stands ([`TaskInput`]), takes writes, and resolves a future
//! when it waits. The [`WriteTask`] message and the wait's `WaitingForInput` end use these.

use actix::prelude::*;

use crate::errors::TaskError;

/// Where a task's input stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TaskInput {
    /// The task takes no input (started without a terminal or an open stdin).
    #[default]
    None,
    /// It takes input and is not waiting for it now.
    Busy,
    /// It waits for input.
    Waiting,
    /// It waits for input at a password-style prompt (terminal echo off in line mode).
    WaitingHidden,
    /// Its input is closed (end of input sent, or the work ended).
    Closed,
}

impl TaskInput {
    /// `Waiting` or `WaitingHidden`.
    pub fn is_waiting(self) -> bool {
        matches!(self, TaskInput::Waiting | TaskInput::WaitingHidden)
    }
}

/// One thing written to a task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaskInputItem {
    /// Bytes for its terminal or stdin.
    Bytes(Vec<u8>),
    /// A named key; the work picks its bytes (or action) by what its input is.
    Key(TaskKey),
}

/// A key's meaning under a terminal and on a pipe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskKey {
    /// Its bytes under a terminal in normal cursor mode.
    pub normal: &'static [u8],
    /// Its bytes under a terminal in application cursor mode.
    pub application: &'static [u8],
    /// What it does on a stdin pipe.
    pub on_pipe: TaskPipeKey,
}

/// What a key does on a stdin pipe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskPipeKey {
    /// Write these bytes.
    Bytes(&'static [u8]),
    /// Interrupt the work (`SIGINT`).
    Interrupt,
    /// End its input (the pipe closes).
    EndOfInput,
}

/// Why a producer refused a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteRefusal {
    /// It takes no input.
    NoInput,
    /// Its input is closed.
    Closed,
    /// Too much input waits for the program already.
    Full,
}

/// Write to task `id`'s input (never blocks). Owner-checked like a read.
#[derive(Message, Debug)]
/// Answered with a look at the task's output, when its producer gives one (for progress reports
/// during the wait that follows).
#[rtype(result = "Result<Option<std::sync::Arc<dyn crate::OutputGlance>>, TaskError>")]
pub struct WriteTask {
    /// The task to write to.
    pub id: String,
    /// The caller's session id; `None` for a caller with no agent.
    pub caller: Option<String>,
    /// What to write, in order.
    pub items: Vec<TaskInputItem>,
}
