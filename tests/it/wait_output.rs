//! `bash_output` waits instead of polling: `wait: true` until the task settles, `until` until the new
//! output matches (across writes, and however far a flood has pushed the match out of memory since),
//! both bounded by `timeout_ms`, ended by a cancel, and checked for bad values. Without the new
//! arguments the read is unchanged (the LG-* cases in `background.rs`).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::*;
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
    let r = bash_output(
        &rt,
        json!({"task_id": id, "until": "Listening on port \\d+", "timeout_ms": 20000}),
    )
    .await;
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.text, "Listening on port 8080\n[status: running]");
    assert!(began.elapsed() < SOON, "{:?}", began.elapsed());
    // The wait consumed nothing of its own: the read after it did, as any read does.
    assert_eq!(
        bash_output(&rt, json!({"task_id": id})).await.text,
        "(no new output)\n[status: running]"
    );
    kill_running(&rt, &id).await;
    finish(rt).await;
}

#[actix_rt::test]
async fn until_matches_output_already_there_and_only_unread_output() {
    let (rt, _s, id) = runtime_running("echo ready; sleep 60").await;
    let r = bash_output(&rt, json!({"task_id": id, "until": "^ready$|(?m)^ready"})).await;
    assert_eq!(r.text, "ready\n[status: running]");
    // `ready` was read: waiting for it again runs out instead of matching old output.
    let r = bash_output(
        &rt,
        json!({"task_id": id, "until": "ready", "timeout_ms": 300}),
    )
    .await;
    assert_eq!(r.text, "(no new output)\n[status: running]");
    bash_kill(&rt, &id).await;
    finish(rt).await;
}

#[actix_rt::test]
async fn until_sees_stderr_and_returns_at_settlement_without_a_match() {
    let (rt, _s, id) = runtime_running("sleep 0.2; echo oops >&2").await;
    let stderr = bash_output(&rt, json!({"task_id": id, "until": "oops"}))
        .await
        .text;
    assert!(stderr.starts_with("[stderr]\noops\n"), "{stderr}");
    let id = start_bg(&rt, None, "sleep 0.2; echo something else").await;
    let r = bash_output(
        &rt,
        json!({"task_id": id, "until": "never printed", "timeout_ms": 60000}),
    )
    .await;
    assert_eq!(r.text, "something else\n[status: completed, exit code: 0]");
    finish(rt).await;
}

#[actix_rt::test]
async fn wait_returns_when_the_task_settles() {
    let (rt, _s, id) = runtime_running("echo one; sleep 0.3; echo two; exit 3").await;
    let r = bash_output(&rt, json!({"task_id": id, "wait": true})).await;
    assert_eq!(r.text, "one\ntwo\n[status: completed, exit code: 3]");
    finish(rt).await;
}

#[actix_rt::test]
async fn a_wait_that_runs_out_renders_running_and_leaves_the_task_alive() {
    let (rt, _s, id) = runtime_running("echo started; sleep 60").await;
    let began = Instant::now();
    let r = bash_output(&rt, json!({"task_id": id, "wait": true, "timeout_ms": 250})).await;
    assert!(began.elapsed().as_millis() >= 250);
    assert!(r.text.ends_with("[status: running]"), "{}", r.text);
    // Still alive: the kill finds it running.
    kill_running(&rt, &id).await;
    finish(rt).await;
}

#[actix_rt::test]
async fn cancelling_the_call_ends_the_wait() {
    let (rt, _s, id) = runtime_running("sleep 60").await;
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
    assert_eq!((r.text.as_str(), r.is_error), ("Error: wait aborted", true));
    kill_running(&rt, &id).await;
    finish(rt).await;
}

