//! Helpers for the end-to-end tests: a runtime in the test's actix system, a recording agent actor,
//! and event-based waits with generous bounds.

#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix::prelude::*;
use dsh::{AgentRef, Inject, Runtime, ToolCall, ToolResult};
use serde_json::{Value, json};

pub use dsh_test_support::SOON;

/// The catalogue's "plain" setup: executor timeout 10 s, grace 200 ms; spills in a temp dir.
pub fn runtime() -> (Runtime, tempfile::TempDir) {
    runtime_with(|b| b)
}

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

/// An agent that records every notice it is sent.
pub struct Agent {
    pub notices: Arc<Mutex<Vec<Inject>>>,
}

impl Actor for Agent {
    type Context = Context<Self>;
}

impl Handler<Inject> for Agent {
    type Result = ();
    fn handle(&mut self, notice: Inject, _: &mut Self::Context) {
        self.notices.lock().unwrap().push(notice);
    }
}

#[derive(Message)]
#[rtype(result = "()")]
pub struct StopAgent;

impl Handler<StopAgent> for Agent {
    type Result = ();
    fn handle(&mut self, _: StopAgent, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

pub struct TestAgent {
    pub addr: Addr<Agent>,
    pub agent: AgentRef,
    pub notices: Arc<Mutex<Vec<Inject>>>,
}

impl TestAgent {
    pub fn new(session: &str) -> Self {
        let notices = Arc::new(Mutex::new(Vec::new()));
        let addr = Agent {
            notices: notices.clone(),
        }
        .start();
        let agent = AgentRef::new(session, addr.clone().recipient());
        Self {
            addr,
            agent,
            notices,
        }
    }

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

pub fn bash_args(command: &str) -> Value {
    json!({"command": command, "description": "test command"})
}

pub async fn call(rt: &Runtime, name: &str, arguments: Value) -> ToolResult {
    tokio::time::timeout(SOON * 3, rt.call(ToolCall::new(name, arguments)))
        .await
        .expect("call timed out")
}

pub async fn call_as(rt: &Runtime, agent: &AgentRef, name: &str, arguments: Value) -> ToolResult {
    let call = ToolCall::new(name, arguments).with_caller(agent.clone());
    tokio::time::timeout(SOON * 3, rt.call(call))
        .await
        .expect("call timed out")
}

pub async fn bash(rt: &Runtime, command: &str) -> ToolResult {
    call(rt, "bash", bash_args(command)).await
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

/// Shuts the runtime down and checks that no process it started is still running.
pub async fn finish(rt: Runtime) {
    tokio::time::timeout(SOON * 2, rt.shutdown())
        .await
        .expect("shutdown timed out");
    let stats = rt.process_stats().await;
    assert_eq!(stats.live, 0, "{stats:?}");
}
