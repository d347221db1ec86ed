//! The `ToolBash` actor: receives model tool calls, parses each once into a [`ToolRequest`], calls
//! the executor or the task registry, renders what the model sees beside the typed outcome, and
//! delivers completion notices to the agent that owns a task.
//!
//! Non-zero exits, timeouts and kills are results (`is_error: false`); only infrastructure failures
//! (bad arguments, spawn errors, aborts, unknown or foreign tasks) are errors, rendered `Error: <message>`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use actix::prelude::*;
use dsh_bash::{
    AbortSignal, BashExecRequest, InputMode, MoveReason, OutputPeek, Run, RunEnding, SandboxPolicy,
    SandboxPolicyResolver, Start, TerminalSize,
};
use dsh_tasks::{KillTask, Register, Subscribe, TaskDone, TaskKillOutcome, TaskRegistry};

use crate::args::{BashArgs, CommandInput, ReadArgs, duration_ms};
use crate::call::{ToolCall, ToolResult};
use crate::config::ToolBashConfig;
use crate::definitions::{DefinitionFacts, ToolDefinition, describe_writable, tool_definitions};
use crate::error::ToolError;
use crate::escalation::escalate;
use crate::executor_ref::ExecutorRef;
use crate::managed_env::managed_env;
use crate::outcome::{Ending, KillResult, LeftRunning, Ran, ToolOutcome};
use crate::render::{
    left_running_line, render_kill, render_moved, render_notice, render_result_with,
    render_started, render_waiting,
};
use crate::reply::{EXECUTOR, REGISTRY, flatten, wait_then_read};
use crate::request::{Offered, ToolRequest};
use crate::task_id::TaskId;

/// The tool actor.
pub struct ToolBash {
    config: ToolBashConfig,
    executor: ExecutorRef,
    registry: Addr<TaskRegistry>,
    /// The standing sandbox policy, present exactly when the executor confines.
    pub(crate) policy: Option<SandboxPolicyResolver>,
}

impl ToolBash {
    /// The tool actor over an executor and the task registry its background tasks go to. A
    /// confining executor needs `policy` ([`ToolError::MissingSandboxPolicy`] otherwise); a
    /// policy without one is ignored.
    pub fn new(
        config: ToolBashConfig,
        executor: ExecutorRef,
        registry: Addr<TaskRegistry>,
        policy: Option<SandboxPolicyResolver>,
    ) -> Result<Self, ToolError> {
        if executor.confines && policy.is_none() {
            return Err(ToolError::MissingSandboxPolicy);
        }
        let policy = policy.filter(|_| executor.confines);
        Ok(Self {
            config,
            executor,
            registry,
            policy,
        })
    }

    /// The definitions to show a model: the tools `config` offers, with the executor's own
    /// timeouts, and the escalation parameters when the executor confines.
    pub fn definitions(config: &ToolBashConfig, executor: &ExecutorRef) -> Vec<ToolDefinition> {
        let mut tools = tool_definitions(DefinitionFacts {
            timeout_ms: executor.timeout_ms,
            max_timeout_ms: executor.max_timeout_ms,
            background: config.background,
            sandbox: executor.confines,
        });
        describe_writable(&mut tools, &executor.writable);
        tools
    }
}

impl Actor for ToolBash {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(4096);
        self.registry.do_send(Subscribe(ctx.address().recipient()));
    }
}

impl Handler<ToolCall> for ToolBash {
    type Result = ResponseFuture<ToolResult>;

    fn handle(&mut self, call: ToolCall, _: &mut Self::Context) -> Self::Result {
        let config = self.config.clone();
        let executor = self.executor.clone();
        let registry = self.registry.clone();
        // The standing policy, resolved at dispatch.
        let session = call.caller.as_ref().map(|c| c.session_id.as_str());
        let standing = self
            .policy
            .as_ref()
            .map(|policy| policy.resolve(session, None));
        let offered = Offered {
            background: config.background,
            sandbox: standing.is_some(),
        };
        Box::pin(async move {
            if call.cancel.as_ref().is_some_and(AbortSignal::is_aborted) {
                return ToolResult::failed(ToolError::AbortedBeforeDispatch);
            }
            let result = match ToolRequest::parse(&call.name, &call.arguments, offered) {
                Err(err) => Err(err),
                Ok(ToolRequest::Bash(args)) => {
                    bash(&config, &executor, &registry, standing, args, call).await
                }
                Ok(ToolRequest::Output(args)) => {
                    bash_output(&registry, offered.sandbox, args, call).await
                }
                Ok(ToolRequest::Write(args)) => {
                    crate::write::bash_write(&registry, offered.sandbox, args, call).await
                }
                Ok(ToolRequest::Kill { task_id }) => bash_kill(&registry, task_id, call).await,
            };
            result.unwrap_or_else(ToolResult::failed)
        })
    }
}

