//! `LocalBashExecutor`: runs `bash -c <command>` through the process manager.
//!
//! It owns everything bash-shaped: argv, the model-friendly terminal environment, budgets from its
//! config, and the foreground deadline with its timeout-versus-abort classification. Processes belong
//! to the manager, so stopping this actor leaves background commands running.

use std::collections::BTreeMap;
use std::time::Duration;

use actix::prelude::*;
use dsh_process::{
    AbortSignal, InputMode, InputState, ProcessManager, ProcessSpawnSpec, QueuedNotice, Release,
    Spawn, SpawnError, Wait, ensure_not_aborted, wait_abort,
};
use tokio::time::{Instant, sleep_until};

use crate::background::BashProcess;
use crate::config::{BashConfig, OnTimeout};
use crate::errors::ExecError;
use crate::leftovers::Leftovers;
use crate::messages::{BashRunResult, MoveReason, MovedToBackground, Run, RunEnding, Start};
use crate::request::BashExecSpec;
use crate::sandbox::WrapFacts;

/// Set for every command so pagers and colour codes do not garble what the model reads (Codex's set);
/// a caller's own entry wins.
pub const TERMINAL_ENV: [(&str, &str); 4] = [
    ("NO_COLOR", "1"),
    ("TERM", "dumb"),
    ("PAGER", "cat"),
    ("GIT_PAGER", "cat"),
];

/// `TERM` under a terminal (`tty: true`): the emulator understands xterm's sequences.
pub const TERMINAL_TERM: &str = "xterm-256color";

/// The local executor actor.
pub struct LocalBashExecutor {
    config: BashConfig,
    manager: Addr<ProcessManager>,
}

impl LocalBashExecutor {
    /// Fails with `bash-local: <key> must be a positive finite number` for a zero budget.
    pub fn new(config: BashConfig, manager: Addr<ProcessManager>) -> Result<Self, ExecError> {
        config.validate()?;
        Ok(Self { config, manager })
    }

    /// The validated configuration this executor runs with.
    pub fn config(&self) -> &BashConfig {
        &self.config
    }
}

/// How a command is started: its argv (`bash -c <command>`, or a sandbox runner's wrap of it) and
/// how the child is confined, if it is.
#[derive(Clone, Debug)]
pub(crate) struct Launch {
    pub argv: Vec<String>,
    /// Variables the confinement sets (`TMPDIR`), below the caller's own.
    pub env: Vec<(String, String)>,
    pub confinement: Option<dsh_contain::confine::Confinement>,
}

impl Launch {
    /// `bash -c <command>`, unconfined.
    pub(crate) fn plain(command: &str) -> Self {
        Self {
            argv: bash_argv(command),
            env: Vec::new(),
            confinement: None,
        }
    }
}

/// `["bash", "-c", command]`.
pub(crate) fn bash_argv(command: &str) -> Vec<String> {
    vec!["bash".into(), "-c".into(), command.to_owned()]
}

/// The process spawn for a bash spec: stdout cap as given, everything else from the config.
fn process_spec(
    config: &BashConfig,
    spec: &BashExecSpec,
    launch: Launch,
    stdout_max_bytes: usize,
    abort: Option<AbortSignal>,
) -> ProcessSpawnSpec {
    let mut env: BTreeMap<String, String> = TERMINAL_ENV
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    if let InputMode::Terminal(_) = spec.input {
        // A terminal that draws: its output goes through the emulator (docs/interactive.md).
        env.insert("TERM".into(), TERMINAL_TERM.into());
    }
    env.extend(launch.env);
    env.extend(spec.env.clone().unwrap_or_default());
    ProcessSpawnSpec {
        argv: launch.argv,
        cwd: spec.workdir.clone(),
        env,
        dsh_env: spec.dsh_env.clone().unwrap_or_default(),
        stdin: spec.stdin.clone(),
        stdout_max_bytes,
        stderr_max_bytes: config.max_output_bytes as usize,
        max_spill_bytes: config.max_spill_bytes,
        grace: Duration::from_millis(config.grace_ms),
        spill_dir: None,
        abort,
        session: spec.session.clone(),
        background: false,
        queued: None,
        confinement: launch.confinement,
        input: spec.input,
    }
}

