//! `dsh serve` driven by the official SDKs over Streamable HTTP with a bearer token: the TypeScript
//! SDK (tests/mcp-ts/http_client.mjs, `StreamableHTTPClientTransport`: list, a foreground call, a
//! background task, and the same identity reading it on a new connection) and the Python SDK
//! (tests/mcp/http_client.py, `streamable_http_client`, in both modes: the 2025-11-25 handshake and
//! 2026-07-28 stateless requests, each with the client's root as the workspace), and the MCP
//! Inspector CLI (`--transport http` with the token in `--header`).

use std::process::Command;

use dsh_test_support::procfs::live_with_cmdline;
use dsh_test_support::wait::wait_until;
use serde_json::Value;

use crate::mcp_client::python;
use crate::mcp_ts::{check, node_project};
use crate::serve_client::{SOON, Server};

/// Runs an SDK client (`what`), asserts it succeeded, and returns the JSON report on its last line.
fn report_of(client: &mut Command, what: &str) -> Value {
    let output = client
        .output()
        .unwrap_or_else(|e| panic!("run {what}: {e}"));
    let stdout = check(&output, what);
    serde_json::from_str(stdout.trim().lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("not a JSON report ({e}): {stdout}"))
}

#[test]
fn the_typescript_sdk_round_trips_over_http_with_a_token_and_reconnects() {
    let Some(project) = node_project() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = Server::alice(&dir, &[]);
    let marker = format!("serve-sdk-ts-{}", std::process::id());
    let mut client = Command::new("node");
    client
        .arg(project.join("http_client.mjs"))
        .arg(format!("{}/mcp", server.base))
        .arg("alice-token")
        .arg(&marker)
        .current_dir(&project);
    let report = report_of(&mut client, "the TypeScript client");
    assert_eq!(
        report["checks"],
        serde_json::json!(["list", "call", "background", "reconnect"])
    );
    assert_eq!(
        live_with_cmdline(&marker).len(),
        1,
        "the task outlived its connection"
    );
    drop(server);
    assert!(
        wait_until(SOON, || live_with_cmdline(&marker).is_empty()),
        "the server's end killed the task"
    );
}

#[test]
fn the_python_sdk_round_trips_over_http_in_both_modes_with_roots() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = Server::tokens(&dir, &[("alice", "alice-token"), ("bob", "bob-token")]);
    let server = Server::start(&["--auth-tokens", &tokens]);
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/http_client.py");
    // One identity per mode: an identity's workspace, once its client named it, stays its own.
    let modes = [
        ("alice", "legacy", "2025-11-25"),
        ("bob", "auto", "2026-07-28"),
    ];
    for (identity, mode, version) in modes {
        let root = tempfile::tempdir().unwrap();
        let root = root.path().canonicalize().unwrap();
        let mut client = Command::new(python());
        client
            .arg(&script)
            .arg(format!("{}/mcp", server.base))
            .arg(format!("{identity}-token"))
            .arg(identity)
            .arg(mode)
            .arg(&root);
        let report = report_of(&mut client, &format!("the Python client ({mode})"));
        assert_eq!(report["protocol_version"], version);
        assert_eq!(
            report["checks"],
            serde_json::json!(["list", "call", "background"])
        );
    }
}

#[test]
fn the_mcp_inspector_cli_calls_bash_over_http_with_a_token() {
    let Some(project) = node_project() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = Server::alice(&dir, &[]);
    let marker = format!("serve-inspector-{}", std::process::id());
    let inspector =
        |token: &str, args: &[&str]| {
            let mut cli = Command::new("node");
            cli.arg(project.join(
                "node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js",
            ))
            .arg("--cli")
            .arg(format!("{}/mcp", server.base))
            .args(["--transport", "http", "--header"])
            .arg(format!("Authorization: Bearer {token}"))
            .args(args)
            .current_dir(&project);
            cli.output().expect("run the MCP Inspector CLI")
        };
    let command = format!("command=echo \"$DSH_SESSION_ID {marker}\"; exit 3");
    let call = [
        "--method",
        "tools/call",
        "--tool-name",
        "bash",
        "--tool-arg",
        &command,
        "--tool-arg",
        "description=try the inspector",
    ];
    let stdout = check(&inspector("alice-token", &call), "the Inspector CLI");
    let called: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(
        called["content"][0]["text"],
        format!("alice {marker}\n[exit code: 3]")
    );
    assert_eq!(called["structuredContent"]["exit_code"], 3);
    let refused = inspector("wrong-token", &call);
    assert!(!refused.status.success(), "a wrong token is refused");
    assert!(wait_until(SOON, || live_with_cmdline(&marker).is_empty()));
}