/// A relative `workdir` resolves against the workspace; an absolute one is used as given. No workdir
/// stays `None`: the executor's resolver defaults it, in one place.
fn resolve_workdir(workdir: Option<String>, workspace: Option<&Path>) -> Option<PathBuf> {
    match (workdir.map(PathBuf::from), workspace) {
        (Some(dir), Some(root)) if dir.is_relative() => Some(root.join(dir)),
        (dir, _) => dir,
    }
}

async fn bash(
    config: &ToolBashConfig,
    executor: &ExecutorRef,
    registry: &Addr<TaskRegistry>,
    standing: Option<SandboxPolicy>,
    args: BashArgs,
    call: ToolCall,
) -> Result<ToolResult, ToolError> {
    let escalation_offered = standing.is_some();
    let policy = match &args.escalation {
        Some(escalation) => {
            let granted =
                escalate(config, standing.as_ref(), escalation, &args.command, &call).await?;
            if call.cancel.as_ref().is_some_and(AbortSignal::is_aborted) {
                // Cancelled after the grant: nothing is published.
                return Err(ToolError::Aborted);
            }
            Some(granted)
        }
        None => standing,
    };
    if args.run_in_background && !config.background {
        return Err(ToolError::BackgroundDisabled);
    }
    if args.input != CommandInput::Closed && !config.background {
        return Err(ToolError::InputDisabled);
    }
    let session = call.caller.as_ref().map(|c| c.session_id.as_str());
    // A foreground run always gets a peek: it also yields the whole-stream byte counts at the end.
    let peek = (!args.run_in_background).then(|| call.peek.clone().unwrap_or_default());
    // Only named arguments are forwarded: a model cannot set env, stdin or output budgets.
    let request = BashExecRequest {
        command: args.command.clone(),
        workdir: resolve_workdir(args.workdir, executor.cwd.as_deref()),
        timeout_ms: args.timeout.map(duration_ms),
        dsh_env: Some(managed_env(&config.dsh_home, session)),
        abort: if args.run_in_background {
            None
        } else {
            call.cancel.clone()
        },
        peek: peek.clone(),
        session: session.map(str::to_owned),
        sandbox_policy: policy,
        input: match args.input {
            CommandInput::Closed => InputMode::Closed,
            CommandInput::Open => InputMode::Open,
            CommandInput::Terminal => InputMode::Terminal(TerminalSize::DEFAULT),
        },
        ..BashExecRequest::default()
    };
    let spec = (executor.resolve)(request)?;
    if args.run_in_background {
        let handle = flatten(executor.start.send(Start(spec)).await, EXECUTOR)?;
        let register = Register {
            kind: "bash".into(),
            label: args.command,
            owner: call.caller,
            producer: Box::new(handle),
        };
        let task_id = TaskId::from(flatten(registry.send(register).await, REGISTRY)?);
        let text = render_started(task_id.as_str());
        return Ok(ToolResult::done(text, ToolOutcome::Started { task_id }));
    }
    let began = Instant::now();
    let mut result = flatten(executor.run.send(Run(spec)).await, EXECUTOR)?;
    let moved = match std::mem::replace(&mut result.ending, RunEnding::Exited) {
        RunEnding::MovedToBackground(moved) => Some(moved),
        ending => {
            result.ending = ending;
            None
        }
    };
    if let Some(moved) = moved {
        let register = Register {
            kind: "bash".into(),
            label: args.command,
            owner: call.caller,
            producer: Box::new(moved.handle),
        };
        let task_id = TaskId::from(flatten(registry.send(register).await, REGISTRY)?);
        let hidden = match moved.reason {
            MoveReason::Timeout => {
                let text = render_moved(&moved.output, result.timeout_ms, task_id.as_str());
                let timeout = Duration::from_millis(result.timeout_ms);
                return Ok(ToolResult::done(
                    text,
                    ToolOutcome::MovedToBackground { task_id, timeout },
                ));
            }
            MoveReason::WaitingForInput => false,
            MoveReason::WaitingForHiddenInput => true,
        };
        let text = render_waiting(&moved.output, task_id.as_str(), hidden);
        return Ok(ToolResult::done(
            text,
            ToolOutcome::WaitingForInput { task_id, hidden },
        ));
    }
    let totals = peek.as_ref().and_then(OutputPeek::snapshot);
    let mut ran = Ran::new(&result, began.elapsed(), totals.as_ref());
    if ran.ending == Ending::Aborted {
        return Ok(
            ToolResult::failed(ToolError::CommandAborted).with_outcome(ToolOutcome::Ran(ran))
        );
    }
    let mut text = render_result_with(&result, escalation_offered);
    if let Some(left) = result.left_running.take() {
        // What still holds the pipes becomes the caller's task: `bash_kill` is how a later call
        // stops it (docs/CONTRACT.md, "Left running").
        let line_start = if text.ends_with('\n') { "" } else { "\n" };
        let description = dsh_bash::describe_left_running(left.processes());
        let pids: Vec<i32> = left.processes().iter().map(|p| p.pid).collect();
        let register = Register {
            kind: "bash".into(),
            label: format!("left running by: {}", args.command),
            owner: call.caller,
            producer: Box::new(left),
        };
        let task_id = TaskId::from(flatten(registry.send(register).await, REGISTRY)?);
        let line = left_running_line(&dsh_tasks::LeftRunning {
            task_id: task_id.to_string(),
            description,
            pids: pids.clone(),
        });
        text.push_str(&format!("{line_start}{line}"));
        ran.left_running = Some(Box::new(LeftRunning { task_id, pids }));
    }
    Ok(ToolResult::done(text, ToolOutcome::Ran(ran)))
}

