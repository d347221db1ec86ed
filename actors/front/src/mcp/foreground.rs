//! The foreground part of a `tools/call`: its run is driven until it ends, the client cancels it,
//! it asks for an approval in a 2026-07-28 session (parked for an input round,
//! `mcp/input_rounds.rs`), or — a `bash` call of a client with the Tasks extension — it runs past
//! `--task-after-ms` and becomes an MCP task (`mcp/tasks.rs`).

use std::sync::Arc;
use std::time::Duration;

use dsh::{AbortSignal, ApprovalOutcome};
use rmcp::RoleServer;
use rmcp::model::CallToolResponse;
use rmcp::service::RequestContext;
use serde_json::Value;

use crate::mcp::progress;
use crate::mcp::runs::{Run, Step};
use crate::mcp::session::Session;

/// Aborts the call if the handler future is dropped before it finished (the client went away or
/// cancelled and the transport dropped the request).
struct AbortOnDrop(Option<AbortSignal>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(signal) = self.0.take() {
            signal.abort("cancelled by the MCP client");
        }
    }
}

/// How the session's calls are driven.
#[derive(Clone)]
pub struct Foreground {
    pub session: Arc<Session>,
    /// `--progress-interval-ms`.
    pub progress_interval: Duration,
    /// A `bash` call of a client with the Tasks extension becomes a task after this long.
    pub task_after: Duration,
}

impl Foreground {
    /// Runs `run` until it ends, is cancelled, (2026-07-28) asks for an approval, which parks it
    /// and answers its request with the input round, or (a `bash` call of a client with the Tasks
    /// extension) runs past `--task-after-ms`, which makes it a task.
    pub async fn drive(
        &self,
        mut run: Run,
        name: String,
        arguments: Value,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResponse {
        let task_after = (name == "bash"
            && context
                .client_capabilities()
                .is_some_and(|c| c.supports_tasks()))
        .then_some(self.task_after);
        let mut stays = false;
        if task_after == Some(Duration::ZERO) {
            match self.become_task(run) {
                Ok(handle) => return handle,
                Err(back) => (run, stays) = (back, true),
            }
        }
        let becomes_task = async {
            match task_after {
                Some(after) => tokio::time::sleep(after).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(becomes_task);
        let mut guard = AbortOnDrop(Some(run.cancel.clone()));
        let mut ticker = context.meta.get_progress_token().map(|token| {
            progress::start(
                context.peer.clone(),
                token,
                run.peek.clone(),
                self.progress_interval,
            )
        });
        let mut cancelled = false;
        loop {
            let step = tokio::select! {
                step = run.step() => step,
                () = context.ct.cancelled(), if !cancelled => {
                    run.cancel.abort("cancelled by the MCP client");
                    cancelled = true;
                    continue;
                }
                () = &mut becomes_task, if !cancelled && !stays => {
                    match self.become_task(run) {
                        Ok(handle) => {
                            guard.0 = None;
                            return handle;
                        }
                        Err(back) => (run, stays) = (back, true),
                    }
                    continue;
                }
            };
            match step {
                Step::Done(result) => {
                    guard.0 = None;
                    if let Some(ticker) = ticker.take() {
                        ticker.stop().await;
                    }
                    return self.session.reply(result).into();
                }
                Step::Asks(ask) if cancelled => {
                    let _ = ask.answer.send(ApprovalOutcome::Cancelled);
                }
                Step::Asks(ask) => {
                    guard.0 = None;
                    return self.session.rounds.park(name, arguments, run, ask).into();
                }
            }
        }
    }

    /// Hands `run` to the session's tasks and answers with the task handle, or gives it back when
    /// as many tasks run as may.
    fn become_task(&self, run: Run) -> Result<CallToolResponse, Run> {
        let session = self.session.clone();
        let tasks = &self.session.tasks;
        let handle = tasks.start(run, move |result| session.reply(result))?;
        Ok(CallToolResponse::Task(handle))
    }
}
