//! `dsh mcp` spoken to line by line, as raw JSON-RPC: the error codes, tool metadata, structured
//! results, progress, logging levels per protocol version, roots, and the client hanging up.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::io::Write;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use dsh::actors::process::signal::pid_is_live;
use dsh_test_support::wait::line_channel;
use serde_json::{Value, json};

const SOON: Duration = Duration::from_secs(30);

struct Client {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<Value>,
    /// Lines read while waiting for something else.
    seen: Vec<Value>,
}

impl Client {
    fn start(extra: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_dsh"))
            .args(["mcp", "--grace-ms", "300", "--progress-interval-ms", "200"])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start dsh mcp");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let lines = line_channel(stdout, |line| {
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line}: {e}"))
        });
        Self {
            child,
            stdin,
            lines,
            seen: Vec::new(),
        }
    }

    /// Starts and initializes a session with `version`, declaring `capabilities`.
    fn session(version: &str, capabilities: Value, extra: &[&str]) -> Self {
        let mut client = Self::start(extra);
        client.send(
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": capabilities,
            "clientInfo": {"name": "raw", "version": "1"}}}),
        );
        let init = client.response(0);
        assert_eq!(init["result"]["protocolVersion"], version);
        client.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        client
    }

    fn send_raw(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    fn send(&mut self, message: Value) {
        self.send_raw(&message.to_string());
    }

    fn next(&mut self) -> Value {
        self.lines
            .recv_timeout(SOON)
            .expect("no message from dsh mcp")
    }

    /// Waits for the first message (seen before or arriving) matching `want`.
    fn wait_for(&mut self, want: impl Fn(&Value) -> bool) -> Value {
        if let Some(i) = self.seen.iter().position(&want) {
            return self.seen.remove(i);
        }
        loop {
            let message = self.next();
            if want(&message) {
                return message;
            }
            self.seen.push(message);
        }
    }

    fn response(&mut self, id: impl Into<Value>) -> Value {
        let id = id.into();
        self.wait_for(|m| m["id"] == id && m.get("method").is_none())
    }

    fn call(&mut self, id: i64, tool: &str, arguments: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}}));
        self.response(id)
    }

    /// Closes stdin and waits for exit 0.
    fn finish(mut self) {
        drop(self.stdin.take());
        wait_exit(&mut self.child);
    }
}

fn wait_exit(child: &mut Child) {
    let deadline = Instant::now() + SOON;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert_eq!(status.code(), Some(0));
            return;
        }
        assert!(Instant::now() < deadline, "dsh mcp did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn bash(command: &str) -> Value {
    json!({"command": command, "description": "test"})
}

fn error_code(message: &Value) -> i64 {
    message["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error: {message}"))
}

