//! Structured results beside the unchanged text, and the output peek a front end uses for progress.

use std::time::{Duration, Instant};

use crate::common::*;
use dsh::ToolCall;
use dsh::actors::tool_bash::{OutputPeek, output_schema};
use serde_json::json;

#[actix_rt::test]
async fn foreground_background_read_and_kill_carry_structured_facts() {
    let (rt, _spill) = runtime();
    let result = bash(&rt, "printf 'out\\n'; printf 'e' >&2; exit 3").await;
    assert_eq!(result.text, "out\n[stderr]\ne\n[exit code: 3]");
    let s = result.structured.expect("structured");
    assert_eq!(s["background"], false);
    assert_eq!(s["exit_code"], 3);
    assert_eq!(s["signal"], serde_json::Value::Null);
    assert_eq!(s["timed_out"], false);
    assert_eq!(
        s["stdout"],
        json!({"bytes": 4, "truncated": false, "spill_path": null})
    );
    assert_eq!(s["stderr"]["bytes"], 1);
    assert!(s["duration_ms"].as_u64().is_some());

    let timed_out = call(
        &rt,
        "bash",
        json!({"command": "sleep 5", "description": "d", "timeoutMs": 100}),
    )
    .await;
    let s = timed_out.structured.unwrap();
    assert_eq!(s["timed_out"], true);
    assert_eq!(s["signal"], "SIGTERM");

    let id = start_bg(&rt, None, "echo bg; sleep 30").await;
    poll_output(&rt, None, &id, |seen| seen.contains("bg")).await;
    let read = call(&rt, "bash_output", json!({"task_id": id})).await;
    let s = read.structured.unwrap();
    assert_eq!(
        (s["task_id"].as_str(), s["status"].as_str()),
        (Some(id.as_str()), Some("running"))
    );
    let kill = call(&rt, "bash_kill", json!({"task_id": id})).await;
    assert_eq!(kill.structured.unwrap()["outcome"], "killed");
    // A second kill while the first is under way is "killed" too (issue 11); once the task has
    // settled (its status names the signal) it is "already finished".
    let deadline = Instant::now() + Duration::from_secs(30);
    while call(&rt, "bash_output", json!({"task_id": id}))
        .await
        .structured
        .is_none_or(|s| s["signal"].is_null())
    {
        assert!(Instant::now() < deadline, "the killed task never settled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let again = call(&rt, "bash_kill", json!({"task_id": id})).await;
    assert_eq!(again.structured.unwrap()["outcome"], "already_finished");

    let bad = call(&rt, "bash", json!({"description": "no command"})).await;
    assert!(bad.is_error && bad.structured.is_none());
    for tool in ["bash", "bash_output", "bash_kill"] {
        assert!(output_schema(tool).is_some());
    }
    finish(rt).await;
}

#[actix_rt::test]
async fn a_peek_sees_a_running_commands_bytes_and_last_line() {
    let (rt, _spill) = runtime();
    let peek = OutputPeek::new();
    let call = ToolCall::new(
        "bash",
        bash_args("printf 'first\\nsecond line\\n'; sleep 30"),
    )
    .with_cancel(dsh::AbortSignal::new())
    .with_peek(peek.clone());
    let cancel = call.cancel.clone().unwrap();
    let running = actix::spawn({
        let rt = rt.clone();
        async move { rt.call(call).await }
    });
    let deadline = Instant::now() + SOON;
    let seen = loop {
        if let Some(seen) = peek.snapshot().filter(|s| s.stdout_bytes == 18) {
            break seen;
        }
        assert!(Instant::now() < deadline, "peek never saw the output");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(seen.last_line, "second line");
    assert_eq!(seen.stderr_bytes, 0);
    cancel.abort("test done");
    let result = running.await.unwrap();
    assert_eq!(result.text, "Error: command aborted");
    assert_eq!(result.structured.unwrap()["aborted"], true);
    finish(rt).await;
}
