//! `dsh serve` through the binary, over HTTP: a tool round trip with a token, 401s, identities
//! that own their tasks across connections and not each other's (and their per-session limits),
//! the idle lease, the refusals (evil `Origin`, oversized body, malformed JSON-RPC, a network
//! address without tokens), slow headers, the bound on connections, tokens kept out of the log, a
//! dropped SSE stream resumed with `Last-Event-ID`, and SIGTERM and SIGKILL of the server.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use dsh_test_support::procfs::live_with_cmdline;
use dsh_test_support::wait::wait_until;
use serde_json::json;

use crate::serve_client::{McpSession, SOON, Server, marker, post, read_to_close};

/// A long command carrying `marker` in its command line (its bash stays, with the marker).
fn long_running(marker: &str) -> String {
    format!("sleep 300; echo {marker}")
}

/// The status of a GET of the server's /healthz.
fn healthz(server: &Server) -> u16 {
    let health = ureq::get(format!("{}/healthz", server.base)).call();
    health.unwrap().status().as_u16()
}

fn two_identities(dir: &tempfile::TempDir, extra: &[&str]) -> Server {
    let tokens = Server::tokens(dir, &[("alice", "alice-token"), ("bob", "bob-token")]);
    let mut args = vec!["--auth-tokens", tokens.as_str()];
    args.extend_from_slice(extra);
    Server::start(&args)
}

#[test]
fn a_tool_round_trip_with_a_token_and_401_without_one() {
    let dir = tempfile::tempdir().unwrap();
    let server = two_identities(&dir, &[]);
    assert_eq!(healthz(&server), 200);
    let mut alice = McpSession::open(&server, "alice-token");
    let text = alice.text(
        "bash",
        json!({"command": "echo \"hello $DSH_SESSION_ID\"", "description": "test"}),
    );
    assert_eq!(text.trim(), "hello alice");
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "x", "version": "1"}}})
    .to_string();
    for token in [None, Some("wrong"), Some("alice-tokenx"), Some("")] {
        let refused = post(&server, token, &[], &initialize);
        assert_eq!(refused.status, 401, "{token:?}");
        assert_eq!(refused.body, "", "a 401 says nothing");
    }
}

#[test]
fn identities_own_their_tasks_across_connections_and_not_each_others() {
    let dir = tempfile::tempdir().unwrap();
    let server = two_identities(&dir, &[]);
    let (a, b) = (marker("own-a"), marker("own-b"));
    let mut alice = McpSession::open(&server, "alice-token");
    let mut bob = McpSession::open(&server, "bob-token");
    let alices = alice.background(&long_running(&a));
    let bobs = bob.background(&long_running(&b));
    for (session, task) in [(&mut bob, &alices), (&mut alice, &bobs)] {
        for tool in ["bash_output", "bash_kill"] {
            let text = session.text(tool, json!({"task_id": task}));
            assert!(
                text.contains(&format!("task {task} belongs to another session")),
                "{tool}: {text}"
            );
        }
    }
    let hijack = post(
        &server,
        Some("bob-token"),
        &[("Mcp-Session-Id", &alice.id)],
        &json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
            "name": "bash_kill", "arguments": {"task_id": alices}}})
        .to_string(),
    );
    assert!(
        hijack
            .body
            .contains("this MCP session belongs to another identity"),
        "{}",
        hijack.body
    );
    alice.close();
    let mut again = McpSession::open(&server, "alice-token");
    let output = again.text("bash_output", json!({"task_id": alices}));
    assert!(!output.contains("belongs to another"), "{output}");
    let killed = again.text("bash_kill", json!({"task_id": alices}));
    assert!(!killed.contains("belongs to another"), "{killed}");
    assert!(wait_until(SOON, || live_with_cmdline(&a).is_empty()));
    // Bob's shell alone carries the marker (its `sleep` child does too, between fork and exec).
    assert!(
        wait_until(SOON, || live_with_cmdline(&b).len() == 1),
        "bob's task is untouched: {:?}",
        live_with_cmdline(&b)
    );
}

