//! Backpressure through the binary (`actors/front/src/flow.rs`): a client that sends and does not read
//! makes the server stop reading, with its memory bounded, and then gets every reply exactly once;
//! at the `--max-in-flight` cap cancels and approval answers still get through and held calls run
//! in order; a paused server still stops at SIGTERM and when the client closes its stdout.
//!
//! "Paused" can only be seen from outside as the absence of progress: a writer thread sends the
//! requests and counts them, and the server counts as paused once that count has stood still for
//! [`STILL`] while requests were left to send (the old server read everything at once, growing
//! without bound, so the count never stood still before the end).

use crate::common::{exit_status, start_dsh};
use crate::jsonl_server;
use crate::mcp_raw::{Client, approval_answer, escalation, sandboxed_workspace, text};

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dsh_test_support::procfs::{assert_none_with_cmdline, live_with_cmdline, status_field};
use dsh_test_support::wait::wait_until;
use jsonl_server::{SOON, Server, bash, unique_marker};
use serde_json::{Value, json};

/// How long the writer's count must stand still for the server to count as paused.
const STILL: Duration = Duration::from_secs(2);

/// The bound on the server's RSS while it waits for the client to read (the old server reached
/// 144 MiB for 10,000 jsonl calls in a debug build, 726 MB in a release one).
const PAUSED_RSS_BOUND_KIB: u64 = 64 << 10;

/// A server fed by a writer thread that sends `lines` and then, for `dsh jsonl`, closes its input
/// (for `dsh mcp` that is a disconnect: the input is closed once every response is in).
struct Flood {
    child: Child,
    stdout: BufReader<ChildStdout>,
    sent: Arc<AtomicUsize>,
    total: usize,
    /// Ends with the input, when it is left open.
    writer: Option<JoinHandle<Option<ChildStdin>>>,
}

/// What the writer does after the last line.
#[derive(Clone, Copy, PartialEq, Eq)]
enum AtTheEnd {
    CloseInput,
    KeepInputOpen,
}

/// What the wait for a pause saw.
struct Pause {
    /// The writer's count stood still with requests left to send.
    paused: bool,
    /// Requests sent when the wait ended.
    sent: usize,
    /// The server's highest RSS seen meanwhile.
    peak_rss_kib: u64,
}

impl Flood {
    /// Starts `dsh <args>`, runs `handshake` on its stdin and stdout, then sends `lines` from a
    /// thread of their own.
    fn start(
        args: &[&str],
        handshake: impl FnOnce(&mut ChildStdin, &mut BufReader<ChildStdout>),
        lines: Vec<String>,
        at_the_end: AtTheEnd,
    ) -> Self {
        let mut child = start_dsh(args, Stdio::inherit());
        let mut stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        handshake(&mut stdin, &mut stdout);
        let sent = Arc::new(AtomicUsize::new(0));
        let total = lines.len();
        let count = sent.clone();
        let writer = std::thread::spawn(move || {
            for line in lines {
                if writeln!(stdin, "{line}").is_err() {
                    return None;
                }
                count.fetch_add(1, Ordering::SeqCst);
            }
            (at_the_end == AtTheEnd::KeepInputOpen).then_some(stdin)
        });
        Self {
            child,
            stdout,
            sent,
            total,
            writer: Some(writer),
        }
    }

