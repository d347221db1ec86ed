//! `dsh jsonl`: its line protocol (see docs/CONTRACT.md), driven as a real subprocess.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use crate::common::{exit_status, start_dsh};
use dsh::actors::process::signal::pid_is_live;
use dsh_test_support::procfs::status_field;
use dsh_test_support::wait::line_channel;
use serde_json::{Value, json};

const SOON: Duration = Duration::from_secs(60);

/// A running `dsh jsonl` with a thread collecting its output lines.
struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<Value>,
    /// Every output line exactly as written.
    raw: Arc<Mutex<Vec<String>>>,
}

impl Server {
    fn start(extra: &[&str]) -> Self {
        let mut child = start_dsh(
            &[&["jsonl", "--grace-ms", "300"], extra].concat(),
            Stdio::inherit(),
        );
        let stdin = child.stdin.take();
        let stdout: ChildStdout = child.stdout.take().unwrap();
        let raw = Arc::new(Mutex::new(Vec::new()));
        let seen = raw.clone();
        let lines = line_channel(stdout, move |line| {
            seen.lock().unwrap().push(line.clone());
            // Ids beyond f64 (`1e400`) are valid JSON that serde_json's Value cannot hold: such
            // lines are checked through `raw`.
            serde_json::from_str(&line).unwrap_or_else(|_| {
                serde_json::from_str::<&serde_json::value::RawValue>(&line)
                    .unwrap_or_else(|e| panic!("not JSON: {line:?}: {e}"));
                Value::String(line.clone())
            })
        });
        Self {
            child,
            stdin,
            lines,
            raw,
        }
    }

    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    fn request(&mut self, id: Value, session: Option<&str>, tool: &str, arguments: Value) {
        let mut request = json!({"id": id, "tool": tool, "arguments": arguments});
        if let Some(session) = session {
            request["session"] = json!(session);
        }
        self.send(&request.to_string());
    }

    fn next(&self) -> Value {
        self.lines
            .recv_timeout(SOON)
            .expect("no line from the server")
    }

    /// Waits for the reply with this id, keeping other lines aside.
    fn reply(&self, id: &Value, others: &mut Vec<Value>) -> Value {
        loop {
            let line = self.next();
            if line.get("id") == Some(id) && line.get("text").is_some() {
                return line;
            }
            others.push(line);
        }
    }

    /// Closes stdin and waits for exit 0.
    fn finish(mut self) -> Vec<Value> {
        drop(self.stdin.take());
        let status = exit_status(&mut self.child, SOON, "the server (after EOF)");
        assert_eq!(status.code(), Some(0));
        self.lines.try_iter().collect()
    }
}

fn bash(command: &str) -> Value {
    json!({"command": command, "description": "test"})
}

#[test]
fn a_hundred_concurrent_requests_all_answered_with_their_ids() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("started");
    // The shared counter's directory is writable to the commands (their own `/tmp` is private).
    let mut server = Server::start(&["--writable-root", dir.path().to_str().unwrap()]);
    // Each request records that it started, then waits until all 100 have started: they can only all
    // finish quickly if they really run at the same time. Each then prints how many had started.
    for i in 0..100 {
        let command = format!(
            "echo x >> {f}; for n in $(seq 1 400); do [ $(wc -l < {f}) -ge 100 ] && break; sleep 0.05; done; echo {i}:$(wc -l < {f})",
            f = counter.display()
        );
        if i == 50 {
            server.send("{\"this is\": not json");
        }
        server.request(
            json!({"n": i, "tag": format!("req-{i}")}),
            None,
            "bash",
            bash(&command),
        );
    }
    let mut answered = HashMap::new();
    let mut malformed = Vec::new();
    while answered.len() < 100 {
        let line = server.next();
        if line.get("error").is_some() {
            assert_eq!(line["id"], Value::Null);
            malformed.push(line);
            continue;
        }
        let n = line["id"]["n"].as_u64().unwrap();
        assert_eq!(
            line["id"]["tag"],
            format!("req-{n}"),
            "the id is echoed verbatim"
        );
        assert_eq!(line["is_error"], false);
        assert_eq!(
            line["text"],
            format!("{n}:100\n"),
            "all 100 were running at once"
        );
        assert!(
            answered.insert(n, line).is_none(),
            "request {n} answered twice"
        );
    }
    assert_eq!(malformed.len(), 1);
    assert!(
        malformed[0]["error"]
            .as_str()
            .unwrap()
            .starts_with("invalid JSON")
    );
    assert!(server.finish().is_empty());
}

