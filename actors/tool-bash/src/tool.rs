//! The `ToolBash` actor: receives model tool calls, validates them, calls the executor or the task
//! registry, renders what the model sees, and delivers completion notices to the agent that owns a task.
//!
//! Non-zero exits, timeouts and kills are results (`is_error: false`); only infrastructure failures
//! (bad arguments, spawn errors, aborts, unknown or foreign tasks) are errors, rendered `Error: <message>`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use actix::prelude::*;
use dsh_bash::{
    AbortSignal, BashConfig, BashExecRequest, LocalBashExecutor, OutputPeek, Resolver, Run,
    SandboxMode, SandboxPolicy, SandboxPolicyResolver, Start,
};
use dsh_tasks::{
    AgentRef, KillTask, ReadTask, Register, Subscribe, TaskDone, TaskKillOutcome, TaskRegistry,
    WaitOutcome, WaitTask,
};
use serde_json::Value;

use crate::approval::ApprovalRequest;
use crate::args::{parse_bash_args_with, parse_read_args, parse_task_id};
use crate::definitions::{DefinitionFacts, ToolDefinition, tool_definitions};
use crate::escalation::escalate;
use crate::managed_env::managed_env;
use crate::render::{
    render_kill, render_moved, render_notice, render_read_with, render_result_with, render_started,
};
use crate::structured::{
    bash_structured, kill_structured, moved_structured, read_structured, started_structured,
};

/// One model tool call.
#[derive(Message, Clone, Debug)]
#[rtype(result = "ToolResult")]
pub struct ToolCall {
    /// `bash`, `bash_output` or `bash_kill`.
    pub name: String,
    /// The arguments exactly as the model produced them.
    pub arguments: Value,
    /// The calling agent, if any: its session owns background tasks it starts and gets their notices.
    pub caller: Option<AgentRef>,
    /// Cancels a foreground call (reported as `command aborted`). Background tasks ignore it.
    pub cancel: Option<AbortSignal>,
    /// Filled with a foreground `bash` call's output once it runs, so a front end can report progress.
    pub peek: Option<OutputPeek>,
    /// The front end's id for the call (quoted in approval requests).
    pub id: Option<String>,
    /// Where an escalation's approval is asked: the calling agent's (or its front end's) mailbox.
    pub approver: Option<Recipient<ApprovalRequest>>,
}

impl ToolCall {
    /// A call with no caller, no cancel signal and no peek.
    pub fn new(name: impl Into<String>, arguments: Value) -> Self {
        Self {
            name: name.into(),
            arguments,
            caller: None,
            cancel: None,
            peek: None,
            id: None,
            approver: None,
        }
    }

    /// Names the call, for approval requests.
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Routes the call's escalation approvals to `approver`.
    pub fn with_approver(mut self, approver: Recipient<ApprovalRequest>) -> Self {
        self.approver = Some(approver);
        self
    }

    /// Makes the call an agent's: its background tasks belong to that agent and notify it.
    pub fn with_caller(mut self, caller: AgentRef) -> Self {
        self.caller = Some(caller);
        self
    }

    /// Lets `cancel` abort the call while it runs in the foreground.
    pub fn with_cancel(mut self, cancel: AbortSignal) -> Self {
        self.cancel = Some(cancel);
        self
    }

    /// Lets `peek` watch a foreground `bash` call's output while it runs.
    pub fn with_peek(mut self, peek: OutputPeek) -> Self {
        self.peek = Some(peek);
        self
    }
}

/// What the model sees, and the same facts for programs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolResult {
    /// The text the model sees.
    pub text: String,
    /// Whether the call failed (bad arguments, spawn error, abort, unknown task); a command's
    /// non-zero exit, timeout or kill is not an error.
    pub is_error: bool,
    /// The result as an object matching [`crate::output_schema`] for the tool (exit code, spill paths,
    /// task id, …); `None` for errors that have no such facts (bad arguments, unknown tasks).
    pub structured: Option<Value>,
}

impl ToolResult {
    /// A successful result showing `text`, without structured content.
    pub fn ok(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            is_error: false,
            structured: None,
        }
    }

    /// An error result: `Error: <message>`.
    pub fn error(message: impl std::fmt::Display) -> Self {
        Self {
            text: format!("Error: {message}"),
            is_error: true,
            structured: None,
        }
    }

    /// Attaches the structured form of the result.
    pub fn with_structured(mut self, structured: Value) -> Self {
        self.structured = Some(structured);
        self
    }
}

