//! Soak: 10,000 jsonl calls and 1,000 MCP calls through the real binary, showing that descriptors,
//! threads and resident memory do not grow with the number of calls served.
//!
//! Each soak samples the server after a warm-up (allocator pools, thread pools and caches filled) and
//! again at the end; the end may not exceed the warm-up by more than a small slack.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Stdio};

use crate::common::start_dsh;
use dsh_test_support::procfs::{Usage, usage};
use serde_json::{Value, json};

/// Calls kept in flight at once.
const WINDOW: usize = 32;

/// Allocator noise, not a leak: a leak of even 1 KiB per call would add 10 MiB.
const RSS_SLACK_KIB: u64 = 4096;

fn spawn(
    args: &[&str],
) -> (
    Child,
    std::process::ChildStdin,
    BufReader<std::process::ChildStdout>,
) {
    let mut child = start_dsh(args, Stdio::null());
    let stdin = child.stdin.take().unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    (child, stdin, stdout)
}

fn read_json(stdout: &mut BufReader<std::process::ChildStdout>) -> Value {
    let mut line = String::new();
    assert!(
        stdout.read_line(&mut line).unwrap() > 0,
        "the server closed its stdout"
    );
    serde_json::from_str(&line).unwrap()
}

/// Runs `total` calls with `WINDOW` in flight; samples the idle server after the first `warm` have
/// been answered (nothing in flight) and again after the last.
fn pump(
    pid: u32,
    total: usize,
    warm: usize,
    mut send: impl FnMut(usize),
    mut answered: impl FnMut() -> bool,
) -> (Usage, Usage) {
    let mut samples = Vec::new();
    let mut sent = 0;
    let mut done = 0;
    for stop in [warm, total] {
        while done < stop {
            while sent < stop && sent - done < WINDOW {
                send(sent);
                sent += 1;
            }
            if answered() {
                done += 1;
            }
        }
        samples.push(usage(pid));
    }
    // The last command's descriptors close just after its answer is written: wait (bounded) for the
    // server to be idle again before judging.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while samples[1].plain_fds() > samples[0].plain_fds() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
        samples[1] = usage(pid);
    }
    (samples[0], samples[1])
}

#[test]
fn ten_thousand_jsonl_calls_leave_descriptors_threads_and_memory_flat() {
    let (mut child, mut stdin, mut stdout) = spawn(&["jsonl"]);
    let pid = child.id();
    let (warm, end) = pump(
        pid,
        10_000,
        1_000,
        |i| {
            let line = json!({"id": i, "tool": "bash", "arguments": {"command": "echo $((1+1))", "description": "soak"}});
            writeln!(stdin, "{line}").unwrap();
        },
        || {
            let reply = read_json(&mut stdout);
            assert_eq!(reply["text"], "2\n", "{reply}");
            true
        },
    );
    drop(stdin);
    assert_eq!(child.wait().unwrap().code(), Some(0));
    warm.assert_no_growth(end, RSS_SLACK_KIB, "jsonl");
}

#[test]
fn a_thousand_mcp_calls_leave_descriptors_threads_and_memory_flat() {
    let (mut child, mut stdin, mut stdout) = spawn(&["mcp"]);
    let pid = child.id();
    let init = json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "soak", "version": "1"}}});
    writeln!(stdin, "{init}").unwrap();
    assert_eq!(read_json(&mut stdout)["id"], "init");
    writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
    )
    .unwrap();
    let (warm, end) = pump(
        pid,
        1_000,
        200,
        |i| {
            let call = json!({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {
                "name": "bash", "arguments": {"command": "echo $((2+2))", "description": "soak"}}});
            writeln!(stdin, "{call}").unwrap();
        },
        || {
            let message = read_json(&mut stdout);
            if message.get("id").is_none() {
                return false;
            }
            assert_eq!(message["result"]["content"][0]["text"], "4\n", "{message}");
            true
        },
    );
    drop(stdin);
    assert_eq!(child.wait().unwrap().code(), Some(0));
    warm.assert_no_growth(end, RSS_SLACK_KIB, "mcp");
}
