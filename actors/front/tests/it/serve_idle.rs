//! What an idle MCP session of `dsh serve` costs, through the binary: 300 sessions of an identity
//! each, each `initialize` and one `echo`, grow the server's resident set by well under the 64 KiB
//! a session that issue 24 allows (rmcp's own session manager, a worker task and five channels per
//! session, measured ~66 KiB); and a session ended with DELETE is gone (404).

use dsh_test_support::procfs::live_with_cmdline;
use dsh_test_support::wait::wait_until;
use serde_json::json;

use crate::serve_client::{McpSession, SOON, Server, marker, post};

const SESSIONS: usize = 300;
const WARM: usize = 20;
/// Per session, in KiB: the session table's measured 30–31 in a debug build (32 in release); rmcp's
/// `LocalSessionManager` 65 (66 in release).
const MOST_KIB: u64 = 52;

/// The server's resident set, in KiB.
fn rss_kib(server: &Server) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.child.id())).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn an_idle_session_costs_the_server_little_and_a_deleted_one_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let names: Vec<(String, String)> = (0..WARM + SESSIONS)
        .map(|i| (format!("agent-{i}"), format!("token-{i}")))
        .collect();
    let lines: Vec<(&str, &str)> = names
        .iter()
        .map(|(i, t)| (i.as_str(), t.as_str()))
        .collect();
    let tokens = Server::tokens(&dir, &lines);
    let cwd = dir.path().to_str().unwrap();
    let server = Server::start(&["--auth-tokens", &tokens, "--cwd", cwd]);
    let mark = marker("idle");
    let open = |i: usize| {
        let mut session = McpSession::open(&server, &format!("token-{i}"));
        let text = session.text(
            "bash",
            json!({"command": format!("echo {mark}"), "description": "test"}),
        );
        assert_eq!(text.trim(), mark);
        session
    };
    let warm: Vec<McpSession> = (0..WARM).map(open).collect();
    let before = rss_kib(&server);
    let idle: Vec<McpSession> = (WARM..WARM + SESSIONS).map(open).collect();
    let after = rss_kib(&server);
    let per_session = after.saturating_sub(before) / SESSIONS as u64;
    assert!(
        per_session <= MOST_KIB,
        "{SESSIONS} idle sessions grew the server from {before} to {after} KiB: {per_session} KiB \
         each (at most {MOST_KIB})"
    );

    let gone = idle[0].id.clone();
    for session in idle.into_iter().chain(warm) {
        session.close();
    }
    let ping = json!({"jsonrpc": "2.0", "id": 9, "method": "ping"}).to_string();
    let after_delete = post(
        &server,
        Some(&format!("token-{WARM}")),
        &[("Mcp-Session-Id", &gone)],
        &ping,
    );
    assert_eq!(after_delete.status, 404, "{}", after_delete.body);
    assert!(
        wait_until(SOON, || live_with_cmdline(&mark).is_empty()),
        "an echo of the test still runs"
    );
}
