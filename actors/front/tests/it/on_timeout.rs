//! `on_timeout: background`: a foreground call that reaches its timeout is not killed but becomes a
//! background task of its caller, keeping what it printed; the default still kills.

use crate::common;
use crate::jsonl_server;

use common::*;
use dsh::OnTimeout;
use serde_json::json;

#[actix_rt::test]
async fn a_call_that_reaches_its_timeout_becomes_the_callers_background_task() {
    let (rt, dir) = runtime_with(|b| b.on_timeout(OnTimeout::Background));
    let agent = TestAgent::new("owner");
    let other = TestAgent::new("other");
    let r = call_as(
        &rt,
        &agent.agent,
        "bash",
        json!({
            "command": "echo before; while [ ! -e stop ]; do sleep 0.05; done; echo after",
            "description": "d",
            "timeoutMs": 300,
            "workdir": dir.path().to_str().unwrap(),
        }),
    )
    .await;
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(
        r.text,
        "before\n[still running after 300ms; moved to background task bash-1; read it with bash_output]"
    );
    assert_eq!(r.structured.as_ref().unwrap()["task_id"], "bash-1");
    assert_eq!(
        r.outcome,
        Some(dsh::ToolOutcome::MovedToBackground {
            task_id: "bash-1".into(),
            timeout: std::time::Duration::from_millis(300),
        })
    );
    // It belongs to the caller, and it still runs.
    let task = json!({"task_id": "bash-1"});
    let r = call_as(&rt, &other.agent, "bash_output", task).await;
    assert_eq!(r.text, "Error: task bash-1 belongs to another session");
    std::fs::write(dir.path().join("stop"), "").unwrap();
    let r = wait_as(&rt, &agent.agent, "bash-1").await;
    assert_eq!(r.text, "after\n[status: completed, exit code: 0]");
    finish(rt).await;
}

#[actix_rt::test]
async fn by_default_a_timeout_still_kills() {
    let (rt, _s) = runtime();
    let mut arguments = bash_args("echo before; sleep 30");
    arguments["timeoutMs"] = json!(200);
    let r = call(&rt, "bash", arguments).await;
    assert_eq!(
        r.text,
        "before\n[timed out after 200ms]\n[killed by signal: SIGTERM]"
    );
    assert!(rt.tasks(None).await.is_empty());
    finish(rt).await;
}

#[test]
fn the_binary_moves_a_timed_out_call_to_the_background() {
    let marker = jsonl_server::unique_marker(302);
    let mut server = jsonl_server::Server::start(&["--on-timeout", "background"]).unwrap();
    server.call_as(
        "s",
        "fg",
        "bash",
        jsonl_server::bash(
            &format!("echo so far; sleep {marker}"),
            json!({"timeoutMs": 300}),
        ),
    );
    assert_eq!(
        server.text("fg"),
        "so far\n[still running after 300ms; moved to background task bash-1; read it with bash_output]"
    );
    server.call_as("s", "k", "bash_kill", json!({"task_id": "bash-1"}));
    assert_eq!(server.text("k"), "killed background task bash-1");
    server.finish();
    assert!(
        dsh_test_support::wait::wait_until(jsonl_server::SOON, || {
            dsh_test_support::procfs::live_with_cmdline(&marker).is_empty()
        }),
        "the moved task was left running"
    );
}
