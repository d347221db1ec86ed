//! `dsh run`: one foreground `bash` call, printed as the model would see it, except that the
//! model's escalation hint is replaced by [`PERSON_HINT`]: the person who ran it cannot escalate a
//! call, only rerun it with other flags.

use std::io::Write;

use actix::Actor;
use dsh::{AbortSignal, NoApprovalChannel, ToolCall};
use serde_json::json;

use crate::flags::RuntimeFlags;
use crate::signals;

/// What `dsh run` prints where the model would read the escalation hint (docs/CONTRACT.md, "Front
/// ends").
pub const PERSON_HINT: &str = "[sandbox: dsh run cannot ask for approval; to allow it, rerun with \
     --sandbox danger-full-access, or with --writable-root DIR to let commands write DIR]";

pub async fn main(
    mut flags: RuntimeFlags,
    workdir: Option<String>,
    command: Vec<String>,
) -> Result<i32, String> {
    // One call and then the end: nothing could read a task a timeout moved to the background.
    flags.on_timeout = dsh::OnTimeout::Kill;
    let (mut interrupts, runtime) = flags.start_interruptible()?;
    let mut arguments = json!({"command": command.join(" "), "description": "dsh run"});
    if let Some(dir) = workdir {
        arguments["workdir"] = json!(dir);
    }
    let cancel = AbortSignal::new();
    // One-shot runs have nobody to ask: an escalation gets the "no approval channel" text
    // (docs/CONTRACT.md, "Front ends").
    let call = runtime.call(
        ToolCall::new("bash", arguments)
            .with_cancel(cancel.clone())
            .with_approver(NoApprovalChannel.start().recipient()),
    );
    tokio::pin!(call);
    // SIGINT/SIGTERM aborts the call; everything is dead within `--shutdown-grace-ms` of the
    // signal (not after the call's own SIGTERM-to-SIGKILL grace), and a second signal kills at once.
    let (result, deadline) = tokio::select! {
        result = &mut call => (result, interrupts.deadline()),
        () = interrupts.next() => {
            let deadline = interrupts.deadline();
            cancel.abort("interrupted");
            (signals::within_grace(&runtime, &mut interrupts, deadline, call).await, deadline)
        }
    };
    signals::within_grace(&runtime, &mut interrupts, deadline, runtime.shutdown()).await;
    let mut stdout = std::io::stdout().lock();
    let text = result
        .text
        .replace(dsh::actors::tool_bash::ESCALATION_HINT, PERSON_HINT);
    let _ = stdout.write_all(text.as_bytes());
    let _ = stdout.flush();
    Ok(if result.is_error { 1 } else { 0 })
}
