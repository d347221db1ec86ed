//! `dsh mcp`: the three tools over the Model Context Protocol on stdio.
//!
//! One connection is one agent session with its own id, so `DSH_SESSION_ID` and task ownership work.
//! Completion notices for the session are appended as an extra text block to its next tool result and
//! also sent as a log notification when the protocol version and the client's level allow it
//! (`mcp/log_gate.rs`). MCP request cancellation aborts a foreground call; a `progressToken` gets progress
//! notifications while the call runs (`mcp/progress.rs`). Results carry `structuredContent` beside the
//! unchanged text. Without `--cwd`, the client's first `file://` root is the workspace (`mcp/roots.rs`).
//! Malformed JSON-RPC is answered before rmcp sees it (`mcp/jsonrpc_errors.rs`, `mcp/stdio.rs`).
//! Sandbox escalations are approved through `elicitation/create` when the client declared it
//! (`mcp/approvals.rs`). At most `--max-in-flight` `tools/call` requests are handed to rmcp at once
//! (`mcp/stdio.rs`, `flow.rs`); rmcp serves the server wrapped in `in_flight::Counted`, which
//! marks the end of each.

mod approvals;
mod in_flight;
mod jsonrpc_errors;
mod log_gate;
pub mod progress;
mod roots;
mod stdio;
mod tools;

use dsh::actors::process::lock_unpoisoned;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh::actors::tool_bash::OutputPeek;
use dsh::{AbortSignal, ToolCall};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerConfig, Tool,
};
use rmcp::service::{NotificationContext, Peer, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::Value;
use tokio::sync::watch;

use crate::flags::RuntimeFlags;
use crate::mcp::in_flight::Counted;
use crate::mcp::log_gate::LogGate;
use crate::mcp::roots::{apply_workspace, file_uri_path, usable_root};
use crate::mcp::tools::{INSTRUCTIONS, mcp_tools, server_info};
use crate::notices::forwarder;
use crate::signals;

/// How long a call waits for the client to answer `roots/list` before running without a workspace.
const ROOTS_WAIT: Duration = Duration::from_secs(5);

/// The connection's session: its agent identity and the notices not yet shown to the model.
struct Session {
    /// The runtime's handle on this connection's session.
    handle: dsh::Session,
    /// Asks the client through `elicitation/create` (used only when it declared the capability).
    approver: actix::Recipient<dsh::ApprovalRequest>,
    pending: Arc<Mutex<Vec<String>>>,
    logs: Arc<LogGate>,
    /// `None` while the client's roots are being asked for; then the workspace root, if any.
    workspace: watch::Receiver<Option<Option<PathBuf>>>,
    workspace_tx: Arc<watch::Sender<Option<Option<PathBuf>>>>,
    /// The roots were asked for (at `initialized`, or at the first call of a session without one).
    roots_requested: AtomicBool,
    /// How many times the roots were asked for; each answer is numbered by the request it answers.
    roots_asked: AtomicU64,
    /// The number of the answer applied last. Held while an answer is applied, so the sandbox's
    /// workspace and the published one change together, and an older answer that arrives after a
    /// newer one is dropped.
    roots_applied: Arc<tokio::sync::Mutex<u64>>,
}

#[derive(Clone)]
struct DshServer {
    session: Arc<Session>,
    tools: Arc<Vec<Tool>>,
    progress_interval: Duration,
    /// No `--cwd`: the workspace comes from the client's roots.
    uses_roots: bool,
}

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

impl DshServer {
    /// Asks for the roots once per session, if they decide the workspace.
    fn ensure_roots(&self, peer: &Peer<RoleServer>) {
        if self.uses_roots && !self.session.roots_requested.swap(true, Ordering::SeqCst) {
            self.refresh_roots(peer.clone());
        }
    }

    /// The workspace root, waiting (bounded) for the client's answer to `roots/list`.
    async fn workspace(&self) -> Option<PathBuf> {
        let mut workspace = self.session.workspace.clone();
        let ready = tokio::time::timeout(ROOTS_WAIT, workspace.wait_for(Option::is_some)).await;
        match ready {
            Ok(Ok(root)) => root.clone().flatten(),
            _ => None,
        }
    }

    /// Asks the client for its roots (when it has any and `--cwd` was not given) and publishes the
    /// first `file://` one.
    #[allow(deprecated, reason = "roots are how MCP clients name the workspace")]
    fn refresh_roots(&self, peer: Peer<RoleServer>) {
        let tx = self.session.workspace_tx.clone();
        let session = self.session.handle.clone();
        let offers_roots = peer
            .peer_info()
            .is_some_and(|info| info.capabilities.roots.is_some());
        if !offers_roots {
            tx.send_replace(Some(None));
            return;
        }
        let asked = self.session.roots_asked.fetch_add(1, Ordering::SeqCst) + 1;
        let applied = self.session.roots_applied.clone();
        tokio::spawn(async move {
            let listed = tokio::time::timeout(ROOTS_WAIT, peer.list_roots()).await;
            let root = match listed {
                Ok(Ok(result)) => result.roots.iter().find_map(|r| file_uri_path(&r.uri)),
                Ok(Err(err)) => {
                    tracing::info!(%err, "the client did not list its roots");
                    None
                }
                Err(_) => {
                    tracing::info!("the client did not answer roots/list in time");
                    None
                }
            };
            let root = root.as_deref().and_then(usable_root);
            let mut applied = applied.lock().await;
            if *applied > asked {
                tracing::info!(?root, "an older roots/list answer arrived late; dropped");
                return;
            }
            *applied = asked;
            tracing::info!(?root, "workspace from the client's roots");
            // The sandbox's writable workspace follows (or falls back to the server's own when the
            // roots went away), before any call is let through.
            if let Err(err) = session.set_workspace(root.clone()).await {
                tracing::warn!(%err, "cannot set the session's sandbox workspace");
            }
            tx.send_replace(Some(root));
        });
    }
}

impl ServerHandler for DshServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(logging::capabilities())
            .with_server_info(server_info())
            .with_instructions(INSTRUCTIONS)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.ensure_roots(&context.peer);
    }

    async fn on_roots_list_changed(&self, context: NotificationContext<RoleServer>) {
        if self.uses_roots {
            self.refresh_roots(context.peer);
        }
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
        let mut arguments = request
            .arguments
            .map(Value::Object)
            .unwrap_or_else(|| Value::Object(Default::default()));
        self.ensure_roots(&context.peer);
        if name == "bash"
            && let Some(root) = self.workspace().await
        {
            apply_workspace(&mut arguments, &root);
        }
        let cancel = AbortSignal::new();
        let mut guard = AbortOnDrop(Some(cancel.clone()));
        let peek = OutputPeek::new();
        let mut call = ToolCall::new(name, arguments)
            .with_cancel(cancel.clone())
            .with_peek(peek.clone());
        if approvals::client_elicits(&context.peer) {
            call = call.with_approver(self.session.approver.clone());
        }
        let _ticker = context.meta.get_progress_token().map(|token| {
            progress::start(context.peer.clone(), token, peek, self.progress_interval)
        });
        let running = self.session.handle.call(call);
        tokio::pin!(running);
        let result = tokio::select! {
            result = &mut running => result,
            () = context.ct.cancelled() => {
                cancel.abort("cancelled by the MCP client");
                running.await
            }
        };
        guard.0 = None;
        let mut content = vec![ContentBlock::text(result.text)];
        let notices = std::mem::take(&mut *lock_unpoisoned(&self.session.pending));
        if !notices.is_empty() {
            content.push(ContentBlock::text(notices.join("\n")));
        }
        let mut reply = if result.is_error {
            CallToolResult::error(content)
        } else {
            CallToolResult::success(content)
        };
        reply.structured_content = result.structured;
        Ok(reply.into())
    }
}

