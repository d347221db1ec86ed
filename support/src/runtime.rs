//! A runtime for the library's tests (feature `runtime`): the catalogue's plain setup in the test's
//! actix system, an agent that records its notices, tool calls with a bound, and a shutdown that
//! checks nothing is left running.

use std::time::{Duration, Instant};

use actix::prelude::*;
use dsh::{AgentRef, Inject, Runtime, ToolCall, ToolResult};
use serde_json::{Value, json};

pub use crate::SOON;
use crate::actors::{Log, Recorder};

/// The catalogue's "plain" setup: executor timeout 10 s, grace 200 ms; spills in a temp dir.
pub fn runtime() -> (Runtime, tempfile::TempDir) {
    runtime_with(|b| b)
}

/// The plain setup, changed by `edit` before it starts.
pub fn runtime_with(
    edit: impl FnOnce(dsh::RuntimeBuilder) -> dsh::RuntimeBuilder,
) -> (Runtime, tempfile::TempDir) {
    let spill = tempfile::tempdir().unwrap();
    let builder = Runtime::builder()
        .timeout_ms(10_000)
        .grace_ms(200)
        .spill_dir(spill.path());
    (
        edit(builder).start_in_current_system().expect("runtime"),
        spill,
    )
}

/// Whether the default sandbox backend works here; if not, says why (the caller then skips).
pub fn sandbox_usable() -> bool {
    usable(
        dsh::LocalSandboxConfig::default(),
        "no sandbox backend here",
    )
}

/// Whether the Landlock backend works here; if not, says why (the caller then skips).
pub fn landlock_usable() -> bool {
    let landlock = dsh::LocalSandboxConfig {
        backend: dsh::BackendChoice::Landlock,
        ..Default::default()
    };
    usable(landlock, "Landlock is not usable here")
}

fn usable(config: dsh::LocalSandboxConfig, unusable: &str) -> bool {
    match dsh::LocalSandboxProvider::new(config)
        .expect("a sandbox config")
        .verdict()
    {
        Ok(_) => true,
        Err(reason) => {
            eprintln!("skipped: {unusable}: {reason}");
            false
        }
    }
}

/// The recording agent: it keeps every notice it is sent.
pub type Agent = Recorder<Inject>;

/// A recording agent and its name for the runtime.
pub struct TestAgent {
    /// The agent's actor (send it [`Stop`](crate::actors::Stop) to make it gone).
    pub addr: Addr<Agent>,
    /// How calls name it.
    pub agent: AgentRef,
    /// The notices it has been sent.
    pub notices: Log<Inject>,
}

impl TestAgent {
    /// Starts an agent for `session` in the current system.
    pub fn new(session: &str) -> Self {
        let (addr, notices) = Agent::start();
        let agent = AgentRef::new(session, addr.clone().recipient());
        Self {
            addr,
            agent,
            notices,
        }
    }

    /// Starts an agent for `session` and a background `command` as it: the agent and the task id.
    pub async fn with_task(rt: &Runtime, session: &str, command: &str) -> (Self, String) {
        let agent = Self::new(session);
        let id = start_bg(rt, Some(&agent.agent), command).await;
        (agent, id)
    }

    /// Starts a background `command` as this agent and returns its task id.
    pub async fn start_bg(&self, rt: &Runtime, command: &str) -> String {
        start_bg(rt, Some(&self.agent), command).await
    }

    /// `bash_output` of task `id` as this agent.
    pub async fn output(&self, rt: &Runtime, id: impl std::fmt::Display) -> ToolResult {
        let arguments = json!({"task_id": id.to_string()});
        call_as(rt, &self.agent, "bash_output", arguments).await
    }

    /// `bash_kill` of task `id` as this agent.
    pub async fn kill(&self, rt: &Runtime, id: impl std::fmt::Display) -> ToolResult {
        let arguments = json!({"task_id": id.to_string()});
        call_as(rt, &self.agent, "bash_kill", arguments).await
    }

    /// The texts of the notices so far.
    pub fn notice_texts(&self) -> Vec<String> {
        self.notices
            .lock()
            .unwrap()
            .iter()
            .map(|n| n.text.clone())
            .collect()
    }

