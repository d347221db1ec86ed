//! Interactive programs (issue 22) through the runtime handle: `bash` with `tty` or `stdin: "open"`
//! returns the moment the command waits for input, `bash_write` answers it, and bad writes get
//! the contract's errors. Every test kills what it starts and checks that nothing is left.

use std::time::Instant;

use crate::common::*;
use dsh::ToolResult;
use dsh_test_support::procfs::live_with_cmdline;
use dsh_test_support::wait::poll_until;
use serde_json::{Value, json};

/// A reply's status line when the program waits for input again.
const WAITING: &str = "[status: waiting for input]";
/// A reply's status line when the program exited 0.
const COMPLETED: &str = "[status: completed, exit code: 0]";

/// `bash` with `tty: true`.
fn tty(command: &str) -> Value {
    json!({"command": command, "description": "interactive", "tty": true})
}

/// Runs `command` on a terminal in the foreground.
async fn run_tty(rt: &dsh::Runtime, command: &str) -> ToolResult {
    call(rt, "bash", tty(command)).await
}

/// Runs `command` on a terminal; it must wait for input: its reply and its task id.
async fn start_tty(rt: &dsh::Runtime, command: &str) -> (ToolResult, String) {
    let r = run_tty(rt, command).await;
    let id = moved_task(&r.text);
    (r, id)
}

/// The task id of a `[waiting for …; moved to background task <id>; …]` reply.
fn moved_task(text: &str) -> String {
    let rest = text
        .split("moved to background task ")
        .nth(1)
        .unwrap_or_else(|| panic!("not moved: {text:?}"));
    rest.split(';').next().unwrap().to_owned()
}

async fn write(rt: &dsh::Runtime, args: Value) -> ToolResult {
    call(rt, "bash_write", args).await
}

/// `bash_write` of `input` and Enter to task `id`.
async fn answer(rt: &dsh::Runtime, id: &str, input: &str) -> ToolResult {
    write(
        rt,
        json!({"task_id": id, "input": input, "keys": ["Enter"]}),
    )
    .await
}

/// `bash_write` of `keys` alone to task `id`.
async fn press(rt: &dsh::Runtime, id: &str, keys: &[&str]) -> ToolResult {
    write(rt, json!({"task_id": id, "keys": keys})).await
}

/// Starts `exec -a <marker> <program>` on a terminal in the background and waits until it runs:
/// its task id.
async fn start_marked(rt: &dsh::Runtime, marker: &str, program: &str) -> String {
    let command = format!("exec -a {marker} {program}");
    let r = bash_with(
        rt,
        &command,
        json!({"tty": true, "run_in_background": true}),
    )
    .await;
    let id = r.text.strip_prefix("started background task ").unwrap();
    let started = poll_until(SOON, || !live_with_cmdline(marker).is_empty()).await;
    assert!(started, "{marker} never started");
    id.to_owned()
}

/// Runs `command` with the other arguments in `extra` and a timeout of `ms`, which it must reach;
/// then waits until nothing with `marker` in its command line is left.
async fn times_out(rt: &dsh::Runtime, marker: &str, command: &str, extra: Value, ms: u64) {
    let mut extra = extra;
    extra["timeoutMs"] = json!(ms);
    let r = bash_with(rt, command, extra).await;
    let timed_out = format!("[timed out after {ms}ms]");
    assert!(r.text.contains(&timed_out), "{}", r.text);
    none_left(marker).await;
}

/// Runs `command` (a program named by `marker`) on a terminal in a runtime of its own: as it does
/// not wait for input, it must run into its 1500 ms timeout and leave nothing behind.
async fn not_waiting_on_a_terminal(marker: &str, command: &str) {
    let (rt, _s) = runtime();
    times_out(&rt, marker, command, json!({"tty": true}), 1500).await;
    finish(rt).await;
}

/// Waits until no process with `marker` in its command line is left.
async fn none_left(marker: &str) {
    let gone = poll_until(SOON, || live_with_cmdline(marker).is_empty()).await;
    assert!(gone, "{marker} still running");
}

