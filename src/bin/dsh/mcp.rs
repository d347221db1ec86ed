//! `dsh mcp`: the three tools over the Model Context Protocol on stdio.
//!
//! One connection is one agent session with its own id, so `DSH_SESSION_ID` and task ownership work.
//! Completion notices for the session are appended as an extra text block to its next tool result and
//! also sent at once as a log notification. MCP request cancellation aborts a foreground call. The tools'
//! schemas and argument errors are dsh's own (not derived), so every client sees the seeds' contract.

use std::sync::{Arc, Mutex};

use dsh::{AbortSignal, AgentRef, Runtime, ToolCall, lock_unpoisoned};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerConfig, Tool,
};
use rmcp::service::{Peer, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::Value;

use crate::flags::RuntimeFlags;
use crate::notices::session_agent;
use crate::signals::{self, Interrupts};

/// The connection's session: its agent identity and the notices not yet shown to the model.
struct Session {
    agent: AgentRef,
    pending: Arc<Mutex<Vec<String>>>,
}

#[derive(Clone)]
struct DshServer {
    runtime: Runtime,
    session: Arc<Session>,
    tools: Arc<Vec<Tool>>,
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

impl ServerHandler for DshServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(logging::capabilities())
            .with_server_info(Implementation::new("dsh-bash", env!("CARGO_PKG_VERSION")))
            .with_instructions(dsh::PROMPT_SECTION)
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
        let arguments = request
            .arguments
            .map(Value::Object)
            .unwrap_or_else(|| Value::Object(Default::default()));
        let cancel = AbortSignal::new();
        let mut guard = AbortOnDrop(Some(cancel.clone()));
        let call = ToolCall::new(request.name.to_string(), arguments)
            .with_caller(self.session.agent.clone())
            .with_cancel(cancel.clone());
        let running = self.runtime.call(call);
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
        let result = if result.is_error {
            CallToolResult::error(content)
        } else {
            CallToolResult::success(content)
        };
        Ok(result.into())
    }
}

/// Turns our tool definitions into MCP tools.
fn mcp_tools(runtime: &Runtime) -> Vec<Tool> {
    runtime
        .tool_definitions()
        .iter()
        .map(|def| {
            let schema = def.input_schema.as_object().cloned().unwrap_or_default();
            Tool::new(def.name, def.description.clone(), Arc::new(schema))
        })
        .collect()
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

    pub fn capabilities() -> ServerCapabilities {
        ServerCapabilities::builder()
            .enable_tools()
            .enable_logging()
            .build()
    }

    pub fn send(peer: Peer<RoleServer>, text: String) {
        actix::spawn(async move {
            let param =
                LoggingMessageNotificationParam::new(LoggingLevel::Info, Value::String(text))
                    .with_logger("dsh-bash");
            if let Err(err) = peer.notify_logging_message(param).await {
                tracing::debug!(%err, "could not send a notice as a log notification");
            }
        });
    }
}

pub async fn main(flags: RuntimeFlags) -> Result<i32, String> {
    let mut interrupts = Interrupts::install();
    let runtime = flags.start()?;
    let pending = Arc::new(Mutex::new(Vec::new()));
    let peer_slot: Arc<Mutex<Option<Peer<RoleServer>>>> = Arc::default();
    let session_id = new_session_id();
    let agent = {
        let (pending, peer_slot) = (pending.clone(), peer_slot.clone());
        session_agent(session_id.clone(), move |notice| {
            lock_unpoisoned(&pending).push(notice.clone());
            if let Some(peer) = lock_unpoisoned(&peer_slot).clone() {
                logging::send(peer, notice);
            }
        })
    };
    let server = DshServer {
        tools: Arc::new(mcp_tools(&runtime)),
        runtime: runtime.clone(),
        session: Arc::new(Session { agent, pending }),
    };
    tracing::info!(session = %session_id, "serving MCP on stdio");
    let service = server
        .serve(rmcp::transport::stdio_pipes())
        .await
        .map_err(|e| format!("MCP handshake failed: {e}"))?;
    *lock_unpoisoned(&peer_slot) = Some(service.peer().clone());
    let cancel = service.cancellation_token();
    let waiting = service.waiting();
    tokio::pin!(waiting);
    tokio::select! {
        quit = &mut waiting => tracing::info!(?quit, "MCP connection ended"),
        () = interrupts.next() => {
            tracing::info!("interrupted; shutting down");
            cancel.cancel();
        }
    }
    signals::shutdown(&runtime, &mut interrupts).await;
    Ok(0)
}
