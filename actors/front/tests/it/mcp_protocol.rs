//! `dsh mcp` spoken to line by line, as raw JSON-RPC: the error codes, tool metadata, structured
//! results, progress, logging levels per protocol version, roots, and the client hanging up.

use std::io::Write;
use std::time::{Duration, Instant};

use crate::common::landlock_usable;
use dsh::actors::process::signal::pid_is_live;
use dsh_test_support::procfs::{assert_all_gone, live_with_cmdline};
use dsh_test_support::wait::wait_until;
use serde_json::{Value, json};

use crate::mcp_raw::{
    Client, ESCALATION_ANSWERS, NO_APPROVAL_CHANNEL, SOON, approval_answer,
    assert_asks_for_escalation, bash, error_code, escalation, sandboxed_workspace, text, wait_exit,
};

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
    // Params that are not an object: -32602 with the request's id (the client must not have to
    // wait for its own timeout), and an unknown logging level is invalid params, not -32601.
    client.send_raw(r#"{"jsonrpc":"2.0","id":"p","method":"ping","params":[]}"#);
    let reply = client.response("p");
    assert_eq!((error_code(&reply), &reply["id"]), (-32602, &json!("p")));
    client.send_raw(
        r#"{"jsonrpc":"2.0","id":6,"method":"logging/setLevel","params":{"level":"loud"}}"#,
    );
    let reply = client.response(6);
    assert_eq!(error_code(&reply), -32602);
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown logging level \"loud\"; known levels: debug, info,"),
        "{reply}"
    );
    client.send_raw(
        r#"{"jsonrpc":"2.0","id":7,"method":"logging/setLevel","params":{"level":"warning"}}"#,
    );
    assert_eq!(client.response(7)["result"], json!({}));
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
    let task = started_task(&started);
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
    let task = started_task(&started);
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
    client.wait_for_finished_log();
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
    client.wait_for_finished_log();
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

/// A client that declares roots but never answers `roots/list` holds a call back only for
/// `--roots-timeout-ms`; the call then runs in the server's own directory.
#[test]
fn an_unanswered_roots_list_delays_a_call_only_for_the_roots_timeout() {
    let mut client = Client::session(
        "2025-06-18",
        json!({"roots": {"listChanged": true}}),
        &["--roots-timeout-ms", "200"],
    );
    client.wait_for(|m| m["method"] == "roots/list");
    let asked = Instant::now();
    let pwd = client.call(1, "bash", bash("pwd"));
    // The default wait is 5 s; 200 ms and a spawn fit well inside 3 s on a loaded machine.
    assert!(
        asked.elapsed() < Duration::from_secs(3),
        "{:?}",
        asked.elapsed()
    );
    let here = std::env::current_dir().unwrap().canonicalize().unwrap();
    assert_eq!(
        pwd["result"]["content"][0]["text"],
        format!("{}\n", here.display())
    );
    client.finish();
}

#[test]
fn the_client_closing_our_stdout_kills_everything_and_exits_0() {
    let mut client = Client::session("2025-06-18", json!({}), &[]);
    let started = client.call(1, "bash", json!({"command": "echo $$; exec sleep 300", "description": "d", "run_in_background": true}));
    let task = started_task(&started);
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

/// MCP's stdio shutdown: the client closes our stdin while a foreground call runs a command that
/// ignores SIGTERM. The command is killed at once (not after rmcp's wait for the call's answer), the
/// server exits 0, and the aborted call is not answered.
#[test]
fn the_client_closing_our_stdin_kills_a_running_call_at_once_and_answers_nothing_after() {
    let marker = format!("dsh-mcp-eof-{}", std::process::id());
    let mut client = Client::session("2025-06-18", json!({}), &[]);
    client.send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "bash",
        "arguments": bash(&format!("trap '' TERM; exec -a {marker} sleep 300"))}}),
    );
    assert!(
        wait_until(SOON, || !live_with_cmdline(&marker).is_empty()),
        "the command never started"
    );
    let pids = live_with_cmdline(&marker);
    let closed = Instant::now();
    drop(client.stdin.take());
    wait_exit(&mut client.child);
    // The kill escalates to SIGKILL after `--grace-ms 300`; rmcp's own wait was 5 s.
    assert!(
        closed.elapsed() < Duration::from_millis(2_500),
        "exit took {:?}",
        closed.elapsed()
    );
    assert_all_gone(&pids, SOON);
    let mut after = client.seen.clone();
    while let Ok(line) = client.lines.recv_timeout(Duration::from_millis(200)) {
        after.push(line);
    }
    assert!(
        after.iter().all(|m| m["id"] != json!(1)),
        "the aborted call was answered: {after:?}"
    );
}