#[actix_rt::test]
async fn a_prompt_returns_the_call_and_bash_write_answers_it() {
    let (rt, _s) = runtime();
    let began = Instant::now();
    let (r, id) = start_tty(&rt, "read -p 'name? ' x; echo got $x").await;
    assert!(!r.is_error, "{}", r.text);
    assert!(began.elapsed() < SOON, "{:?}", began.elapsed());
    let waiting = "[waiting for input; moved to background task";
    assert_eq!(
        r.text,
        format!("name?\n{waiting} {id}; answer with bash_write]")
    );
    let structured = r.outcome.as_ref().map(dsh::ToolOutcome::structured);
    let structured = structured.unwrap();
    assert_eq!(structured["waiting_for_input"], true);
    assert_eq!(structured["input_hidden"], false);
    let status = call(&rt, "bash_output", json!({"task_id": id})).await;
    assert_ends_with(&status, WAITING);
    let r = answer(&rt, &id, "bob").await;
    assert!(!r.is_error, "{}", r.text);
    assert!(r.text.contains("got bob"), "{}", r.text);
    assert_ends_with(&r, COMPLETED);
    let raw = r.text.contains('\x1b') || r.text.contains('\r');
    assert!(!raw, "{:?}", r.text);
    finish(rt).await;
}

#[actix_rt::test]
async fn a_password_prompt_is_hidden_input() {
    let (rt, _s) = runtime();
    let (r, id) = start_tty(&rt, "read -s -p 'password: ' pw; echo; echo length ${#pw}").await;
    let hidden = "[waiting for hidden input; moved to background task";
    assert_ends_with(&r, &format!("{hidden} {id}; answer with bash_write]"));
    let r = write(&rt, json!({"task_id": id, "input": "hunter2\n"})).await;
    // The reply shows what the program printed, never the hidden input.
    let shown = r.text.contains("length 7") && !r.text.contains("hunter2");
    assert!(shown, "{}", r.text);
    finish(rt).await;
}

#[actix_rt::test]
async fn python_input_with_an_open_stdin() {
    let (rt, _s) = runtime();
    let python = "python3 -c 'print(\"hi \" + input())'";
    let r = bash_with(&rt, python, json!({"stdin": "open"})).await;
    let id = moved_task(&r.text);
    let silent = r.text.starts_with("(no output)\n[waiting for input;");
    assert!(silent, "{}", r.text);
    let r = answer(&rt, &id, "there").await;
    assert_eq!(r.text, format!("hi there\n{COMPLETED}"));
    finish(rt).await;
}

#[actix_rt::test]
async fn ctrl_c_on_a_terminal_kills_a_sleep() {
    let (rt, _s) = runtime();
    let marker = "dsh-i22-lib-ctrlc-7781";
    let id = start_marked(&rt, marker, "sleep 300").await;
    // The terminal echoes the interrupt as `^C`, as a terminal does.
    let r = press(&rt, &id, &["C-c"]).await;
    assert_eq!(r.text, "^C\n[status: killed by SIGINT]");
    none_left(marker).await;
    finish(rt).await;
}

#[actix_rt::test]
async fn bad_writes_get_clear_errors() {
    let (rt, _s) = runtime();
    let r = write(&rt, json!({"task_id": "bash-99", "input": "x"})).await;
    assert!(r.is_error);
    assert_eq!(r.text, "Error: unknown bash task \"bash-99\"");
    let plain = start_bg(&rt, None, "sleep 300").await;
    let r = write(&rt, json!({"task_id": plain, "input": "x"})).await;
    let how = "(start it with tty: true or stdin: \"open\")";
    assert_eq!(r.text, format!("Error: task {plain} takes no input {how}"));
    call(&rt, "bash_kill", json!({"task_id": plain})).await;
    let (_, id) = start_tty(&rt, "read x").await;
    let r = press(&rt, &id, &["Enter", "Hyper"]).await;
    assert!(r.is_error);
    let unknown = "Error: invalid keys: unknown key \"Hyper\"; known keys: Enter, Tab";
    assert!(r.text.starts_with(unknown), "{}", r.text);
    assert_ends_with(&press(&rt, &id, &["Enter"]).await, COMPLETED);
    let r = write(&rt, json!({"task_id": id, "input": "late"})).await;
    let closed = format!("Error: task {id} has finished; its input is closed");
    assert_eq!(r.text, closed);
    finish(rt).await;
}

