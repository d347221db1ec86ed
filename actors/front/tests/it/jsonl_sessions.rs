//! `dsh jsonl` keeps a session's state only while the session has something left: 10,000 distinct
//! session names, each running `true`, leave the server's memory where it was, while a session
//! whose background task is still running, or finished and unread, keeps the task, its notice and
//! the right to read it.

use crate::jsonl_server;

use std::time::Duration;

use dsh_test_support::procfs::{live_with_cmdline, status_field};
use dsh_test_support::wait::wait_until;
use jsonl_server::{Server, bash, unique_marker};
use serde_json::{Value, json};

/// Calls kept in flight while the sessions are pumped.
const WINDOW: usize = 16;

/// How much the server's RSS may grow over 10,000 gone sessions. Before sessions were freed each
/// cost ~1.4 KiB (13 MiB for 10,000); what is left is allocator noise.
const GROWTH_BOUND_KIB: u64 = 4096;

/// Runs `true` once in each of the sessions `<prefix>-<from>` … `<prefix>-<to - 1>`, `WINDOW` at a time.
fn one_call_per_session(server: &mut Server, prefix: &str, from: usize, to: usize) {
    let (mut sent, mut done) = (from, from);
    while done < to {
        while sent < to && sent - done < WINDOW {
            let session = format!("{prefix}-{sent}");
            server.call_as(
                &session,
                &format!("c{sent}"),
                "bash",
                bash("true", json!({})),
            );
            sent += 1;
        }
        let reply = server.line_where(|line| line.get("text").is_some());
        assert_eq!(reply["text"], "(no output)", "{reply}");
        done += 1;
    }
}

fn notice_of(server: &mut Server, session: &str) -> Value {
    server.line_where(|line| line["session"] == session && line.get("notice").is_some())
}

#[test]
fn ten_thousand_gone_sessions_leave_memory_flat_and_sessions_with_tasks_keep_them() {
    let marker = unique_marker(7100);
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join(format!("gate-{marker}"));
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    // The gate's directory is reachable by the commands (their own `/tmp` is private).
    let mut server =
        Server::start(&["--writable-root", dir.path().to_str().unwrap()]).expect("start");
    let pid = server.child.id();

    // One session's task runs until the test opens the gate; another's finished and is unread.
    let waiting = format!("read -r word < {}; echo \"got $word\"", fifo.display());
    server.call_as(
        "keeper",
        "k1",
        "bash",
        bash(&waiting, json!({"run_in_background": true})),
    );
    let kept = server.reply("k1")["structured"]["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
    server.call_as(
        "finished",
        "f1",
        "bash",
        bash("echo early", json!({"run_in_background": true})),
    );
    let finished = server.reply("f1")["structured"]["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let notice = notice_of(&mut server, "finished");
    assert!(
        notice["notice"].as_str().unwrap().contains(&finished),
        "{notice}"
    );

    one_call_per_session(&mut server, "warm", 0, 1_000);
    let warm = status_field(pid, "VmRSS:");
    one_call_per_session(&mut server, "gone", 0, 10_000);
    let end = status_field(pid, "VmRSS:");
    println!("RSS after warm-up {warm} KiB, after 10,000 more sessions {end} KiB");
    assert!(
        end <= warm + GROWTH_BOUND_KIB,
        "10,000 gone sessions grew the server from {warm} KiB to {end} KiB"
    );

    // The sessions with something left still own it.
    server.call_as(
        "finished",
        "f2",
        "bash_output",
        json!({"task_id": finished}),
    );
    assert_eq!(
        server.text("f2"),
        "early\n[status: completed, exit code: 0]"
    );
    server.call_as("keeper", "k2", "bash_output", json!({"task_id": kept}));
    assert_eq!(server.text("k2"), "(no new output)\n[status: running]");
    std::fs::write(&fifo, "go\n").unwrap();
    let notice = notice_of(&mut server, "keeper");
    assert_eq!(
        notice["notice"],
        format!(
            "background bash task {kept} finished [status: completed, exit code: 0]. Read its \
             output with bash_output."
        )
    );
    server.call_as("keeper", "k3", "bash_output", json!({"task_id": kept}));
    assert_eq!(
        server.text("k3"),
        "got go\n[status: completed, exit code: 0]"
    );
    // A gone session's name can come back.
    server.call_as("gone-7", "again", "bash", bash("echo back", json!({})));
    assert_eq!(server.text("again"), "back\n");

    server.finish();
    assert!(
        wait_until(Duration::from_secs(30), || live_with_cmdline(&marker)
            .is_empty()),
        "left running: {:?}",
        live_with_cmdline(&marker)
    );
}
