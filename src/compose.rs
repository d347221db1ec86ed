//! Wiring a runtime from a [`RuntimeBuilder`]: the process manager, the task registry, the
//! executor (local, or the sandbox executor over a provider), the tool actor over them, and the
//! shutdown sequencer; the actors of docs/ARCHITECTURE.md, "Actors and their messages".

use std::path::{Path, PathBuf};
use std::sync::Arc;

use actix::prelude::*;
use dsh_bash::sandbox::LocalSandboxProvider;
use dsh_bash::{
    BashConfig, LocalBashExecutor, OnTimeout, Resolver, SandboxBashExecutor, SandboxMode,
    SandboxPolicy, SandboxPolicyResolver, SandboxProvider, Start, sandbox_unavailable_text,
};
use dsh_process::{ManagerConfig, ProcessManager};
use dsh_tasks::TaskRegistry;
use dsh_tool_bash::{ExecutorRef, ToolBash, ToolBashConfig, resolve_dsh_home};

use crate::builder::{RuntimeBuilder, SandboxSource};
use crate::error::RuntimeError;
use crate::runtime::{Inner, Runtime};
use crate::shutdown::ShutdownSequencer;

/// The executor a runtime runs commands with, as the tool and supervised tasks use it.
struct Executor {
    /// The executor as the tool sees it.
    tool: ExecutorRef,
    /// The standing sandbox policy, when the executor confines.
    policy: Option<SandboxPolicyResolver>,
    /// Its resolver and its background starts, which also serve supervised tasks.
    resolver: Resolver,
    start: Recipient<Start>,
    /// The sandbox provider, told when the runtime has shut down.
    provider: Option<Arc<dyn SandboxProvider>>,
}

impl RuntimeBuilder {
    /// Starts the actors on the current actix arbiter (inside `actix::System` or `actix_rt::test`).
    pub fn start_in_current_system(self) -> Result<Runtime, RuntimeError> {
        build(self, false)
    }

    /// Starts the actors on a thread of their own, running its own actix system; usable from anywhere.
    pub fn start(self) -> Result<Runtime, RuntimeError> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("dsh-runtime".into())
            .spawn(move || {
                let system = System::new();
                let built = system.block_on(async move { build(self, true) });
                if built.is_err() {
                    // A failed start ends the thread: its system runs only until the actors it
                    // made have stopped (the process manager cleans up when dropped).
                    System::current().stop();
                }
                let _ = tx.send(built);
                // Else it runs until the shutdown sequencer stops it.
                let _ = system.run();
            })
            .map_err(RuntimeError::Thread)?;
        rx.recv().map_err(|_| RuntimeError::ThreadExited)?
    }
}

