//! `bash_write` (issue 22): write text and named keys to a task's terminal or open stdin, then
//! wait as `bash_output` does — until the task waits for input again, ends, or `until` matches,
//! at most `min(timeout_ms ?? 10000, 600000)` ms — and return the same read.
//!
//! The write is owner-checked by the registry and never blocks: the process layer queues at most
//! 64 KiB not yet taken by the program (`input buffer full` beyond). The wait subscribes before
//! the write is sent, so the prompt the write answers is never mistaken for the next one (the
//! process layer marks the task busy as the write is queued). Input text is never logged.

use actix::Addr;
use dsh_tasks::{TaskInputItem, TaskKey, TaskPipeKey, TaskRegistry, WriteTask};

use crate::args::WriteArgs;
use crate::call::{ToolCall, ToolResult};
use crate::error::ToolError;
use crate::keys::{Key, PipeInput};
use crate::reply::{REGISTRY, flatten, wait_then_read};

/// What one key becomes for the task: its terminal bytes in both cursor modes, and its meaning on
/// a pipe.
fn task_key(key: Key) -> TaskKey {
    TaskKey {
        normal: key.terminal_bytes(false),
        application: key.terminal_bytes(true),
        on_pipe: match key.pipe_input() {
            PipeInput::Bytes(bytes) => TaskPipeKey::Bytes(bytes),
            PipeInput::Interrupt => TaskPipeKey::Interrupt,
            PipeInput::EndOfInput => TaskPipeKey::EndOfInput,
        },
    }
}

/// The `bash_write` call.
pub(crate) async fn bash_write(
    registry: &Addr<TaskRegistry>,
    escalation_offered: bool,
    args: WriteArgs,
    call: ToolCall,
) -> Result<ToolResult, ToolError> {
    let WriteArgs {
        task_id,
        input,
        keys,
        wait,
        until,
    } = args;
    let caller = call.caller.map(|c| c.session_id);
    let mut items = Vec::with_capacity(keys.len() + 1);
    if !input.is_empty() {
        items.push(TaskInputItem::Bytes(input.into_bytes()));
    }
    items.extend(
        keys.into_iter()
            .map(|key| TaskInputItem::Key(task_key(key))),
    );
    let write = WriteTask {
        id: task_id.to_string(),
        caller: caller.clone(),
        items,
    };
    let glance = flatten(registry.send(write).await, REGISTRY)?;
    tracing::debug!(task = %task_id, "bash_write: input queued");
    // Progress reports during the wait (MCP) say what the task prints.
    if let (Some(peek), Some(glance)) = (&call.peek, glance) {
        peek.attach_glance(glance);
    }
    wait_then_read(
        registry,
        escalation_offered,
        task_id,
        caller,
        Some((wait, until)),
        call.cancel,
        "bash_write",
    )
    .await
}
