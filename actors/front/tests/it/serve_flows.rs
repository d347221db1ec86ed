//! More of `dsh serve` through the binary: tokens given as their SHA-256, an identity that reconnects
//! and reads the rest of its task's output with nothing lost or repeated, progress and completion
//! notices over HTTP, a client that opens 1,000 connections while others are still served, a slow
//! body and an idle kept-alive connection timing out.

use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dsh_test_support::procfs::live_with_cmdline;
use dsh_test_support::wait::wait_until;
use serde_json::{Value, json};

use crate::serve_client::{McpSession, SOON, Server, marker, post, read_to_close};

#[test]
fn a_token_given_as_its_sha256_lets_its_identity_in_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    // printf %s bob-secret | sha256sum
    let hashed = "sha256:9f03ef1533a68d2f506f81ef463c1183a82a6bd40e45613f36e6fe1889cf1b99";
    let tokens = Server::tokens(&dir, &[("alice", "alice-token"), ("bob", hashed)]);
    let server = Server::start(&["--auth-tokens", &tokens]);
    let mut bob = McpSession::open(&server, "bob-secret");
    let text = bob.text(
        "bash",
        json!({"command": "echo \"as $DSH_SESSION_ID\"", "description": "test"}),
    );
    assert_eq!(text, "as bob\n");
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "x", "version": "1"}}})
    .to_string();
    for token in ["bob-secre", hashed, &hashed["sha256:".len()..]] {
        let refused = post(&server, Some(token), &[], &initialize);
        assert_eq!(refused.status, 401, "{token}");
        assert_eq!(refused.body, "");
    }
}

/// The output and status of one `bash_output` read of `task` that waits for `until`, or for the
/// task's end.
fn read(session: &mut McpSession, task: &str, until: Option<&str>) -> (String, String) {
    let mut arguments = json!({"task_id": task, "wait": true, "timeout_ms": 30000});
    if let Some(until) = until {
        arguments["until"] = json!(until);
    }
    let result = session.call("bash_output", arguments);
    let structured = &result["result"]["structuredContent"];
    let output = structured["output"].as_str().unwrap_or_else(|| {
        panic!("no output in {result}");
    });
    (
        output.to_owned(),
        structured["status"].as_str().unwrap().to_owned(),
    )
}

#[test]
fn a_reconnecting_identity_reads_the_rest_of_its_output_with_nothing_lost_or_repeated() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::alice(&dir, &[]);
    let mut first = McpSession::open(&server, "alice-token");
    let task = first.background("for i in $(seq 1 60); do echo line-$i; sleep 0.05; done");
    let (mut seen, status) = read(&mut first, &task, Some("line-10"));
    assert_eq!(status, "running", "the task outran the first connection");
    assert!(seen.contains("line-10\n"), "{seen}");
    first.close();
    let mut second = McpSession::open(&server, "alice-token");
    loop {
        let (output, status) = read(&mut second, &task, None);
        seen.push_str(&output);
        if status != "running" {
            assert_eq!(status, "completed");
            break;
        }
    }
    let expected: String = (1..=60).map(|i| format!("line-{i}\n")).collect();
    assert_eq!(seen, expected);
}

/// The JSON-RPC messages of an SSE body.
fn messages(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str(data.trim()).ok())
        .collect()
}

