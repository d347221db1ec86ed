//! The sandbox escalation cases of the bash tool (TB-35…TB-45), the sandbox markers of background
//! reads (TB-51, LG-24…LG-26) and the denial part of TB-68. The executor is the real
//! `SandboxBashExecutor` over a fake provider (argv unchanged), behind a recorder that notes the
//! mode of every run and start; the approver is a test actor answering a scripted outcome.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use actix::prelude::*;
use dsh_bash::sandbox::Wrap;
use dsh_bash::*;
use dsh_bash::{ProcessManager, TaskOutput, TaskStatus};
use dsh_tasks::{AgentRef, Inject, RegistryConfig, TaskRegistry};
use dsh_test_support::actors::{Answerer, Log};
use dsh_tool_bash::*;
use serde_json::{Value, json};

/// Wraps nothing; every command runs as is with full enforcement.
struct PassThrough;

impl SandboxProvider for PassThrough {
    fn confine(
        &self,
        argv: &[String],
        policy: &SandboxPolicy,
        _session: Option<&str>,
    ) -> Result<Wrap, ExecError> {
        Ok(Wrap::through_runner(
            Vec::new(),
            argv,
            policy,
            vec!["permission denied".into()],
            vec!["fake-runner: ".into()],
        ))
    }
}

/// Forwards to the sandbox executor, noting each call's mode.
struct Recorder {
    inner: Addr<SandboxBashExecutor>,
    modes: Arc<Mutex<Vec<SandboxMode>>>,
}

impl Actor for Recorder {
    type Context = Context<Self>;
}

impl Recorder {
    fn note(&self, spec: &BashExecSpec) {
        let mode = spec.sandbox_policy.as_ref().unwrap().mode;
        self.modes.lock().unwrap().push(mode);
    }
}

/// Notes the mode of each `$message` and forwards it to the sandbox executor.
macro_rules! forward {
    ($message:ident, $answer:ty) => {
        impl Handler<$message> for Recorder {
            type Result = ResponseFuture<Result<$answer, ExecError>>;
            fn handle(&mut self, message: $message, _: &mut Self::Context) -> Self::Result {
                self.note(&message.0);
                let inner = self.inner.clone();
                Box::pin(async move { inner.send(message).await.unwrap() })
            }
        }
    };
}

forward!(Run, BashRunResult);
forward!(Start, BashProcess);

/// An agent whose notices are dropped.
type Agent = dsh_test_support::actors::Recorder<Inject>;

fn agent(session: &str) -> AgentRef {
    AgentRef::new(session, Agent::start_discarding().recipient())
}

struct Setup {
    tool: Addr<ToolBash>,
    modes: Arc<Mutex<Vec<SandboxMode>>>,
    manager: Addr<ProcessManager>,
    _spill: tempfile::TempDir,
}

/// The tools a composition offers with background work, with or without a sandbox.
fn facts(sandbox: bool) -> DefinitionFacts {
    DefinitionFacts {
        timeout_ms: 10_000,
        max_timeout_ms: 600_000,
        background: true,
        sandbox,
    }
}

fn tool_config(approvals: bool) -> ToolBashConfig {
    ToolBashConfig {
        dsh_home: PathBuf::from("/tmp/dsh-home"),
        background: true,
        approvals,
    }
}

impl Setup {
    /// A sandboxing composition (default `read-only`), or a plain local one.
    fn new(sandboxed: bool, approvals: bool) -> Self {
        let spill = tempfile::tempdir().unwrap();
        let manager = ProcessManager::new(ManagerConfig {
            spill_dir: Some(spill.path().into()),
            ..Default::default()
        })
        .start();
        let registry = TaskRegistry::new(RegistryConfig::default()).start();
        let config = BashConfig {
            grace_ms: 200,
            ..BashConfig::default()
        };
        let modes = Arc::new(Mutex::new(Vec::new()));
        let (executor, policy) = if sandboxed {
            let resolver = SandboxPolicyResolver::new(
                SandboxMode::ReadOnly,
                &std::env::current_dir().unwrap(),
            );
            let default = resolver.resolve(None, None);
            let inner = SandboxBashExecutor::new(
                config.clone(),
                manager.clone(),
                Arc::new(PassThrough),
                default.clone(),
            )
            .unwrap()
            .start();
            let recorder = Recorder {
                inner,
                modes: modes.clone(),
            }
            .start();
            let resolve = SandboxBashExecutor::resolver(&config, default);
            (
                ExecutorRef::new(&config, resolve, recorder).confining(),
                Some(resolver),
            )
        } else {
            let local = LocalBashExecutor::new(config.clone(), manager.clone())
                .unwrap()
                .start();
            (ExecutorRef::local(local, &config), None)
        };
        let tool = ToolBash::new(tool_config(approvals), executor, registry, policy)
            .unwrap()
            .start();
        Self {
            tool,
            modes,
            manager,
            _spill: spill,
        }
    }