/// One runtime through a long day: several interactive tasks at once, one of them timed out and
/// one killed, then plain commands as before.
#[actix_rt::test]
async fn a_long_day_of_interactive_tasks_then_plain_commands() {
    let (rt, _s) = runtime();
    let marker = "dsh-i22-longday-5113";
    let mut waiting = Vec::new();
    for i in 0..4 {
        let prompt = format!("read -p 'q{i}? ' a; echo a{i}=$a");
        waiting.push(start_tty(&rt, &prompt).await.1);
    }
    // A foreground tty call that does not wait for input times out as any call does.
    let sleep = format!("exec -a {marker}-t sleep 300");
    times_out(&rt, marker, &sleep, json!({"tty": true}), 300).await;
    // One waiting task is killed instead of answered.
    let killed = waiting.pop().unwrap();
    let r = call(&rt, "bash_kill", json!({"task_id": killed})).await;
    assert!(!r.is_error, "{}", r.text);
    for (i, id) in waiting.iter().enumerate() {
        let r = write(&rt, json!({"task_id": id, "input": format!("v{i}\n")})).await;
        assert!(r.text.contains(&format!("a{i}=v{i}")), "{}", r.text);
    }
    assert_eq!(bash(&rt, "echo still fine").await.text, "still fine\n");
    none_left(marker).await;
    finish(rt).await;
}

#[actix_rt::test]
async fn a_python_repl_takes_five_exchanges() {
    let (rt, _s) = runtime();
    let (r, id) = start_tty(&rt, "python3 -q -i").await;
    assert!(r.text.starts_with(">>>"), "{}", r.text);
    for (input, expected) in [
        ("6*7", "42"),
        ("'ab'*2", "'abab'"),
        ("len('dsh')", "3"),
        ("x = 5", ">>>"),
        ("x + 1", "6"),
    ] {
        let r = answer(&rt, &id, input).await;
        assert!(r.text.contains(expected), "{input}: {}", r.text);
        assert_ends_with(&r, WAITING);
        assert!(!r.text.contains('\x1b'), "{:?}", r.text);
    }
    assert_ends_with(&press(&rt, &id, &["C-d"]).await, COMPLETED);
    finish(rt).await;
}

#[actix_rt::test]
async fn a_progress_bar_reads_as_its_final_state() {
    let (rt, _s) = runtime();
    let bar = "for i in $(seq 1 100); do printf '\\rprogress %3d%%' $i; done; echo; echo done";
    let r = run_tty(&rt, bar).await;
    assert_eq!(r.text, "progress 100%\ndone\n");
    finish(rt).await;
}

#[actix_rt::test]
async fn less_reads_as_its_screen() {
    let (rt, _s) = runtime();
    let pager = "seq 1 200 | sed 's/^/line /' > /tmp/dsh-i22-less.txt; less /tmp/dsh-i22-less.txt";
    let (r, id) = start_tty(&rt, pager).await;
    let first_screen = r.text.contains("line 1\n") && r.text.contains("line 39");
    assert!(first_screen, "{}", r.text);
    assert!(!r.text.contains("line 41\n"), "{}", r.text);
    let r = press(&rt, &id, &["PageDown"]).await;
    assert!(r.text.contains("line 50"), "{}", r.text);
    let r = write(&rt, json!({"task_id": id, "input": "q"})).await;
    assert_ends_with(&r, COMPLETED);
    let _ = std::fs::remove_file("/tmp/dsh-i22-less.txt");
    finish(rt).await;
}

