//! `dsh mcp`: the four tools over the Model Context Protocol on stdio.
//!
//! One connection is one agent session with its own id, so `DSH_SESSION_ID` and task ownership work.
//! Completion notices for the session are appended as an extra text block to its next tool result and
//! also sent as a log notification when the protocol version and the client's level allow it
//! (`mcp/log_gate.rs`). MCP request cancellation aborts a foreground call; a `progressToken` gets progress
//! notifications while the call runs (`mcp/progress.rs`). Results carry `structuredContent` beside the
//! unchanged text. Without `--cwd`, the client's first `file://` root is the workspace
//! (`mcp/workspace.rs`). Malformed JSON-RPC is answered before rmcp sees it (`mcp/jsonrpc_errors.rs`,
//! `mcp/stdio.rs`). Sandbox escalations are approved through `elicitation/create` when the client
//! declared it (`mcp/approvals.rs`). A session that began with `initialize` is asked for roots and
//! approvals with requests of the server's own; a 2026-07-28 session, which has none, through input
//! rounds of its calls (`mcp/input_rounds.rs`, `mcp/runs.rs`). A long `bash` call of a client with the
//! Tasks extension becomes an MCP task (`mcp/foreground.rs`, `mcp/tasks.rs`). At most
//! `--max-in-flight` `tools/call` requests are handed to rmcp at once (`mcp/stdio.rs`, `flow.rs`);
//! rmcp serves the server wrapped in `in_flight::Counted`, which marks the end of each.
//!
//! The handler itself (`mcp/server.rs`) is the one `dsh serve` serves over HTTP (`http/`); this
//! file is its stdio connection.

mod approvals;
mod foreground;
mod in_flight;
mod input_rounds;
pub mod jsonrpc_errors;
mod log_gate;
mod logging;
pub mod progress;
mod roots;
mod runs;
mod server;
mod session;
mod stdio;
mod tasks;
mod tools;
mod workspace;

use dsh::actors::process::lock_unpoisoned;
use std::sync::Arc;
use std::time::Duration;

use rmcp::ServiceExt;

use crate::flags::RuntimeFlags;
use crate::mcp::in_flight::Counted;
use crate::mcp::session::new_session_id;

use crate::signals;

pub use crate::mcp::foreground::Foreground;
pub use crate::mcp::server::{DshServer, Sessions};
pub use crate::mcp::session::{Session, SessionSettings};
pub use crate::mcp::tools::mcp_tools;

/// How long a call waits for the client to answer `roots/list` before running without a workspace,
/// unless `--roots-timeout-ms` says otherwise.
pub const DEFAULT_ROOTS_TIMEOUT_MS: u64 = 5_000;

pub use crate::mcp::tasks::DEFAULT_TASK_AFTER_MS;

/// The settings of `dsh mcp` beside the runtime's.
pub struct McpOptions {
    /// `--max-line-bytes`.
    pub max_line_bytes: usize,
    /// `--max-in-flight`.
    pub max_in_flight: usize,
    /// `--progress-interval-ms`.
    pub progress_interval: Duration,
    /// `--roots-timeout-ms`.
    pub roots_timeout: Duration,
    /// `--task-after-ms`.
    pub task_after: Duration,
}

pub async fn main(flags: RuntimeFlags, options: McpOptions) -> Result<i32, String> {
    let McpOptions {
        max_line_bytes,
        max_in_flight,
        progress_interval,
        roots_timeout,
        task_after,
    } = options;
    let (mut interrupts, runtime) = flags.start_interruptible()?;
    let session_id = new_session_id();
    let session = Session::open(
        &runtime,
        &actix::Arbiter::current(),
        session_id.clone(),
        SessionSettings {
            max_in_flight,
            max_finished_tasks: flags.max_finished_tasks,
            progress_interval,
            roots_timeout,
            cwd_settled: flags.cwd.is_some(),
        },
    );
    let peer_slot = session.peer.clone();
    let stdio = stdio::spawn(max_line_bytes, max_in_flight);
    let server = DshServer {
        tools: Arc::new(mcp_tools(&runtime)),
        sessions: Arc::new(Foreground {
            session,
            progress_interval,
            task_after,
        }),
    };
    let server = Counted {
        inner: server,
        in_flight: stdio.in_flight.clone(),
    };
    tracing::info!(session = %session_id, "serving MCP on stdio");
    let disconnected = stdio.disconnected.clone();
    let input_closed = stdio.input_closed.clone();
    let served = tokio::select! {
        served = server.serve((stdio.read, stdio.write)) => served,
        () = disconnected.cancelled() => Err(rmcp::service::ServerInitializeError::ConnectionClosed(
            "the client closed our stdout".into(),
        )),
        () = interrupts.next() => Err(rmcp::service::ServerInitializeError::ConnectionClosed(
            "interrupted".into(),
        )),
    };
    let service = match served {
        Ok(service) => service,
        Err(err) => {
            // No session was established: nothing can have been started, but be thorough.
            tracing::info!(%err, "MCP session not established");
            signals::shutdown(&runtime, &mut interrupts).await;
            stdio.flush.flush().await;
            return Ok(0);
        }
    };
    *lock_unpoisoned(&peer_slot) = Some(service.peer().clone());
    let cancel = service.cancellation_token();
    let waiting = service.waiting();
    tokio::pin!(waiting);
    let ended = tokio::select! {
        quit = &mut waiting => {
            tracing::info!(?quit, "MCP connection ended");
            true
        }
        () = interrupts.next() => {
            tracing::info!("interrupted; shutting down");
            false
        }
        () = disconnected.cancelled() => {
            tracing::info!("the client closed our stdout; shutting down");
            false
        }
        // MCP's stdio shutdown: every running call's command is killed now, not after rmcp's wait
        // for its answer, and nothing is answered after the end of input.
        () = input_closed.cancelled() => {
            tracing::info!("the client closed our stdin; shutting down");
            false
        }
    };
    if !ended {
        cancel.cancel();
    }
    signals::shutdown(&runtime, &mut interrupts).await;
    *lock_unpoisoned(&peer_slot) = None;
    if !ended {
        let _ = tokio::time::timeout(Duration::from_secs(5), waiting).await;
    }
    stdio.flush.flush().await;
    Ok(0)
}
