//! Supervisor policies through the `dsh jsonl` binary: fair admission across sessions under
//! `--max-concurrent`, queue time counted toward the timeout, cancelling a queued call, queued
//! background tasks, per-session limits, and the flags' bad values.

use crate::jsonl_server;

use std::time::{Duration, Instant};

use dsh_test_support::procfs::assert_none_with_cmdline;
use jsonl_server::{SOON, Server, bash, unique_marker};
use serde_json::{Value, json};

fn text(reply: &Value) -> &str {
    reply["text"].as_str().unwrap_or_default()
}

#[test]
fn one_session_with_twenty_calls_does_not_starve_another_with_one() {
    let mut server = Server::start(&["--max-concurrent", "2"]).unwrap();
    for i in 0..20 {
        server.call_as(
            "A",
            &format!("a{i}"),
            "bash",
            bash(&format!("sleep 0.15; echo a{i}"), json!({})),
        );
    }
    server.call_as("B", "b", "bash", bash("echo b", json!({})));
    let mut a_before_b = 0;
    loop {
        let line = server.next_line();
        let Some(id) = line["id"].as_str() else {
            continue;
        };
        if id == "b" {
            assert_eq!(text(&line), "b\n");
            break;
        }
        if id.starts_with('a') {
            a_before_b += 1;
        }
    }
    assert!(
        a_before_b < 6,
        "B's reply came after {a_before_b} of A's replies"
    );
    for _ in a_before_b..20 {
        server.next_line();
    }
    server.finish();
}

#[test]
fn queue_time_counts_toward_the_timeout_and_a_queued_call_can_be_cancelled() {
    let marker = unique_marker(300);
    let mut server = Server::start(&["--max-concurrent", "1"]).unwrap();
    server.call(
        "bg",
        "bash",
        bash(
            &format!("sleep {marker}"),
            json!({"run_in_background": true}),
        ),
    );
    assert_eq!(server.text("bg"), "started background task bash-1");

    let began = Instant::now();
    server.call("fg", "bash", bash("echo fg", json!({"timeoutMs": 1500})));
    let reply = server.reply("fg");
    assert_eq!(reply["is_error"], true);
    assert_eq!(
        text(&reply),
        "Error: timed out after 1500ms waiting to start"
    );
    assert!(began.elapsed() < SOON / 2, "{:?}", began.elapsed());

    // A queued background start answers at once and reads as queued until it starts.
    server.call("q", "bash", bash("echo never", json!({})));
    server.call(
        "probe",
        "bash",
        bash("echo probe", json!({"run_in_background": true})),
    );
    assert_eq!(server.text("probe"), "started background task bash-2");
    server.call("read", "bash_output", json!({"task_id": "bash-2"}));
    assert_eq!(server.text("read"), "(no new output)\n[status: queued]");

    let began = Instant::now();
    server.send(&json!({"cancel": "q"}));
    let reply = server.reply("q");
    assert_eq!(text(&reply), "Error: command aborted");
    assert!(began.elapsed() < Duration::from_secs(10));

    // Killing a queued task takes it out of the queue; it never runs.
    server.call("kill", "bash_kill", json!({"task_id": "bash-2"}));
    assert_eq!(server.text("kill"), "killed background task bash-2");
    server.call(
        "read2",
        "bash_output",
        json!({"task_id": "bash-2", "wait": true, "timeout_ms": 20000}),
    );
    assert_eq!(server.text("read2"), "(no new output)\n[status: killed]");

    // The running task still holds the only slot; when it goes, new calls run again.
    server.call("k1", "bash_kill", json!({"task_id": "bash-1"}));
    assert_eq!(server.text("k1"), "killed background task bash-1");
    server.call("after", "bash", bash("echo after", json!({})));
    assert_eq!(server.text("after"), "after\n");
    server.finish();
    assert_none_with_cmdline(&marker, SOON);
}

#[test]
fn per_session_limits_queue_then_refuse() {
    let marker = unique_marker(301);
    let mut server = Server::start(&[
        "--max-running-per-session",
        "1",
        "--max-queued-per-session",
        "1",
    ])
    .unwrap();
    let bg = |command: String| bash(&command, json!({"run_in_background": true}));
    server.call_as("A", "1", "bash", bg(format!("sleep {marker}")));
    assert_eq!(server.text("1"), "started background task bash-1");
    server.call_as("A", "2", "bash", bg(format!("echo second; sleep {marker}")));
    assert_eq!(server.text("2"), "started background task bash-2");
    server.call_as("A", "r2", "bash_output", json!({"task_id": "bash-2"}));
    assert_eq!(server.text("r2"), "(no new output)\n[status: queued]");
    server.call_as("A", "3", "bash", bg("echo third".into()));
    let reply = server.reply("3");
    assert_eq!(reply["is_error"], true);
    assert!(
        text(&reply).ends_with(
            "too many running tasks for this session (limit 1); wait for one to finish or stop \
             one with bash_kill"
        ),
        "{reply}"
    );
    // Another session is not limited by A's tasks; foreground calls are not limited at all.
    server.call_as("B", "b", "bash", bg("echo b".into()));
    assert_eq!(server.text("b"), "started background task bash-3");
    server.call_as("A", "fg", "bash", bash("echo fg", json!({})));
    assert_eq!(server.text("fg"), "fg\n");
    // When A's running task goes, its queued one starts.
    server.call_as("A", "k", "bash_kill", json!({"task_id": "bash-1"}));
    assert_eq!(server.text("k"), "killed background task bash-1");
    server.call_as(
        "A",
        "w",
        "bash_output",
        json!({"task_id": "bash-2", "until": "second", "timeout_ms": 30000}),
    );
    assert_eq!(server.text("w"), "second\n[status: running]");
    server.finish();
    assert_none_with_cmdline(&marker, SOON);
}

#[test]
fn zero_limits_are_usage_errors() {
    for args in [
        &["jsonl", "--max-concurrent", "0"][..],
        &["jsonl", "--max-running-per-session", "0"][..],
        &["run", "--max-concurrent", "0", "--", "true"][..],
        &["jsonl", "--max-queued-per-session", "2"][..],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_dsh"))
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains("--max-"), "{args:?}: {said}");
    }
}