#[test]
fn progress_and_completion_notices_arrive_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::alice(&dir, &["--progress-interval-ms", "200"]);
    let alice = McpSession::open(&server, "alice-token");
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "_meta": {"progressToken": "p-1"}, "name": "bash",
        "arguments": {"command": "echo working; sleep 1.5; echo done", "description": "test"}}});
    let reply = post(
        &server,
        Some("alice-token"),
        &[("Mcp-Session-Id", &alice.id)],
        &call.to_string(),
    );
    let sent = messages(&reply.body);
    let progress: Vec<&Value> = sent
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert!(progress.len() >= 2, "{}", reply.body);
    assert!(
        progress
            .iter()
            .all(|p| p["params"]["progressToken"] == "p-1")
    );
    assert!(
        progress
            .iter()
            .any(|p| p["params"]["message"] == "8 bytes so far; last line: working"),
        "{}",
        reply.body
    );
    let last = sent.last().unwrap();
    assert_eq!(last["id"], 3, "the result comes last");
    assert_eq!(last["result"]["content"][0]["text"], "working\ndone\n");

    // A background task's end, never read, is told in a later result (a block of its own), once.
    let mut alice = alice;
    let task = alice.background("sleep 0.2");
    let notice = format!("background bash task {task} finished");
    let mut all_text = || {
        let result = alice.call("bash", json!({"command": "true", "description": "test"}));
        let blocks = result["result"]["content"].as_array().unwrap().clone();
        let texts: Vec<&str> = blocks.iter().filter_map(|b| b["text"].as_str()).collect();
        texts.join("\n")
    };
    let mut told = 0;
    let deadline = Instant::now() + SOON;
    while told == 0 && Instant::now() < deadline {
        told += all_text().matches(&notice).count();
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(told, 1, "the notice came once");
    let text = all_text();
    assert!(!text.contains(&notice), "and only once: {text}");
}

/// Open descriptors of process `pid`.
fn descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

#[test]
fn a_client_with_a_thousand_connections_holds_at_most_max_connections_and_others_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::alice(
        &dir,
        &["--max-connections", "128", "--header-timeout-ms", "1000"],
    );
    let address = server.base.trim_start_matches("http://").to_owned();
    let pid = server.child.id();
    let before = descriptors(pid);
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut most = 0;
            while !done.load(Ordering::SeqCst) {
                most = most.max(descriptors(pid));
                std::thread::sleep(Duration::from_millis(20));
            }
            most
        })
    };
    // A thousand connections that send nothing; the kernel's backlog holds those the server has
    // not accepted, and the header timeout closes the accepted ones a wave at a time.
    let hog: Vec<TcpStream> = (0..1000)
        .map(|_| TcpStream::connect(&address).expect("connect"))
        .collect();
    let mut alice = McpSession::open(&server, "alice-token");
    let m = marker("hog");
    let text = alice.text(
        "bash",
        json!({"command": format!("echo {m}"), "description": "test"}),
    );
    assert_eq!(text, format!("{m}\n"), "the server went on serving others");
    done.store(true, Ordering::SeqCst);
    let most = sampler.join().unwrap();
    assert!(
        most <= before + 128 + 8,
        "at most --max-connections open: {most} descriptors, {before} before"
    );
    assert!(
        most > before + 64,
        "the sampler saw the hog: {most}, {before} before"
    );
    drop(hog);
    assert!(wait_until(SOON, || live_with_cmdline(&m).is_empty()));
}