#[test]
fn an_identity_without_a_connection_for_the_idle_time_loses_its_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let server = two_identities(&dir, &["--identity-idle-ms", "300"]);
    let (a, b) = (marker("idle-a"), marker("idle-b"));
    let alice = {
        let mut alice = McpSession::open(&server, "alice-token");
        alice.background(&long_running(&a));
        alice
    };
    let mut bob = McpSession::open(&server, "bob-token");
    bob.background(&long_running(&b));
    assert!(wait_until(SOON, || live_with_cmdline(&a).len() == 1));
    alice.close();
    assert!(
        wait_until(SOON, || live_with_cmdline(&a).is_empty()),
        "the abandoned identity's task was killed"
    );
    assert_eq!(live_with_cmdline(&b).len(), 1, "bob is still connected");
}

#[test]
fn an_evil_origin_and_an_oversized_body_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = two_identities(&dir, &["--max-line-bytes", "4096"]);
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "x", "version": "1"}}})
    .to_string();
    // An evil Origin is refused; a local one is served.
    for (origin, status) in [("http://evil.example", 403), ("http://localhost:3000", 200)] {
        let reply = post(
            &server,
            Some("alice-token"),
            &[("Origin", origin)],
            &initialize,
        );
        assert_eq!(reply.status, status, "{origin}: {}", reply.body);
    }
    let padded = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "padding": "x".repeat(8192),
        "clientInfo": {"name": "x", "version": "1"}}})
    .to_string();
    let big = post(&server, Some("alice-token"), &[], &padded);
    assert_eq!(big.status, 413, "{}", big.body);
}

#[test]
fn a_network_address_without_tokens_is_refused_at_startup() {
    let out = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .args(["serve", "--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("refusing to listen on 0.0.0.0:0 without --auth-tokens"),
        "{stderr}"
    );
}

/// Alice and Bob each start a long-running task on its own connection (markers `TAG-a` and
/// `TAG-b`); returns the markers once both run.
fn a_task_each(server: &Server, tag: &str) -> (String, String) {
    let (a, b) = (marker(&format!("{tag}-a")), marker(&format!("{tag}-b")));
    McpSession::open(server, "alice-token").background(&long_running(&a));
    McpSession::open(server, "bob-token").background(&long_running(&b));
    assert!(wait_until(SOON, || live_with_cmdline(&a).len() == 1
        && live_with_cmdline(&b).len() == 1));
    (a, b)
}

#[test]
fn sigterm_kills_every_identitys_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = two_identities(&dir, &[]);
    let (a, b) = a_task_each(&server, "term");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let exited = wait_until(SOON, || server.child.try_wait().unwrap().is_some());
    assert!(exited, "the server exits on SIGTERM");
    assert!(wait_until(Duration::from_secs(10), || live_with_cmdline(
        &a
    )
    .is_empty()
        && live_with_cmdline(&b).is_empty()));
}

#[test]
fn headers_sent_a_byte_at_a_time_time_out_and_the_server_serves_others() {
    let server = Server::start(&["--header-timeout-ms", "500"]);
    let address = server.base.trim_start_matches("http://").to_owned();
    let mut slow = TcpStream::connect(&address).unwrap();
    slow.write_all(b"GET /heal").unwrap();
    assert_eq!(healthz(&server), 200, "others are served meanwhile");
    let answered = read_to_close(&mut slow);
    assert!(!answered.contains("200 OK"), "{answered}");
}

#[test]
fn past_max_connections_a_client_waits_until_one_closes() {
    let server = Server::start(&["--max-connections", "1", "--header-timeout-ms", "2000"]);
    let address = server.base.trim_start_matches("http://").to_owned();
    let mut idle = TcpStream::connect(&address).unwrap();
    idle.write_all(b"G").unwrap();
    assert_eq!(healthz(&server), 200);
    // The one connection allowed was the idle one: the request above was served only after the
    // server closed it.
    idle.set_read_timeout(Some(Duration::from_millis(1)))
        .unwrap();
    let mut byte = [0u8; 1];
    assert!(
        matches!(idle.read(&mut byte), Ok(0)),
        "the idle connection is closed"
    );
}

#[test]
fn tokens_are_never_logged_even_at_trace() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = Server::tokens(&dir, &[("alice", "alice-secret-token-qzxv")]);
    let mut server = Server::start_with_log(&["--auth-tokens", &tokens], "trace");
    let mut alice = McpSession::open(&server, "alice-secret-token-qzxv");
    let text = alice.text(
        "bash",
        json!({"command": "echo logged", "description": "test"}),
    );
    assert_eq!(text, "logged\n");
    post(&server, Some("wrong-token-qzxv"), &[], "{}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    server.child.wait().unwrap();
    let log = server.log.lock().unwrap().clone();
    assert!(
        log.contains("CallToolRequest"),
        "the trace was written: {log}"
    );
    // Both tokens end in `qzxv`, which no pid, number or hex name in a log can spell.
    assert!(!log.contains("qzxv"), "a token was logged");
}