#[actix_rt::test]
async fn bad_wait_values_are_errors() {
    let (rt, _s, id) = runtime_running("sleep 60").await;
    let r = call(&rt, "bash_output", json!({"task_id": id, "until": "("})).await;
    assert!(r.is_error);
    assert!(r.text.starts_with("Error: invalid until: "), "{}", r.text);
    let r = bash_output(&rt, json!({"task_id": id, "timeout_ms": -1})).await;
    assert_eq!(
        r.text,
        "Error: invalid timeout_ms: expected a positive number, got -1"
    );
    let r = bash_output(&rt, json!({"task_id": id, "wait": true, "timeout_ms": 0})).await;
    assert_eq!(
        r.text,
        "Error: invalid timeout_ms: expected a positive number, got 0"
    );
    let r = bash_output(&rt, json!({"task_id": id, "wait": "yes"})).await;
    assert_eq!(
        r.text,
        "Error: invalid arguments: \"wait\" must be a boolean"
    );
    let r = bash_output(&rt, json!({"task_id": "bash-99", "wait": true})).await;
    assert_eq!(r.text, "Error: unknown bash task \"bash-99\"");
    bash_kill(&rt, &id).await;
    finish(rt).await;
}

#[actix_rt::test]
async fn a_wait_respects_ownership() {
    let (rt, _s) = runtime();
    let (owner, id) = TestAgent::with_task(&rt, "owner", "sleep 60").await;
    let other = TestAgent::new("other");
    let r = wait_as(&rt, &other.agent, &id).await;
    assert_eq!(
        r.text,
        format!("Error: task {id} belongs to another session")
    );
    owner.kill(&rt, &id).await;
    finish(rt).await;
}

/// About 10 MB of numbered lines (`line <n> of a flood`) with `target` on a line of its own halfway.
fn flood(target: &str) -> String {
    format!(
        "seq -f 'line %.0f of a flood' 1 220000; echo {target}; \
         seq -f 'line %.0f of a flood' 220001 440000"
    )
}

/// The bytes `flood` prints.
fn flood_bytes(target: &str) -> u64 {
    let lines: u64 = (1..=440_000u64)
        .map(|n| format!("line {n} of a flood\n").len() as u64)
        .sum();
    lines + target.len() as u64 + 1
}

/// A command that prints `started`, waits for `go` to exist, floods with `target` halfway, and
/// then sleeps (as `sleep <marker>`, to find it in `/proc`).
fn started_then_flood(go: &Path, target: &str, marker: &str) -> String {
    format!(
        "echo started; while [ ! -e {} ]; do sleep 0.02; done; {}; exec sleep {marker}",
        go.display(),
        flood(target)
    )
}

/// Reads `started` (the previous read, from which the wait's `until` is matched) and checks the task
/// still runs.
async fn read_started(rt: &dsh::Runtime, id: &str) {
    let r = call(
        rt,
        "bash_output",
        json!({"task_id": id, "until": "started\n"}),
    )
    .await;
    assert_eq!(r.text, "started\n[status: running]");
}

/// The read that follows a wait for the target, megabytes into a flood: it shows the flood's tail
/// and where the whole output is.
fn assert_flooded_read(text: &str) {
    assert!(
        text.contains("[some output was dropped from memory; full output: /")
            && text.ends_with("[status: running]"),
        "{}",
        &text[text.len().saturating_sub(400)..]
    );
}

/// Kills `id`, shuts the runtime down and checks no `sleep <marker>` is left.
async fn kill_and_finish(rt: dsh::Runtime, id: &str, marker: &str) {
    kill_running(&rt, &id).await;
    finish(rt).await;
    assert_eq!(
        dsh_test_support::procfs::live_with_cmdline(&format!("sleep {marker}")),
        Vec::<i32>::new()
    );
}