/// A sandbox escalation through `elicitation/create`: accept runs the command once under the wider
/// mode, decline is the user's rejection, cancel is a cancel; a client without the capability gets
/// the "no approval channel" text.
#[test]
fn sandbox_escalations_are_approved_through_elicitation() {
    let Some((ws, cwd)) = sandboxed_workspace() else {
        return;
    };
    let escalate = |file: &str| escalation(&format!("touch {file}"));
    let mut client = Client::session(
        "2025-06-18",
        json!({"elicitation": {}}),
        &["--sandbox", "read-only", "--cwd", &cwd],
    );
    for (id, (action, expected)) in (1..).zip(ESCALATION_ANSWERS) {
        // Each answer's command touches a file named after it.
        let file = action;
        client.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "bash", "arguments": escalate(file)}}));
        let ask = client.wait_for(|m| m["method"] == "elicitation/create");
        let question = ask["params"]["message"].as_str().unwrap();
        assert_asks_for_escalation(question, &format!("touch {file}"), &ask);
        let answer = approval_answer(action);
        client.send(json!({"jsonrpc": "2.0", "id": ask["id"], "result": answer}));
        let reply = client.response(id);
        assert_eq!(text(&reply), expected, "{reply}");
        assert_eq!(ws.path().join(file).exists(), action == "accept");
    }
    client.finish();

    let mut plain = Client::session(
        "2025-06-18",
        json!({}),
        &["--sandbox", "read-only", "--cwd", &cwd],
    );
    let reply = plain.call(9, "bash", escalate("never"));
    assert_eq!(text(&reply), NO_APPROVAL_CHANNEL);
    plain.finish();
}

/// Two fresh directories outside `/tmp` and the checkout, where Landlock confines commands; `None`
/// (said why) where it does not.
fn confinable_dirs() -> Option<(tempfile::TempDir, tempfile::TempDir)> {
    landlock_usable().then(|| (outside_tmp_and_checkout(), outside_tmp_and_checkout()))
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

/// The task id in the structured content of a background start's reply.
fn started_task(reply: &Value) -> String {
    reply["result"]["structuredContent"]["task_id"]
        .as_str()
        .expect("a task id")
        .to_owned()
}

/// Asserts that `reply`, to `touch <beside>/x`, is the sandbox's denial and wrote nothing.
fn assert_write_beside_denied(reply: &Value, beside: &std::path::Path) {
    let text = reply["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.contains("[sandbox: file access denied under workspace-write mode]"),
        "{text}"
    );
    assert!(!beside.join("x").exists());
}

/// Under the default `workspace-write`, the client's root is the directory commands may write, not
/// the server's own directory: a session whose root came from `roots/list` can build in it, and
/// still cannot write beside it.
#[test]
fn the_clients_root_is_the_sandboxs_writable_workspace() {
    let Some((workspace, beside)) = confinable_dirs() else {
        return;
    };
    let root = workspace.path().canonicalize().unwrap();
    let uri = format!("file://{}", root.display());
    let mut client = Client::session("2025-06-18", json!({"roots": {}}), &[]);
    client.answer_roots(&[&uri]);
    let made = client.call(1, "bash", bash("touch made && echo made"));
    let outside = format!("touch '{}/x'", beside.path().display());
    let denied = client.call(2, "bash", bash(&outside));
    client.finish();
    assert_eq!(made["result"]["content"][0]["text"], "made\n");
    assert!(root.join("made").is_file());
    assert_write_beside_denied(&denied, beside.path());
}

/// A client whose root is the whole file system does not widen `workspace-write` to everything: the
/// root is not used (the server's own directory is the workspace), and a write elsewhere is denied.
#[test]
fn a_root_that_is_the_whole_file_system_is_not_a_writable_workspace() {
    let Some((_, beside)) = confinable_dirs() else {
        return;
    };
    let mut client = Client::session("2025-06-18", json!({"roots": {}}), &[]);
    client.answer_roots(&["file:///"]);
    let outside = format!("touch '{}/x'", beside.path().display());
    let denied = client.call(1, "bash", bash(&outside));
    client.finish();
    assert_write_beside_denied(&denied, beside.path());
}