/// A foreground run: spawn, then wait under one fused deadline; the first of our timer and the
/// caller's abort wins and kills the group.
pub(crate) async fn run(
    config: BashConfig,
    manager: Addr<ProcessManager>,
    spec: BashExecSpec,
    launch: Launch,
    sandbox: Option<WrapFacts>,
) -> Result<BashRunResult, ExecError> {
    // The manager only sees the fused signal, so the caller's own must be checked here.
    ensure_not_aborted(spec.abort.as_ref())?;
    // Time spent waiting for admission counts toward the timeout.
    let deadline = Instant::now() + Duration::from_millis(spec.timeout_ms);
    let caller_abort = spec.abort.clone();
    let fused = AbortSignal::new();
    let queued = QueuedNotice::new();
    let mut process = process_spec(
        &config,
        &spec,
        launch,
        spec.stdout_max_bytes,
        Some(fused.clone()),
    );
    process.queued = Some(queued.clone());
    let spawn = manager.send(Spawn(process));
    // Only a spawn that waits for admission races the deadline and the cancel here: one being
    // started is as good as running, and the wait below classifies it as before.
    let spawned = tokio::select! {
        biased;
        answer = spawn => answer.map_err(|_| ExecError::ManagerGone)??,
        () = async { queued.fired().await; sleep_until(deadline).await } => {
            fused.abort(format!("BASH_TIMEOUT after {}ms waiting to start", spec.timeout_ms));
            tracing::debug!(timeout_ms = spec.timeout_ms, "timed out waiting to start");
            return Err(ExecError::TimedOutWaitingToStart { timeout_ms: spec.timeout_ms });
        }
        () = async { queued.fired().await; wait_abort(caller_abort.as_ref()).await } => {
            fused.abort(caller_abort.as_ref().map(AbortSignal::reason_text).unwrap_or_default());
            return Err(ExecError::AbortedWaitingToStart);
        }
    };
    if let Some(peek) = &spec.peek {
        peek.attach(spawned.output.clone());
    }
    // Straight from the process's driver, not through the manager's mailbox.
    let wait = spawned.output.settled();
    tokio::pin!(wait);
    // Who fired the fused deadline first, if anyone: the timer or the caller's abort.
    let mut ending = RunEnding::Exited;
    // With input open, the command waiting for it ends the call too (issue 22).
    let input = spawned.output.input().cloned();
    let waiting = async {
        match &input {
            Some(input) => input.waiting_or_closed().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(waiting);
    let mut watching_input = input.is_some();
    let outcome = loop {
        tokio::select! {
            outcome = &mut wait => break outcome,
            state = &mut waiting, if watching_input && ending == RunEnding::Exited => {
                watching_input = false;
                let reason = match state {
                    InputState::WaitingHidden => MoveReason::WaitingForHiddenInput,
                    InputState::Waiting => MoveReason::WaitingForInput,
                    // Input closed: the command is ending; wait for it as usual.
                    InputState::Busy | InputState::Closed => continue,
                };
                tracing::debug!(?reason, "move to background: waiting for input");
                let grace = Duration::from_millis(config.grace_ms);
                let handle = BashProcess::running(manager, spawned.clone(), None, sandbox, grace);
                let output = handle.read_output();
                return Ok(moved_result(MovedToBackground { reason, handle, output }, spec.timeout_ms));
            }
            () = sleep_until(deadline), if ending == RunEnding::Exited => {
                if config.on_timeout == OnTimeout::Background {
                    tracing::debug!(
                        target: "dsh::policy",
                        decision = "background",
                        timeout_ms = spec.timeout_ms,
                        "move to background: still running at its timeout"
                    );
                    // A confined task keeps its facts: its later reads carry its markers.
                    let grace = Duration::from_millis(config.grace_ms);
                    let handle = BashProcess::running(manager, spawned.clone(), None, sandbox, grace);
                    let output = handle.read_output();
                    let moved = MovedToBackground { reason: MoveReason::Timeout, handle, output };
                    return Ok(moved_result(moved, spec.timeout_ms));
                }
                ending = RunEnding::TimedOut;
                fused.abort(format!("BASH_TIMEOUT after {}ms", spec.timeout_ms));
            }
            () = wait_abort(caller_abort.as_ref()), if ending == RunEnding::Exited => {
                ending = RunEnding::Aborted;
                fused.abort(caller_abort.as_ref().map(AbortSignal::reason_text).unwrap_or_default());
            }
        }
    };
    let Some(mut outcome) = outcome else {
        manager.do_send(Release { id: spawned.id });
        return Err(ExecError::ManagerGone);
    };
    let left_running = if outcome.left_running.is_empty() {
        None
    } else {
        // The output settles before the manager hears of it and remembers what was left running
        // (in subreaper mode it first scans `/proc`): wait until it has, so the task's first look
        // and a prompt `bash_kill` find it.
        let _ = manager.send(Wait { id: spawned.id }).await;
        Some(Leftovers::new(
            manager.clone(),
            spawned.pid,
            std::mem::take(&mut outcome.left_running),
            Duration::from_millis(config.grace_ms),
        ))
    };
    manager.do_send(Release { id: spawned.id });
    Ok(BashRunResult {
        ending,
        exit_code: outcome.exit_code,
        signal: outcome.signal,
        timeout_ms: spec.timeout_ms,
        stdout: outcome.stdout,
        stderr: outcome.stderr,
        oom_killed: outcome.oom_killed,
        sandbox: None,
        left_running,
    })
}

/// The result of a foreground run left running as a background task.
fn moved_result(moved: MovedToBackground, timeout_ms: u64) -> BashRunResult {
    BashRunResult {
        ending: RunEnding::MovedToBackground(moved),
        exit_code: None,
        signal: None,
        timeout_ms,
        stdout: Default::default(),
        stderr: Default::default(),
        oom_killed: false,
        sandbox: None,
        left_running: None,
    }
}

/// A background start. A failure to start is an error and nothing is registered (a NUL byte, E2BIG,
/// EMFILE, a missing program, …), as in the foreground. The one exception is an unusable working
/// directory, which stays asynchronous (docs/CONTRACT.md, `bash_output`): it gives a handle that
/// settles `killed` and reports `spawn failed: …` in one read. A start the policy queues answers at
/// once with a handle whose status is `queued` until it starts (a failure to start is then reported
/// like a bad workdir).
pub(crate) async fn start(
    config: BashConfig,
    manager: Addr<ProcessManager>,
    spec: BashExecSpec,
    launch: Launch,
    sandbox: Option<WrapFacts>,
) -> Result<BashProcess, ExecError> {
    ensure_not_aborted(spec.abort.as_ref())?;
    // Killing a queued task fires this; the manager then withdraws its spawn.
    let abort = spec.abort.clone().unwrap_or_default();
    let grace = Duration::from_millis(config.grace_ms);
    let queued = QueuedNotice::new();
    let mut process = process_spec(
        &config,
        &spec,
        launch,
        config.max_output_bytes as usize,
        Some(abort.clone()),
    );
    process.background = true;
    process.queued = Some(queued.clone());
    let mut spawn = Box::pin(manager.send(Spawn(process)));
    let answer = tokio::select! {
        biased;
        answer = &mut spawn => answer,
        () = queued.fired() => {
            let pending = Box::pin(async move {
                spawn.await.unwrap_or(Err(SpawnError::ShutDown))
            });
            return Ok(BashProcess::queued(manager, pending, abort, sandbox, grace));
        }
    };
    match answer.map_err(|_| ExecError::ManagerGone)? {
        Ok(spawned) => Ok(BashProcess::running(
            manager,
            spawned,
            Some(abort),
            sandbox,
            grace,
        )),
        Err(err @ SpawnError::Workdir { .. }) => {
            tracing::debug!(%err, "background spawn failed");
            Ok(BashProcess::failed(
                manager,
                format!("spawn failed: {err}"),
                sandbox,
            ))
        }
        Err(err) => Err(err.into()),
    }
}

impl Actor for LocalBashExecutor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(4096);
    }
}

impl Handler<Run> for LocalBashExecutor {
    type Result = ResponseFuture<Result<BashRunResult, ExecError>>;

    fn handle(&mut self, Run(spec): Run, _: &mut Self::Context) -> Self::Result {
        let launch = Launch::plain(&spec.command);
        Box::pin(run(
            self.config.clone(),
            self.manager.clone(),
            spec,
            launch,
            None,
        ))
    }
}

impl Handler<Start> for LocalBashExecutor {
    type Result = ResponseFuture<Result<BashProcess, ExecError>>;

    fn handle(&mut self, Start(spec): Start, _: &mut Self::Context) -> Self::Result {
        let launch = Launch::plain(&spec.command);
        Box::pin(start(
            self.config.clone(),
            self.manager.clone(),
            spec,
            launch,
            None,
        ))
    }
}