#[actix_rt::test]
async fn until_sees_a_match_a_flood_pushes_out_of_memory_while_it_waits() {
    let (rt, _spill) = runtime();
    let dir = tempfile::tempdir().unwrap();
    let (go, pid_file, payload) = (
        dir.path().join("go"),
        dir.path().join("pid"),
        dir.path().join("payload"),
    );
    // The target and the megabyte after it arrive in one write, so they are in the pipe together
    // and the driver reads all of it before any waiter runs: a wait that only looks at what is
    // still in memory when it runs never sees the target.
    let mut bytes = b"TARGET-4711\n".to_vec();
    bytes.extend(std::iter::repeat_n(b'x', 1_000_000));
    bytes.push(b'\n');
    std::fs::write(&payload, &bytes).unwrap();
    let marker = "61.1901";
    let command = format!(
        "echo $$ > {pid}; echo started; while [ ! -e {go} ]; do sleep 0.02; done; \
         seq -f 'line %.0f of a flood' 1 220000; dd if={payload} bs=1048576 count=1 status=none; \
         seq -f 'line %.0f of a flood' 220001 440000; exec sleep {marker}",
        pid = pid_file.display(),
        go = go.display(),
        payload = payload.display(),
    );
    let id = start_bg(&rt, None, &command).await;
    read_started(&rt, &id).await;
    // A pipe of 1 MiB, so that one write holds the target and its megabyte.
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    let stdout = std::fs::OpenOptions::new()
        .write(true)
        .open(format!("/proc/{}/fd/1", pid.trim()))
        .unwrap();
    nix::fcntl::fcntl(&stdout, nix::fcntl::FcntlArg::F_SETPIPE_SZ(1 << 20)).unwrap();
    drop(stdout);
    let waiting = ToolCall::new(
        "bash_output",
        json!({"task_id": id, "until": "(?m)^TARGET-4711$", "timeout_ms": 120000}),
    );
    let began = Instant::now();
    let pending = {
        let rt = rt.clone();
        actix_rt::spawn(async move { rt.call(waiting).await })
    };
    // As in `cancelling_the_call_ends_the_wait`: these turns carry the call into the registry's
    // wait, which registers its scans, before the flood may start.
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    std::fs::write(&go, "").unwrap();
    let r = dsh_test_support::within(SOON * 3, pending).await.unwrap();
    assert!(
        began.elapsed() < Duration::from_secs(120),
        "the wait ran out: {:?}",
        began.elapsed()
    );
    assert_flooded_read(&r.text);
    kill_and_finish(rt, &id, marker).await;
}

#[actix_rt::test]
async fn until_sees_a_match_that_left_memory_before_the_wait_began() {
    let (rt, spill) = runtime();
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let marker = "61.1902";
    let id = start_bg(&rt, None, &started_then_flood(&go, "TARGET-4712", marker)).await;
    read_started(&rt, &id).await;
    std::fs::write(&go, "").unwrap();
    // The whole flood is written (its spill file holds it) before the wait begins; the target has
    // long left the 64,000 bytes kept in memory.
    let want = "started\n".len() as u64 + flood_bytes("TARGET-4712");
    let deadline = Instant::now() + SOON * 3;
    loop {
        let spilled: u64 = std::fs::read_dir(spill.path())
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.file_name().to_string_lossy().ends_with("-stdout.log"))
            .map(|e| e.metadata().unwrap().len())
            .sum();
        if spilled >= want {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "flooded {spilled} of {want} bytes"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let began = Instant::now();
    let r = bash_output(
        &rt,
        json!({"task_id": id, "until": "(?m)^TARGET-4712$", "timeout_ms": 120000}),
    )
    .await;
    assert!(began.elapsed() < SOON, "{:?}", began.elapsed());
    assert_flooded_read(&r.text);
    assert!(
        !r.text.contains("TARGET"),
        "the target left memory long ago"
    );
    // The read moved the cursor past the target: waiting for it again runs out.
    let r = bash_output(
        &rt,
        json!({"task_id": id, "until": "TARGET", "timeout_ms": 300}),
    )
    .await;
    assert_eq!(r.text, "(no new output)\n[status: running]");
    kill_and_finish(rt, &id, marker).await;
}