#[test]
fn bad_json_rpc_gets_the_right_error_codes() {
    let mut client = Client::start(&[]);
    client.send_raw("{not json");
    let reply = client.next();
    assert_eq!((error_code(&reply), &reply["id"]), (-32700, &Value::Null));
    client.send_raw(r#"{"jsonrpc":"2.0","id":"x"}"#);
    let reply = client.next();
    assert_eq!((error_code(&reply), &reply["id"]), (-32600, &json!("x")));
    client.send_raw(r#"{"jsonrpc":"2.0","id":1,"method":7}"#);
    assert_eq!(error_code(&client.response(1)), -32600);
    let mut client = {
        client.finish();
        Client::session("2025-06-18", json!({}), &[])
    };
    client.send_raw(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call"}"#);
    assert_eq!(error_code(&client.response(2)), -32602);
    client.send_raw(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"arguments":{}}}"#);
    assert_eq!(error_code(&client.response(3)), -32602);
    let unknown = client.call(4, "nope", json!({}));
    assert_eq!(error_code(&unknown), -32602);
    assert!(
        unknown["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown tool \"nope\"")
    );
    // Still serving.
    let ok = client.call(5, "bash", bash("echo alive"));
    assert_eq!(ok["result"]["content"][0]["text"], "alive\n");
    client.finish();
}

/// Params that are well-formed JSON but cannot be decoded (a lone surrogate, `1e400`, nesting past
/// serde_json's recursion limit) are answered -32602 with serde's reason and the request's id,
/// instead of `tools/call needs a params object` (or, outside `tools/call`, no answer at all).
#[test]
fn undecodable_params_are_answered_with_the_reason_and_the_id() {
    let mut client = Client::session("2025-06-18", json!({}), &[]);
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let call = |id: i64, arguments: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"bash","arguments":{arguments}}}}}"#
        )
    };
    for (id, line, reason) in [
        (
            1,
            call(1, r#"{"command":"echo \ud800","description":"t"}"#),
            "unexpected end of hex escape",
        ),
        (
            2,
            call(
                2,
                r#"{"command":"echo","description":"t","timeoutMs":1e400}"#,
            ),
            "number out of range",
        ),
        (
            3,
            call(
                3,
                &format!(r#"{{"command":"echo","description":"t","x":{deep}}}"#),
            ),
            "recursion limit exceeded",
        ),
        (
            4,
            r#"{"jsonrpc":"2.0","id":4,"method":"ping","params":{"x":"\udc00"}}"#.to_owned(),
            "lone leading surrogate in hex escape",
        ),
    ] {
        client.send_raw(&line);
        let reply = client.response(id);
        assert_eq!(error_code(&reply), -32602, "{reply}");
        let message = reply["error"]["message"].as_str().unwrap();
        let said =
            format!("Invalid params: invalid JSON in \"params\": {reason} at line 1 column ");
        assert!(message.starts_with(&said), "{message}");
    }
    let ok = client.call(5, "bash", bash("echo alive"));
    assert_eq!(ok["result"]["content"][0]["text"], "alive\n");
    client.finish();
}

#[test]
fn a_message_over_max_line_bytes_is_refused_unread_and_the_server_goes_on() {
    let mut client = Client::start(&["--max-line-bytes", "4096"]);
    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":"{}"}}}}"#,
        "x".repeat(1 << 20)
    );
    client.send_raw(&huge);
    let reply = client.next();
    assert_eq!((error_code(&reply), &reply["id"]), (-32600, &Value::Null));
    assert!(reply["error"]["message"].as_str().unwrap().contains("4096"));
    client.send_raw(r#"{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#);
    assert!(client.response(2).get("result").is_some());
    client.finish();
}

#[test]
fn tools_have_titles_annotations_schemas_and_structured_results() {
    let mut client = Client::session("2025-06-18", json!({}), &[]);
    client.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    let tools = client.response(1)["result"]["tools"].clone();
    let tool = |name: &str| {
        tools
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap()
            .clone()
    };
    let hints = |name: &str| {
        let a = tool(name)["annotations"].clone();
        (
            a["readOnlyHint"].clone(),
            a["destructiveHint"].clone(),
            a["idempotentHint"].clone(),
            a["openWorldHint"].clone(),
        )
    };
    assert_eq!(
        hints("bash"),
        (json!(false), json!(true), json!(false), json!(true))
    );
    assert_eq!(hints("bash_output").0, json!(true));
    assert_eq!(hints("bash_output").2, json!(true));
    assert_eq!(
        (hints("bash_kill").1, hints("bash_kill").2),
        (json!(true), json!(true))
    );
    // bash_write writes to a program: not read-only, destructive, not idempotent.
    assert_eq!(
        (
            hints("bash_write").0,
            hints("bash_write").1,
            hints("bash_write").2
        ),
        (json!(false), json!(true), json!(false))
    );
    for name in ["bash", "bash_output", "bash_write", "bash_kill"] {
        assert!(tool(name)["title"].is_string());
        assert_eq!(tool(name)["outputSchema"]["type"], "object");
    }

    let failed = client.call(2, "bash", bash("echo out; exit 4"));
    assert_eq!(
        failed["result"]["content"][0]["text"],
        "out\n[exit code: 4]"
    );
    let structured = &failed["result"]["structuredContent"];
    assert_eq!(structured["exit_code"], 4);
    assert_eq!(structured["stdout"]["bytes"], 4);
    let started = client.call(
        3,
        "bash",
        json!({"command": "sleep 30", "description": "d", "run_in_background": true}),
    );
    let task = started["result"]["structuredContent"]["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        started["result"]["content"][0]["text"],
        format!("started background task {task}")
    );
    let read = client.call(4, "bash_output", json!({"task_id": task}));
    assert_eq!(read["result"]["structuredContent"]["status"], "running");
    let kill = client.call(5, "bash_kill", json!({"task_id": task}));
    assert_eq!(kill["result"]["structuredContent"]["outcome"], "killed");
    client.finish();
}

#[test]
fn a_progress_token_gets_progress_while_the_command_runs() {
    let mut client = Client::session("2025-06-18", json!({}), &[]);
    client.send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "bash", "arguments": bash("echo first line; sleep 1.2; echo done"),
        "_meta": {"progressToken": "tok"}}}),
    );
    let reply = client.response(1);
    assert_eq!(reply["result"]["content"][0]["text"], "first line\ndone\n");
    let progress: Vec<Value> = std::mem::take(&mut client.seen)
        .into_iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert!(progress.len() >= 2, "{progress:?}");
    let values: Vec<f64> = progress
        .iter()
        .map(|p| p["params"]["progress"].as_f64().unwrap())
        .collect();
    assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");
    assert!(
        progress
            .iter()
            .all(|p| p["params"]["progressToken"] == "tok")
    );
    assert!(
        progress
            .iter()
            .any(|p| p["params"]["message"] == "11 bytes so far; last line: first line"),
        "{progress:?}"
    );
    // No token, no progress.
    client.send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "bash", "arguments": bash("sleep 0.5")}}),
    );
    client.response(2);
    assert!(
        client
            .seen
            .iter()
            .all(|m| m["method"] != "notifications/progress"),
        "{:?}",
        client.seen
    );
    client.finish();
}