/// The executor seam: its resolver, called in place, and the two messages as recipients, so any
/// actor handling [`Run`] and [`Start`] can stand in.
#[derive(Clone)]
pub struct ExecutorRef {
    /// Turns a request into a spec with the executor's defaults and caps.
    pub resolve: Resolver,
    /// Where foreground runs go.
    pub run: Recipient<Run>,
    /// Where background starts go.
    pub start: Recipient<Start>,
    /// Whether the executor confines commands (a sandbox executor): the tool then advertises the
    /// escalation parameters and needs a sandbox policy resolver.
    pub confines: bool,
}

impl ExecutorRef {
    /// An executor actor at `addr` that resolves requests with `resolve`.
    pub fn new<A>(resolve: Resolver, addr: Addr<A>) -> Self
    where
        A: Actor<Context = Context<A>> + Handler<Run> + Handler<Start>,
    {
        Self {
            resolve,
            run: addr.clone().recipient(),
            start: addr.recipient(),
            confines: false,
        }
    }

    /// An executor that confines commands (see [`ExecutorRef::confines`]).
    pub fn confining(mut self) -> Self {
        self.confines = true;
        self
    }

    /// The local executor, resolving with the same config it was started with.
    pub fn local(addr: Addr<LocalBashExecutor>, config: &BashConfig) -> Self {
        Self::new(config.resolver(), addr)
    }
}

/// Tool-layer settings.
#[derive(Clone, Debug)]
pub struct ToolBashConfig {
    /// The workspace: a relative `workdir` resolves against it. `None`: the runtime process's cwd.
    pub cwd: Option<PathBuf>,
    /// The resolved, absolute `DSH_HOME` given to every command.
    pub dsh_home: PathBuf,
    /// Offer `run_in_background`, `bash_output` and `bash_kill`.
    pub background: bool,
    /// The executor's default timeout, quoted in the schema.
    pub timeout_ms: u64,
    /// The executor's maximum timeout, quoted in the schema.
    pub max_timeout_ms: u64,
    /// An approval service is composed: escalations are asked of the call's approver. Without it
    /// every escalation fails closed (`… but no approval service is composed`).
    pub approvals: bool,
}

/// The tool actor.
pub struct ToolBash {
    config: ToolBashConfig,
    executor: ExecutorRef,
    registry: Addr<TaskRegistry>,
    /// The standing sandbox policy, present exactly when the executor confines.
    policy: Option<SandboxPolicyResolver>,
}

impl ToolBash {
    /// The tool actor over an executor and the task registry its background tasks go to. A
    /// confining executor needs `policy` (the seeds' load-time error otherwise); a policy without
    /// one is ignored.
    pub fn new(
        config: ToolBashConfig,
        executor: ExecutorRef,
        registry: Addr<TaskRegistry>,
        policy: Option<SandboxPolicyResolver>,
    ) -> Result<Self, String> {
        if executor.confines && policy.is_none() {
            return Err(
                "tool-bash: the mounted bash executor confines but ctx.sandboxPolicy is missing"
                    .into(),
            );
        }
        let policy = policy.filter(|_| executor.confines);
        Ok(Self {
            config,
            executor,
            registry,
            policy,
        })
    }

    /// The definitions to show a model; `sandbox` when the executor confines.
    pub fn definitions(config: &ToolBashConfig, sandbox: bool) -> Vec<ToolDefinition> {
        tool_definitions(DefinitionFacts {
            timeout_ms: config.timeout_ms,
            max_timeout_ms: config.max_timeout_ms,
            background: config.background,
            sandbox,
        })
    }
}

/// Sets (`Some`) or clears (`None`) a session's standing sandbox mode (the seeds' `sandbox/mode`
/// session event). Never shown to the model. Fails when the executor does not confine.
#[derive(Message, Clone, Debug)]
#[rtype(result = "Result<(), String>")]
pub struct SetSessionSandboxMode {
    /// The agent session.
    pub session: String,
    /// Its new standing mode.
    pub mode: Option<SandboxMode>,
}

impl Handler<SetSessionSandboxMode> for ToolBash {
    type Result = Result<(), String>;

    fn handle(&mut self, msg: SetSessionSandboxMode, _: &mut Self::Context) -> Self::Result {
        let policy = self
            .policy
            .as_mut()
            .ok_or("the bash executor does not sandbox; there is no mode to set")?;
        policy.set_session_mode(&msg.session, msg.mode);
        Ok(())
    }
}

