//! The MCP Tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) for long `bash` calls: MCP
//! hosts cap how long a tool call may take, so a call still running after `--task-after-ms` is
//! answered with a task handle instead, and the client polls `tasks/get` for it.
//!
//! An MCP task is the same foreground call, moved out of its request: the runtime never sees a
//! difference. Its result is the `CallToolResult` the request would have carried. `tasks/cancel`
//! aborts the call as a request cancel does, and the task reads `cancelled` once the command is
//! gone. An approval the call needs meanwhile is the task's input request (`input_required`),
//! answered with `tasks/update`. The table is the connection's own, so a task is seen only by the
//! session that started it. Finished records beyond `--max-finished-tasks` are dropped, oldest
//! first. These ids (`<session>/task-N`) are not dsh's background task ids (`bash-N`): a model's
//! `run_in_background` call starts a dsh task, which stays one and is read with `bash_output`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use dsh::actors::process::lock_unpoisoned;
use dsh::actors::tool_bash::OutputPeek;
use dsh::{AbortSignal, ApprovalOutcome, ToolResult};
use rmcp::model::{
    CallToolResult, CreateTaskResult, DetailedTask, ElicitRequest, ElicitResult, GetTaskResult,
    InputRequest, InputRequests, InputResponses, JsonObject, Task, TaskPayload,
};
use tokio::sync::oneshot;

use crate::mcp::approvals;
use crate::mcp::progress;
use crate::mcp::runs::{Ask, Run, Step};

/// How long a `bash` call runs in the foreground before it becomes a task, unless
/// `--task-after-ms` says otherwise.
pub const DEFAULT_TASK_AFTER_MS: u64 = 10_000;

/// Why a `tasks/*` request was refused.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// No such task in this session (never started here, or dropped by retention).
    #[error("unknown task \"{0}\" (tasks are seen only by the session that started them)")]
    Unknown(String),
    /// `tasks/update` while the task waits for nothing, or without the answer it waits for.
    #[error("task \"{0}\" is not waiting for the input \"{1}\"")]
    NotWaiting(String, String),
}

/// Where a task stands.
enum TaskState {
    /// The call runs.
    Working,
    /// The call waits for the answer to an approval.
    InputRequired {
        key: String,
        request: Box<InputRequest>,
        answer: oneshot::Sender<ApprovalOutcome>,
    },
    /// `tasks/cancel` aborted the call; it is being killed.
    Cancelling,
    /// The call ended with this result.
    Completed(JsonObject),
    /// The call was cancelled and has ended.
    Cancelled,
}

impl TaskState {
    fn finished(&self) -> bool {
        matches!(self, TaskState::Completed(_) | TaskState::Cancelled)
    }
}

struct Record {
    id: String,
    created_at: String,
    updated_at: String,
    cancel: AbortSignal,
    peek: OutputPeek,
    asked: u64,
    state: TaskState,
}

/// The session's MCP tasks.
pub struct Tasks {
    records: Mutex<VecDeque<Record>>,
    issued: AtomicU64,
    session_id: String,
    /// At most this many run at once (`--max-in-flight`).
    max_running: usize,
    keep_finished: usize,
    poll_interval_ms: u64,
}

impl Tasks {
    pub fn new(
        session_id: String,
        max_running: usize,
        keep_finished: usize,
        poll_interval_ms: u64,
    ) -> Self {
        Self {
            records: Mutex::default(),
            issued: AtomicU64::new(0),
            session_id,
            max_running,
            keep_finished,
            poll_interval_ms,
        }
    }