fn background_notice(client: &mut Client, id: i64) {
    let started = client.call(
        id,
        "bash",
        json!({"command": "true", "description": "d", "run_in_background": true}),
    );
    let task = started["result"]["structuredContent"]["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // The notice is appended to a later result; poll until it shows up there.
    let deadline = Instant::now() + SOON;
    let mut n = 0;
    loop {
        n += 1;
        let reply = client.call(id * 1000 + n, "bash", bash("true"));
        let content = reply["result"]["content"].as_array().unwrap().clone();
        if content.len() == 2 {
            assert!(content[1]["text"].as_str().unwrap().contains(&task));
            return;
        }
        assert!(Instant::now() < deadline, "no notice for {task}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn log_messages(client: &mut Client) -> usize {
    client
        .seen
        .iter()
        .filter(|m| m["method"] == "notifications/message")
        .count()
}

#[test]
fn logging_follows_set_level_and_the_protocol_version() {
    // Before 2026-07-28 the server may log until the client sets a level.
    let mut client = Client::session("2025-06-18", json!({}), &[]);
    background_notice(&mut client, 1);
    let logged = client.wait_for(|m| m["method"] == "notifications/message");
    assert!(
        logged["params"]["data"]
            .as_str()
            .unwrap()
            .contains("finished")
    );
    client.send(json!({"jsonrpc": "2.0", "id": 2, "method": "logging/setLevel", "params": {"level": "warning"}}));
    assert_eq!(client.response(2)["result"], json!({}));
    background_notice(&mut client, 3);
    client.call(5, "bash", bash("true"));
    assert_eq!(
        log_messages(&mut client),
        0,
        "info notices are below warning"
    );
    client.send(json!({"jsonrpc": "2.0", "id": 4, "method": "logging/setLevel", "params": {"level": "bogus"}}));
    assert!(client.response(4).get("error").is_some());
    client.finish();

    // 2026-07-28 (no initialize): nothing is logged unless a request asks for a level.
    let mut client = Client::start(&[]);
    let meta = |level: Option<&str>| {
        let mut meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}});
        if let Some(level) = level {
            meta["io.modelcontextprotocol/logLevel"] = json!(level);
        }
        meta
    };
    let call = |client: &mut Client, id: i64, arguments: Value, level: Option<&str>| {
        client.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "bash", "arguments": arguments, "_meta": meta(level)}}));
        client.response(id)
    };
    let started = call(
        &mut client,
        1,
        json!({"command": "true", "description": "d", "run_in_background": true}),
        None,
    );
    assert!(started.get("result").is_some(), "{started}");
    for id in 2..200 {
        let reply = call(&mut client, id, bash("true"), None);
        if reply["result"]["content"].as_array().unwrap().len() == 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    call(&mut client, 250, bash("true"), None);
    assert_eq!(log_messages(&mut client), 0, "{:?}", client.seen);
    call(
        &mut client,
        300,
        json!({"command": "true", "description": "d", "run_in_background": true}),
        Some("info"),
    );
    let logged = client.wait_for(|m| m["method"] == "notifications/message");
    assert!(
        logged["params"]["data"]
            .as_str()
            .unwrap()
            .contains("finished")
    );
    client.finish();
}