/// Sets (`Some`) or clears (`None`) one session's own workspace root for the sandbox policy: what
/// `workspace-write` lets its commands write. Without a sandboxing executor there is nothing to
/// confine, and the message does nothing.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct SetSessionWorkspace {
    /// The agent session.
    pub session: String,
    /// Its workspace root.
    pub root: Option<std::path::PathBuf>,
}

impl Handler<SetSessionWorkspace> for ToolBash {
    type Result = ();

    fn handle(&mut self, msg: SetSessionWorkspace, _: &mut Self::Context) {
        if let Some(policy) = self.policy.as_mut() {
            policy.set_session_root(&msg.session, msg.root.as_deref());
        }
    }
}

/// The standing sandbox policy of a session (its mode and workspace root, or the defaults), for
/// work a host starts on a session's behalf outside a tool call; `None` without a sandboxing
/// executor.
#[derive(Message, Debug, Clone)]
#[rtype(result = "Option<dsh_bash::SandboxPolicy>")]
pub struct StandingSandboxPolicy {
    /// The agent session, if any.
    pub session: Option<String>,
}

impl Handler<StandingSandboxPolicy> for ToolBash {
    type Result = Option<dsh_bash::SandboxPolicy>;

    fn handle(&mut self, msg: StandingSandboxPolicy, _: &mut Self::Context) -> Self::Result {
        self.policy
            .as_ref()
            .map(|policy| policy.resolve(msg.session.as_deref(), None))
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
        // Step 5: the standing policy, resolved at dispatch.
        let session = call.caller.as_ref().map(|c| c.session_id.as_str());
        let standing = self
            .policy
            .as_ref()
            .map(|policy| policy.resolve(session, None));
        let sandboxed = standing.is_some();
        Box::pin(async move {
            if call.cancel.as_ref().is_some_and(AbortSignal::is_aborted) {
                return ToolResult::error("tool call aborted before dispatch");
            }
            let outcome = match call.name.as_str() {
                "bash" => bash(&config, &executor, &registry, standing, call).await,
                "bash_output" if config.background => bash_output(&registry, sandboxed, call).await,
                "bash_kill" if config.background => bash_kill(&registry, call).await,
                other => Err(format!(
                    "unknown tool \"{other}\"; available tools: {}",
                    ToolBash::definitions(&config, sandboxed)
                        .iter()
                        .map(|d| d.name)
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            };
            outcome.unwrap_or_else(ToolResult::error)
        })
    }
}

/// A reply from another actor as tool text: a closed mailbox says which actor is gone; an error keeps
/// its own message.
fn flatten<T, E: std::fmt::Display>(
    reply: Result<Result<T, E>, MailboxError>,
    actor: &str,
) -> Result<T, String> {
    reply
        .map_err(|_| format!("the {actor} is not running"))?
        .map_err(|err| err.to_string())
}

const EXECUTOR: &str = "bash executor";
const REGISTRY: &str = "task registry";

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
    call: ToolCall,
) -> Result<ToolResult, String> {
    let args = parse_bash_args_with(&call.arguments, standing.is_some())?;
    let escalation_offered = standing.is_some();
    let policy = match &args.escalation {
        Some(escalation) => {
            let granted = escalate(config, standing.as_ref(), escalation, &call).await?;
            if call.cancel.as_ref().is_some_and(AbortSignal::is_aborted) {
                // Cancelled after the grant: nothing is published.
                return Err("tool call aborted".into());
            }
            Some(granted)
        }
        None => standing,
    };
    if args.run_in_background && !config.background {
        return Err(
            "run_in_background is disabled for this deployment (enableRunInBackground: false)"
                .into(),
        );
    }
    let session = call.caller.as_ref().map(|c| c.session_id.as_str());
    // A foreground run always gets a peek: it also yields the whole-stream byte counts at the end.
    let peek = (!args.run_in_background).then(|| call.peek.clone().unwrap_or_default());
    // Only named arguments are forwarded: a model cannot set env, stdin or output budgets.
    let request = BashExecRequest {
        command: args.command.clone(),
        workdir: resolve_workdir(args.workdir, config.cwd.as_deref()),
        timeout_ms: args.timeout_ms,
        dsh_env: Some(managed_env(&config.dsh_home, session)),
        abort: if args.run_in_background {
            None
        } else {
            call.cancel.clone()
        },
        peek: peek.clone(),
        session: session.map(str::to_owned),
        sandbox_policy: policy,
        ..BashExecRequest::default()
    };
    let spec = (executor.resolve)(request).map_err(|err| err.to_string())?;
    if args.run_in_background {
        let handle = flatten(executor.start.send(Start(spec)).await, EXECUTOR)?;
        let register = Register {
            kind: "bash".into(),
            label: args.command,
            owner: call.caller,
            producer: Box::new(handle),
        };
        let id = flatten(registry.send(register).await, REGISTRY)?;
        return Ok(ToolResult::ok(render_started(&id)).with_structured(started_structured(&id)));
    }
    let began = std::time::Instant::now();
    let mut result = flatten(executor.run.send(Run(spec)).await, EXECUTOR)?;
    if let Some(moved) = result.moved_to_background.take() {
        let register = Register {
            kind: "bash".into(),
            label: args.command,
            owner: call.caller,
            producer: Box::new(moved.handle),
        };
        let id = flatten(registry.send(register).await, REGISTRY)?;
        let text = render_moved(&moved.output, result.timeout_ms, &id);
        return Ok(ToolResult::ok(text).with_structured(moved_structured(&id, result.timeout_ms)));
    }
    let duration_ms = began.elapsed().as_millis() as u64;
    let totals = peek.as_ref().and_then(OutputPeek::snapshot);
    let structured = bash_structured(&result, duration_ms, totals.as_ref());
    if result.aborted {
        return Ok(ToolResult::error("command aborted").with_structured(structured));
    }
    Ok(ToolResult::ok(render_result_with(&result, escalation_offered)).with_structured(structured))
}

async fn bash_output(
    registry: &Addr<TaskRegistry>,
    escalation_offered: bool,
    call: ToolCall,
) -> Result<ToolResult, String> {
    let args = parse_read_args(&call.arguments)?;
    let id = args.task_id;
    let caller = call.caller.map(|c| c.session_id);
    if let Some(wait_ms) = args.wait_ms {
        let cancel = call.cancel.clone();
        let until = args
            .until
            .map(|until| Arc::new(until) as Arc<dyn dsh_tasks::OutputCondition>);
        let wait = WaitTask {
            id: id.clone(),
            caller: caller.clone(),
            timeout: std::time::Duration::from_millis(wait_ms),
            until,
            cancel: Box::pin(async move { dsh_bash::wait_abort(cancel.as_ref()).await }),
        };
        let outcome = flatten(registry.send(wait).await, REGISTRY)?;
        tracing::debug!(task = %id, ?outcome, "bash_output wait ended");
        if outcome == WaitOutcome::Aborted {
            return Err("wait aborted".into());
        }
    }
    let reply = flatten(
        registry
            .send(ReadTask {
                id: id.clone(),
                caller,
            })
            .await,
        REGISTRY,
    )?;
    let structured = read_structured(&id, &reply.output, &reply.snapshot.status);
    Ok(ToolResult::ok(render_read_with(
        &reply.output,
        &reply.snapshot.status,
        escalation_offered,
    ))
    .with_structured(structured))
}

async fn bash_kill(registry: &Addr<TaskRegistry>, call: ToolCall) -> Result<ToolResult, String> {
    let id = parse_task_id(&call.arguments)?;
    let caller = call.caller.map(|c| c.session_id);
    let reply = flatten(
        registry
            .send(KillTask {
                id: id.clone(),
                caller,
            })
            .await,
        REGISTRY,
    )?;
    let killed = reply.outcome == TaskKillOutcome::Killed;
    Ok(ToolResult::ok(render_kill(&id, killed)).with_structured(kill_structured(&id, killed)))
}

impl Handler<TaskDone> for ToolBash {
    type Result = ();

    /// Notices go only to the exact owner, only if it has not already seen the end (it killed the task),
    /// and are dropped silently when its mailbox is closed.
    fn handle(&mut self, done: TaskDone, _: &mut Self::Context) {
        let Some(owner) = done.owner else { return };
        if done.snapshot.reported {
            return;
        }
        if let Some(inbox) = owner.inbox() {
            let text = render_notice(&done.snapshot.id, &done.snapshot.status);
            tracing::debug!(task = %done.snapshot.id, session = %owner.session_id, "delivering completion notice");
            inbox.do_send(dsh_tasks::Inject {
                text,
                source: "tool-bash",
            });
        }
    }
}
