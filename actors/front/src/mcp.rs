//! `dsh mcp`: the three tools over the Model Context Protocol on stdio.
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
//! Tasks extension becomes an MCP task (`mcp/foreground.rs`, `mcp/tasks.rs`). At most `--max-in-flight` `tools/call` requests are handed to rmcp at once
//! (`mcp/stdio.rs`, `flow.rs`); rmcp serves the server wrapped in `in_flight::Counted`, which
//! marks the end of each.

mod approvals;
mod foreground;
mod in_flight;
mod input_rounds;
mod jsonrpc_errors;
mod log_gate;
mod logging;
pub mod progress;
mod roots;
mod runs;
mod session;
mod stdio;
mod tasks;
mod tools;
mod workspace;

use dsh::actors::process::lock_unpoisoned;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh::ToolCall;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, GetTaskParams, GetTaskResult,
    ListToolsResult, PaginatedRequestParams, ServerConfig, Tool, UpdateTaskParams,
};
use rmcp::service::{NotificationContext, Peer, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::Value;

use crate::flags::RuntimeFlags;
use crate::mcp::foreground::Foreground;
use crate::mcp::in_flight::Counted;
use crate::mcp::input_rounds::{Lifecycle, ROOTS, RoundApprover, Rounds};
use crate::mcp::log_gate::LogGate;
use crate::mcp::roots::apply_workspace;
use crate::mcp::runs::Run;
use crate::mcp::session::{Session, new_session_id};
use crate::mcp::tasks::Tasks;
use crate::mcp::tools::{INSTRUCTIONS, mcp_tools, server_info};
use crate::mcp::workspace::Workspace;
use crate::notices::forwarder;
use crate::signals;

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

#[derive(Clone)]
struct DshServer {
    session: Arc<Session>,
    tools: Arc<Vec<Tool>>,
    foreground: Foreground,
}

impl ServerHandler for DshServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(logging::capabilities())
            .with_server_info(server_info())
            .with_instructions(INSTRUCTIONS)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.session.workspace.ensure(&context.peer);
    }

    async fn on_roots_list_changed(&self, context: NotificationContext<RoleServer>) {
        self.session.workspace.changed(context.peer);
    }

    #[allow(
        deprecated,
        reason = "logging/setLevel is part of the protocol versions dsh serves"
    )]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.session.logs.observe(context.protocol_version(), None);
        self.session.logs.set_level(request.level);
        Ok(())
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let tasks = &self.session.tasks;
        tasks.get(&request.task_id).map_err(invalid_params)
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let tasks = &self.session.tasks;
        tasks
            .update(&request.task_id, &request.input_responses)
            .map_err(invalid_params)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let tasks = &self.session.tasks;
        tasks.cancel(&request.task_id).map_err(invalid_params)
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.as_ref().clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        #[allow(
            deprecated,
            reason = "the per-request log level opts a client into log messages"
        )]
        self.session
            .logs
            .observe(context.protocol_version(), context.meta.log_level());
        let name = request.name.to_string();
        if !self.tools.iter().any(|tool| tool.name == name) {
            let available: Vec<&str> = self.tools.iter().map(|t| t.name.as_ref()).collect();
            return Err(ErrorData::invalid_params(
                format!(
                    "unknown tool \"{name}\"; available tools: {}",
                    available.join(", ")
                ),
                None,
            ));
        }
        let arguments = request
            .arguments
            .map(Value::Object)
            .unwrap_or_else(|| Value::Object(Default::default()));
        if let Some(state) = &request.request_state {
            let run = self
                .session
                .rounds
                .resume(state, &name, &arguments, request.input_responses.as_ref())
                .map_err(invalid_params)?;
            return Ok(self.foreground.drive(run, name, arguments, &context).await);
        }
        let lifecycle = Lifecycle::of(&context);
        let workspace = &self.session.workspace;
        let approver = match lifecycle {
            Lifecycle::Handshake => {
                workspace.ensure(&context.peer);
                approvals::client_elicits(&context.peer).then(|| self.session.approver.clone())
            }
            Lifecycle::Inline => {
                let capabilities = context.client_capabilities().unwrap_or_default();
                #[allow(deprecated, reason = "roots are how MCP clients name the workspace")]
                let offers_roots = capabilities.roots.is_some();
                let listed = request.input_responses.as_ref().and_then(|r| r.get(ROOTS));
                if let Some(listed) = listed {
                    workspace.apply_listed(listed).await;
                } else if workspace.needs_round(offers_roots) {
                    return Ok(input_rounds::ask_roots().into());
                }
                capabilities
                    .elicitation
                    .is_some()
                    .then(|| self.session.round_approver.clone())
            }
        };
        let mut effective = arguments.clone();
        if name == "bash"
            && let Some(root) = workspace.current().await
        {
            apply_workspace(&mut effective, &root);
        }
        let asking = (lifecycle == Lifecycle::Inline && approver.is_some())
            .then_some(&self.session.rounds.asking);
        let mut call = ToolCall::new(name.clone(), effective);
        if let Some(approver) = approver {
            call = call.with_approver(approver);
        }
        let run = Run::start(&self.session.handle, call, asking);
        Ok(self.foreground.drive(run, name, arguments, &context).await)
    }
}

/// A refused request's -32602, with the reason.
fn invalid_params(err: impl std::fmt::Display) -> ErrorData {
    ErrorData::invalid_params(err.to_string(), None)
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
    let pending = Arc::new(Mutex::new(Vec::new()));
    let logs = Arc::new(LogGate::default());
    let peer_slot: Arc<Mutex<Option<Peer<RoleServer>>>> = Arc::default();
    let session_id = new_session_id();
    let handle = {
        let (pending, peer_slot, logs) = (pending.clone(), peer_slot.clone(), logs.clone());
        let inbox = forwarder(move |notice| {
            lock_unpoisoned(&pending).push(notice.clone());
            if let Some(peer) = lock_unpoisoned(&peer_slot).clone() {
                logging::send(peer, &logs, notice);
            }
        });
        runtime.session(session_id.clone(), inbox)
    };
    let rounds = Arc::new(Rounds::new(
        session_id.clone(),
        max_in_flight,
        input_rounds::PARKED_FOR,
    ));
    let tasks = Arc::new(Tasks::new(
        session_id.clone(),
        max_in_flight,
        flags.max_finished_tasks,
        progress_interval.as_millis() as u64,
    ));
    let stdio = stdio::spawn(max_line_bytes, max_in_flight);
    let session = Arc::new(Session {
        approver: actix::Actor::start(approvals::McpApprover {
            peer: peer_slot.clone(),
        })
        .recipient(),
        round_approver: actix::Actor::start(RoundApprover {
            asking: rounds.asking.clone(),
        })
        .recipient(),
        rounds,
        tasks,
        pending,
        logs,
        // With --cwd the workspace is settled; otherwise it comes from the client's roots.
        workspace: Workspace::new(handle.clone(), flags.cwd.is_some(), roots_timeout),
        handle,
    });
    let server = DshServer {
        tools: Arc::new(mcp_tools(&runtime)),
        session: session.clone(),
        foreground: Foreground {
            session,
            progress_interval,
            task_after,
        },
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