#[test]
fn without_cwd_the_first_file_root_is_the_workspace() {
    let workspace = tempfile::tempdir().unwrap();
    std::fs::create_dir(workspace.path().join("sub dir")).unwrap();
    let root = workspace.path().canonicalize().unwrap();
    let uri = format!("file://{}", root.display().to_string().replace(' ', "%20"));
    let mut client = Client::session("2025-06-18", json!({"roots": {"listChanged": true}}), &[]);
    let ask = client.wait_for(|m| m["method"] == "roots/list");
    client.send(
        json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"roots": [
        {"uri": "https://example.com/not-a-dir"}, {"uri": uri, "name": "ws"}]}}),
    );
    let pwd = client.call(1, "bash", bash("pwd"));
    assert_eq!(
        pwd["result"]["content"][0]["text"],
        format!("{}\n", root.display())
    );
    let sub = client.call(
        2,
        "bash",
        json!({"command": "pwd", "description": "d", "workdir": "sub dir"}),
    );
    assert_eq!(
        sub["result"]["content"][0]["text"],
        format!("{}/sub dir\n", root.display())
    );
    client.finish();

    // --cwd wins: the server does not even ask.
    let elsewhere = tempfile::tempdir().unwrap();
    let cwd = elsewhere.path().canonicalize().unwrap();
    let mut client = Client::session(
        "2025-06-18",
        json!({"roots": {}}),
        &["--cwd", cwd.to_str().unwrap()],
    );
    let pwd = client.call(1, "bash", bash("pwd"));
    assert_eq!(
        pwd["result"]["content"][0]["text"],
        format!("{}\n", cwd.display())
    );
    assert!(
        client.seen.iter().all(|m| m["method"] != "roots/list"),
        "{:?}",
        client.seen
    );
    client.finish();
}

#[test]
fn the_client_closing_our_stdout_kills_everything_and_exits_0() {
    let mut client = Client::session("2025-06-18", json!({}), &[]);
    let started = client.call(1, "bash", json!({"command": "echo $$; exec sleep 300", "description": "d", "run_in_background": true}));
    let task = started["result"]["structuredContent"]["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let pid = loop {
        let read = client.call(2, "bash_output", json!({"task_id": task}));
        let output = read["result"]["structuredContent"]["output"]
            .as_str()
            .unwrap()
            .to_owned();
        if let Some(pid) = output.lines().next().and_then(|l| l.parse::<i32>().ok()) {
            break pid;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    client.send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "bash", "arguments": bash("sleep 300")}}));
    // Hang up: drop our end of its stdout (the reader thread), keep its stdin open.
    let Client {
        mut child,
        stdin,
        lines,
        ..
    } = client;
    drop(lines);
    // The reader thread holds the pipe until its next read fails; a message makes that happen.
    let mut stdin = stdin.unwrap();
    let deadline = Instant::now() + SOON;
    while child.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "dsh mcp kept running after the hang-up"
        );
        let _ = writeln!(stdin, r#"{{"jsonrpc":"2.0","id":9,"method":"ping"}}"#);
        std::thread::sleep(Duration::from_millis(50));
    }
    wait_exit(&mut child);
    assert!(!pid_is_live(pid), "the background task was killed");
}

/// A sandbox escalation through `elicitation/create`: accept runs the command once under the wider
/// mode, decline is the user's rejection, cancel is a cancel; a client without the capability gets
/// the seeds' "no approval channel" text.
#[test]
fn sandbox_escalations_are_approved_through_elicitation() {
    if dsh::LocalSandboxProvider::new(dsh::LocalSandboxConfig::default())
        .unwrap()
        .verdict()
        .is_err()
    {
        eprintln!("skipped: no sandbox backend is usable here");
        return;
    }
    let ws = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let cwd = ws.path().to_str().unwrap().to_owned();
    let escalate = |file: &str| {
        json!({"command": format!("touch {file}"), "description": "test",
               "sandbox_permissions": "workspace-write", "justification": "it writes a file"})
    };
    let mut client = Client::session(
        "2025-06-18",
        json!({"elicitation": {}}),
        &["--sandbox", "read-only", "--cwd", &cwd],
    );
    for (id, file, action, expected) in [
        (1, "accepted", "accept", "(no output)"),
        (
            2,
            "declined",
            "decline",
            "Error: the user rejected escalating this command to \"workspace-write\"",
        ),
        (
            3,
            "cancelled",
            "cancel",
            "Error: approval for escalating to \"workspace-write\" was cancelled",
        ),
    ] {
        client.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "bash", "arguments": escalate(file)}}));
        let ask = client.wait_for(|m| m["method"] == "elicitation/create");
        assert!(
            ask["params"]["message"]
                .as_str()
                .unwrap()
                .contains("escalate sandbox to workspace-write: it writes a file"),
            "{ask}"
        );
        let mut answer = json!({"action": action});
        if action == "accept" {
            answer["content"] = json!({"approve": true});
        }
        client.send(json!({"jsonrpc": "2.0", "id": ask["id"], "result": answer}));
        let reply = client.response(id);
        assert_eq!(reply["result"]["content"][0]["text"], expected, "{reply}");
        assert_eq!(ws.path().join(file).exists(), action == "accept");
    }
    client.finish();

    let mut plain = Client::session(
        "2025-06-18",
        json!({}),
        &["--sandbox", "read-only", "--cwd", &cwd],
    );
    let reply = plain.call(9, "bash", escalate("never"));
    assert_eq!(
        reply["result"]["content"][0]["text"],
        "Error: sandbox escalation to \"workspace-write\" requires approval, but no approval channel is available"
    );
    plain.finish();
}