    /// Sets session `session`'s sandbox mode override to `mode`.
    async fn set_session_mode(&self, session: &str, mode: SandboxMode) {
        self.tool
            .send(SetSessionSandboxMode {
                session: session.into(),
                mode: Some(mode),
            })
            .await
            .unwrap()
            .unwrap();
    }

    fn modes(&self) -> Vec<SandboxMode> {
        self.modes.lock().unwrap().clone()
    }

    async fn call(&self, call: ToolCall) -> ToolResult {
        self.tool.send(call).await.unwrap()
    }

    /// Calls `bash` escalating to `mode` as session `session`, every approval answered with
    /// `answer`: the result, and the questions asked.
    async fn escalate(
        &self,
        mode: &str,
        session: &str,
        answer: ApprovalOutcome,
    ) -> (ToolResult, Log<ApprovalRequest>) {
        let (recipient, asked) = approver(answer);
        let call = bash(escalation_args(mode))
            .with_caller(agent(session))
            .with_approver(recipient);
        (self.call(call).await, asked)
    }

    async fn shutdown(&self) {
        let _ = self.manager.send(dsh_process::Shutdown).await;
    }
}

/// Answers every approval with `answer`, keeping the questions.
fn approver(answer: ApprovalOutcome) -> (Recipient<ApprovalRequest>, Log<ApprovalRequest>) {
    let (addr, asked) = Answerer::new(answer).start();
    (addr.recipient(), asked)
}

fn escalation_args(mode: &str) -> Value {
    json!({
        "command": "true",
        "description": "test escalation",
        "sandbox_permissions": mode,
        "justification": "the command needs workspace writes",
    })
}

/// A `bash` call escalating to `workspace-write`.
fn widening() -> ToolCall {
    bash(escalation_args("workspace-write"))
}

/// A background `bash` call escalating to `workspace-write`.
fn widening_in_background() -> ToolCall {
    let mut arguments = escalation_args("workspace-write");
    arguments["run_in_background"] = json!(true);
    bash(arguments)
}

fn bash(arguments: Value) -> ToolCall {
    ToolCall::new("bash", arguments)
}

/// Catalogue: TB-35.
#[test]
fn a_confining_executor_without_a_policy_fails_to_load() {
    let system = System::new();
    system.block_on(async {
        let setup = Setup::new(false, true);
        let registry = TaskRegistry::new(RegistryConfig::default()).start();
        let local = LocalBashExecutor::new(BashConfig::default(), setup.manager.clone())
            .unwrap()
            .start();
        let confining = ExecutorRef::local(local, &BashConfig::default()).confining();
        let err = ToolBash::new(tool_config(true), confining, registry, None)
            .err()
            .unwrap();
        assert_eq!(
            err.to_string(),
            "tool-bash: the mounted bash executor confines but ctx.sandboxPolicy is missing"
        );
        assert_eq!(err.code(), "MISCONFIGURED");
        setup.shutdown().await;
    });
}

