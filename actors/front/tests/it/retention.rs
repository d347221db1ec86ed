//! Retention of finished background tasks: at most `max_finished_tasks` records,
//! `retained_output_bytes` of output in memory and `retained_spill_bytes` of spill files on disk;
//! tasks whose end the owner read go first, then the oldest; a discarded task reads as an error of
//! its own and its spill files go with it.

use crate::common;
use crate::jsonl_server;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

/// Waits until task `id` has settled, without reading it.
async fn settled(rt: &dsh::Runtime, id: &str) {
    let deadline = Instant::now() + SOON;
    loop {
        let tasks = rt.tasks(None).await;
        if tasks.iter().any(|t| t.id == id && t.settled) {
            return;
        }
        assert!(Instant::now() < deadline, "{id} never settled: {tasks:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn spill_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Starts `echo <word>` in the background and reads it to its end: a finished task that was read.
async fn read_in_full(rt: &dsh::Runtime, word: &str) -> String {
    let id = start_bg(rt, None, &format!("echo {word}")).await;
    let r = wait_output(rt, &id).await;
    assert_eq!(r.text, format!("{word}\n[status: completed, exit code: 0]"));
    id
}

/// What a call about task `id` says once retention has discarded it.
fn discarded(id: &str) -> String {
    format!("Error: bash task {id} finished and was discarded (retention limit)")
}

/// Reads task `id` and finds it discarded by retention.
async fn assert_read_discarded(rt: &dsh::Runtime, id: &str) {
    let r = call(rt, "bash_output", json!({"task_id": id})).await;
    assert!(r.is_error, "{}", r.text);
    assert_eq!(r.text, discarded(id));
}

#[actix_rt::test]
async fn read_tasks_go_first_then_the_oldest_and_spill_files_go_with_them() {
    let (rt, spill) = runtime_with(|b| b.max_finished_tasks(1).max_output_bytes(1000));
    let first = read_in_full(&rt, "one").await;

    let second = start_bg(&rt, None, "seq 1 20000").await;
    settled(&rt, &second).await;
    assert_read_discarded(&rt, &first).await;
    let second_files = spill_files(spill.path());
    assert_eq!(second_files.len(), 1, "{second_files:?}");

    // The unread second task is now the oldest: the third's end discards it and its spill file.
    let third = start_bg(&rt, None, "seq 1 20000").await;
    settled(&rt, &third).await;
    let r = call(&rt, "bash_kill", json!({"task_id": second})).await;
    assert_eq!(r.text, discarded(&second));
    let deadline = Instant::now() + SOON;
    while spill_files(spill.path()) == second_files {
        assert!(Instant::now() < deadline, "the discarded spill file stayed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(spill_files(spill.path()).len(), 1);
    let r = call(&rt, "bash_output", json!({"task_id": third})).await;
    assert!(
        r.text
            .contains("[some output was dropped from memory; full output: /")
            && r.text.ends_with("]\n[status: completed, exit code: 0]"),
        "{}",
        r.text
    );
    finish(rt).await;
}

#[actix_rt::test]
async fn retained_output_bytes_bound_unread_finished_tasks() {
    let (rt, _spill) = runtime_with(|b| b.retained_output_bytes(150_000));
    let mut ids = Vec::new();
    for _ in 0..3 {
        // 60 000 bytes of output each, kept in memory (under the 64 000-byte stream cap).
        let id = start_bg(&rt, None, "head -c 60000 /dev/zero | tr '\\0' x").await;
        settled(&rt, &id).await;
        ids.push(id);
    }
    let r = call(&rt, "bash_output", json!({"task_id": ids[0]})).await;
    assert!(r.text.contains("discarded (retention limit)"), "{}", r.text);
    for id in &ids[1..] {
        let r = call(&rt, "bash_output", json!({"task_id": id})).await;
        assert!(
            r.text.ends_with("[status: completed, exit code: 0]"),
            "{id}"
        );
    }
    finish(rt).await;
}

/// Bytes of every file in `dir`.
fn spill_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

/// The full-output path a read names (`[… full output: <path>]`).
fn spill_path_in(text: &str) -> std::path::PathBuf {
    let start = text.find("full output: ").expect(text) + "full output: ".len();
    let end = start + text[start..].find(']').expect(text);
    std::path::PathBuf::from(&text[start..end])
}

/// Waits until the spill files in `dir` hold at most `budget` bytes (a discard removes them
/// through the process manager's mailbox, just after the settlement that caused it).
async fn spill_within(dir: &Path, budget: u64) {
    let deadline = Instant::now() + SOON;
    while spill_bytes(dir) > budget {
        assert!(
            Instant::now() < deadline,
            "spill files keep {} bytes over a budget of {budget}: {:?}",
            spill_bytes(dir),
            spill_files(dir)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[actix_rt::test]
async fn retained_spill_bytes_bound_the_files_of_finished_tasks_read_or_not() {
    const BUDGET: u64 = 250_000;
    const FLOOD: &str = "head -c 100000 /dev/zero | tr '\\0' x";
    let (rt, spill) = runtime_with(|b| b.max_output_bytes(1000).retained_spill_bytes(BUDGET));
    let unread = start_bg(&rt, None, FLOOD).await;
    settled(&rt, &unread).await;
    // The second is read to its end: its memory goes, its 100 000-byte file stays and counts.
    let read = start_bg(&rt, None, FLOOD).await;
    let r = wait_output(&rt, &read).await;
    assert!(
        r.text.ends_with("[status: completed, exit code: 0]"),
        "{}",
        r.text
    );
    let read_file = spill_path_in(&r.text);
    assert!(read_file.exists());
    assert_eq!(spill_bytes(spill.path()), 200_000);

    // 300 000 bytes: over the budget; the read task goes first, and its file with it.
    let third = start_bg(&rt, None, FLOOD).await;
    settled(&rt, &third).await;
    spill_within(spill.path(), BUDGET).await;
    assert!(!read_file.exists(), "the discarded task's file stayed");
    assert_read_discarded(&rt, &read).await;

    // Then the oldest: the unread first task.
    let fourth = start_bg(&rt, None, FLOOD).await;
    settled(&rt, &fourth).await;
    spill_within(spill.path(), BUDGET).await;
    assert_read_discarded(&rt, &unread).await;
    assert_eq!(spill_files(spill.path()).len(), 2);
    for id in [&third, &fourth] {
        let r = call(&rt, "bash_output", json!({"task_id": id})).await;
        assert!(
            r.text.ends_with("[status: completed, exit code: 0]"),
            "{id}: {}",
            r.text
        );
        assert!(spill_path_in(&r.text).exists(), "{id}");
    }
    finish(rt).await;
}

#[actix_rt::test]
async fn an_owner_hears_when_a_task_it_never_read_is_discarded() {
    let (rt, _spill) = runtime_with(|b| b.max_finished_tasks(1));
    let agent = TestAgent::new("owner");
    let first = start_bg(&rt, Some(&agent.agent), "echo first").await;
    agent.wait_notices(1).await;
    let second = start_bg(&rt, Some(&agent.agent), "echo second").await;
    let notices = agent.wait_notices(3).await;
    assert!(
        notices.contains(&format!(
            "background bash task {first} finished and was discarded unread (retention limit)."
        )),
        "{notices:?}"
    );
    let r = call_as(&rt, &agent.agent, "bash_output", json!({"task_id": second})).await;
    assert_eq!(r.text, "second\n[status: completed, exit code: 0]");
    finish(rt).await;
}

/// A host's retention policy: a task whose end its owner has read is discarded at the next
/// settlement, whatever the limits.
struct ForgetWhatWasRead;

impl dsh::RetentionPolicy for ForgetWhatWasRead {
    fn name(&self) -> &str {
        "forget-what-was-read"
    }

    fn discard(
        &mut self,
        _load: dsh::RetentionLoad,
        finished: &[dsh::FinishedTask<'_>],
    ) -> Option<usize> {
        finished.iter().position(|task| task.reported)
    }
}

#[actix_rt::test]
async fn a_host_retention_policy_joins_the_stack() {
    let (rt, _spill) = runtime_with(|b| b.retention_policy(Box::new(ForgetWhatWasRead)));
    let read = read_in_full(&rt, "read").await;
    let unread = start_bg(&rt, None, "echo unread").await;
    settled(&rt, &unread).await;
    assert_read_discarded(&rt, &read).await;
    let r = call(&rt, "bash_output", json!({"task_id": unread})).await;
    assert_eq!(r.text, "unread\n[status: completed, exit code: 0]");
    finish(rt).await;
}

#[test]
fn the_binary_takes_the_retention_flags() {
    let mut server = jsonl_server::Server::start(&[
        "--max-finished-tasks",
        "1",
        "--retained-output-bytes",
        "1MiB",
        "--retained-spill-bytes",
        "512MiB",
    ])
    .unwrap();
    for (n, id) in [(1, "bash-1"), (2, "bash-2")] {
        server.call(
            &format!("s{n}"),
            "bash",
            jsonl_server::bash(&format!("echo {n}"), json!({"run_in_background": true})),
        );
        assert_eq!(
            server.text(&format!("s{n}")),
            format!("started background task {id}")
        );
        server.call(
            &format!("w{n}"),
            "bash_output",
            json!({"task_id": id, "wait": true}),
        );
        assert_eq!(
            server.text(&format!("w{n}")),
            format!("{n}\n[status: completed, exit code: 0]")
        );
    }
    server.call("r", "bash_output", json!({"task_id": "bash-1"}));
    assert_eq!(
        server.text("r"),
        "Error: bash task bash-1 finished and was discarded (retention limit)"
    );
    server.finish();
}