    /// Waits, reading nothing, until the writer's count stands still for [`STILL`] or it has sent
    /// everything; samples the server's RSS all along.
    fn wait_for_pause(&self) -> Pause {
        let pid = self.child.id();
        let deadline = Instant::now() + Duration::from_secs(300);
        let (mut last, mut since) = (usize::MAX, Instant::now());
        let mut peak_rss_kib = 0;
        loop {
            peak_rss_kib = peak_rss_kib.max(status_field(pid, "VmRSS:"));
            let sent = self.sent.load(Ordering::SeqCst);
            if sent == self.total {
                return Pause {
                    paused: false,
                    sent,
                    peak_rss_kib,
                };
            }
            if sent != last {
                (last, since) = (sent, Instant::now());
            } else if since.elapsed() >= STILL {
                return Pause {
                    paused: true,
                    sent,
                    peak_rss_kib,
                };
            }
            assert!(Instant::now() < deadline, "neither paused nor done");
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Waits for the writer to have sent everything, and closes the input.
    fn close_input(&mut self) {
        if let Some(writer) = self.writer.take() {
            drop(writer.join().unwrap());
        }
    }

    fn read_json(&mut self) -> Option<Value> {
        let mut line = String::new();
        if self.stdout.read_line(&mut line).unwrap() == 0 {
            return None;
        }
        Some(serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line}: {e}")))
    }

    /// Waits for the server to exit, returning its exit code.
    fn exit_code(&mut self, within: Duration) -> Option<i32> {
        exit_status(&mut self.child, within, "the server").code()
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

fn assert_paused_and_bounded(what: &str, pause: &Pause, total: usize) {
    println!(
        "{what}: {} of {total} requests taken when the server stopped reading; peak RSS {} KiB",
        pause.sent, pause.peak_rss_kib
    );
    assert!(
        pause.paused,
        "{what}: the server read all {total} requests without anyone reading its replies"
    );
    assert!(
        pause.peak_rss_kib < PAUSED_RSS_BOUND_KIB,
        "{what}: the server grew to {} KiB while nobody read",
        pause.peak_rss_kib
    );
}

fn jsonl_echo(i: usize) -> String {
    json!({"id": i, "tool": "bash", "arguments": {"command": format!("echo {i}"), "description": "flood"}})
        .to_string()
}

#[test]
fn a_jsonl_client_that_does_not_read_pauses_the_server_then_gets_every_reply_once() {
    const CALLS: usize = 10_000;
    let lines = (0..CALLS).map(jsonl_echo).collect();
    let mut flood = Flood::start(&["jsonl"], |_, _| {}, lines, AtTheEnd::CloseInput);
    let pause = flood.wait_for_pause();
    assert_paused_and_bounded("jsonl", &pause, CALLS);
    // Now the client reads: every call is answered, once, with its own output.
    let mut seen = vec![0u32; CALLS];
    for _ in 0..CALLS {
        let reply = flood.read_json().expect("a reply");
        let i = reply["id"].as_u64().unwrap() as usize;
        assert_eq!(reply["text"], format!("{i}\n"), "{reply}");
        seen[i] += 1;
    }
    assert!(seen.iter().all(|n| *n == 1), "a reply came twice or never");
    // The writer closed the input after the last line: the server exits 0 with nothing more said.
    assert_eq!(flood.read_json(), None);
    assert_eq!(flood.exit_code(SOON), Some(0));
}

/// A session that started `initialize` and `notifications/initialized`.
fn mcp_handshake(stdin: &mut ChildStdin, stdout: &mut BufReader<ChildStdout>) {
    let init = json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "flood", "version": "1"}}});
    writeln!(stdin, "{init}").unwrap();
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(line.contains("\"init\""), "{line}");
    writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
    )
    .unwrap();
}

#[test]
fn an_mcp_client_that_does_not_read_pauses_the_server_then_gets_every_response_once() {
    const CALLS: usize = 6_000;
    // Unknown arguments are ignored: the padding only makes the requests outgrow the read-ahead.
    let pad = "p".repeat(512);
    let lines = (0..CALLS)
        .map(|i| {
            json!({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "bash",
                "arguments": {"command": format!("echo {i}"), "description": "flood", "pad": pad}}})
            .to_string()
        })
        .collect();
    let mut flood = Flood::start(&["mcp"], mcp_handshake, lines, AtTheEnd::KeepInputOpen);
    let pause = flood.wait_for_pause();
    assert_paused_and_bounded("mcp", &pause, CALLS);
    let mut seen = vec![0u32; CALLS];
    let mut answered = 0;
    while answered < CALLS {
        let message = flood.read_json().expect("a response");
        let Some(i) = message.get("id").and_then(Value::as_u64) else {
            continue;
        };
        let i = i as usize;
        assert_eq!(
            message["result"]["content"][0]["text"],
            format!("{i}\n"),
            "{message}"
        );
        seen[i] += 1;
        answered += 1;
    }
    assert!(
        seen.iter().all(|n| *n == 1),
        "a response came twice or never"
    );
    flood.close_input();
    assert_eq!(flood.exit_code(SOON), Some(0));
}

/// A flood of calls that each print 60 kB: a client that does not read fills the output queue
/// after a few replies.
fn big_replies(marker: &str, calls: usize) -> Vec<String> {
    (0..calls)
        .map(|i| {
            json!({"id": i, "tool": "bash", "arguments": {
                "command": format!("head -c 60000 /dev/zero | tr '\\0' x; : {marker}"),
                "description": "flood"}})
            .to_string()
        })
        .collect()
}