/// Starts the actors of `builder` on the current arbiter; `owns_system` makes shutdown stop the
/// actix system too (the runtime's own thread).
pub(crate) fn build(
    mut builder: RuntimeBuilder,
    owns_system: bool,
) -> Result<Runtime, RuntimeError> {
    builder.bash.validate()?;
    if !builder.background {
        // Nowhere to move a call to: a timeout kills.
        builder.bash.on_timeout = OnTimeout::Kill;
    }
    let policy = builder.policy_stack();
    tracing::debug!(target: "dsh::policy", stack = ?policy, "policy stack");
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let dsh_home = resolve_dsh_home(
        builder.dsh_home.as_deref(),
        std::env::var("DSH_HOME").ok(),
        std::env::var_os("HOME").map(PathBuf::from),
        builder.bash.cwd.as_deref().unwrap_or(&cwd),
    );
    let mut manager = ProcessManager::try_new(ManagerConfig {
        spill_dir: builder.spill_dir,
        keep_spill: builder.keep_spill,
        policy: Box::new(policy),
        containment: builder.containment,
        max_terminals: builder.max_terminals,
    })?;
    let containment = manager.containment_mode();
    // Made now, so the sandbox can show it to the commands whose results name its files.
    let spill_dir = match manager.spill_dir() {
        Ok(dir) => Some(dir),
        Err(err) => {
            tracing::warn!(%err, "no spill directory yet; the first output that needs one says why");
            None
        }
    };
    let manager = manager.start();
    let mut registry = TaskRegistry::new(builder.registry);
    for policy in builder.retention_policies.drain(..) {
        registry = registry.with_retention_policy(policy);
    }
    let registry = registry.start();
    let tool_config = ToolBashConfig {
        dsh_home,
        background: builder.background,
        approvals: true,
    };
    let sandbox_mode = builder.sandbox.as_ref().map(|(mode, _)| *mode);
    let executor = match builder.sandbox {
        None => local_executor(builder.bash, &manager)?,
        Some((mode, source)) => {
            sandbox_executor(builder.bash, &manager, mode, source, &cwd, spill_dir)?
        }
    };
    let definitions = ToolBash::definitions(&tool_config, &executor.tool);
    let tool = ToolBash::new(
        tool_config,
        executor.tool,
        registry.clone(),
        executor.policy,
    )
    .map_err(RuntimeError::Tool)?
    .start();
    let sequencer = ShutdownSequencer::new(
        manager.clone(),
        registry.clone(),
        executor.provider.clone(),
        owns_system,
    )
    .start();
    Ok(Runtime {
        inner: Arc::new(Inner {
            tool,
            registry,
            manager,
            sequencer,
            definitions,
            containment,
            resolver: executor.resolver,
            start: executor.start,
            sandbox_mode,
            provider: executor.provider,
        }),
    })
}

/// The local executor: commands run unconfined.
fn local_executor(
    bash: BashConfig,
    manager: &Addr<ProcessManager>,
) -> Result<Executor, RuntimeError> {
    let resolver = bash.resolver();
    let tool_bash = bash.clone();
    let executor = LocalBashExecutor::new(bash, manager.clone())?.start();
    Ok(Executor {
        start: executor.clone().recipient(),
        tool: ExecutorRef::new(&tool_bash, resolver.clone(), executor),
        policy: None,
        resolver,
        provider: None,
    })
}

/// The sandbox executor over the host's backends (probed here; a confined `mode` they cannot
/// give fails closed) or over the host's own provider.
fn sandbox_executor(
    bash: BashConfig,
    manager: &Addr<ProcessManager>,
    mode: SandboxMode,
    source: SandboxSource,
    cwd: &Path,
    spill_dir: Option<PathBuf>,
) -> Result<Executor, RuntimeError> {
    let provider: Arc<dyn SandboxProvider> = match source {
        SandboxSource::Provider(provider) => provider,
        SandboxSource::Local(config) => {
            let provider = LocalSandboxProvider::new(config.showing_spill_dir(spill_dir))
                .map_err(RuntimeError::Sandbox)?;
            if mode.confines() && provider.verdict().is_err() {
                return Err(RuntimeError::Sandbox(sandbox_unavailable_text(mode, None)));
            }
            Arc::new(provider)
        }
    };
    let policies = SandboxPolicyResolver::new(mode, bash.cwd.as_deref().unwrap_or(cwd));
    let default_policy = SandboxPolicy {
        mode,
        workspace_root: policies.workspace_root().to_path_buf(),
    };
    // The description lists the writable set but the workspace, which is the session's own.
    let writable_policy = SandboxPolicy {
        mode: SandboxMode::WorkspaceWrite,
        ..default_policy.clone()
    };
    let writable: Vec<PathBuf> = provider
        .writable(&writable_policy)
        .into_iter()
        .filter(|path| *path != writable_policy.workspace_root)
        .collect();
    let resolver = SandboxBashExecutor::resolver(&bash, default_policy.clone());
    let tool_bash = bash.clone();
    let executor =
        SandboxBashExecutor::new(bash, manager.clone(), provider.clone(), default_policy)?.start();
    Ok(Executor {
        start: executor.clone().recipient(),
        tool: ExecutorRef::new(&tool_bash, resolver.clone(), executor)
            .confining()
            .with_writable(writable),
        policy: Some(policies),
        resolver,
        provider: Some(provider),
    })
}
