//! The runtime facade: builds the actors, exposes a thread-safe handle, and shuts everything down in
//! order (tasks first, so no notice is sent for work the shutdown kills; then every process group).

use std::path::PathBuf;
use std::sync::Arc;

use actix::prelude::*;
use dsh_bash::sandbox::{LocalSandboxConfig, LocalSandboxProvider};
use dsh_bash::{
    BashConfig, BashExecRequest, ExecError, LocalBashExecutor, OnTimeout, ProcessPolicy, Resolver,
    RestartPolicy, SandboxBashExecutor, SandboxMode, SandboxPolicy, SandboxPolicyResolver,
    SandboxProvider, Start, Supervised, sandbox_unavailable_text,
};
use dsh_process::{
    AdmissionCost, ContainmentConfig, ContainmentError, ContainmentMode, GetAdmissionCost,
    ManagerConfig, ManagerStats, MaxConcurrent, MaxPerSession, PolicyStack, ProcessManager, Stats,
    TaskLimits, WatchdogCommand,
};
use dsh_tasks::{
    AgentRef, GetRetentionLoad, ListTasks, Register, RegistryConfig, ReleaseOwner, RetentionLoad,
    RetentionPolicy, TaskRegistry, TaskSnapshot,
};
use dsh_tool_bash::{
    ExecutorRef, SetSessionSandboxMode, SetSessionWorkspace, StandingSandboxPolicy, ToolBash,
    ToolBashConfig, ToolCall, ToolDefinition, ToolResult, resolve_dsh_home,
};
use tokio::sync::oneshot;

