//! [`Runtime`]: the `Send + Sync + Clone` handle on a running runtime, usable from any tokio code.
//! Built by [`RuntimeBuilder`] (`builder.rs`, wired in `compose.rs`); per-session work goes through
//! a `Session` (`session.rs`); shutdown is sequenced in `shutdown.rs`.

use std::path::PathBuf;
use std::sync::Arc;

use actix::prelude::*;
use dsh_bash::{BashExecRequest, Resolver, RestartPolicy, SandboxMode, Start, Supervised};
use dsh_process::{
    AdmissionCost, ContainmentMode, GetAdmissionCost, ManagerStats, ProcessManager, Stats,
};
use dsh_tasks::{
    AgentRef, GetRetentionLoad, ListTasks, Register, ReleaseOwner, RetentionLoad, TaskRegistry,
    TaskSnapshot,
};
use dsh_tool_bash::{
    SetSessionSandboxMode, SetSessionWorkspace, StandingSandboxPolicy, TaskId, ToolBash, ToolCall,
    ToolDefinition, ToolError, ToolResult,
};

use crate::builder::RuntimeBuilder;
use crate::error::RuntimeError;
use crate::shutdown::{ShutdownRuntime, ShutdownSequencer};

/// A handle to a running dsh runtime. `Send + Sync + Clone`; dropping the last clone shuts it down.
#[derive(Clone)]
pub struct Runtime {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) tool: Addr<ToolBash>,
    pub(crate) registry: Addr<TaskRegistry>,
    pub(crate) manager: Addr<ProcessManager>,
    pub(crate) sequencer: Addr<ShutdownSequencer>,
    pub(crate) definitions: Vec<ToolDefinition>,
    pub(crate) containment: ContainmentMode,
    /// The executor's resolver and its background starts, for supervised tasks.
    pub(crate) resolver: Resolver,
    pub(crate) start: Recipient<Start>,
    pub(crate) sandbox_mode: Option<SandboxMode>,
    /// The sandbox provider, told when a session is released.
    pub(crate) provider: Option<std::sync::Arc<dyn dsh_bash::SandboxProvider>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Cannot await here; the shutdown sequencer kills and joins everything on its own.
        self.sequencer.do_send(ShutdownRuntime);
    }
}

