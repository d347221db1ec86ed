//! Interactive programs (issue 22) through the `dsh` binary, the gaps closed after the first build:
//! `--max-ttys` refuses at admission, `until` matches the live prompt line, MCP progress during a
//! `bash_write` says what the program printed, and `git rebase -i` edited in vim through keys.

use std::time::{Duration, Instant};

use dsh_test_support::procfs::live_with_cmdline;
use dsh_test_support::wait::wait_until;
use serde_json::{Value, json};

use crate::jsonl_server::{SOON, Server, bash, unique_marker};
use crate::mcp_raw::Client;

/// Asserts, for a while, that nothing runs with `marker` in its command line.
fn assert_gone(marker: &str) {
    assert!(
        wait_until(SOON, || live_with_cmdline(marker).is_empty()),
        "processes with {marker} were left running"
    );
}

/// The task a reply moved to the background at a prompt.
fn moved_task(text: &str) -> String {
    let (_, rest) = text
        .split_once("moved to background task ")
        .unwrap_or_else(|| panic!("not moved at a prompt: {text}"));
    rest.split(';').next().unwrap().to_owned()
}

#[test]
fn a_tty_call_beyond_max_ttys_is_refused_at_admission_not_queued() {
    let marker = unique_marker(2291);
    let mut server = Server::start(&["--max-concurrent", "1", "--max-ttys", "1"]).unwrap();
    let sleep = format!("sleep {marker}");
    server.call_as(
        "s",
        "busy",
        "bash",
        bash(&sleep, json!({"run_in_background": true})),
    );
    assert_eq!(server.text("busy"), "started background task bash-1");
    // Queued behind it (one command at a time), this terminal task already holds the one terminal.
    let prompt = format!("read -p 'name? ' x; {sleep}");
    let queued = json!({"tty": true, "run_in_background": true});
    server.call_as("s", "queued", "bash", bash(&prompt, queued));
    assert_eq!(server.text("queued"), "started background task bash-2");
    // So the next terminal call is refused at once instead of waiting behind both.
    let asked = Instant::now();
    let refused = json!({"tty": true, "timeout_ms": 20_000});
    server.call_as("s", "over", "bash", bash("echo hi", refused));
    let reply = server.reply("over");
    assert_eq!(reply["is_error"], true, "{reply}");
    let text = reply["text"].as_str().unwrap();
    assert!(
        text.contains(
            "too many terminals: at most 1 tty tasks run at once (--max-ttys); wait for one to finish or stop one with bash_kill"
        ),
        "{text}"
    );
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "{:?}",
        asked.elapsed()
    );
    for task in ["bash-1", "bash-2"] {
        server.call_as("s", task, "bash_kill", json!({"task_id": task}));
        server.reply(task);
    }
    server.finish();
    assert_gone(&marker);
}

#[test]
fn until_matches_the_live_prompt_line_of_a_terminal() {
    let marker = unique_marker(2292);
    let mut server = Server::start(&[]).unwrap();
    // After the answer the program prints a line without a newline and sleeps: it is not waiting
    // for input, so only `until` on the live line can end the wait early.
    let command = format!("read -p 'go? ' x; printf 'almost there'; sleep {marker}");
    server.call_as("s", "start", "bash", bash(&command, json!({"tty": true})));
    let task = moved_task(&server.text("start"));
    let asked = Instant::now();
    let write = json!({"task_id": task, "input": "y", "keys": ["Enter"],
                       "until": "almost", "timeout_ms": 30_000});
    server.call_as("s", "w", "bash_write", write);
    let text = server.text("w");
    assert!(
        asked.elapsed() < Duration::from_secs(15),
        "{:?}",
        asked.elapsed()
    );
    assert!(text.contains("almost there"), "{text}");
    assert!(text.ends_with("[status: running]"), "{text}");
    server.call_as("s", "kill", "bash_kill", json!({"task_id": task}));
    server.reply("kill");
    server.finish();
    assert_gone(&marker);
}

#[test]
fn mcp_progress_during_bash_write_names_the_output() {
    let mut client = Client::session("2025-06-18", json!({}), &[]);
    let command = "read -p 'go? ' x; echo tick-$x; sleep 1.5; echo done";
    let args = json!({"command": command, "description": "test", "tty": true});
    let started = client.call(1, "bash", args);
    let task = moved_task(started["result"]["content"][0]["text"].as_str().unwrap());
    client.seen.clear();
    client.send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "bash_write", "arguments": {"task_id": task, "input": "a", "keys": ["Enter"]},
        "_meta": {"progressToken": "w"}}}),
    );
    let reply = client.response(2);
    let text = reply["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("tick-a\ndone\n"), "{text}");
    let messages: Vec<Value> = std::mem::take(&mut client.seen)
        .into_iter()
        .filter(|m| m["method"] == "notifications/progress")
        .map(|m| m["params"]["message"].clone())
        .collect();
    assert!(
        messages.iter().any(|m| m
            .as_str()
            .unwrap()
            .ends_with("bytes so far; last line: tick-a")),
        "{messages:?}"
    );
    client.finish();
}

/// A repository with commits `one`, `two` and `three`, each adding its file.
fn three_commits() -> tempfile::TempDir {
    let repo = tempfile::tempdir().unwrap();
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .current_dir(repo.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    git(&["init", "-q"]);
    for name in ["one", "two", "three"] {
        std::fs::write(repo.path().join(name), name).unwrap();
        git(&["add", name]);
        git(&["commit", "-q", "-m", name]);
    }
    repo
}

#[test]
fn git_rebase_i_is_edited_in_vim_through_keys_and_saved() {
    let repo = three_commits();
    let mut server = Server::start(&["--cwd", repo.path().to_str().unwrap()]).unwrap();
    // Vim in compatible mode (no `-N`): in nocompatible mode it waits on the terminal with a timer
    // (escape-sequence and exit-time terminal-response timeouts), reported as waiting for input.
    let rebase = "GIT_SEQUENCE_EDITOR='vim -u NONE -n -i NONE' git -c user.name=t \
                  -c user.email=t@t rebase -i HEAD~2";
    server.call_as("s", "rebase", "bash", bash(rebase, json!({"tty": true})));
    let screen = server.text("rebase");
    assert!(
        screen.contains("pick") && screen.contains(" three"),
        "{screen}"
    );
    assert!(
        screen.ends_with(
            "[waiting for input; moved to background task bash-1; answer with bash_write]"
        ),
        "{screen}"
    );
    // Line 2 (`pick … three`) becomes a fixup of `two`.
    let edit = json!({"task_id": "bash-1", "input": ":2s/^pick/fixup/", "keys": ["Enter"]});
    server.call_as("s", "edit", "bash_write", edit);
    let screen = server.text("edit");
    assert!(screen.contains("fixup"), "{screen}");
    assert!(screen.ends_with("[status: waiting for input]"), "{screen}");
    let save =
        json!({"task_id": "bash-1", "input": ":wq", "keys": ["Enter"], "timeout_ms": 30_000});
    server.call_as("s", "save", "bash_write", save);
    let done = server.text("save");
    assert!(
        done.ends_with("[status: completed, exit code: 0]"),
        "{done}"
    );
    server.call_as(
        "s",
        "log",
        "bash",
        bash("git log --format=%s; ls", json!({})),
    );
    assert_eq!(server.text("log"), "two\none\none\nthree\ntwo\n");
    server.finish();
}