    /// Waits until at least `n` notices arrived.
    pub async fn wait_notices(&self, n: usize) -> Vec<String> {
        let deadline = Instant::now() + SOON;
        loop {
            let texts = self.notice_texts();
            if texts.len() >= n {
                return texts;
            }
            assert!(
                Instant::now() < deadline,
                "only {} notices: {texts:?}",
                texts.len()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// `bash` arguments for `command`.
pub fn bash_args(command: &str) -> Value {
    json!({"command": command, "description": "test command"})
}

/// Calls tool `name` with no agent, bounded by three [`SOON`]s.
pub async fn call(rt: &Runtime, name: &str, arguments: Value) -> ToolResult {
    tokio::time::timeout(SOON * 3, rt.call(ToolCall::new(name, arguments)))
        .await
        .expect("call timed out")
}

/// Calls tool `name` as `agent`, bounded by three [`SOON`]s.
pub async fn call_as(rt: &Runtime, agent: &AgentRef, name: &str, arguments: Value) -> ToolResult {
    let call = ToolCall::new(name, arguments).with_caller(agent.clone());
    tokio::time::timeout(SOON * 3, rt.call(call))
        .await
        .expect("call timed out")
}

/// `bash_output` with `arguments`, with no agent.
pub async fn bash_output(rt: &Runtime, arguments: Value) -> ToolResult {
    call(rt, "bash_output", arguments).await
}

/// `bash_kill` of task `id`, with no agent.
pub async fn bash_kill(rt: &Runtime, id: impl std::fmt::Display) -> ToolResult {
    call(rt, "bash_kill", json!({"task_id": id.to_string()})).await
}

/// `bash_output` of task `id` with no agent, waiting until the task settles.
pub async fn wait_output(rt: &Runtime, id: impl std::fmt::Display) -> ToolResult {
    let arguments = json!({"task_id": id.to_string(), "wait": true});
    call(rt, "bash_output", arguments).await
}

/// `bash_output` of task `id` as `agent`, waiting until the task settles.
pub async fn wait_as(rt: &Runtime, agent: &AgentRef, id: impl std::fmt::Display) -> ToolResult {
    call_as(
        rt,
        agent,
        "bash_output",
        json!({"task_id": id.to_string(), "wait": true}),
    )
    .await
}

/// Runs `command` in the foreground with no agent.
pub async fn bash(rt: &Runtime, command: &str) -> ToolResult {
    call(rt, "bash", bash_args(command)).await
}

/// Runs `command` in the foreground with no agent, with the other `bash` arguments in `extra` (an
/// object such as `{"workdir": "/tmp"}`).
pub async fn bash_with(rt: &Runtime, command: &str, extra: Value) -> ToolResult {
    let mut arguments = bash_args(command);
    let Value::Object(extra) = extra else {
        panic!("extra bash arguments must be an object: {extra}")
    };
    arguments.as_object_mut().expect("an object").extend(extra);
    call(rt, "bash", arguments).await
}

/// Asserts that `result`'s text ends with `tail` (a status line such as
/// `[status: completed, exit code: 0]`), showing the text if not.
#[track_caller]
pub fn assert_ends_with(result: &ToolResult, tail: &str) {
    assert!(result.text.ends_with(tail), "{}", result.text);
}

/// Runs `command` in the foreground as agent `session`, in the plain runtime with its dsh home at
/// `<temp dir>/dsh-home`, and finishes the runtime: the reply's text and that dsh home.
pub async fn run_in_a_session(session: &str, command: &str) -> (String, std::path::PathBuf) {
    let root = tempfile::tempdir().unwrap();
    let home = root.path().join("dsh-home");
    let (rt, _s) = runtime_with(|b| b.dsh_home(&home));
    let agent = TestAgent::new(session);
    let text = call_as(&rt, &agent.agent, "bash", bash_args(command))
        .await
        .text;
    finish(rt).await;
    (text, home)
}

/// Starts a background command and returns its task id.
pub async fn start_bg(rt: &Runtime, agent: Option<&AgentRef>, command: &str) -> String {
    let args = json!({"command": command, "description": "background", "run_in_background": true});
    let result = match agent {
        Some(agent) => call_as(rt, agent, "bash", args).await,
        None => call(rt, "bash", args).await,
    };
    assert!(!result.is_error, "{}", result.text);
    result
        .text
        .strip_prefix("started background task ")
        .expect("ack")
        .to_owned()
}

/// The plain setup with a background `command` started in it with no agent: the runtime, its
/// spill dir and the task id.
pub async fn runtime_running(command: &str) -> (Runtime, tempfile::TempDir, String) {
    let (rt, spill) = runtime();
    let id = start_bg(&rt, None, command).await;
    (rt, spill, id)
}

/// `bash_kill` of task `id` with no agent, which must find it running.
pub async fn kill_running(rt: &Runtime, id: impl std::fmt::Display) {
    let r = bash_kill(rt, &id).await;
    assert_eq!(r.text, format!("killed background task {id}"));
}

/// Polls `bash_output` (as `agent`) until the accumulated text satisfies `done`.
pub async fn poll_output(
    rt: &Runtime,
    agent: Option<&AgentRef>,
    id: &str,
    done: impl Fn(&str) -> bool,
) -> String {
    let deadline = Instant::now() + SOON;
    let mut seen = String::new();
    loop {
        let args = json!({"task_id": id});
        let result = match agent {
            Some(agent) => call_as(rt, agent, "bash_output", args).await,
            None => call(rt, "bash_output", args).await,
        };
        assert!(!result.is_error, "{}", result.text);
        seen.push_str(&result.text);
        seen.push('\n');
        if done(&seen) {
            return seen;
        }
        assert!(
            Instant::now() < deadline,
            "condition never met; saw {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls `bash_output` (as `agent`) until the accumulated text contains `needle`.
pub async fn poll_for(rt: &Runtime, agent: Option<&AgentRef>, id: &str, needle: &str) -> String {
    poll_output(rt, agent, id, |seen| seen.contains(needle)).await
}

/// Shuts the runtime down and checks that no process it started is still running.
pub async fn finish(rt: Runtime) {
    tokio::time::timeout(SOON * 2, rt.shutdown())
        .await
        .expect("shutdown timed out");
    let stats = rt.process_stats().await;
    assert_eq!(stats.live, 0, "{stats:?}");
}