#[test]
fn malformed_lines_get_an_error_and_the_server_goes_on() {
    let mut server = Server::start(&[]);
    for (line, id) in [
        ("[1,2]", Value::Null),
        ("{\"id\": 5}", json!(5)),
        ("{\"id\": 6, \"tool\": 7}", json!(6)),
        ("not json at all", Value::Null),
        ("{\"tool\":\"bash\",\"session\":3}", Value::Null),
        ("{\"id\":\"s\",\"tool\":\"bash\",\"session\":3}", json!("s")),
        (
            "{\"id\":[7],\"tool\":\"bash\",\"arguments\":\"ls\"}",
            json!([7]),
        ),
        (
            "{\"id\":8,\"cancel\":9,\"tool\":\"bash\",\"arguments\":{}}",
            json!(8),
        ),
    ] {
        server.send(line);
        let reply = server.next();
        assert_eq!(reply["id"], id, "{line}");
        assert!(
            reply["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{line}: {reply}"
        );
    }
    // A line that is not UTF-8 (binary junk) is malformed too, not the end of the input.
    let stdin = server.stdin.as_mut().expect("stdin open");
    stdin.write_all(b"\xff\xfe{\"id\": 9}\n").unwrap();
    stdin.flush().unwrap();
    assert_eq!(
        server.next(),
        json!({"id": null, "error": "the line is not valid UTF-8"})
    );
    server.request(json!("after"), None, "bash", bash("echo still here"));
    let reply = server.next();
    assert_eq!(
        (&reply["id"], &reply["text"], &reply["is_error"]),
        (&json!("after"), &json!("still here\n"), &json!(false))
    );
    assert_eq!(reply["structured"]["exit_code"], 0);
    // Key order is part of the protocol (docs/CONTRACT.md): id first.
    assert!(
        server
            .raw
            .lock()
            .unwrap()
            .last()
            .unwrap()
            .starts_with("{\"id\":\"after\",\"text\":"),
        "{reply}"
    );
    server.request(json!(1), None, "nope", json!({}));
    assert_eq!(
        server.next(),
        json!({"id": 1, "error": "unknown tool \"nope\"; available tools: bash, bash_output, bash_write, bash_kill"})
    );
    server.finish();
}

/// Well-formed JSON that cannot be decoded says what is wrong and where, for its id, instead of
/// `"arguments" must be a JSON object`; a NUL in `session` is the session's error, not the spawn's.
#[test]
fn undecodable_fields_and_nul_sessions_are_named_errors_for_their_id() {
    let mut server = Server::start(&[]);
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let cases = [
        (
            r#"{"id":1,"tool":"bash","arguments":{"command":"echo \ud800","description":"t"}}"#.to_owned(),
            "arguments",
        ),
        (
            r#"{"id":2,"tool":"bash","arguments":{"command":"echo","description":"t","timeoutMs":1e400}}"#.to_owned(),
            "arguments",
        ),
        (
            format!(r#"{{"id":3,"tool":"bash","arguments":{{"command":"echo","description":"t","x":{deep}}}}}"#),
            "arguments",
        ),
        (
            r#"{"id":4,"session":"\udc00","tool":"bash","arguments":{"command":"echo","description":"t"}}"#.to_owned(),
            "session",
        ),
    ];
    for (id, (line, field)) in cases.iter().enumerate() {
        // serde's own reason, at the position where it finds the fault in the whole line (nesting
        // is counted from the field, which is one level less deep than from the line).
        let reason = serde_json::from_str::<Value>(line).unwrap_err().to_string();
        let expected = format!("invalid JSON in \"{field}\": {reason}");
        server.send(line);
        let reply = server.next();
        assert_eq!(reply["id"], json!(id + 1), "{line}");
        let error = reply["error"].as_str().unwrap();
        if reason.starts_with("recursion limit exceeded") {
            let (bare, _) = expected.split_once(" column ").unwrap();
            assert!(error.starts_with(bare), "{error}");
        } else {
            assert_eq!(error, expected, "{line}");
        }
    }
    server.send(
        r#"{"id":5,"session":"a\u0000b","tool":"bash","arguments":{"command":"echo","description":"t"}}"#,
    );
    assert_eq!(
        server.next(),
        json!({"id": 5, "error": "\"session\" must not contain a NUL byte"})
    );
    server.request(json!("after"), Some("ok"), "bash", bash("echo still here"));
    assert_eq!(server.next()["text"], "still here\n");
    server.finish();
}

#[test]
fn a_cancel_aborts_its_call_and_unknown_cancels_are_ignored() {
    let mut server = Server::start(&[]);
    server.request(json!("long"), None, "bash", bash("echo started; sleep 60"));
    // Let it start: a quick call sent after it is answered once both are in flight.
    server.request(json!("probe"), None, "bash", bash("sleep 0.3"));
    let mut others = Vec::new();
    server.reply(&json!("probe"), &mut others);
    server.send("{\"cancel\": \"nobody\"}");
    server.send("{\"cancel\": \"long\"}");
    let reply = server.reply(&json!("long"), &mut others);
    assert_eq!(reply["is_error"], true);
    assert_eq!(reply["text"], "Error: command aborted");
    assert!(others.is_empty(), "{others:?}");
    server.finish();
}

#[test]
fn sessions_own_their_tasks_and_get_notices() {
    let mut server = Server::start(&[]);
    server.request(
        json!(1),
        Some("alice"),
        "bash",
        json!({"command": "echo bg", "description": "d", "run_in_background": true}),
    );
    let mut others = Vec::new();
    assert_eq!(
        server.reply(&json!(1), &mut others)["text"],
        "started background task bash-1"
    );
    let notice = if others.is_empty() {
        server.next()
    } else {
        others.remove(0)
    };
    assert_eq!(
        notice,
        json!({"session": "alice", "notice": "background bash task bash-1 finished [status: completed, exit code: 0]. Read its output with bash_output."})
    );
    // Another session may not read it; its own may.
    for (id, session, read) in [
        (2, "bob", "Error: task bash-1 belongs to another session"),
        (3, "alice", "bg\n[status: completed, exit code: 0]"),
    ] {
        let arguments = json!({"task_id": "bash-1"});
        server.request(json!(id), Some(session), "bash_output", arguments);
        assert_eq!(
            server.reply(&json!(id), &mut others)["text"],
            read,
            "{session}"
        );
    }
    server.finish();
}

/// Starts `sleep 300` in the background and returns its pid (read through bash_output).
fn background_sleeper(server: &mut Server, id: i64) -> i32 {
    server.request(json!(id), None, "bash", json!({"command": "echo $$; exec sleep 300", "description": "d", "run_in_background": true}));
    let mut others = Vec::new();
    let task = server.reply(&json!(id), &mut others)["structured"]["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let deadline = Instant::now() + SOON;
    loop {
        server.request(
            json!(id + 1000),
            None,
            "bash_output",
            json!({"task_id": task}),
        );
        let text = server.reply(&json!(id + 1000), &mut others)["text"]
            .as_str()
            .unwrap()
            .to_owned();
        if let Some(pid) = text.lines().next().and_then(|l| l.parse().ok()) {
            return pid;
        }
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn eof_with_running_background_tasks_leaves_no_process_behind() {
    let mut server = Server::start(&[]);
    let pids: Vec<i32> = (0..3).map(|i| background_sleeper(&mut server, i)).collect();
    assert!(pids.iter().all(|pid| pid_is_live(*pid)));
    server.finish();
    let alive: Vec<&i32> = pids.iter().filter(|pid| pid_is_live(**pid)).collect();
    assert!(alive.is_empty(), "left running after EOF: {alive:?}");
}

#[test]
fn sigterm_kills_and_joins_everything_and_answers_running_calls() {
    let mut server = Server::start(&[]);
    let pid = background_sleeper(&mut server, 1);
    server.request(
        json!("fg"),
        None,
        "bash",
        bash("echo $$ > /dev/null; sleep 300"),
    );
    std::thread::sleep(Duration::from_millis(200));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let mut others = Vec::new();
    let reply = server.reply(&json!("fg"), &mut others);
    assert!(
        reply["text"]
            .as_str()
            .unwrap()
            .contains("[killed by signal: SIGTERM]"),
        "{reply}"
    );
    let status = server.child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(!pid_is_live(pid), "the background task was killed");
}

#[test]
fn ids_of_any_size_and_form_come_back_as_the_exact_text_sent() {
    let mut server = Server::start(&[]);
    let ids = [
        "18446744073709551617",
        "1.0",
        "-0",
        "1e400",
        r#""caf\u00e9""#,
        r#"{"b":1,"a":[true,null]}"#,
    ];
    for id in ids {
        server.send(&format!(
            r#"{{"id":{id},"tool":"bash","arguments":{{"command":"true","description":"d"}}}}"#
        ));
    }
    server.send(r#"{"id":18446744073709551618,"tool":"nope"}"#);
    for _ in 0..ids.len() + 1 {
        server.next();
    }
    let raw = server.raw.lock().unwrap().clone();
    for id in ids {
        assert!(
            raw.iter()
                .any(|l| l.starts_with(&format!("{{\"id\":{id},\"text\":"))),
            "{id} not echoed verbatim in {raw:?}"
        );
    }
    assert!(
        raw.iter()
            .any(|l| l.starts_with(r#"{"id":18446744073709551618,"error":"unknown tool"#))
    );
    server.finish();
}

#[test]
fn an_id_already_in_flight_is_an_error_and_the_running_call_goes_on() {
    let mut server = Server::start(&[]);
    server.request(json!(7), None, "bash", bash("echo first; sleep 1"));
    server.request(json!(7), None, "bash", bash("echo second"));
    let mut others = Vec::new();
    let reply = server.reply(&json!(7), &mut others);
    assert_eq!(reply["text"], "first\n");
    assert_eq!(
        others,
        [json!({"id": 7, "error": "id 7 is already in flight; this line was not run"})]
    );
    // Once answered, the id is free again; a cancel with its own id is answered too.
    server.request(json!(7), None, "bash", bash("sleep 60"));
    server.send(r#"{"id":"c","cancel":7}"#);
    let mut others = Vec::new();
    let text = server.reply(&json!(7), &mut others)["text"].clone();
    // The cancel may land before or after the call reached the executor.
    assert!(
        text == "Error: command aborted" || text == "Error: tool call aborted before dispatch",
        "{text}"
    );
    assert!(
        others.contains(&json!({"id": "c", "cancelled": true})),
        "{others:?}"
    );
    server.finish();
}

#[test]
fn a_line_over_max_line_bytes_is_answered_and_never_held_in_memory() {
    let mut server = Server::start(&["--max-line-bytes", "1048576"]);
    // 256 MiB in one line: the server must skip it as it streams by.
    let chunk = vec![b'x'; 1 << 20];
    let stdin = server.stdin.as_mut().unwrap();
    stdin
        .write_all(br#"{"id":1,"tool":"bash","arguments":{"command":""#)
        .unwrap();
    for _ in 0..256 {
        stdin.write_all(&chunk).unwrap();
    }
    stdin.write_all(b"\"}}\n").unwrap();
    assert_eq!(
        server.next(),
        json!({"id": null, "error": "the line is longer than --max-line-bytes (1048576 bytes); skipped"})
    );
    let peak = status_field(server.child.id(), "VmHWM:");
    assert!(peak < 64 * 1024, "peak RSS {peak} KiB");
    server.request(json!(2), None, "bash", bash("echo fine"));
    assert_eq!(server.next()["text"], "fine\n");
    server.finish();
}

#[test]
fn the_client_closing_our_stdout_is_a_disconnect_everything_is_killed_exit_0() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .args(["jsonl", "--grace-ms", "300"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    writeln!(stdin, r#"{{"id":1,"tool":"bash","arguments":{{"command":"echo $$; exec sleep 300","description":"d","run_in_background":true}}}}"#).unwrap();
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let task = serde_json::from_str::<Value>(&line).unwrap()["structured"]["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let pid = loop {
        writeln!(
            stdin,
            r#"{{"id":2,"tool":"bash_output","arguments":{{"task_id":"{task}"}}}}"#
        )
        .unwrap();
        line.clear();
        stdout.read_line(&mut line).unwrap();
        let text = serde_json::from_str::<Value>(&line).unwrap()["text"]
            .as_str()
            .unwrap()
            .to_owned();
        if let Some(pid) = text.lines().next().and_then(|l| l.parse::<i32>().ok()) {
            break pid;
        }
    };
    // A foreground call is running too; the client closes its end of our stdout but keeps stdin open.
    writeln!(
        stdin,
        r#"{{"id":3,"tool":"bash","arguments":{{"command":"sleep 300","description":"d"}}}}"#
    )
    .unwrap();
    drop(stdout);
    let status = exit_status(&mut child, SOON, "the server (after the disconnect)");
    assert_eq!(status.code(), Some(0));
    assert!(!pid_is_live(pid), "the background task was killed");
    drop(stdin);
}