#[actix_rt::test]
async fn a_program_blocked_on_a_socket_is_not_waiting_for_input() {
    let marker = "dsh-i22-socket-6121";
    let listen = "s=socket.socket(); s.bind((\"127.0.0.1\",0)); s.listen(); s.accept()";
    let python = format!("python3 -c 'import socket,sys; {listen}' {marker}");
    not_waiting_on_a_terminal(marker, &python).await;
}

#[actix_rt::test]
async fn node_and_an_interactive_bash_wait_at_their_prompts() {
    let (rt, _s) = runtime();
    let (_, node) = start_tty(&rt, "node").await;
    let r = answer(&rt, &node, "[1,2,3].map(x => x * 2).join('-')").await;
    assert!(r.text.contains("'2-4-6'"), "{}", r.text);
    assert_ends_with(&r, WAITING);
    let (r, shell) = start_tty(&rt, "PS1='sh$ ' bash --norc -i").await;
    assert!(r.text.starts_with("sh$"), "{}", r.text);
    let r = answer(&rt, &shell, "echo $((6*7))").await;
    assert!(r.text.contains("\n42\n"), "{}", r.text);
    assert_ends_with(&r, WAITING);
    assert_ends_with(&answer(&rt, &shell, "exit").await, COMPLETED);
    assert_ends_with(&answer(&rt, &node, ".exit").await, COMPLETED);
    finish(rt).await;
}

#[actix_rt::test]
async fn ssh_keygen_asks_for_a_hidden_passphrase_twice() {
    let (rt, _s) = runtime();
    let dir = tempfile::tempdir().unwrap();
    let keygen = format!("ssh-keygen -q -t ed25519 -f {}/k", dir.path().display());
    let (r, id) = start_tty(&rt, &keygen).await;
    assert!(r.text.contains("[waiting for hidden input;"), "{}", r.text);
    let r = answer(&rt, &id, "correct horse").await;
    assert_ends_with(&r, "[status: waiting for hidden input]");
    let r = answer(&rt, &id, "correct horse").await;
    assert_ends_with(&r, COMPLETED);
    assert!(!r.text.contains("correct horse"), "{}", r.text);
    assert!(dir.path().join("k").exists());
    finish(rt).await;
}

#[actix_rt::test]
async fn cat_with_an_open_stdin_ends_with_c_d() {
    let (rt, _s) = runtime();
    let r = bash_with(&rt, "cat; echo end", json!({"stdin": "open"})).await;
    let id = moved_task(&r.text);
    let r = answer(&rt, &id, "one").await;
    assert_eq!(r.text, format!("one\n{WAITING}"));
    let end = press(&rt, &id, &["C-d"]).await.text;
    assert_eq!(end, format!("end\n{COMPLETED}"));
    finish(rt).await;
}

#[actix_rt::test]
async fn a_background_job_reading_the_terminal_while_the_foreground_computes_is_not_waiting() {
    let marker = "dsh-i22-bgjob-3307";
    // The background job is stopped by SIGTTIN at its read; the foreground program sleeps.
    let job = format!("set -m; (read x) & exec -a {marker} sleep 300");
    not_waiting_on_a_terminal(marker, &job).await;
}

#[actix_rt::test]
async fn a_hundred_terminal_tasks_wait_at_once_and_are_answered() {
    // The default --max-ttys is 64.
    let (rt, _s) = runtime_with(|b| b.max_ttys(100));
    let starts = (0..100).map(|i| {
        let rt = &rt;
        async move {
            let prompt = format!("read -p 'n{i}? ' x; echo r{i}=$x");
            (i, start_tty(rt, &prompt).await.1)
        }
    });
    let tasks = futures::future::join_all(starts).await;
    let answers = tasks.iter().map(|(i, id)| {
        let rt = &rt;
        async move {
            let r = answer(rt, id, &format!("{i}")).await;
            assert!(r.text.contains(&format!("r{i}={i}")), "{}", r.text);
        }
    });
    futures::future::join_all(answers).await;
    finish(rt).await;
}

