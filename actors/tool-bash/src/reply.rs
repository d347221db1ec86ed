//! Turning other actors' replies into tool results, for every tool that asks them (`tool.rs` for
//! `bash`, `bash_output` and `bash_kill`, `write.rs` for `bash_write`): a closed mailbox names the
//! actor that is gone, and a read renders the same way whichever tool made it.

use actix::MailboxError;

use crate::call::ToolResult;
use crate::error::ToolError;
use crate::outcome::{Read, ToolOutcome};
use crate::render::render_read_input;
use crate::task_id::TaskId;

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
    let text = render_read_input(&reply.output, status, input, escalation_offered);
    let read = Read::new(task_id, &reply.output, status).with_input(input);
    ToolResult::done(text, ToolOutcome::Read(read))
}