/// A fresh directory outside `/tmp` and outside this checkout (both writable to the server's
/// commands for other reasons).
fn outside_tmp_and_checkout() -> tempfile::TempDir {
    let base = std::env::var_os("HOME")
        .map(std::path::PathBuf::from)
        .filter(|home| {
            home.is_dir()
                && !home.starts_with("/tmp")
                && !std::path::Path::new(env!("CARGO_MANIFEST_DIR")).starts_with(home)
        })
        .unwrap_or_else(|| std::path::PathBuf::from("/var/tmp"));
    tempfile::Builder::new()
        .prefix("dsh-mcp-root-")
        .tempdir_in(base)
        .unwrap()
}

/// Whether Landlock confines commands here (the roots tests need it); says why not.
fn landlock_usable() -> bool {
    let provider = dsh::LocalSandboxProvider::new(dsh::LocalSandboxConfig {
        backend: dsh::BackendChoice::Landlock,
        ..Default::default()
    })
    .unwrap();
    match provider.verdict() {
        Ok(_) => true,
        Err(reason) => {
            eprintln!("skipped: Landlock is not usable here: {reason}");
            false
        }
    }
}

/// Under the default `workspace-write`, the client's root is the directory commands may write, not
/// the server's own directory: a session whose root came from `roots/list` can build in it, and
/// still cannot write beside it.
#[test]
fn the_clients_root_is_the_sandboxs_writable_workspace() {
    if !landlock_usable() {
        return;
    }
    let workspace = outside_tmp_and_checkout();
    let beside = outside_tmp_and_checkout();
    let root = workspace.path().canonicalize().unwrap();
    let uri = format!("file://{}", root.display());
    let mut client = Client::session("2025-06-18", json!({"roots": {}}), &[]);
    let ask = client.wait_for(|m| m["method"] == "roots/list");
    client.send(json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"roots": [{"uri": uri}]}}));
    let made = client.call(1, "bash", bash("touch made && echo made"));
    let outside = format!("touch '{}/x'", beside.path().display());
    let denied = client.call(2, "bash", bash(&outside));
    client.finish();
    assert_eq!(made["result"]["content"][0]["text"], "made\n");
    assert!(root.join("made").is_file());
    let denied = denied["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        denied.contains("[sandbox: file access denied under workspace-write mode]"),
        "{denied}"
    );
    assert!(!beside.path().join("x").exists());
}

/// A client whose root is the whole file system does not widen `workspace-write` to everything: the
/// root is not used (the server's own directory is the workspace), and a write elsewhere is denied.
#[test]
fn a_root_that_is_the_whole_file_system_is_not_a_writable_workspace() {
    if !landlock_usable() {
        return;
    }
    let beside = outside_tmp_and_checkout();
    let mut client = Client::session("2025-06-18", json!({"roots": {}}), &[]);
    let ask = client.wait_for(|m| m["method"] == "roots/list");
    client.send(
        json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"roots": [{"uri": "file:///"}]}}),
    );
    let outside = format!("touch '{}/x'", beside.path().display());
    let denied = client.call(1, "bash", bash(&outside));
    client.finish();
    let denied = denied["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        denied.contains("[sandbox: file access denied under workspace-write mode]"),
        "{denied}"
    );
    assert!(!beside.path().join("x").exists());
}
