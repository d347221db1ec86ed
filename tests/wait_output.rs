//! `bash_output` waits instead of polling: `wait: true` until the task settles, `until` until the new
//! output matches (across writes), both bounded by `timeout_ms`, ended by a cancel, and checked for bad
//! values. Without the new arguments the read is unchanged (the LG-* cases in `background.rs`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code: a failed unwrap is a failed test"
)]

mod common;

use std::time::Instant;

use common::*;
use dsh::{AbortSignal, ToolCall};
use serde_json::json;

#[actix_rt::test]
async fn until_returns_on_a_match_that_spans_two_writes() {
    let (rt, _s) = runtime();
    let id = start_bg(
        &rt,
        None,
        "printf 'Listen'; sleep 0.3; printf 'ing on port 8080\\n'; sleep 60",
    )
    .await;
    let began = Instant::now();
    let r = call(
        &rt,
        "bash_output",
        json!({"task_id": id, "until": "Listening on port \\d+", "timeout_ms": 20000}),
    )
    .await;
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.text, "Listening on port 8080\n[status: running]");
    assert!(began.elapsed() < SOON, "{:?}", began.elapsed());
    // The wait consumed nothing of its own: the read after it did, as any read does.
    let r = call(&rt, "bash_output", json!({"task_id": id})).await;
    assert_eq!(r.text, "(no new output)\n[status: running]");
    call(&rt, "bash_kill", json!({"task_id": id})).await;
    finish(rt).await;
}

#[actix_rt::test]
async fn until_matches_output_already_there_and_only_unread_output() {
    let (rt, _s) = runtime();
    let id = start_bg(&rt, None, "echo ready; sleep 60").await;
    let r = call(
        &rt,
        "bash_output",
        json!({"task_id": id, "until": "^ready$|(?m)^ready"}),
    )
    .await;
    assert_eq!(r.text, "ready\n[status: running]");
    // `ready` was read: waiting for it again runs out instead of matching old output.
    let r = call(
        &rt,
        "bash_output",
        json!({"task_id": id, "until": "ready", "timeout_ms": 300}),
    )
    .await;
    assert_eq!(r.text, "(no new output)\n[status: running]");
    call(&rt, "bash_kill", json!({"task_id": id})).await;
    finish(rt).await;
}

#[actix_rt::test]
async fn until_sees_stderr_and_returns_at_settlement_without_a_match() {
    let (rt, _s) = runtime();
    let id = start_bg(&rt, None, "sleep 0.2; echo oops >&2").await;
    let r = call(&rt, "bash_output", json!({"task_id": id, "until": "oops"})).await;
    assert!(r.text.starts_with("[stderr]\noops\n"), "{}", r.text);
    let id = start_bg(&rt, None, "sleep 0.2; echo something else").await;
    let r = call(
        &rt,
        "bash_output",
        json!({"task_id": id, "until": "never printed", "timeout_ms": 60000}),
    )
    .await;
    assert_eq!(r.text, "something else\n[status: completed, exit code: 0]");
    finish(rt).await;
}

#[actix_rt::test]
async fn wait_returns_when_the_task_settles() {
    let (rt, _s) = runtime();
    let id = start_bg(&rt, None, "echo one; sleep 0.3; echo two; exit 3").await;
    let r = call(&rt, "bash_output", json!({"task_id": id, "wait": true})).await;
    assert_eq!(r.text, "one\ntwo\n[status: completed, exit code: 3]");
    finish(rt).await;
}

#[actix_rt::test]
async fn a_wait_that_runs_out_renders_running_and_leaves_the_task_alive() {
    let (rt, _s) = runtime();
    let id = start_bg(&rt, None, "echo started; sleep 60").await;
    let began = Instant::now();
    let r = call(
        &rt,
        "bash_output",
        json!({"task_id": id, "wait": true, "timeout_ms": 250}),
    )
    .await;
    assert!(began.elapsed().as_millis() >= 250);
    assert!(r.text.ends_with("[status: running]"), "{}", r.text);
    // Still alive: the kill finds it running.
    let r = call(&rt, "bash_kill", json!({"task_id": id})).await;
    assert_eq!(r.text, format!("killed background task {id}"));
    finish(rt).await;
}

#[actix_rt::test]
async fn cancelling_the_call_ends_the_wait() {
    let (rt, _s) = runtime();
    let id = start_bg(&rt, None, "sleep 60").await;
    let cancel = AbortSignal::new();
    let waiting = ToolCall::new("bash_output", json!({"task_id": id, "wait": true}))
        .with_cancel(cancel.clone());
    let pending = {
        let rt = rt.clone();
        actix_rt::spawn(async move { rt.call(waiting).await })
    };
    // Everything here runs on this test's one thread: these turns carry the call through the tool
    // actor into the registry's wait, with no I/O in between.
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    cancel.abort("user");
    let r = dsh_test_support::within(SOON, pending).await.unwrap();
    assert!(r.is_error);
    assert_eq!(r.text, "Error: wait aborted");
    let r = call(&rt, "bash_kill", json!({"task_id": id})).await;
    assert_eq!(r.text, format!("killed background task {id}"));
    finish(rt).await;
}

#[actix_rt::test]
async fn bad_wait_values_are_errors() {
    let (rt, _s) = runtime();
    let id = start_bg(&rt, None, "sleep 60").await;
    let r = call(&rt, "bash_output", json!({"task_id": id, "until": "("})).await;
    assert!(r.is_error);
    assert!(r.text.starts_with("Error: invalid until: "), "{}", r.text);
    let r = call(&rt, "bash_output", json!({"task_id": id, "timeout_ms": -1})).await;
    assert_eq!(
        r.text,
        "Error: invalid timeout_ms: expected a positive number, got -1"
    );
    let r = call(
        &rt,
        "bash_output",
        json!({"task_id": id, "wait": true, "timeout_ms": 0}),
    )
    .await;
    assert_eq!(
        r.text,
        "Error: invalid timeout_ms: expected a positive number, got 0"
    );
    let r = call(&rt, "bash_output", json!({"task_id": id, "wait": "yes"})).await;
    assert_eq!(
        r.text,
        "Error: invalid arguments: \"wait\" must be a boolean"
    );
    let r = call(
        &rt,
        "bash_output",
        json!({"task_id": "bash-99", "wait": true}),
    )
    .await;
    assert_eq!(r.text, "Error: unknown bash task \"bash-99\"");
    call(&rt, "bash_kill", json!({"task_id": id})).await;
    finish(rt).await;
}

#[actix_rt::test]
async fn a_wait_respects_ownership() {
    let (rt, _s) = runtime();
    let owner = TestAgent::new("owner");
    let other = TestAgent::new("other");
    let id = start_bg(&rt, Some(&owner.agent), "sleep 60").await;
    let r = call_as(
        &rt,
        &other.agent,
        "bash_output",
        json!({"task_id": id, "wait": true}),
    )
    .await;
    assert_eq!(
        r.text,
        format!("Error: task {id} belongs to another session")
    );
    call_as(&rt, &owner.agent, "bash_kill", json!({"task_id": id})).await;
    finish(rt).await;
}
