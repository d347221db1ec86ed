//! `SandboxBashExecutor`: the local executor with every command confined
//! (docs/ARCHITECTURE.md#sandbox).
//!
//! - `danger-full-access`: a plain local run (facts `{mode, denied: false}`, no enforcement); a
//!   plain local start with no facts at all. The provider is never consulted.
//! - otherwise the provider is asked, on every run and start, to confine the exact argv
//!   `["bash", "-c", command]` under `{mode, workspace_root}`; its error propagates and nothing runs.
//!   A wrap that keeps the argv (Landlock, applied in the spawn) runs it as is; a runner's argv runs
//!   as `bash -c "exec '<a0>' '<a1>' …"`, so the outer shell execs into the runner. Containment
//!   (cgroup leaf or subreaper marker, watchdog, kill escalation) is the process manager's, for
//!   confined and unconfined commands alike.
//! - a foreground result classified as a runner failure is an error
//!   ([`ExecError::SandboxUnavailable`], detail = first line of the trimmed stderr); otherwise the
//!   result carries `{mode, denied, enforcement}`. A background task keeps its own wrap's facts and
//!   stamps them when it settles (`runner_failed` when the runner itself failed, which is never also a
//!   denial); a confined spawn failure still stamps facts, `denied: false`.

use std::sync::Arc;

use actix::prelude::*;
use dsh_process::{ProcessManager, SpawnError};
use dsh_tasks::{SandboxFacts, SandboxMode};

use crate::background::BashProcess;
use crate::config::BashConfig;
use crate::errors::ExecError;
use crate::executor::{Launch, bash_argv, run, start};
use crate::messages::{BashRunResult, Run, Start};
use crate::request::BashExecSpec;
use crate::resolve::Resolver;
use crate::sandbox::policy::SandboxPolicy;
use crate::sandbox::provider::{SandboxProvider, Wrap, sandbox_unavailable_text};
use crate::sandbox::quote::exec_command;

/// The sandbox executor actor.
pub struct SandboxBashExecutor {
    config: BashConfig,
    manager: Addr<ProcessManager>,
    provider: Arc<dyn SandboxProvider>,
    default_policy: SandboxPolicy,
}

impl SandboxBashExecutor {
    /// Fails like the local executor for a bad config. `default_policy` serves specs that carry none.
    pub fn new(
        config: BashConfig,
        manager: Addr<ProcessManager>,
        provider: Arc<dyn SandboxProvider>,
        default_policy: SandboxPolicy,
    ) -> Result<Self, ExecError> {
        config.validate()?;
        Ok(Self {
            config,
            manager,
            provider,
            default_policy,
        })
    }

    /// The configured default mode.
    pub fn sandbox_mode(&self) -> SandboxMode {
        self.default_policy.mode
    }

    /// The local resolve, then the policy: the request's own, else `default_policy`.
    pub fn resolver(config: &BashConfig, default_policy: SandboxPolicy) -> Resolver {
        let config = config.clone();
        Arc::new(move |request| {
            let mut spec = config.resolve(request)?;
            spec.sandbox_policy
                .get_or_insert_with(|| default_policy.clone());
            Ok(spec)
        })
    }
}

/// The facts of a `danger-full-access` foreground run.
fn unconfined_facts() -> SandboxFacts {
    SandboxFacts {
        mode: SandboxMode::DangerFullAccess,
        denied: false,
        enforcement: None,
        runner_failed: false,
    }
}

/// How to start a wrapped command.
fn launch_for(wrap: &Wrap, argv: &[String]) -> Launch {
    if wrap.argv == argv {
        return Launch {
            argv: wrap.argv.clone(),
            env: wrap.env.clone(),
            confinement: wrap.confinement.clone(),
        };
    }
    Launch {
        argv: bash_argv(&exec_command(&wrap.argv)),
        env: wrap.env.clone(),
        confinement: wrap.confinement.clone(),
    }
}

/// A refused in-spawn restriction is the runner failing: fail closed with its detail.
fn confine_error(err: ExecError, mode: SandboxMode) -> ExecError {
    match err {
        ExecError::Spawn(err @ SpawnError::Confine { .. }) => {
            ExecError::SandboxUnavailable(sandbox_unavailable_text(mode, Some(&err.to_string())))
        }
        other => other,
    }
}

fn confine(
    provider: &dyn SandboxProvider,
    spec: &BashExecSpec,
    policy: &SandboxPolicy,
) -> Result<(Wrap, Launch), ExecError> {
    let argv = bash_argv(&spec.command);
    let wrap = provider.confine(&argv, policy, spec.session.as_deref())?;
    let launch = launch_for(&wrap, &argv);
    Ok((wrap, launch))
}

async fn run_confined(
    config: BashConfig,
    manager: Addr<ProcessManager>,
    provider: Arc<dyn SandboxProvider>,
    policy: SandboxPolicy,
    spec: BashExecSpec,
) -> Result<BashRunResult, ExecError> {
    if !policy.mode.confines() {
        let launch = Launch::plain(&spec.command);
        let mut result = run(config, manager, spec, launch, None).await?;
        result.sandbox = Some(unconfined_facts());
        return Ok(result);
    }
    let (wrap, launch) = confine(provider.as_ref(), &spec, &policy)?;
    let mut result = run(config, manager, spec, launch, Some(wrap.facts.clone()))
        .await
        .map_err(|err| confine_error(err, policy.mode))?;
    if wrap
        .facts
        .runner_failed(result.exit_code, &result.stderr.text)
    {
        let detail = result
            .stderr
            .text
            .trim()
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned();
        return Err(ExecError::SandboxUnavailable(sandbox_unavailable_text(
            policy.mode,
            Some(&detail),
        )));
    }
    result.sandbox = Some(wrap.facts.classify(result.exit_code, &result.stderr.text));
    Ok(result)
}

async fn start_confined(
    config: BashConfig,
    manager: Addr<ProcessManager>,
    provider: Arc<dyn SandboxProvider>,
    policy: SandboxPolicy,
    spec: BashExecSpec,
) -> Result<BashProcess, ExecError> {
    if !policy.mode.confines() {
        let launch = Launch::plain(&spec.command);
        return start(config, manager, spec, launch, None).await;
    }
    let (wrap, launch) = confine(provider.as_ref(), &spec, &policy)?;
    start(config, manager, spec, launch, Some(wrap.facts))
        .await
        .map_err(|err| confine_error(err, policy.mode))
}

impl SandboxBashExecutor {
    fn policy_of(&self, spec: &BashExecSpec) -> SandboxPolicy {
        spec.sandbox_policy
            .clone()
            .unwrap_or_else(|| self.default_policy.clone())
    }
}

impl Actor for SandboxBashExecutor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(4096);
    }
}

impl Handler<Run> for SandboxBashExecutor {
    type Result = ResponseFuture<Result<BashRunResult, ExecError>>;

    fn handle(&mut self, Run(spec): Run, _: &mut Self::Context) -> Self::Result {
        let policy = self.policy_of(&spec);
        Box::pin(run_confined(
            self.config.clone(),
            self.manager.clone(),
            self.provider.clone(),
            policy,
            spec,
        ))
    }
}

impl Handler<Start> for SandboxBashExecutor {
    type Result = ResponseFuture<Result<BashProcess, ExecError>>;

    fn handle(&mut self, Start(spec): Start, _: &mut Self::Context) -> Self::Result {
        let policy = self.policy_of(&spec);
        Box::pin(start_confined(
            self.config.clone(),
            self.manager.clone(),
            self.provider.clone(),
            policy,
            spec,
        ))
    }
}