    /// Makes `run` a task, driven to its end here; `finish` makes its result what the request
    /// would have carried. With as many tasks running as `--max-in-flight` allows, the run is given
    /// back and stays in the foreground (and in the request count that backpressure bounds).
    pub fn start(
        self: &Arc<Self>,
        mut run: Run,
        finish: impl FnOnce(ToolResult) -> CallToolResult + Send + 'static,
    ) -> Result<CreateTaskResult, Run> {
        let mut records = lock_unpoisoned(&self.records);
        if records.iter().filter(|r| !r.state.finished()).count() >= self.max_running {
            tracing::info!(
                "as many MCP tasks run as --max-in-flight allows; the call stays in the foreground"
            );
            return Err(run);
        }
        let id = format!(
            "{}/task-{}",
            self.session_id,
            self.issued.fetch_add(1, Ordering::Relaxed) + 1
        );
        let now = now_iso();
        let record = Record {
            id: id.clone(),
            created_at: now.clone(),
            updated_at: now,
            cancel: run.cancel.clone(),
            peek: run.peek.clone(),
            asked: 0,
            state: TaskState::Working,
        };
        let handle = self.task_of(&record);
        records.push_back(record);
        drop(records);
        tracing::info!(task = %id, "a bash call became an MCP task");
        let tasks = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                match run.step().await {
                    Step::Done(result) => {
                        let reply = finish(result);
                        if let Some(tasks) = tasks.upgrade() {
                            tasks.finish(&id, reply);
                        }
                        return;
                    }
                    Step::Asks(ask) => match tasks.upgrade() {
                        Some(tasks) => tasks.ask(&id, ask),
                        None => {
                            let _ = ask.answer.send(ApprovalOutcome::Cancelled);
                        }
                    },
                }
            }
        });
        Ok(CreateTaskResult::new(handle))
    }

    /// `tasks/get`.
    pub fn get(&self, id: &str) -> Result<GetTaskResult, TaskError> {
        let records = lock_unpoisoned(&self.records);
        let record = find(&records, id)?;
        let payload = match &record.state {
            TaskState::Working | TaskState::Cancelling => TaskPayload::Working,
            TaskState::InputRequired { key, request, .. } => {
                let mut input_requests = InputRequests::new();
                input_requests.insert(key.clone(), (**request).clone());
                TaskPayload::InputRequired { input_requests }
            }
            TaskState::Completed(result) => TaskPayload::Completed {
                result: result.clone(),
            },
            TaskState::Cancelled => TaskPayload::Cancelled,
        };
        Ok(GetTaskResult::new(DetailedTask::new(
            self.task_of(record),
            payload,
        )))
    }

    /// `tasks/update`: the answer to the approval the task waits for.
    pub fn update(&self, id: &str, responses: &InputResponses) -> Result<(), TaskError> {
        let mut records = lock_unpoisoned(&self.records);
        let record = find_mut(&mut records, id)?;
        let TaskState::InputRequired { key, .. } = &record.state else {
            return Err(TaskError::NotWaiting(id.to_owned(), "approval".to_owned()));
        };
        let Some(answer) = responses.get(key) else {
            return Err(TaskError::NotWaiting(id.to_owned(), key.clone()));
        };
        let outcome = serde_json::from_value::<ElicitResult>(answer.clone())
            .map_or(ApprovalOutcome::Unavailable, |answer| {
                approvals::outcome(&answer)
            });
        if let TaskState::InputRequired { answer, .. } =
            std::mem::replace(&mut record.state, TaskState::Working)
        {
            tracing::info!(
                task = id,
                ?outcome,
                "approval answered through tasks/update"
            );
            let _ = answer.send(outcome);
        }
        record.updated_at = now_iso();
        Ok(())
    }

    /// `tasks/cancel`: aborts the call as a request cancel does; a finished task stays as it is.
    pub fn cancel(&self, id: &str) -> Result<(), TaskError> {
        let mut records = lock_unpoisoned(&self.records);
        let record = find_mut(&mut records, id)?;
        if record.state.finished() {
            return Ok(());
        }
        record.cancel.abort("cancelled by the MCP client");
        if let TaskState::InputRequired { answer, .. } =
            std::mem::replace(&mut record.state, TaskState::Cancelling)
        {
            let _ = answer.send(ApprovalOutcome::Cancelled);
        }
        record.updated_at = now_iso();
        Ok(())
    }

    fn ask(&self, id: &str, ask: Ask) {
        let mut records = lock_unpoisoned(&self.records);
        let Ok(record) = find_mut(&mut records, id) else {
            let _ = ask.answer.send(ApprovalOutcome::Cancelled);
            return;
        };
        let form = approvals::form(&ask.request);
        match (&record.state, form) {
            (TaskState::Working, Some(form)) => {
                record.asked += 1;
                record.state = TaskState::InputRequired {
                    key: format!("approval-{}", record.asked),
                    request: Box::new(InputRequest::Elicitation(ElicitRequest::new(form))),
                    answer: ask.answer,
                };
                record.updated_at = now_iso();
            }
            (TaskState::Working, None) => {
                let _ = ask.answer.send(ApprovalOutcome::Unavailable);
            }
            _ => {
                let _ = ask.answer.send(ApprovalOutcome::Cancelled);
            }
        }
    }

    fn finish(&self, id: &str, reply: CallToolResult) {
        let mut records = lock_unpoisoned(&self.records);
        if let Ok(record) = find_mut(&mut records, id) {
            record.state = match record.state {
                TaskState::Cancelling => TaskState::Cancelled,
                _ => match serde_json::to_value(&reply) {
                    Ok(serde_json::Value::Object(result)) => TaskState::Completed(result),
                    _ => TaskState::Cancelled,
                },
            };
            record.updated_at = now_iso();
        }
        let mut finished = records.iter().filter(|r| r.state.finished()).count();
        while finished > self.keep_finished {
            let Some(oldest) = records.iter().position(|r| r.state.finished()) else {
                break;
            };
            if let Some(dropped) = records.remove(oldest) {
                tracing::debug!(task = %dropped.id, "finished MCP task dropped by retention");
            }
            finished -= 1;
        }
    }

    fn task_of(&self, record: &Record) -> Task {
        let mut task = Task::new(
            record.id.clone(),
            rmcp::model::TaskStatus::Working,
            record.created_at.clone(),
            record.updated_at.clone(),
        )
        .with_poll_interval_ms(self.poll_interval_ms);
        match &record.state {
            TaskState::Working => {
                let peeked = record.peek.snapshot();
                task = task.with_status_message(format!(
                    "[status: running] {}",
                    progress::message(peeked.as_ref())
                ));
            }
            TaskState::InputRequired { .. } => {
                task = task.with_status_message("[status: waiting for approval]");
            }
            TaskState::Cancelling => {
                task = task.with_status_message("[status: killed]");
            }
            TaskState::Completed(_) | TaskState::Cancelled => {}
        }
        task
    }
}

fn find<'a>(records: &'a VecDeque<Record>, id: &str) -> Result<&'a Record, TaskError> {
    records
        .iter()
        .find(|r| r.id == id)
        .ok_or_else(|| TaskError::Unknown(id.to_owned()))
}

fn find_mut<'a>(records: &'a mut VecDeque<Record>, id: &str) -> Result<&'a mut Record, TaskError> {
    records
        .iter_mut()
        .find(|r| r.id == id)
        .ok_or_else(|| TaskError::Unknown(id.to_owned()))
}

/// Now as an ISO 8601 UTC timestamp with milliseconds.
fn now_iso() -> String {
    let since = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    iso(since.as_secs(), since.subsec_millis())
}

/// `secs` since the epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ` (the civil calendar from a day count).
fn iso(secs: u64, millis: u32) -> String {
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_iso_8601_utc() {
        assert_eq!(iso(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso(951_782_400, 5), "2000-02-29T00:00:00.005Z");
        assert_eq!(iso(1_796_263_993, 120), "2026-12-03T02:13:13.120Z");
    }
}