/// Catalogue: TB-36.
#[actix_rt::test]
async fn fields_advertised_and_pairing_validated() {
    let definitions = tool_definitions(facts(true));
    let bash_def = &definitions[0];
    let properties = &bash_def.input_schema["properties"];
    assert_eq!(
        properties["sandbox_permissions"]["enum"],
        json!(["workspace-write", "danger-full-access"])
    );
    assert_eq!(properties["justification"]["type"], "string");
    assert!(bash_def.description.contains("approval prompt"));
    assert!(
        bash_def
            .description
            .contains("[sandbox: file access denied under <mode> mode]")
    );
    let plain = tool_definitions(facts(false));
    assert!(
        plain[0].input_schema["properties"]
            .get("sandbox_permissions")
            .is_none()
    );
    assert!(!plain[0].description.contains("approval prompt"));

    let s = Setup::new(true, true);
    let cases = [
        (
            json!({"command": "true", "description": "d", "sandbox_permissions": "workspace-write"}),
            "Error: invalid escalation: sandbox_permissions requires a justification",
        ),
        (
            json!({"command": "true", "description": "d", "justification": "because"}),
            "Error: invalid escalation: justification is only valid together with sandbox_permissions",
        ),
        (
            json!({"command": "true", "description": "d", "sandbox_permissions": "workspace-write", "justification": "  "}),
            "Error: invalid justification: expected a non-empty sentence",
        ),
        (
            json!({"command": "true", "description": "d", "sandbox_permissions": "root", "justification": "x"}),
            "Error: invalid arguments: \"sandbox_permissions\" must be one of [\"workspace-write\",\"danger-full-access\"]",
        ),
    ];
    for (arguments, expected) in cases {
        let result = s.call(bash(arguments)).await;
        assert!(result.is_error);
        assert_eq!(result.text, expected);
    }
    assert!(s.modes().is_empty());
    s.shutdown().await;
}

/// Catalogue: TB-37.
#[actix_rt::test]
async fn composition_and_widening_checks() {
    let plain = Setup::new(false, true);
    let result = plain.call(widening()).await;
    assert!(result.is_error);
    assert_eq!(
        result.text,
        "Error: sandbox_permissions is not available in this composition (no sandboxing executor to escalate)"
    );
    plain.shutdown().await;

    let s = Setup::new(true, true);
    s.set_session_mode("s-ww", SandboxMode::WorkspaceWrite)
        .await;
    let (result, asked) = s
        .escalate("workspace-write", "s-ww", ApprovalOutcome::AllowedOnce)
        .await;
    assert_eq!(
        result.text,
        "Error: sandbox escalation to \"workspace-write\" is not strictly wider than this call's current \"workspace-write\" mode"
    );
    assert!(
        asked.lock().unwrap().is_empty(),
        "no approval prompt is raised"
    );
    // A mode outside the vocabulary can never become a session's standing mode (the seeds' malformed
    // `sandbox/mode` event): it does not parse, and nothing is wider than the widest mode.
    assert_eq!(SandboxMode::parse("unknown-mode"), None);
    assert!(SandboxMode::DangerFullAccess.wider().is_empty());
    assert!(s.modes().is_empty());
    s.shutdown().await;
}

/// Catalogue: TB-38.
#[actix_rt::test]
async fn fail_closed_when_approval_cannot_be_routed() {
    let unserviced = Setup::new(true, false);
    let result = unserviced.call(widening().with_caller(agent("a"))).await;
    assert_eq!(
        result.text,
        "Error: sandbox escalation to \"workspace-write\" requires approval, but no approval service is composed"
    );
    unserviced.shutdown().await;

    let s = Setup::new(true, true);
    let result = s.call(widening()).await;
    assert_eq!(
        result.text,
        "Error: sandbox escalation to \"workspace-write\" requires approval, but the call has no agent to route it through"
    );
    let result = s.call(widening().with_caller(agent("a"))).await;
    assert_eq!(
        result.text,
        "Error: sandbox escalation to \"workspace-write\" requires approval, but no approval channel is available"
    );
    let (result, _) = s
        .escalate("workspace-write", "a", ApprovalOutcome::Unavailable)
        .await;
    assert!(
        result.text.contains("no approval channel"),
        "{}",
        result.text
    );
    let no_answerer = NoApprovalChannel.start().recipient();
    let result = s.call(widening().with_approver(no_answerer)).await;
    assert!(
        result.text.contains("no approval channel"),
        "{}",
        result.text
    );
    assert!(s.modes().is_empty());
    s.shutdown().await;
}

