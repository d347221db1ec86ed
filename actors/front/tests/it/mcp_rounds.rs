//! A 2026-07-28 session (no `initialize`, capabilities in each request's `_meta`) gets its roots
//! and its approvals through input rounds: the `tools/call` answers `input_required`, and the
//! retried call carries the answers. Raw JSON-RPC, line by line.

use dsh_test_support::procfs::{assert_all_gone, live_with_cmdline};
use dsh_test_support::wait::wait_until;
use serde_json::{Value, json};

use crate::mcp_raw::{
    Client, ESCALATION_ANSWERS, NO_APPROVAL_CHANNEL, SOON, approval_answer,
    assert_asks_for_escalation, bash, error_code, escalation, inline_meta, sandboxed_workspace,
    text,
};

/// Asserts that `reply`, to `pwd`, names `dir`.
fn assert_ran_in(reply: &Value, dir: &std::path::Path) {
    assert_eq!(text(reply), format!("{}\n", dir.display()));
}

fn file_uri(dir: &std::path::Path) -> String {
    format!("file://{}", dir.display())
}

/// A server under `--sandbox read-only` in a fresh workspace (kept alive by the `TempDir`), where a
/// sandbox backend is usable.
fn read_only_client() -> Option<(tempfile::TempDir, Client)> {
    let (ws, cwd) = sandboxed_workspace()?;
    let client = Client::start(&["--sandbox", "read-only", "--cwd", &cwd]);
    Some((ws, client))
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
    assert_ran_in(&pwd, &first);
    // Known roots are not asked for again…
    let pwd = client.call_inline(3, bash("pwd"), roots.clone(), json!({}));
    assert_ran_in(&pwd, &first);
    // …until the client says they changed.
    client.send(json!({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}));
    let asked = client.call_inline(4, bash("pwd"), roots.clone(), json!({}));
    assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
    let pwd = client.call_inline(5, bash("pwd"), roots.clone(), answer(&second));
    assert_ran_in(&pwd, &second);
    client.finish();

    // A client that does not offer roots is not asked: the server's own directory.
    let mut client = Client::start(&[]);
    let pwd = client.call_inline(1, bash("pwd"), json!({}), json!({}));
    let here = std::env::current_dir().unwrap().canonicalize().unwrap();
    assert_ran_in(&pwd, &here);
    client.finish();
}

/// An escalation asks through an input round: the call is parked under a `requestState`, the
/// retried call carries the answer, and the command runs once if approved, never otherwise. A
/// state is good for one retry of the same call.
#[test]
fn escalations_are_approved_declined_and_cancelled_through_input_rounds() {
    let Some((ws, mut client)) = read_only_client() else {
        return;
    };
    let escalate = |file: &str| escalation(&format!("echo once >> {file}"));
    let elicits = json!({"elicitation": {}});
    for (id, (action, expected)) in (1..).zip(ESCALATION_ANSWERS) {
        // Each answer's command writes a file named after it.
        let file = action;
        let asked = client.call_inline(id, escalate(file), elicits.clone(), json!({}));
        let result = &asked["result"];
        assert_eq!(result["resultType"], "input_required", "{asked}");
        let ask = &result["inputRequests"]["approval"];
        assert_eq!(ask["method"], "elicitation/create", "{asked}");
        let question = ask["params"]["message"].as_str().unwrap();
        assert_asks_for_escalation(question, &format!("echo once >> {file}"), &asked);
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
        let answer = approval_answer(action);
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
    assert_eq!(text(&reply), NO_APPROVAL_CHANNEL);
    client.finish();
}

/// A session that began with `initialize` is asked with requests of the server's own, as before:
/// no call of it answers `input_required`.
#[test]
fn a_handshake_era_session_is_asked_with_requests_not_rounds() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path().canonicalize().unwrap();
    let mut client = Client::session("2025-11-25", json!({"roots": {}, "elicitation": {}}), &[]);
    client.answer_roots(&[&file_uri(&root)]);
    let pwd = client.call(1, "bash", bash("pwd"));
    assert!(
        pwd["result"]
            .get("resultType")
            .is_none_or(|t| t == "complete"),
        "{pwd}"
    );
    assert_ran_in(&pwd, &root);
    client.finish();
}

/// The retried call is the request that runs the approved command: cancelling it kills the command,
/// and nothing is left running.
#[test]
fn cancelling_the_retried_call_kills_the_approved_command() {
    let marker = format!("dsh-mcp-round-{}", std::process::id());
    let Some((_ws, mut client)) = read_only_client() else {
        return;
    };
    let escalate = escalation(&format!("sleep 3600; echo {marker}"));
    let elicits = json!({"elicitation": {}});
    let asked = client.call_inline(1, escalate.clone(), elicits.clone(), json!({}));
    let state = asked["result"]["requestState"].as_str().unwrap().to_owned();
    let params = json!({"name": "bash", "arguments": escalate,
        "requestState": state,
        "inputResponses": {"approval": approval_answer("accept")},
        "_meta": inline_meta(elicits)});
    client.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}));
    assert!(
        wait_until(SOON, || !live_with_cmdline(&marker).is_empty()),
        "the approved command never started"
    );
    let pids = live_with_cmdline(&marker);
    client.cancel(2);
    assert_all_gone(&pids, SOON);
    // The server goes on.
    let after = client.call_inline(3, bash("echo after"), json!({}), json!({}));
    assert_eq!(text(&after), "after\n");
    client.finish();
}
