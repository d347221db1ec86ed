//! A 2026-07-28 session (no `initialize`, capabilities in each request's `_meta`) gets its roots
//! and its approvals through input rounds: the `tools/call` answers `input_required`, and the
//! retried call carries the answers. Raw JSON-RPC, line by line.

use dsh_test_support::procfs::{assert_all_gone, live_with_cmdline};
use dsh_test_support::wait::wait_until;
use serde_json::{Value, json};

use crate::mcp_raw::{Client, SOON, bash, error_code, inline_meta};

fn text(reply: &Value) -> &str {
    reply["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text: {reply}"))
}

fn file_uri(dir: &std::path::Path) -> String {
    format!("file://{}", dir.display())
}

#[test]
fn roots_become_the_workspace_through_an_input_round_and_follow_a_change() {
    let (first, second) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (first, second) = (
        first.path().canonicalize().unwrap(),
        second.path().canonicalize().unwrap(),
    );
    let roots = json!({"roots": {}});
    let mut client = Client::start(&[]);
    let asked = client.call_inline(1, bash("pwd"), roots.clone(), json!({}));
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    assert_eq!(
        asked["result"]["inputRequests"]["roots"]["method"],
        "roots/list"
    );
    let answer = |dir: &std::path::Path| {
        json!({"inputResponses": {"roots": {"roots": [
            {"uri": "https://example.com/not-a-dir"}, {"uri": file_uri(dir)}]}}})
    };
    let pwd = client.call_inline(2, bash("pwd"), roots.clone(), answer(&first));
    assert_eq!(text(&pwd), format!("{}\n", first.display()));
    // Known roots are not asked for again…
    let pwd = client.call_inline(3, bash("pwd"), roots.clone(), json!({}));
    assert_eq!(text(&pwd), format!("{}\n", first.display()));
    // …until the client says they changed.
    client.send(json!({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}));
    let asked = client.call_inline(4, bash("pwd"), roots.clone(), json!({}));
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    let pwd = client.call_inline(5, bash("pwd"), roots.clone(), answer(&second));
    assert_eq!(text(&pwd), format!("{}\n", second.display()));
    client.finish();

    // A client that does not offer roots is not asked: the server's own directory.
    let mut client = Client::start(&[]);
    let pwd = client.call_inline(1, bash("pwd"), json!({}), json!({}));
    let here = std::env::current_dir().unwrap().canonicalize().unwrap();
    assert_eq!(text(&pwd), format!("{}\n", here.display()));
    client.finish();
}

/// An escalation asks through an input round: the call is parked under a `requestState`, the
/// retried call carries the answer, and the command runs once if approved, never otherwise. A
/// state is good for one retry of the same call.
#[test]
fn escalations_are_approved_declined_and_cancelled_through_input_rounds() {
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
        json!({"command": format!("echo once >> {file}"), "description": "test",
               "sandbox_permissions": "workspace-write", "justification": "it writes a file"})
    };
    let elicits = json!({"elicitation": {}});
    let mut client = Client::start(&["--sandbox", "read-only", "--cwd", &cwd]);
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
        let asked = client.call_inline(id, escalate(file), elicits.clone(), json!({}));
        let result = &asked["result"];
        assert_eq!(result["resultType"], "input_required", "{asked}");
        let ask = &result["inputRequests"]["approval"];
        assert_eq!(ask["method"], "elicitation/create", "{asked}");
        let question = ask["params"]["message"].as_str().unwrap();
        let (command, mode, reason) = (
            question.find(&format!("echo once >> {file}")),
            question.find("workspace-write"),
            question.find("it writes a file"),
        );
        assert!(
            command.is_some() && mode.is_some() && reason > command && reason > mode,
            "the question shows the command and the mode, then the justification: {asked}"
        );
        assert!(
            !ws.path().join(file).exists(),
            "nothing runs before the answer"
        );
        let state = result["requestState"].as_str().unwrap().to_owned();
        // A retry that is another call finds nothing to resume, and runs nothing.
        let other = client.call_inline(
            id + 10,
            escalate("other"),
            elicits.clone(),
            json!({"requestState": state}),
        );
        assert_eq!(error_code(&other), -32602, "{other}");
        let mut answer = json!({"action": action});
        if action == "accept" {
            answer["content"] = json!({"approve": true});
        }
        let retry = json!({"requestState": state, "inputResponses": {"approval": answer}});
        let reply = client.call_inline(id + 20, escalate(file), elicits.clone(), retry.clone());
        assert_eq!(text(&reply), expected, "{reply}");
        // The same state again: the call is not run a second time.
        let again = client.call_inline(id + 30, escalate(file), elicits.clone(), retry);
        assert_eq!(error_code(&again), -32602, "{again}");
        let written = std::fs::read_to_string(ws.path().join(file)).ok();
        let want = (action == "accept").then(|| "once\n".to_owned());
        assert_eq!(written, want, "{file}");
        assert!(!ws.path().join("other").exists());
    }
    // Without the capability in the request's `_meta`, there is no approval channel.
    let reply = client.call_inline(9, escalate("never"), json!({}), json!({}));
    assert_eq!(
        text(&reply),
        "Error: sandbox escalation to \"workspace-write\" requires approval, but no approval channel is available"
    );
    client.finish();
}

/// A session that began with `initialize` is asked with requests of the server's own, as before:
/// no call of it answers `input_required`.
#[test]
fn a_handshake_era_session_is_asked_with_requests_not_rounds() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path().canonicalize().unwrap();
    let mut client = Client::session("2025-11-25", json!({"roots": {}, "elicitation": {}}), &[]);
    let ask = client.wait_for(|m| m["method"] == "roots/list");
    client.send(json!({"jsonrpc": "2.0", "id": ask["id"],
        "result": {"roots": [{"uri": file_uri(&root)}]}}));
    let pwd = client.call(1, "bash", bash("pwd"));
    assert!(
        pwd["result"]
            .get("resultType")
            .is_none_or(|t| t == "complete"),
        "{pwd}"
    );
    assert_eq!(text(&pwd), format!("{}\n", root.display()));
    client.finish();
}

/// The retried call is the request that runs the approved command: cancelling it kills the command,
/// and nothing is left running.
#[test]
fn cancelling_the_retried_call_kills_the_approved_command() {
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
    let marker = format!("dsh-mcp-round-{}", std::process::id());
    let escalate = json!({"command": format!("sleep 3600; echo {marker}"), "description": "test",
        "sandbox_permissions": "workspace-write", "justification": "it needs to"});
    let elicits = json!({"elicitation": {}});
    let mut client = Client::start(&["--sandbox", "read-only", "--cwd", &cwd]);
    let asked = client.call_inline(1, escalate.clone(), elicits.clone(), json!({}));
    let state = asked["result"]["requestState"].as_str().unwrap().to_owned();
    let params = json!({"name": "bash", "arguments": escalate,
        "requestState": state,
        "inputResponses": {"approval": {"action": "accept", "content": {"approve": true}}},
        "_meta": inline_meta(elicits)});
    client.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}));
    assert!(
        wait_until(SOON, || !live_with_cmdline(&marker).is_empty()),
        "the approved command never started"
    );
    let pids = live_with_cmdline(&marker);
    client.send(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 2, "reason": "test"}}),
    );
    assert_all_gone(&pids, SOON);
    // The server goes on.
    let after = client.call_inline(3, bash("echo after"), json!({}), json!({}));
    assert_eq!(text(&after), "after\n");
    client.finish();
}