async fn bash_output(
    registry: &Addr<TaskRegistry>,
    escalation_offered: bool,
    args: ReadArgs,
    call: ToolCall,
) -> Result<ToolResult, ToolError> {
    let ReadArgs {
        task_id,
        wait,
        until,
    } = args;
    let caller = call.caller.map(|c| c.session_id);
    let wait = wait.map(|timeout| (timeout, until));
    wait_then_read(
        registry,
        escalation_offered,
        task_id,
        caller,
        wait,
        call.cancel,
        "bash_output",
    )
    .await
}

async fn bash_kill(
    registry: &Addr<TaskRegistry>,
    task_id: TaskId,
    call: ToolCall,
) -> Result<ToolResult, ToolError> {
    let caller = call.caller.map(|c| c.session_id);
    let reply = flatten(
        registry
            .send(KillTask {
                id: task_id.to_string(),
                caller,
            })
            .await,
        REGISTRY,
    )?;
    let result = if reply.outcome == TaskKillOutcome::Killed {
        KillResult::Killed
    } else {
        KillResult::AlreadyFinished
    };
    let mut text = render_kill(task_id.as_str(), result == KillResult::Killed);
    // An ended task's kill says what it left running, and how to stop that.
    if let Some(left) = &reply.snapshot.left_running {
        text.push('\n');
        text.push_str(&left_running_line(left));
    }
    Ok(ToolResult::done(
        text,
        ToolOutcome::Kill { task_id, result },
    ))
}

impl Handler<TaskDone> for ToolBash {
    type Result = ();

    /// Notices go only to the exact owner, only if it has not already seen the end (it killed the task,
    /// or read the final status) and is not about to (a call of it was waiting for the end, and its
    /// reply shows it), and are dropped silently when its mailbox is closed.
    fn handle(&mut self, done: TaskDone, _: &mut Self::Context) {
        let Some(owner) = done.owner else { return };
        if done.snapshot.reported || done.awaited {
            return;
        }
        if let Some(inbox) = owner.inbox() {
            let text = render_notice(
                &done.snapshot.id,
                &done.snapshot.status,
                done.snapshot.left_running.as_ref(),
            );
            tracing::debug!(task = %done.snapshot.id, session = %owner.session_id, "delivering completion notice");
            inbox.do_send(dsh_tasks::Inject {
                text,
                source: "tool-bash",
            });
        }
    }
}
