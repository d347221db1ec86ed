//! Turning other actors' replies into tool results, for every tool that asks them (`tool.rs` for
//! `bash`, `bash_output` and `bash_kill`, `write.rs` for `bash_write`): a closed mailbox names the
//! actor that is gone, and a read renders the same way whichever tool made it.

use std::sync::Arc;
use std::time::Duration;

use actix::{Addr, MailboxError};
use dsh_bash::AbortSignal;
use dsh_tasks::{ReadTask, TaskRegistry, WaitOutcome, WaitTask};

use crate::call::ToolResult;
use crate::error::ToolError;
use crate::outcome::{Read, ToolOutcome};
use crate::render::{left_running_line, render_read_input};
use crate::task_id::TaskId;
use crate::until::UntilPattern;

/// A reply from another actor: a closed mailbox says which actor is gone; an error keeps its own
/// type.
pub(crate) fn flatten<T, E: Into<ToolError>>(
    reply: Result<Result<T, E>, MailboxError>,
    actor: &'static str,
) -> Result<T, ToolError> {
    reply
        .map_err(|_| ToolError::NotRunning(actor))?
        .map_err(Into::into)
}

/// The executor, as a closed mailbox names it.
pub(crate) const EXECUTOR: &str = "bash executor";
/// The task registry, as a closed mailbox names it.
pub(crate) const REGISTRY: &str = "task registry";

/// The result of a read (`bash_output`, and the end of `bash_write`): text and typed facts.
pub(crate) fn read_result(
    task_id: TaskId,
    reply: &dsh_tasks::ReadReply,
    escalation_offered: bool,
) -> ToolResult {
    let status = &reply.snapshot.status;
    let input = reply.snapshot.input;
    let left = reply.snapshot.left_running.as_ref();
    let mut text = render_read_input(&reply.output, status, input, escalation_offered);
    if let Some(left) = left {
        text.push('\n');
        text.push_str(&left_running_line(left));
    }
    let read = Read::new(task_id, &reply.output, status)
        .with_input(input)
        .with_left_running(left);
    ToolResult::done(text, ToolOutcome::Read(read))
}

/// The end of `bash_output` and `bash_write` (named by `tool` in the log): with `wait`, wait for
/// the task to wait for input, end, or match `until` (at most the timeout; `cancel` aborts it),
/// then read the task as `caller`.
pub(crate) async fn wait_then_read(
    registry: &Addr<TaskRegistry>,
    escalation_offered: bool,
    task_id: TaskId,
    caller: Option<String>,
    wait: Option<(Duration, Option<UntilPattern>)>,
    cancel: Option<AbortSignal>,
    tool: &str,
) -> Result<ToolResult, ToolError> {
    if let Some((timeout, until)) = wait {
        let wait = WaitTask {
            id: task_id.to_string(),
            caller: caller.clone(),
            timeout,
            until: until.map(|until| Arc::new(until) as Arc<dyn dsh_tasks::OutputCondition>),
            // A task that waits for input will not finish without it: say so at once.
            for_input: true,
            cancel: Box::pin(async move { dsh_bash::wait_abort(cancel.as_ref()).await }),
        };
        let outcome = flatten(registry.send(wait).await, REGISTRY)?;
        tracing::debug!(task = %task_id, ?outcome, "{tool} wait ended");
        if outcome == WaitOutcome::Aborted {
            return Err(ToolError::WaitAborted);
        }
    }
    let id = task_id.to_string();
    let reply = flatten(registry.send(ReadTask { id, caller }).await, REGISTRY)?;
    Ok(read_result(task_id, &reply, escalation_offered))
}
