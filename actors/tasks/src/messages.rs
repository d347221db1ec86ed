//! The messages of the [`TaskRegistry`](crate::TaskRegistry) actor, and what they answer.
//!
//! A host registers work with [`Register`]; callers read it ([`ReadTask`]), look at it ([`GetTask`],
//! [`ListTasks`]) and kill it ([`KillTask`]); subscribers hear of each end once ([`TaskDone`]).
//! [`ReleaseOwner`] and [`ShutdownTasks`] kill and join.

use actix::prelude::*;

use crate::agent::{AgentRef, TaskOwner};
use crate::errors::TaskError;
use crate::producer::{TaskOutput, TaskProducer, TaskStatus};
use crate::retention::RetentionLoad;
use crate::snapshot::TaskSnapshot;

/// Register running work as a task; replies with its id.
#[derive(Message)]
#[rtype(result = "Result<String, TaskError>")]
pub struct Register {
    /// The id prefix (`bash` gives `bash-1`, `bash-2`, …); must not be blank.
    pub kind: String,
    /// One line saying what the work is (for bash, the command); must not be blank. The record keeps
    /// its first 256 bytes (`…` marks a cut), so a finished task costs little whatever its command.
    pub label: String,
    /// The agent the task belongs to; `None` opens it to every caller and notifies no one.
    pub owner: Option<AgentRef>,
    /// The work itself: read, killed and awaited by the registry.
    pub producer: Box<dyn TaskProducer>,
}

/// Consuming read of a task's new output, with its status as of just before the read.
#[derive(Message, Debug)]
#[rtype(result = "Result<ReadReply, TaskError>")]
pub struct ReadTask {
    /// The task to read.
    pub id: String,
    /// The caller's session id; `None` for a caller with no agent.
    pub caller: Option<String>,
}

/// What a [`ReadTask`] returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadReply {
    /// The output produced since the previous read.
    pub output: TaskOutput,
    /// Taken before the read, so a terminal status here means the output read is final.
    pub snapshot: TaskSnapshot,
}

/// Kill a running task.
#[derive(Message, Debug)]
#[rtype(result = "Result<KillReply, TaskError>")]
pub struct KillTask {
    /// The task to kill.
    pub id: String,
    /// The caller's session id; `None` for a caller with no agent.
    pub caller: Option<String>,
}

/// What a [`KillTask`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskKillOutcome {
    /// The task was running; its kill has started.
    Killed,
    /// The task had already ended (or was already being killed).
    AlreadyFinished,
}

/// What a [`KillTask`] returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KillReply {
    /// Whether this kill started one or found the task already ended.
    pub outcome: TaskKillOutcome,
    /// The task as it stands after the kill was asked for.
    pub snapshot: TaskSnapshot,
}

/// A non-consuming look at one task.
#[derive(Message, Debug)]
#[rtype(result = "Result<TaskSnapshot, TaskError>")]
pub struct GetTask {
    /// The task to look at.
    pub id: String,
    /// The caller's session id; `None` for a caller with no agent.
    pub caller: Option<String>,
}

/// The tasks a caller may see, in registration order.
#[derive(Message, Debug)]
#[rtype(result = "Vec<TaskSnapshot>")]
pub struct ListTasks {
    /// The caller's session id; `None` lists only the tasks without an owner.
    pub caller: Option<String>,
}

/// What the finished tasks hold now (count, memory, spill files), as retention sees it: for tests,
/// benchmarks and health checks.
#[derive(Message, Debug)]
#[rtype(result = "RetentionLoad")]
pub struct GetRetentionLoad;

/// Be told about every task that ends.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Subscribe(pub Recipient<TaskDone>);

/// Sent once per task, after its output is final.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct TaskDone {
    /// The task as it ended.
    pub snapshot: TaskSnapshot,
    /// Who to tell, if the task has an owner.
    pub owner: Option<TaskOwner>,
    /// A call was waiting for this end ([`WaitTask`](crate::WaitTask): a `bash_output` wait, a
    /// `bash_write`) and reads it next, so its reply shows the end: no notice is due for it.
    pub awaited: bool,
}

/// Kill and join the live tasks of a session, then forget all its tasks.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct ReleaseOwner {
    /// The session whose tasks go.
    pub session_id: String,
}

/// Kill and join every task and refuse new ones. Idempotent. No `TaskDone` is sent after it begins.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct ShutdownTasks;

/// Internal: the producer of task `id` finished with `status`.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct ProducerFinished {
    pub id: String,
    pub status: TaskStatus,
}