#[test]
fn a_slow_body_gets_408_and_an_idle_kept_alive_connection_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::alice(&dir, &["--header-timeout-ms", "500"]);
    let address = server.base.trim_start_matches("http://").to_owned();
    let mut slow = TcpStream::connect(&address).unwrap();
    write!(
        slow,
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer alice-token\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Content-Length: 200\r\n\r\n{{"
    )
    .unwrap();
    let started = Instant::now();
    let mut alice = McpSession::open(&server, "alice-token");
    let text = alice.text(
        "bash",
        json!({"command": "echo served", "description": "test"}),
    );
    assert_eq!(text, "served\n", "others are served meanwhile");
    let answered = read_to_close(&mut slow);
    assert!(answered.starts_with("HTTP/1.1 408"), "{answered}");
    assert!(started.elapsed() < SOON);

    let mut idle = TcpStream::connect(&address).unwrap();
    write!(idle, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
    let answered = read_to_close(&mut idle);
    assert!(answered.starts_with("HTTP/1.1 200"), "{answered}");
    assert!(
        answered.ends_with("ok\n"),
        "served, then closed when idle: {answered}"
    );
}

/// Whether `tool` runs here.
fn have(tool: &str) -> bool {
    Command::new(tool).arg("--version").output().is_ok()
}

/// `curl` of `url` trusting `ca`, with `args`; its stdout (with the headers, `-i`).
fn curl(ca: &Path, url: &str, args: &[&str]) -> String {
    let out = Command::new("curl")
        .args(["-sS", "-i", "--max-time", "60", "--cacert"])
        .arg(ca)
        .args(args)
        .arg(url)
        .output()
        .expect("run curl");
    assert!(
        out.status.success(),
        "curl {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn tls_serves_https_with_a_certificate_and_key_and_a_bad_key_stops_the_start() {
    if !have("openssl") || !have("curl") {
        println!("skipped: the TLS test needs the openssl and curl commands");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let made = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "2", "-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let (cert_arg, key_arg) = (cert.to_str().unwrap(), key.to_str().unwrap());
    let server = Server::alice(&dir, &["--tls-cert", cert_arg, "--tls-key", key_arg]);
    assert!(server.base.starts_with("https://"), "{}", server.base);
    let health = curl(&cert, &format!("{}/healthz", server.base), &[]);
    assert!(
        health.starts_with("HTTP/1.1 200") && health.ends_with("ok\n"),
        "{health}"
    );

    // The tool round trip: initialize, initialized, a call.
    let url = format!("{}/mcp", server.base);
    let headers = [
        "-H",
        "Authorization: Bearer alice-token",
        "-H",
        "Content-Type: application/json",
        "-H",
        "Accept: application/json, text/event-stream",
        "-H",
        "MCP-Protocol-Version: 2025-11-25",
    ];
    let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}"#;
    let answer = curl(&cert, &url, &[&headers[..], &["-d", init]].concat());
    let session = answer
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("mcp-session-id:")
                .map(|v| v.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("no session in {answer}"));
    let with_session = format!("Mcp-Session-Id: {session}");
    let mut in_session = headers.to_vec();
    in_session.extend(["-H", &with_session]);
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    curl(
        &cert,
        &url,
        &[&in_session[..], &["-d", initialized]].concat(),
    );
    let m = marker("tls");
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "bash", "arguments": {"command": format!("echo {m} $DSH_SESSION_ID"),
        "description": "test"}}})
    .to_string();
    let called = curl(&cert, &url, &[&in_session[..], &["-d", &call]].concat());
    assert!(called.contains(&format!("{m} alice\\n")), "{called}");

    // Plain HTTP to the TLS port gets no answer.
    let plain = server.base.replace("https://", "http://");
    let refused = ureq::get(format!("{plain}/healthz")).call();
    assert!(refused.is_err(), "plain HTTP was served");

    let bad = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--tls-cert",
            cert_arg,
            "--tls-key",
        ])
        .arg(&cert)
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        stderr.contains(&format!("--tls-key {cert_arg}: ")),
        "{stderr}"
    );
    assert!(wait_until(SOON, || live_with_cmdline(&m).is_empty()));
}

#[test]
fn an_initialize_past_max_sessions_is_refused_until_one_closes() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::alice(&dir, &["--max-sessions", "2"]);
    let first = McpSession::open(&server, "alice-token");
    let mut second = McpSession::open(&server, "alice-token");
    let initialize = json!({"jsonrpc": "2.0", "id": 4, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "x", "version": "1"}}})
    .to_string();
    let refused = post(&server, Some("alice-token"), &[], &initialize);
    assert_eq!(refused.status, 503, "{}", refused.body);
    let answer: Value = serde_json::from_str(&refused.body).unwrap();
    assert_eq!(answer["id"], 4);
    assert_eq!(
        answer["error"]["message"],
        "too many MCP sessions (limit 2); close one or retry later"
    );
    let text = second.text("bash", json!({"command": "echo on", "description": "test"}));
    assert_eq!(text, "on\n", "the sessions there are go on");
    first.close();
    assert!(
        wait_until(SOON, || post(
            &server,
            Some("alice-token"),
            &[],
            &initialize
        )
        .status
            == 200),
        "a closed session makes room"
    );
}