/// Why a runtime could not start.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// A bash setting was refused (`bash-local: <key> must be a positive finite number`).
    #[error(transparent)]
    Config(#[from] ExecError),
    /// The operating system would not start the thread the actors run on.
    #[error("cannot start the runtime thread: {0}")]
    Thread(std::io::Error),
    /// The actor thread ended without saying whether the actors started.
    #[error("the runtime thread exited before it was ready")]
    ThreadExited,
    /// The requested containment mode or a per-task limit is impossible on this host.
    #[error(transparent)]
    Containment(#[from] ContainmentError),
    /// A confined sandbox mode was asked for and no backend can give it here (the seeds'
    /// fail-closed text), or the sandbox settings are invalid.
    #[error("{0}")]
    Sandbox(String),
}

/// Where confinement comes from.
enum SandboxSource {
    /// The host's backends, chosen by probing with this config.
    Local(LocalSandboxConfig),
    /// A provider the host built (already probed, or a custom one).
    Provider(Arc<dyn SandboxProvider>),
}

/// Every setting of a runtime. Defaults are the seeds' (timeout 120 s, max 600 s, 64 000 bytes per
/// stream in memory, 64 MiB per spill file, grace 3 s).
pub struct RuntimeBuilder {
    bash: BashConfig,
    dsh_home: Option<PathBuf>,
    background: bool,
    spill_dir: Option<PathBuf>,
    keep_spill: bool,
    max_concurrent: Option<usize>,
    per_session: Option<MaxPerSession>,
    /// The host's own policies, in the order added.
    policies: Vec<Box<dyn ProcessPolicy>>,
    /// The host's own retention policies, in the order added.
    retention_policies: Vec<Box<dyn RetentionPolicy>>,
    registry: RegistryConfig,
    containment: ContainmentConfig,
    sandbox: Option<(SandboxMode, SandboxSource)>,
}

impl Default for RuntimeBuilder {
    fn default() -> Self {
        Self {
            bash: BashConfig::default(),
            dsh_home: None,
            background: true,
            spill_dir: None,
            keep_spill: false,
            max_concurrent: None,
            per_session: None,
            policies: Vec::new(),
            retention_policies: Vec::new(),
            registry: RegistryConfig::default(),
            containment: ContainmentConfig::default(),
            sandbox: None,
        }
    }
}

impl RuntimeBuilder {
    /// The workspace: default working directory, and the base of relative `workdir`s.
    pub fn cwd(mut self, cwd: impl Into<PathBuf>) -> Self {
        self.bash.cwd = Some(cwd.into());
        self
    }
    /// The default foreground timeout, in milliseconds.
    pub fn timeout_ms(mut self, ms: u64) -> Self {
        self.bash.timeout_ms = ms;
        self
    }
    /// The cap on a call's own timeout, in milliseconds.
    pub fn max_timeout_ms(mut self, ms: u64) -> Self {
        self.bash.max_timeout_ms = ms;
        self
    }
    /// The in-memory cap per stream, in bytes; beyond it the tail is kept and the whole stream spills.
    pub fn max_output_bytes(mut self, bytes: u64) -> Self {
        self.bash.max_output_bytes = bytes;
        self
    }
    /// The cap per spill file, in bytes; a larger stream keeps only its tail and no file.
    pub fn max_spill_bytes(mut self, bytes: u64) -> Self {
        self.bash.max_spill_bytes = bytes;
        self
    }
    /// The delay from SIGTERM to SIGKILL, and the pipe-drain grace after the leader exits.
    pub fn grace_ms(mut self, ms: u64) -> Self {
        self.bash.grace_ms = ms;
        self
    }
    /// `DSH_HOME` for commands (else `$DSH_HOME`, else `~/.dsh`).
    pub fn dsh_home(mut self, path: impl Into<PathBuf>) -> Self {
        self.dsh_home = Some(path.into());
        self
    }
    /// What a foreground call that reaches its timeout becomes: killed (the default, as the seeds), or
    /// a background task of its caller (needs background work enabled; otherwise it is killed).
    pub fn on_timeout(mut self, on_timeout: OnTimeout) -> Self {
        self.bash.on_timeout = on_timeout;
        self
    }
    /// Offer background tasks (`run_in_background`, `bash_output`, `bash_kill`). Default on.
    pub fn background(mut self, enabled: bool) -> Self {
        self.background = enabled;
        self
    }
    /// Spill files go here instead of a private temp directory.
    pub fn spill_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.spill_dir = Some(dir.into());
        self
    }
    /// Keep the private spill directory after shutdown.
    pub fn keep_spill(mut self, keep: bool) -> Self {
        self.keep_spill = keep;
        self
    }
    /// At most `n` commands run at once; more wait, admitted round-robin between sessions and in
    /// order within one. `0` refuses every command (the binary refuses the flag instead).
    pub fn max_concurrent(mut self, n: usize) -> Self {
        self.max_concurrent = Some(n);
        self
    }
    /// At most `running` background tasks of one session run at once; up to `queued` more wait
    /// (`[status: queued]`); beyond that a start is an error.
    pub fn max_per_session(mut self, running: usize, queued: usize) -> Self {
        self.per_session = Some(MaxPerSession { running, queued });
        self
    }
    /// Adds a host policy to the stack (after the built-in ones, in the order added). Every policy
    /// of the stack is asked; the most restrictive answer wins (see `PolicyStack`).
    pub fn policy(mut self, policy: Box<dyn ProcessPolicy>) -> Self {
        self.policies.push(policy);
        self
    }

    /// The policy stack: per-session limits, the concurrency limit, then the host's policies.
    fn policy_stack(&mut self) -> PolicyStack {
        let mut stack = PolicyStack::new();
        if let Some(per_session) = self.per_session {
            stack.push(Box::new(per_session));
        }
        if let Some(n) = self.max_concurrent {
            stack.push(Box::new(MaxConcurrent(n)));
        }
        for policy in self.policies.drain(..) {
            stack.push(policy);
        }
        stack
    }
    /// Finished background tasks kept (default 1000); beyond it they are discarded, those whose end
    /// their owner already read first, then the oldest.
    pub fn max_finished_tasks(mut self, n: usize) -> Self {
        self.registry.max_finished = n;
        self
    }
    /// Bytes of memory finished background tasks keep (default 64 MiB): their output in memory and
    /// their records, counted as allocated (`Runtime::retention_load`); beyond it they are discarded
    /// as by [`RuntimeBuilder::max_finished_tasks`].
    pub fn retained_output_bytes(mut self, bytes: usize) -> Self {
        self.registry.max_retained_bytes = bytes;
        self
    }
    /// Bytes of spill files finished background tasks keep on disk (default 1 GiB,
    /// `dsh_tasks::DEFAULT_MAX_SPILL_BYTES`); beyond it they are discarded as by
    /// [`RuntimeBuilder::max_finished_tasks`] and their files removed. A task read to its end still
    /// keeps its files (its output's full text) until it is discarded.
    pub fn retained_spill_bytes(mut self, bytes: u64) -> Self {
        self.registry.max_spill_bytes = bytes;
        self
    }
    /// Adds a host's retention policy to the registry's stack, after the built-in limits: after
    /// every settlement each policy in order may name a finished task to discard.
    pub fn retention_policy(mut self, policy: Box<dyn RetentionPolicy>) -> Self {
        self.retention_policies.push(policy);
        self
    }

    /// How each command is kept together with all its descendants: `None` (the default) is `auto`,
    /// the strongest the host gives (cgroup, else subreaper, else the process group). An explicit
    /// mode the host cannot give makes `start` fail with the reason.
    pub fn containment(mut self, mode: Option<ContainmentMode>) -> Self {
        self.containment.mode = mode;
        self
    }
    /// Per-command kernel limits (`max_pids`, `max_memory`), enforced by the command's cgroup; they
    /// need cgroup containment, and a limit the host cannot give makes `start` fail with the reason.
    pub fn task_limits(mut self, limits: TaskLimits) -> Self {
        self.containment.limits = limits;
        self
    }
    /// A program that runs `dsh_contain::watchdog::watchdog_main` on its stdin (the `dsh` binary
    /// with `__watchdog` does): one such process per runtime kills every command and removes the
    /// spill directory if the host process dies without shutting the runtime down. Off by default
    /// for libraries, which may have no such program; the `dsh` binary turns it on.
    pub fn watchdog(
        mut self,
        program: impl Into<PathBuf>,
        args: impl IntoIterator<Item = impl Into<std::ffi::OsString>>,
    ) -> Self {
        self.containment.watchdog = Some(WatchdogCommand {
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
        });
        self
    }

    /// Confines every command to `mode` by default with the host's sandbox backends (Landlock in the
    /// spawn, else bubblewrap; see `dsh_bash::sandbox::local`) configured by `config`. A confined
    /// mode the host cannot give makes `start` fail with the seeds' fail-closed text. Libraries run
    /// unconfined unless they ask; the `dsh` binary asks (`--sandbox`).
    pub fn sandbox(mut self, mode: SandboxMode, config: LocalSandboxConfig) -> Self {
        self.sandbox = Some((mode, SandboxSource::Local(config)));
        self
    }
    /// As [`RuntimeBuilder::sandbox`], with a provider the host built (a probed
    /// [`LocalSandboxProvider`] or its own backend).
    pub fn sandbox_provider(
        mut self,
        mode: SandboxMode,
        provider: Arc<dyn SandboxProvider>,
    ) -> Self {
        self.sandbox = Some((mode, SandboxSource::Provider(provider)));
        self
    }

    /// Starts the actors on the current actix arbiter (inside `actix::System` or `actix_rt::test`).
    pub fn start_in_current_system(self) -> Result<Runtime, RuntimeError> {
        self.build(false)
    }

    /// Starts the actors on a thread of their own, running its own actix system; usable from anywhere.
    pub fn start(self) -> Result<Runtime, RuntimeError> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("dsh-runtime".into())
            .spawn(move || {
                let system = System::new();
                system.block_on(async move {
                    let _ = tx.send(self.build(true));
                });
                // Runs until the shutdown sequencer stops the system.
                let _ = system.run();
            })
            .map_err(RuntimeError::Thread)?;
        rx.recv().map_err(|_| RuntimeError::ThreadExited)?
    }

    fn build(mut self, owns_system: bool) -> Result<Runtime, RuntimeError> {
        self.bash.validate()?;
        if !self.background {
            // Nowhere to move a call to: a timeout kills.
            self.bash.on_timeout = OnTimeout::Kill;
        }
        let policy = self.policy_stack();
        tracing::debug!(target: "dsh::policy", stack = ?policy, "policy stack");
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        let dsh_home = resolve_dsh_home(
            self.dsh_home.as_deref(),
            std::env::var("DSH_HOME").ok(),
            std::env::var_os("HOME").map(PathBuf::from),
            self.bash.cwd.as_deref().unwrap_or(&cwd),
        );
        let manager = ProcessManager::try_new(ManagerConfig {
            spill_dir: self.spill_dir,
            keep_spill: self.keep_spill,
            policy: Box::new(policy),
            containment: self.containment,
        })?;
        let containment = manager.containment_mode();
        let manager = manager.start();
        let mut registry = TaskRegistry::new(self.registry);
        for policy in self.retention_policies.drain(..) {
            registry = registry.with_retention_policy(policy);
        }
        let registry = registry.start();
        let tool_config = ToolBashConfig {
            cwd: self.bash.cwd.clone(),
            dsh_home,
            background: self.background,
            timeout_ms: self.bash.timeout_ms,
            max_timeout_ms: self.bash.max_timeout_ms,
            approvals: true,
        };
        let sandbox_mode = self.sandbox.as_ref().map(|(mode, _)| *mode);
        let definitions = ToolBash::definitions(&tool_config, sandbox_mode.is_some());
        // The executor's resolver and its background starts also serve supervised tasks.
        let (executor, policy, resolver, start) = match self.sandbox {
            None => {
                let resolver = self.bash.resolver();
                let executor = LocalBashExecutor::new(self.bash, manager.clone())?.start();
                let start: Recipient<Start> = executor.clone().recipient();
                (
                    ExecutorRef::new(resolver.clone(), executor),
                    None,
                    resolver,
                    start,
                )
            }
            Some((mode, source)) => {
                let provider: Arc<dyn SandboxProvider> = match source {
                    SandboxSource::Provider(provider) => provider,
                    SandboxSource::Local(config) => {
                        let provider =
                            LocalSandboxProvider::new(config).map_err(RuntimeError::Sandbox)?;
                        if mode.confines() && provider.verdict().is_err() {
                            return Err(RuntimeError::Sandbox(sandbox_unavailable_text(
                                mode, None,
                            )));
                        }
                        Arc::new(provider)
                    }
                };
                let policies =
                    SandboxPolicyResolver::new(mode, self.bash.cwd.as_deref().unwrap_or(&cwd));
                let default_policy = SandboxPolicy {
                    mode,
                    workspace_root: policies.workspace_root().to_path_buf(),
                };
                let resolve = SandboxBashExecutor::resolver(&self.bash, default_policy.clone());
                let executor =
                    SandboxBashExecutor::new(self.bash, manager.clone(), provider, default_policy)?
                        .start();
                let start: Recipient<Start> = executor.clone().recipient();
                (
                    ExecutorRef::new(resolve.clone(), executor).confining(),
                    Some(policies),
                    resolve,
                    start,
                )
            }
        };
        let tool = ToolBash::new(tool_config, executor, registry.clone(), policy)
            .map_err(RuntimeError::Sandbox)?
            .start();
        let sequencer = ShutdownSequencer {
            manager: manager.clone(),
            registry: registry.clone(),
            state: ShutdownState::Running,
            owns_system,
        }
        .start();
        Ok(Runtime {
            inner: Arc::new(Inner {
                tool,
                registry,
                manager,
                sequencer,
                definitions,
                containment,
                resolver,
                start,
                sandbox_mode,
            }),
        })
    }
}

