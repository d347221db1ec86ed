//! The MCP server handler both transports serve: `dsh mcp` on stdio (one connection, one
//! session) and `dsh serve` over Streamable HTTP (`http/`, a session per identity). What differs
//! between them is only where a request's session comes from, so that is a trait
//! ([`Sessions`]) and the handler is written once.

use std::sync::Arc;

use dsh::ToolCall;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, Extensions, GetTaskParams,
    GetTaskResult, ListToolsResult, PaginatedRequestParams, ServerConfig, Tool, UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;

use crate::mcp::approvals;
use crate::mcp::foreground::Foreground;
use crate::mcp::input_rounds::{self, Lifecycle, ROOTS};
use crate::mcp::logging;
use crate::mcp::roots::apply_workspace;
use crate::mcp::runs::Run;
use crate::mcp::tasks::Tasks;
use crate::mcp::tools::{INSTRUCTIONS, server_info};

/// Where a request's session comes from.
pub trait Sessions: Send + Sync + 'static {
    /// The session (and how its calls are driven) that the request with these extensions
    /// belongs to; an error refuses the request.
    fn of(&self, extensions: &Extensions) -> Result<Foreground, ErrorData>;
}

/// The stdio connection: every request is its one session's.
impl Sessions for Foreground {
    fn of(&self, _: &Extensions) -> Result<Foreground, ErrorData> {
        Ok(self.clone())
    }
}

/// The four tools over MCP, for the sessions `sessions` names.
#[derive(Clone)]
pub struct DshServer {
    /// The tools offered.
    pub tools: Arc<Vec<Tool>>,
    /// Where each request's session comes from.
    pub sessions: Arc<dyn Sessions>,
}

impl DshServer {
    /// The MCP tasks of the session the request with this context belongs to.
    fn tasks(&self, context: &RequestContext<RoleServer>) -> Result<Arc<Tasks>, ErrorData> {
        Ok(self.sessions.of(&context.extensions)?.session.tasks.clone())
    }
}

impl ServerHandler for DshServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(logging::capabilities())
            .with_server_info(server_info())
            .with_instructions(INSTRUCTIONS)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if let Ok(served) = self.sessions.of(&context.extensions) {
            served.session.workspace.ensure(&context.peer);
            served.session.attach(context.peer);
        }
    }

    async fn on_roots_list_changed(&self, context: NotificationContext<RoleServer>) {
        if let Ok(served) = self.sessions.of(&context.extensions) {
            served.session.workspace.changed(context.peer);
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
        let served = self.sessions.of(&context.extensions)?;
        served
            .session
            .logs
            .observe(context.protocol_version(), None);
        served.session.logs.set_level(request.level);
        Ok(())
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        self.tasks(&context)?
            .get(&request.task_id)
            .map_err(invalid_params)
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.tasks(&context)?
            .update(&request.task_id, &request.input_responses)
            .map_err(invalid_params)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.tasks(&context)?
            .cancel(&request.task_id)
            .map_err(invalid_params)
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
        let served = self.sessions.of(&context.extensions)?;
        #[allow(
            deprecated,
            reason = "the per-request log level opts a client into log messages"
        )]
        served
            .session
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
            let run = served
                .session
                .rounds
                .resume(state, &name, &arguments, request.input_responses.as_ref())
                .map_err(invalid_params)?;
            return Ok(served.drive(run, name, arguments, &context).await);
        }
        let lifecycle = Lifecycle::of(&context);
        let workspace = &served.session.workspace;
        let approver = match lifecycle {
            Lifecycle::Handshake => {
                workspace.ensure(&context.peer);
                approvals::client_elicits(&context.peer).then(|| served.session.approver())
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
                    .then(|| served.session.round_approver())
            }
        };
        let mut effective = arguments.clone();
        if name == "bash"
            && let Some(root) = workspace.current().await
        {
            apply_workspace(&mut effective, &root);
        }
        let asking = (lifecycle == Lifecycle::Inline && approver.is_some())
            .then_some(&served.session.rounds.asking);
        let mut call = ToolCall::new(name.clone(), effective);
        if let Some(approver) = approver {
            call = call.with_approver(approver);
        }
        let run = Run::start(&served.session.handle, call, asking);
        Ok(served.drive(run, name, arguments, &context).await)
    }
}

/// A refused request's -32602, with the reason.
fn invalid_params(err: impl std::fmt::Display) -> ErrorData {
    ErrorData::invalid_params(err.to_string(), None)
}