/// Catalogue: TB-39, TB-40.
#[actix_rt::test]
async fn rejected_and_cancelled_run_nothing() {
    let s = Setup::new(true, true);
    for (answer, expected) in [
        (
            ApprovalOutcome::Rejected,
            "Error: the user rejected escalating this command to \"workspace-write\"",
        ),
        (
            ApprovalOutcome::Cancelled,
            "Error: approval for escalating to \"workspace-write\" was cancelled",
        ),
    ] {
        let (recipient, asked) = approver(answer);
        let result = s
            .call(
                widening()
                    .with_caller(agent("a"))
                    .with_approver(recipient)
                    .with_id("7"),
            )
            .await;
        assert!(result.is_error);
        assert_eq!(result.text, expected);
        let asked = asked.lock().unwrap();
        assert_eq!(
            asked[0].reason,
            "escalate sandbox to workspace-write: the command needs workspace writes"
        );
        assert_eq!(asked[0].session.as_deref(), Some("a"));
        assert_eq!(asked[0].call_id.as_deref(), Some("7"));
        assert_eq!(asked[0].tool, "bash");
    }
    assert!(s.modes().is_empty());
    s.shutdown().await;
}

/// Catalogue: TB-41.
#[actix_rt::test]
async fn granted_foreground_and_background_run_under_the_approved_mode() {
    let s = Setup::new(true, true);
    let (recipient, _) = approver(ApprovalOutcome::AllowedOnce);
    let result = s
        .call(
            widening()
                .with_caller(agent("a"))
                .with_approver(recipient.clone()),
        )
        .await;
    assert!(!result.is_error, "{}", result.text);
    assert_eq!(
        result.structured.unwrap()["sandbox"]["mode"],
        "workspace-write"
    );
    let result = s
        .call(
            widening_in_background()
                .with_caller(agent("a"))
                .with_approver(recipient),
        )
        .await;
    assert_eq!(result.text, "started background task bash-1");
    assert_eq!(
        s.modes(),
        vec![SandboxMode::WorkspaceWrite, SandboxMode::WorkspaceWrite]
    );
    s.shutdown().await;
}

/// Catalogue: TB-42.
#[actix_rt::test]
async fn a_cancel_after_the_grant_publishes_nothing() {
    let s = Setup::new(true, true);
    let cancel = AbortSignal::new();
    let on_ask = cancel.clone();
    let (recipient, _) = Answerer::new(ApprovalOutcome::AllowedOnce)
        .on_ask(move || on_ask.abort("cancelled while deciding"))
        .start();
    let recipient = recipient.recipient();
    let result = s
        .call(
            widening_in_background()
                .with_caller(agent("a"))
                .with_approver(recipient)
                .with_cancel(cancel),
        )
        .await;
    assert!(result.is_error);
    assert_eq!(result.text, "Error: tool call aborted");
    assert!(s.modes().is_empty());
    s.shutdown().await;
}

/// Never answers (the call waits until it is cancelled); says when it has been asked.
struct Silent(Arc<tokio::sync::Notify>);
impl Actor for Silent {
    type Context = Context<Self>;
}
impl Handler<ApprovalRequest> for Silent {
    type Result = ResponseFuture<ApprovalOutcome>;
    fn handle(&mut self, _: ApprovalRequest, _: &mut Self::Context) -> Self::Result {
        self.0.notify_one();
        Box::pin(std::future::pending())
    }
}

#[actix_rt::test]
async fn a_cancel_while_waiting_for_approval_ends_the_wait_as_cancelled() {
    let s = Setup::new(true, true);
    let cancel = AbortSignal::new();
    let asked = Arc::new(tokio::sync::Notify::new());
    let call = widening()
        .with_caller(agent("a"))
        .with_approver(Silent(asked.clone()).start().recipient())
        .with_cancel(cancel.clone());
    let pending = s.tool.send(call);
    let canceller = async {
        asked.notified().await;
        cancel.abort("client cancel");
    };
    let (result, ()) = tokio::join!(pending, canceller);
    let result = result.unwrap();
    assert_eq!(
        result.text,
        "Error: approval for escalating to \"workspace-write\" was cancelled"
    );
    assert!(s.modes().is_empty());
    s.shutdown().await;
}