#[test]
fn malformed_json_rpc_is_refused_and_the_server_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let server = two_identities(&dir, &[]);
    let cases = [
        (r#"{"jsonrpc": "2.0", "id": 1, "method":"#, 400, -32700),
        ("[1, 2]", 400, -32600),
        ("null", 400, -32600),
        (
            r#"{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": 3}"#,
            200,
            -32602,
        ),
    ];
    for (body, status, code) in cases {
        let refused = post(&server, Some("alice-token"), &[], body);
        assert_eq!(refused.status, status, "{body}: {}", refused.body);
        let answer: serde_json::Value = serde_json::from_str(&refused.body).unwrap();
        assert_eq!(answer["error"]["code"], code, "{body}: {answer}");
    }
    let stranger = post(&server, None, &[], "[1, 2]");
    assert_eq!(
        stranger.status, 401,
        "a stranger learns nothing, not even a parse error"
    );
    let mut alice = McpSession::open(&server, "alice-token");
    let text = alice.text(
        "bash",
        json!({"command": "echo still", "description": "test"}),
    );
    assert_eq!(text, "still\n");
}

/// Reads SSE lines from `reader` until one starts with `prefix`; that line's rest.
fn sse_line(reader: &mut impl BufRead, prefix: &str) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        let read = reader.read_line(&mut line).unwrap();
        assert!(read > 0, "the stream ended before a {prefix:?} line");
        if let Some(rest) = line.strip_prefix(prefix) {
            return rest.trim().to_owned();
        }
    }
}

#[test]
fn a_dropped_stream_is_resumed_with_last_event_id_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = two_identities(&dir, &[]);
    let alice = McpSession::open(&server, "alice-token");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(SOON))
        .build()
        .into();
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "bash", "arguments": {"command": "sleep 1; echo resumed", "description": "test"}}});
    let response = agent
        .post(format!("{}/mcp", server.base))
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2025-11-25")
        .header("Authorization", "Bearer alice-token")
        .header("Mcp-Session-Id", &alice.id)
        .send(call.to_string())
        .unwrap();
    let mut stream = BufReader::new(response.into_body().into_reader());
    let last = sse_line(&mut stream, "id:");
    drop(stream);
    let resumed = agent
        .get(format!("{}/mcp", server.base))
        .header("Accept", "text/event-stream")
        .header("MCP-Protocol-Version", "2025-11-25")
        .header("Authorization", "Bearer alice-token")
        .header("Mcp-Session-Id", &alice.id)
        .header("Last-Event-ID", &last)
        .call()
        .unwrap();
    let mut stream = BufReader::new(resumed.into_body().into_reader());
    let answer = loop {
        let data: serde_json::Value = match serde_json::from_str(&sse_line(&mut stream, "data:")) {
            Ok(data) => data,
            Err(_) => continue,
        };
        if data["id"] == 7 {
            break data;
        }
    };
    assert_eq!(answer["result"]["content"][0]["text"], "resumed\n");
}

#[test]
fn per_session_limits_count_per_identity() {
    let dir = tempfile::tempdir().unwrap();
    let server = two_identities(&dir, &["--max-running-per-session", "1"]);
    let (a, b) = (marker("limit-a"), marker("limit-b"));
    let mut alice = McpSession::open(&server, "alice-token");
    alice.background(&long_running(&a));
    // Another connection of the same identity is the same session: over its limit.
    let mut again = McpSession::open(&server, "alice-token");
    let refused = again.text(
        "bash",
        json!({"command": long_running(&a), "description": "test", "run_in_background": true}),
    );
    assert!(
        refused.contains("too many running tasks for this session (limit 1)"),
        "{refused}"
    );
    let mut bob = McpSession::open(&server, "bob-token");
    bob.background(&long_running(&b));
    assert!(wait_until(SOON, || live_with_cmdline(&a).len() == 1
        && live_with_cmdline(&b).len() == 1));
}

#[test]
fn sigkill_of_the_server_leaves_the_watchdog_to_kill_every_identitys_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = two_identities(&dir, &[]);
    let (a, b) = a_task_each(&server, "kill");
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    assert!(wait_until(SOON, || live_with_cmdline(&a).is_empty()
        && live_with_cmdline(&b).is_empty()));
}