impl Runtime {
    /// A builder with every setting at its default; [`RuntimeBuilder::start`] starts the runtime.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
    }

    /// Runs one tool call to completion and returns what the model should see. A call without a
    /// caller belongs to no session (a session's calls go through `Session::call`).
    pub async fn call(&self, call: ToolCall) -> ToolResult {
        match self.inner.tool.send(call).await {
            Ok(result) => result,
            Err(_) => ToolResult::failed(ToolError::ShutDown),
        }
    }

    /// The tools to offer a model (see [`ToolDefinition::openai`], `anthropic`, `mcp`).
    pub fn tool_definitions(&self) -> &[ToolDefinition] {
        &self.inner.definitions
    }

    /// The background tasks a caller may see, in start order.
    pub async fn tasks(&self, session_id: Option<&str>) -> Vec<TaskSnapshot> {
        self.inner
            .registry
            .send(ListTasks {
                caller: session_id.map(Into::into),
            })
            .await
            .unwrap_or_default()
    }

    /// Kills and joins a session's background tasks and forgets them (e.g. when an agent ends),
    /// with its standing sandbox mode and workspace: a later session with the same id starts from
    /// the runtime's defaults.
    pub async fn release_session(&self, session_id: &str) {
        let _ = self
            .inner
            .registry
            .send(ReleaseOwner {
                session_id: session_id.into(),
            })
            .await;
        // Without a sandbox there is nothing to forget (and the mode message says so).
        let _ = self.set_session_sandbox_mode(session_id, None).await;
        let _ = self.set_session_workspace(session_id, None).await;
        // Its tasks are gone: what the sandbox kept for it (the local provider: its namespace,
        // terminals and temp) may go too.
        if let Some(provider) = &self.inner.provider {
            provider.release_session(session_id);
        }
    }

    /// Starts `command` as a background task that `policy` restarts when it ends (host-started
    /// tasks only: a model's tasks never restart). `owner` owns the task and hears when the
    /// supervisor gives up; `None` leaves it open to every caller (see also
    /// `Session::start_supervised`). Returns the task id.
    pub async fn start_supervised(
        &self,
        command: BashExecRequest,
        policy: RestartPolicy,
        owner: Option<AgentRef>,
    ) -> Result<TaskId, RuntimeError> {
        let mut request = command;
        request.session = owner.as_ref().map(|o| o.session_id.clone());
        if request.sandbox_policy.is_none() {
            // Confined as the owner's own commands are: its session's mode and workspace.
            request.sandbox_policy = self
                .inner
                .tool
                .send(StandingSandboxPolicy {
                    session: request.session.clone(),
                })
                .await
                .map_err(|_| RuntimeError::ShutDown)?;
        }
        let label = request.command.clone();
        let spec = (self.inner.resolver)(request)?;
        let supervised =
            Supervised::start(self.inner.start.clone(), spec, policy, owner.clone()).await?;
        let id = self
            .inner
            .registry
            .send(Register {
                kind: "bash".into(),
                label,
                owner,
                producer: Box::new(supervised.clone()),
            })
            .await
            .map_err(|_| RuntimeError::RegistryGone)??;
        supervised.set_task_id(&id);
        Ok(TaskId::from(id))
    }

    /// The containment mode in force.
    pub fn containment_mode(&self) -> ContainmentMode {
        self.inner.containment
    }

    /// The default sandbox mode, when commands run under the sandbox executor.
    pub fn sandbox_mode(&self) -> Option<SandboxMode> {
        self.inner.sandbox_mode
    }

    /// Sets (`Some`) or clears (`None`) a session's standing sandbox mode: its ordinary calls run
    /// under it and escalations widen from it. Never shown to the model. Fails when the runtime does
    /// not sandbox.
    pub async fn set_session_sandbox_mode(
        &self,
        session_id: &str,
        mode: Option<SandboxMode>,
    ) -> Result<(), RuntimeError> {
        self.inner
            .tool
            .send(SetSessionSandboxMode {
                session: session_id.into(),
                mode,
            })
            .await
            .map_err(|_| RuntimeError::ShutDown)?
            .map_err(RuntimeError::Tool)
    }

    /// Sets (`Some`) or clears (`None`) the workspace root of one agent session for the sandbox:
    /// under `workspace-write` its commands may write there instead of the runtime's `cwd` (a
    /// front end that learns each session's workspace, as MCP does from the client's roots). Does
    /// nothing without a sandbox.
    pub async fn set_session_workspace(
        &self,
        session_id: &str,
        root: Option<PathBuf>,
    ) -> Result<(), RuntimeError> {
        self.inner
            .tool
            .send(SetSessionWorkspace {
                session: session_id.into(),
                root,
            })
            .await
            .map_err(|_| RuntimeError::ShutDown)
    }

    /// Process counters (live, queued, peak, stragglers).
    pub async fn process_stats(&self) -> ManagerStats {
        self.inner.manager.send(Stats).await.unwrap_or_default()
    }

    /// What the finished background tasks hold now (how many, their memory as retention counts it,
    /// their spill files), as the retention limits see it.
    pub async fn retention_load(&self) -> RetentionLoad {
        self.inner
            .registry
            .send(GetRetentionLoad)
            .await
            .unwrap_or_default()
    }

    /// Admission work so far: spawns submitted, policy decisions, time spent.
    pub async fn admission_cost(&self) -> AdmissionCost {
        self.inner
            .manager
            .send(GetAdmissionCost)
            .await
            .unwrap_or_default()
    }

    /// SIGKILLs every process group at once without waiting (for a second interrupt). Follow with
    /// [`Runtime::shutdown`] to join them.
    pub fn kill_all_now(&self) {
        self.inner.manager.do_send(dsh_process::KillAllNow);
    }

    /// The tool actor, for hosts that talk to it by message.
    pub fn tool_addr(&self) -> Addr<ToolBash> {
        self.inner.tool.clone()
    }

    /// Kills and joins every task and process, then stops the runtime's own thread if it has one.
    /// Idempotent; later calls return once the first has finished.
    pub async fn shutdown(&self) {
        let _ = self.inner.sequencer.send(ShutdownRuntime).await;
    }
}