/// A handle to a running dsh runtime. `Send + Sync + Clone`; dropping the last clone shuts it down.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

struct Inner {
    tool: Addr<ToolBash>,
    registry: Addr<TaskRegistry>,
    manager: Addr<ProcessManager>,
    sequencer: Addr<ShutdownSequencer>,
    definitions: Vec<ToolDefinition>,
    containment: ContainmentMode,
    /// The executor's resolver and its background starts, for supervised tasks.
    resolver: Resolver,
    start: Recipient<Start>,
    sandbox_mode: Option<SandboxMode>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Cannot await here; the shutdown sequencer kills and joins everything on its own.
        self.sequencer.do_send(ShutdownRuntime);
    }
}

impl Runtime {
    /// A builder with the seeds' defaults; [`RuntimeBuilder::start`] starts the runtime.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
    }

    /// Runs one tool call to completion and returns what the model should see.
    pub async fn call(&self, call: ToolCall) -> ToolResult {
        match self.inner.tool.send(call).await {
            Ok(result) => result,
            Err(_) => ToolResult::error("the dsh runtime is shut down"),
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
    }

    /// Starts `command` as a background task that `policy` restarts when it ends (host-started
    /// tasks only: a model's tasks never restart). `owner` owns the task and hears when the
    /// supervisor gives up; `None` leaves it open to every caller. Returns the task id.
    pub async fn start_supervised(
        &self,
        command: BashExecRequest,
        policy: RestartPolicy,
        owner: Option<AgentRef>,
    ) -> Result<String, String> {
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
                .map_err(|_| "the dsh runtime is shut down".to_owned())?;
        }
        let label = request.command.clone();
        let spec = (self.inner.resolver)(request).map_err(|e| e.to_string())?;
        let supervised = Supervised::start(self.inner.start.clone(), spec, policy, owner.clone())
            .await
            .map_err(|e| e.to_string())?;
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
            .map_err(|_| "the task registry is not running".to_owned())?
            .map_err(|e| e.to_string())?;
        supervised.set_task_id(&id);
        Ok(id)
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
    ) -> Result<(), String> {
        self.inner
            .tool
            .send(SetSessionSandboxMode {
                session: session_id.into(),
                mode,
            })
            .await
            .map_err(|_| "the dsh runtime is shut down".to_owned())?
    }

    /// Sets (`Some`) or clears (`None`) the workspace root of one agent session for the sandbox:
    /// under `workspace-write` its commands may write there instead of the runtime's `cwd` (a
    /// front end that learns each session's workspace, as MCP does from the client's roots). Does
    /// nothing without a sandbox.
    pub async fn set_session_workspace(
        &self,
        session_id: &str,
        root: Option<PathBuf>,
    ) -> Result<(), String> {
        self.inner
            .tool
            .send(SetSessionWorkspace {
                session: session_id.into(),
                root,
            })
            .await
            .map_err(|_| "the dsh runtime is shut down".to_owned())
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

/// Sequences shutdown once, however many callers ask.
struct ShutdownSequencer {
    manager: Addr<ProcessManager>,
    registry: Addr<TaskRegistry>,
    state: ShutdownState,
    /// Stop the actix system afterwards (the runtime started its own thread).
    owns_system: bool,
}

enum ShutdownState {
    Running,
    InProgress(Vec<oneshot::Sender<()>>),
    Done,
}

#[derive(Message)]
#[rtype(result = "()")]
struct ShutdownRuntime;

impl Actor for ShutdownSequencer {
    type Context = Context<Self>;
}

impl Handler<ShutdownRuntime> for ShutdownSequencer {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: ShutdownRuntime, ctx: &mut Self::Context) -> Self::Result {
        let (tx, rx) = oneshot::channel();
        match &mut self.state {
            ShutdownState::Done => return Box::pin(async {}),
            ShutdownState::InProgress(waiters) => waiters.push(tx),
            ShutdownState::Running => {
                self.state = ShutdownState::InProgress(vec![tx]);
                let (registry, manager) = (self.registry.clone(), self.manager.clone());
                let sequence = async move {
                    let _ = registry.send(dsh_tasks::ShutdownTasks).await;
                    let _ = manager.send(dsh_process::Shutdown).await;
                };
                ctx.spawn(sequence.into_actor(self).map(|(), sequencer, _| {
                    tracing::debug!("dsh runtime shut down");
                    if let ShutdownState::InProgress(waiters) =
                        std::mem::replace(&mut sequencer.state, ShutdownState::Done)
                    {
                        for waiter in waiters {
                            let _ = waiter.send(());
                        }
                    }
                    if sequencer.owns_system {
                        System::current().stop();
                    }
                }));
            }
        }
        Box::pin(async move {
            let _ = rx.await;
        })
    }
}