#[test]
fn a_paused_jsonl_server_still_stops_at_sigterm() {
    let marker = unique_marker(7200);
    let mut flood = Flood::start(
        &[
            "jsonl",
            "--shutdown-grace-ms",
            "500",
            "--max-in-flight",
            "32",
        ],
        |_, _| {},
        big_replies(&marker, 3_000),
        AtTheEnd::CloseInput,
    );
    let pause = flood.wait_for_pause();
    assert_paused_and_bounded("jsonl (sigterm)", &pause, 3_000);
    let signalled = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(flood.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    // The grace, plus at most a few seconds for a client that does not read its last lines.
    assert_eq!(flood.exit_code(Duration::from_secs(30)), Some(0));
    println!("exited {:?} after SIGTERM", signalled.elapsed());
    assert_none_with_cmdline(&marker, SOON);
}

#[test]
fn a_paused_jsonl_server_notices_the_client_closing_its_stdout() {
    let marker = unique_marker(7300);
    let mut flood = Flood::start(
        &["jsonl", "--max-in-flight", "32"],
        |_, _| {},
        big_replies(&marker, 3_000),
        AtTheEnd::CloseInput,
    );
    let pause = flood.wait_for_pause();
    assert_paused_and_bounded("jsonl (hang-up)", &pause, 3_000);
    // Close our end of its stdout; its stdin stays open.
    let stdout = std::mem::replace(
        &mut flood.stdout,
        BufReader::new(
            Command::new("true")
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
                .stdout
                .take()
                .unwrap(),
        ),
    );
    drop(stdout);
    assert_eq!(flood.exit_code(SOON), Some(0));
    assert_none_with_cmdline(&marker, SOON);
}

#[test]
fn at_the_jsonl_cap_cancels_get_through_and_held_calls_run_in_order() {
    let marker = unique_marker(7400);
    let mut server = Server::start(&["--max-in-flight", "2", "--grace-ms", "300"]).expect("start");
    let sleeper = format!("sleep {marker}");
    server.call("a", "bash", bash(&sleeper, json!({})));
    server.call("b", "bash", bash(&sleeper, json!({})));
    assert!(
        wait_until(SOON, || live_with_cmdline(&marker).len() == 2),
        "both sleepers run"
    );
    // At the cap: these are held, in order; reading goes on while fewer than 2 are held.
    server.call("c", "bash", bash("echo c", json!({})));
    // A cancel of a held call answers it at once, without running it.
    server.send(&json!({"id": "x1", "cancel": "c"}));
    assert_eq!(server.reply("x1"), json!({"id": "x1", "cancelled": true}));
    let c = server.reply("c");
    assert_eq!(c["text"], "Error: tool call aborted before dispatch", "{c}");
    server.call("d", "bash", bash("echo d", json!({})));
    // A cancel of a running call gets through at the cap, and the held call takes its place.
    server.send(&json!({"id": "x2", "cancel": "a"}));
    assert_eq!(server.reply("x2"), json!({"id": "x2", "cancelled": true}));
    assert_eq!(server.text("a"), "Error: command aborted");
    assert_eq!(server.text("d"), "d\n");
    // Held calls start in the order they were read.
    server.call("e", "bash", bash(&sleeper, json!({})));
    server.call("f", "bash", bash("echo f", json!({})));
    server.send(&json!({"cancel": "b"}));
    assert_eq!(server.text("b"), "Error: command aborted");
    assert_eq!(server.text("f"), "f\n");
    server.send(&json!({"cancel": "e"}));
    assert_eq!(server.text("e"), "Error: command aborted");
    server.finish();
    assert_none_with_cmdline(&marker, SOON);
}

/// A cap of two calls in flight, under `--sandbox read-only` in `cwd`.
fn capped_read_only(cwd: &str) -> [&str; 6] {
    [
        "--max-in-flight",
        "2",
        "--sandbox",
        "read-only",
        "--cwd",
        cwd,
    ]
}

#[test]
fn at_the_jsonl_cap_an_approval_answer_gets_through() {
    let Some((ws, cwd)) = sandboxed_workspace() else {
        return;
    };
    let marker = unique_marker(7450);
    let mut server = Server::start(&capped_read_only(&cwd)).expect("start");
    server.call_as(
        "s",
        "filler",
        "bash",
        bash(&format!("sleep {marker}"), json!({})),
    );
    server.call_as("s", "g", "bash", escalation("touch granted"));
    let question = server.line_where(|l| l.get("approval").is_some() && l["id"] == "g");
    // Both calls in flight wait (one for the answer); a later call is held behind them.
    server.call_as("s", "h", "bash", bash("echo held", json!({})));
    server.send(&json!({"approve": question["approval"], "outcome": "allowed-once"}));
    assert_eq!(server.text("g"), "(no output)");
    assert!(ws.path().join("granted").exists());
    assert_eq!(server.text("h"), "held\n");
    server.send(&json!({"cancel": "filler"}));
    assert_eq!(server.text("filler"), "Error: command aborted");
    server.finish();
}

#[test]
fn at_the_mcp_cap_cancels_get_through_and_held_calls_run_in_order() {
    let marker = unique_marker(7500);
    // The raw client's server has a grace of 300 ms.
    let mut mcp = Client::session("2025-06-18", json!({}), &["--max-in-flight", "2"]);
    let file = tempfile::tempdir().unwrap();
    let never = file.path().join("never");
    let sleeper = bash(&format!("sleep {marker}"), json!({}));
    mcp.send_call(1, "bash", sleeper.clone());
    mcp.send_call(2, "bash", sleeper.clone());
    assert!(
        wait_until(SOON, || live_with_cmdline(&marker).len() == 2),
        "both sleepers run"
    );
    // At the cap: held, in order; reading goes on while fewer than 2 are held.
    mcp.send_call(
        3,
        "bash",
        bash(&format!("touch {}", never.display()), json!({})),
    );
    // A held call that is cancelled never runs.
    mcp.cancel(3);
    mcp.send_call(4, "bash", bash("echo four", json!({})));
    // A running call that is cancelled is stopped, and the held call takes its place.
    mcp.cancel(1);
    assert_eq!(text(&mcp.response(4)), "four\n");
    mcp.send(json!({"jsonrpc": "2.0", "id": 9, "method": "ping"}));
    mcp.response(9);
    assert!(
        !mcp.seen.iter().any(|m| m["id"] == 1 || m["id"] == 3),
        "cancelled requests get no response: {:?}",
        mcp.seen
    );
    assert!(!never.exists(), "the cancelled held call ran");
    // A duplicate of an id in flight is refused, not run twice.
    mcp.send_call(5, "bash", sleeper.clone());
    mcp.send_call(5, "bash", bash("echo twice", json!({})));
    let refused = mcp.response(5);
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    mcp.cancel(5);
    mcp.cancel(2);
    mcp.send_call(6, "bash", bash("echo six", json!({})));
    assert_eq!(text(&mcp.response(6)), "six\n");
    mcp.finish();
    assert_none_with_cmdline(&marker, SOON);
}

/// A `tools/call` that rmcp answers itself, without the tool (here: a protocol version in `_meta`
/// it does not serve), leaves the count like any other: many of them never use up the cap.
#[test]
fn mcp_requests_refused_before_the_tool_leave_the_count() {
    let mut mcp = Client::session("2025-06-18", json!({}), &["--max-in-flight", "2"]);
    for id in 0..6 {
        mcp.send(
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "bash", "arguments": bash("echo refused", json!({})),
            "_meta": {"io.modelcontextprotocol/protocolVersion": "1999-01-01"}}}),
        );
        let refused = mcp.response(id);
        assert!(refused.get("error").is_some(), "{refused}");
    }
    mcp.send_call(9, "bash", bash("echo still", json!({})));
    assert_eq!(text(&mcp.response(9)), "still\n");
    mcp.finish();
}