/// Catalogue: TB-43.
#[actix_rt::test]
async fn the_session_override_drives_ordinary_calls_and_widening() {
    let s = Setup::new(true, true);
    s.set_session_mode("ww", SandboxMode::WorkspaceWrite).await;
    let result = s
        .call(bash(json!({"command": "true", "description": "d"})).with_caller(agent("ww")))
        .await;
    assert!(!result.is_error, "{}", result.text);
    let (result, _) = s
        .escalate("danger-full-access", "ww", ApprovalOutcome::AllowedOnce)
        .await;
    assert!(!result.is_error, "{}", result.text);
    assert_eq!(
        s.modes(),
        vec![SandboxMode::WorkspaceWrite, SandboxMode::DangerFullAccess]
    );
    s.shutdown().await;
}

/// Catalogue: TB-44.
#[test]
fn the_canonical_value_omits_absent_optional_facts() {
    let value = sandbox_structured(&SandboxFacts {
        mode: SandboxMode::ReadOnly,
        denied: false,
        enforcement: None,
        runner_failed: false,
    });
    assert_eq!(value, json!({"mode": "read-only", "denied": false}));
    let value = sandbox_structured(&SandboxFacts {
        mode: SandboxMode::ReadOnly,
        denied: false,
        enforcement: Some(Enforcement::Full),
        runner_failed: true,
    });
    assert_eq!(
        value,
        json!({"mode": "read-only", "denied": false, "enforcement": "full", "runner_failed": true})
    );
}

/// Catalogue: TB-45.
#[actix_rt::test]
async fn an_answer_outside_the_vocabulary_is_an_error() {
    let s = Setup::new(true, true);
    let (result, _) = s
        .escalate("workspace-write", "a", ApprovalOutcome::parse("rogue"))
        .await;
    assert_eq!(
        result.text,
        "Error: unreachable variant in EscalationOutcome: \"rogue\""
    );
    assert!(s.modes().is_empty());
    s.shutdown().await;
}

fn denied(mode: SandboxMode) -> SandboxFacts {
    SandboxFacts {
        mode,
        denied: true,
        enforcement: Some(Enforcement::Full),
        runner_failed: false,
    }
}

fn settled_read(delta: &str, facts: SandboxFacts) -> TaskOutput {
    TaskOutput {
        delta: delta.into(),
        sandbox: Some(facts),
        ..TaskOutput::default()
    }
}

const EXIT_1: TaskStatus = TaskStatus::Completed { exit_code: 1 };

/// A read of a task that exited 1 after a denial under `read-only`, rendered with `delta`, by a
/// confining tool (`escalates`) or not.
fn read_denied_read_only(delta: &str, escalates: bool) -> String {
    render_read_with(
        &settled_read(delta, denied(SandboxMode::ReadOnly)),
        &EXIT_1,
        escalates,
    )
}

/// The facts of a sandbox runner that failed under `mode`.
fn runner_failed(mode: SandboxMode, denied: bool) -> SandboxFacts {
    SandboxFacts {
        mode,
        denied,
        enforcement: Some(Enforcement::Full),
        runner_failed: true,
    }
}

/// Catalogue: TB-51.
#[test]
fn settled_sandbox_facts_in_reads() {
    let text = read_denied_read_only("tail", true);
    assert!(text.contains("[sandbox: escalation available"), "{text}");
    let text = read_denied_read_only("tail", false);
    assert_eq!(
        text,
        "tail\n[status: completed, exit code: 1]\n[sandbox: file access denied under read-only mode]"
    );
    let runner = runner_failed(SandboxMode::WorkspaceWrite, true);
    let text = render_read_with(&settled_read("", runner), &EXIT_1, true);
    assert!(text.contains("sandbox runner itself failed under workspace-write mode"));
    assert!(!text.contains("file access denied"));
    // While the task runs no facts are shown, even if the handle already has them.
    let text = render_read_with(
        &settled_read("x", denied(SandboxMode::ReadOnly)),
        &TaskStatus::Running,
        true,
    );
    assert_eq!(text, "x\n[status: running]");
}

