//! Interactive programs (issue 22) through the `dsh` binary: a `tty: true` call returns at the
//! prompt, `bash_write` answers it, bad writes get the contract's errors, and shutting the server
//! down leaves nothing of a task that still waits.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code: a failed unwrap is a failed test"
)]

use crate::jsonl_server;

use serde_json::json;

/// Call `fg` runs a `tty: true` prompt that returns as background task bash-1, and call `w`
/// answers it with `bob` and Enter.
fn prompt_then_answer(server: &mut jsonl_server::Server) {
    server.call_as(
        "s",
        "fg",
        "bash",
        jsonl_server::bash("read -p 'name? ' x; echo got $x", json!({"tty": true})),
    );
    assert_eq!(
        server.text("fg"),
        "name?\n[waiting for input; moved to background task bash-1; answer with bash_write]"
    );
    server.call_as(
        "s",
        "w",
        "bash_write",
        json!({"task_id": "bash-1", "input": "bob", "keys": ["Enter"]}),
    );
}

#[test]
fn the_binary_returns_at_a_prompt_and_bash_write_answers_it() {
    let marker = jsonl_server::unique_marker(2201);
    let mut server = jsonl_server::Server::start(&[]).unwrap();
    prompt_then_answer(&mut server);
    let answered = server.text("w");
    assert!(answered.contains("got bob"), "{answered}");
    assert!(
        answered.ends_with("[status: completed, exit code: 0]"),
        "{answered}"
    );
    server.call_as(
        "s",
        "late",
        "bash_write",
        json!({"task_id": "bash-1", "input": "x"}),
    );
    assert_eq!(
        server.text("late"),
        "Error: task bash-1 has finished; its input is closed"
    );
    server.call_as(
        "s",
        "keys",
        "bash_write",
        json!({"task_id": "bash-1", "keys": ["Meta"]}),
    );
    assert!(
        server
            .text("keys")
            .starts_with("Error: invalid keys: unknown key \"Meta\"; known keys:"),
    );
    // A task still waiting at shutdown is killed with the runtime.
    server.call_as(
        "s",
        "pw",
        "bash",
        jsonl_server::bash(
            &format!("read -s -p 'pw: ' p; sleep {marker}"),
            json!({"tty": true}),
        ),
    );
    assert_eq!(
        server.text("pw"),
        "pw:\n[waiting for hidden input; moved to background task bash-2; answer with bash_write]"
    );
    server.call_as(
        "s",
        "pw2",
        "bash_write",
        json!({"task_id": "bash-2", "input": "secret\n", "timeout_ms": 200}),
    );
    let reply = server.text("pw2");
    assert!(reply.ends_with("[status: running]"), "{reply}");
    assert!(!reply.contains("secret"), "{reply}");
    server.finish();
    assert!(
        dsh_test_support::wait::wait_until(jsonl_server::SOON, || {
            dsh_test_support::procfs::live_with_cmdline(&marker).is_empty()
        }),
        "the waiting task was left running"
    );
}

#[test]
fn the_binary_gives_a_terminal_the_tty_size() {
    let mut server = jsonl_server::Server::start(&["--tty-size", "10x30"]).unwrap();
    server.call_as(
        "s",
        "size",
        "bash",
        jsonl_server::bash("stty size; echo $TERM", json!({"tty": true})),
    );
    assert_eq!(server.text("size"), "10 30\nxterm-256color\n");
    server.finish();
}

#[test]
fn a_terminal_works_under_bubblewrap() {
    let server =
        jsonl_server::Server::start(&["--sandbox-backend", "bwrap", "--sandbox", "read-only"]);
    let mut server = match server {
        Ok(server) => server,
        Err(said) if said.contains("no sandbox backend is usable") => {
            eprintln!("skipping: bubblewrap is not usable here");
            return;
        }
        Err(said) => panic!("the server refused to start: {said}"),
    };
    prompt_then_answer(&mut server);
    let reply = server.reply("w");
    assert_eq!(
        reply["text"],
        "name? bob\ngot bob\n[status: completed, exit code: 0]"
    );
    assert_eq!(reply["structured"]["sandbox"]["mode"], "read-only");
    server.finish();
}