/// A session id for this connection: unique per process and connection.
fn new_session_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("mcp-{}-{nanos:08x}", std::process::id())
}

/// MCP logging, deprecated by SEP-2577 but still how clients surface a server's messages; kept in one
/// place so it is easy to replace.
#[allow(
    deprecated,
    reason = "notices are also sent as MCP log notifications, as the issue asks"
)]
mod logging {
    use rmcp::RoleServer;
    use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam, ServerCapabilities};
    use rmcp::service::Peer;
    use serde_json::Value;

    use crate::mcp::log_gate::LogGate;

    pub fn capabilities() -> ServerCapabilities {
        ServerCapabilities::builder()
            .enable_tools()
            .enable_logging()
            .build()
    }

    /// Sends a notice at `info`, if the gate allows it now.
    pub fn send(peer: Peer<RoleServer>, gate: &LogGate, text: String) {
        if !gate.allows(LoggingLevel::Info) {
            return;
        }
        tokio::spawn(async move {
            let param =
                LoggingMessageNotificationParam::new(LoggingLevel::Info, Value::String(text))
                    .with_logger("dsh");
            if let Err(err) = peer.notify_logging_message(param).await {
                tracing::debug!(%err, "could not send a notice as a log notification");
            }
        });
    }
}

pub async fn main(
    flags: RuntimeFlags,
    max_line_bytes: usize,
    max_in_flight: usize,
    progress_interval: Duration,
) -> Result<i32, String> {
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
    // With --cwd the workspace is settled; otherwise it waits for the client's roots.
    let (workspace_tx, workspace) = watch::channel(flags.cwd.as_ref().map(|_| None));
    let stdio = stdio::spawn(max_line_bytes, max_in_flight);
    let server = DshServer {
        tools: Arc::new(mcp_tools(&runtime)),
        session: Arc::new(Session {
            handle,
            approver: actix::Actor::start(approvals::McpApprover {
                peer: peer_slot.clone(),
            })
            .recipient(),
            pending,
            logs,
            workspace,
            workspace_tx: Arc::new(workspace_tx),
            roots_requested: AtomicBool::new(false),
            roots_asked: AtomicU64::new(0),
            roots_applied: Arc::default(),
        }),
        progress_interval,
        uses_roots: flags.cwd.is_none(),
    };
    let server = Counted {
        inner: server,
        in_flight: stdio.in_flight.clone(),
    };
    tracing::info!(session = %session_id, "serving MCP on stdio");
    let disconnected = stdio.disconnected.clone();
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