/// Catalogue: LG-24.
#[test]
fn settled_background_denial_via_bash_output() {
    let text = read_denied_read_only("", true);
    assert!(
        text.ends_with(&format!(
            "[status: completed, exit code: 1]\n[sandbox: file access denied under read-only mode]\n{ESCALATION_HINT}"
        )),
        "{text}"
    );
    assert_eq!(
        ESCALATION_HINT,
        "[sandbox: escalation available — retry this exact command once with sandbox_permissions (the narrowest wider mode that suffices) + justification; the approval prompt asks the user]"
    );
}

/// Catalogue: LG-25.
#[test]
fn denial_facts_without_a_confining_executor_have_no_hint() {
    let text = read_denied_read_only("", false);
    assert!(
        text.ends_with("[sandbox: file access denied under read-only mode]"),
        "{text}"
    );
    assert!(!text.contains("escalation available"));
}

/// Catalogue: LG-26.
#[test]
fn background_runner_failure_marker() {
    let runner = runner_failed(SandboxMode::ReadOnly, false);
    let text = render_read_with(&settled_read("", runner), &EXIT_1, true);
    assert!(
        text.ends_with("[sandbox: the sandbox runner itself failed under read-only mode — the command did not run; this is a sandbox problem, not a command failure]"),
        "{text}"
    );
    assert!(!text.contains("file access denied"));
}

fn foreground(facts: Option<SandboxFacts>) -> BashRunResult {
    BashRunResult {
        ending: RunEnding::Exited,
        exit_code: Some(1),
        signal: None,
        timeout_ms: 1000,
        stdout: CollectedOutput::default(),
        stderr: CollectedOutput {
            text: "denied".into(),
            ..Default::default()
        },
        oom_killed: false,
        sandbox: facts,
        left_running: None,
    }
}

/// Catalogue: TB-68.
#[test]
fn denial_before_exit() {
    let text = render_result_with(&foreground(Some(denied(SandboxMode::ReadOnly))), false);
    assert_eq!(
        text,
        "[stderr]\ndenied\n[sandbox: file access denied under read-only mode]\n[exit code: 1]"
    );
    let text = render_result_with(&foreground(Some(denied(SandboxMode::ReadOnly))), true);
    assert!(text.contains("[sandbox: escalation available"));
    assert!(text.ends_with("\n[exit code: 1]"));
    let mut not_denied = denied(SandboxMode::ReadOnly);
    not_denied.denied = false;
    let text = render_result_with(&foreground(Some(not_denied)), true);
    assert!(!text.contains("[sandbox:"));
}

/// A host tells a sandbox failure from a bad argument by the error's code, not its text: the
/// runner failing is `SANDBOX_UNAVAILABLE` with the contract's text, a blank command
/// `INVALID_ARGUMENTS`, a refused escalation `ESCALATION_REFUSED`.
#[actix_rt::test]
async fn error_codes_tell_a_sandbox_failure_from_a_bad_argument() {
    let setup = Setup::new(true, false);
    let broken = setup
        .call(bash(json!({
            "command": "echo 'fake-runner: cannot set up' >&2; exit 1",
            "description": "the runner fails",
        })))
        .await;
    assert!(broken.is_error, "{}", broken.text);
    assert!(
        broken.text.starts_with(
            "Error: sandbox mode \"read-only\" is requested but no sandbox backend is usable on this host"
        ),
        "{}",
        broken.text
    );
    let error = broken.error.as_ref().unwrap();
    assert_eq!(error.code(), "SANDBOX_UNAVAILABLE");
    assert_eq!(broken.text, format!("Error: {error}"));

    let blank = setup
        .call(bash(json!({"command": "", "description": "nothing"})))
        .await;
    assert_eq!(
        blank.text,
        "Error: invalid command: expected a non-empty string"
    );
    assert_eq!(blank.error.as_ref().unwrap().code(), "INVALID_ARGUMENTS");

    let refused = setup.call(widening().with_caller(agent("s"))).await;
    assert_eq!(
        refused.error.as_ref().unwrap().code(),
        "ESCALATION_REFUSED",
        "{}",
        refused.text
    );
    assert_eq!(
        refused.text,
        "Error: sandbox escalation to \"workspace-write\" requires approval, but no approval service is composed"
    );
    setup.shutdown().await;
}