#[test]
fn at_the_mcp_cap_an_elicitation_answer_gets_through() {
    let Some((ws, cwd)) = sandboxed_workspace() else {
        return;
    };
    let marker = unique_marker(7550);
    let mut mcp = Client::session(
        "2025-06-18",
        json!({"elicitation": {}}),
        &capped_read_only(&cwd),
    );
    mcp.send_call(7, "bash", bash(&format!("sleep {marker}"), json!({})));
    mcp.send_call(1, "bash", escalation("touch granted"));
    let ask = mcp.wait_for(|m| m["method"] == "elicitation/create");
    // Both calls in flight wait (one for the answer); a later call is held behind them.
    mcp.send_call(2, "bash", bash("echo held", json!({})));
    mcp.send(json!({"jsonrpc": "2.0", "id": ask["id"], "result": approval_answer("accept")}));
    assert_eq!(text(&mcp.response(1)), "(no output)");
    assert!(ws.path().join("granted").exists());
    assert_eq!(text(&mcp.response(2)), "held\n");
    mcp.cancel(7);
    mcp.finish();
    assert_none_with_cmdline(&marker, SOON);
}

#[test]
fn max_in_flight_must_allow_one_call() {
    for mode in ["jsonl", "mcp"] {
        let out = Command::new(env!("CARGO_BIN_EXE_dsh"))
            .args([mode, "--max-in-flight", "0"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{mode}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("at least 1 call must be allowed to run"),
            "{mode}"
        );
    }
}