#[actix_rt::test]
async fn without_background_tasks_input_is_refused() {
    let (rt, _s) = runtime_with(|b| b.background(false));
    let r = run_tty(&rt, "read x").await;
    assert!(r.is_error);
    assert_eq!(
        r.text,
        "Error: tty and stdin \"open\" need background tasks, which are disabled for this deployment (enableRunInBackground: false)"
    );
    let r = write(&rt, json!({"task_id": "bash-1", "input": "x"})).await;
    let unknown = r.text.starts_with("Error: unknown tool \"bash_write\"");
    assert!(unknown, "{}", r.text);
    finish(rt).await;
}

/// Prompt-to-reply latency as a model sees it: from `bash_write`'s call to its reply, whose wait
/// ends when the program prints its next prompt and blocks again (settle + two checks). Printed
/// for docs/interactive.md; the bound is only a guard against a broken wait on a loaded machine.
#[actix_rt::test]
async fn prompt_to_reply_latency() {
    let (rt, _s) = runtime();
    let (_, id) = start_tty(&rt, "while read -p '> ' line; do echo \"=$line\"; done").await;
    let mut took = Vec::new();
    for i in 0..40 {
        let began = Instant::now();
        let r = answer(&rt, &id, &format!("{i}")).await;
        took.push(began.elapsed());
        assert_ends_with(&r, WAITING);
    }
    took.sort();
    let (p50, p99) = (took[took.len() / 2], took[took.len() * 99 / 100]);
    println!("bash_write prompt-to-reply: p50 {p50:?}, p99 {p99:?}");
    assert!(p99 < SOON, "{p99:?}");
    call(&rt, "bash_kill", json!({"task_id": id})).await;
    finish(rt).await;
}

#[actix_rt::test]
async fn vim_edits_a_file_through_keys_and_saves_it() {
    let (rt, _s) = runtime();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("notes.txt");
    std::fs::write(&file, "first\n").unwrap();
    let vim = format!("vim -u NONE -n {}", file.display());
    let (r, id) = start_tty(&rt, &vim).await;
    assert!(r.text.contains("first"), "{}", r.text);
    let r = write(
        &rt,
        json!({"task_id": id, "input": "Gosecond", "keys": ["Escape"]}),
    )
    .await;
    assert!(r.text.contains("second"), "{}", r.text);
    assert_ends_with(&r, WAITING);
    assert_ends_with(&answer(&rt, &id, ":wq").await, COMPLETED);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "first\nsecond\n");
    finish(rt).await;
}

#[actix_rt::test]
async fn a_program_reading_a_pipe_that_is_not_its_input_is_not_waiting() {
    let (rt, _s) = runtime();
    let marker = "dsh-i22-otherpipe-9043";
    for extra in [json!({"tty": true}), json!({"stdin": "open"})] {
        let pipe = format!("exec -a {marker} sleep 300 | cat");
        times_out(&rt, marker, &pipe, extra, 1200).await;
    }
    finish(rt).await;
}

#[actix_rt::test]
async fn a_terminal_flood_is_read_to_its_end_and_a_flooding_task_can_be_killed() {
    let (rt, _s) = runtime();
    let r = run_tty(&rt, "yes 0123456789 | head -n 200000; echo end").await;
    let tail = &r.text[r.text.len().saturating_sub(300)..];
    assert!(r.text.contains("0123456789\nend\n"), "{tail}");
    let truncated = r.text.contains("[output truncated; full output: ");
    assert!(truncated, "{}", &r.text[..300]);
    assert!(!r.text.contains('\r'));
    let marker = "dsh-i22-flood-4409";
    let id = start_marked(&rt, marker, "yes").await;
    kill_running(&rt, &id).await;
    none_left(marker).await;
    finish(rt).await;
}
