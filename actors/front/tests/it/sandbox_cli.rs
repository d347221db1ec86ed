//! The sandbox through the `dsh` binary: `--sandbox` modes with their markers, fail-closed startup,
//! the unconfined-with-a-warning default where no backend works, jsonl escalation approvals
//! (granted, rejected, cancelled by answer, by a cancel line and by end of input), `--network deny`
//! against a listener on 127.0.0.1, signal scope against the server's own pid, and a confined
//! background task's `bash_output` markers. Skips, saying why, where Landlock is missing.

use crate::common::{landlock_usable, run_dsh};
use crate::jsonl_server;

use std::path::Path;
use std::process::{Command, Output};

use dsh_test_support::scratch;
use dsh_test_support::wait::wait_until;
use jsonl_server::{SOON, Server, bash};
use serde_json::{Value, json};

const DENIED_RO: &str = "[sandbox: file access denied under read-only mode]";
const DENIED_WW: &str = "[sandbox: file access denied under workspace-write mode]";
/// What `dsh run` shows a person instead of [`HINT`].
const PERSON_HINT: &str = "[sandbox: dsh run cannot ask for approval; to allow it, rerun with --sandbox danger-full-access, or with --writable-root DIR to let commands write DIR]";
const CANCELLED: &str = "Error: approval for escalating to \"workspace-write\" was cancelled";
const HINT: &str = "[sandbox: escalation available — retry this exact command once with sandbox_permissions (the narrowest wider mode that suffices) + justification; the approval prompt asks the user]";

/// A fresh directory outside `/tmp` (which workspace-write may write).
fn outside_tmp() -> tempfile::TempDir {
    scratch::outside_tmp("dsh-sandbox-cli-", Path::new(env!("CARGO_TARGET_TMPDIR")))
}

/// A fresh workspace outside `/tmp` where Landlock confines commands; `None` (said why) where it
/// does not.
fn landlock_workspace() -> Option<tempfile::TempDir> {
    landlock_usable().then(outside_tmp)
}

/// `dsh run --sandbox <mode> --cwd <ws> -- <command>`.
fn run_in(ws: &tempfile::TempDir, mode: &str, command: &str) -> Output {
    run_dsh(&[
        "run",
        "--sandbox",
        mode,
        "--cwd",
        path_str(ws.path()),
        "--",
        command,
    ])
}

/// `dsh jsonl --sandbox read-only --cwd <ws>` in a fresh [`landlock_workspace`] (kept alive by
/// the `TempDir`); `None` (said why) where Landlock does not confine.
fn read_only_server() -> Option<(tempfile::TempDir, Server)> {
    let ws = landlock_workspace()?;
    let server = Server::start(&["--sandbox", "read-only", "--cwd", path_str(ws.path())]).unwrap();
    Some((ws, server))
}

fn text(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn path_str(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Asserts that a run's output shows `marker`.
fn assert_shows(output: &Output, marker: &str) {
    let printed = text(output);
    assert!(printed.contains(marker), "{printed}");
}

/// Asserts that `dsh` refused to start (exit 2) saying `message`.
fn assert_startup_error(output: &Output, message: &str) {
    assert_eq!(output.status.code(), Some(2));
    let said = stderr(output);
    assert!(said.contains(message), "{said}");
}

/// Reads background task `task` with `bash_output` as request `id` (with `extra` arguments).
fn read_task(server: &mut Server, id: &str, task: &str, extra: Value) -> String {
    let mut arguments = json!({"task_id": task});
    arguments
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    server.send(&json!({"id": id, "session": "s1", "tool": "bash_output", "arguments": arguments}));
    server.text(id)
}

#[test]
fn read_only_denies_touch_in_the_workspace_with_the_marker() {
    let Some(ws) = landlock_workspace() else {
        return;
    };
    let out = run_in(&ws, "read-only", "touch made-here");
    // A person ran it: the flag that allows it, not the model's escalation.
    assert_shows(&out, &format!("{DENIED_RO}\n{PERSON_HINT}\n[exit code: 1]"));
    assert!(
        !text(&out).contains("sandbox_permissions"),
        "{}",
        text(&out)
    );
    assert!(!ws.path().join("made-here").exists());
}

/// Asserts that a workspace-write run made `inside` in `ws` and was denied `outside` in
/// `elsewhere`, with the marker.
fn assert_wrote_inside_only(out: &Output, ws: &tempfile::TempDir, elsewhere: &tempfile::TempDir) {
    assert_shows(out, DENIED_WW);
    assert!(ws.path().join("inside").exists());
    assert!(!elsewhere.path().join("outside").exists());
}

#[test]
fn workspace_write_allows_the_workspace_and_tmp_and_denies_elsewhere() {
    let Some(ws) = landlock_workspace() else {
        return;
    };
    let elsewhere = outside_tmp();
    // The command's /tmp is the runtime's private temp (`sandbox_metadata` shows it is not the host's).
    let command = format!(
        "touch inside && echo tmp-ok > /tmp/t && cat /tmp/t && touch {}/outside",
        path_str(elsewhere.path())
    );
    let out = run_in(&ws, "workspace-write", &command);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("tmp-ok"),
        "{out:?}"
    );
    assert_wrote_inside_only(&out, &ws, &elsewhere);
}

#[test]
fn the_default_is_workspace_write_where_a_backend_works() {
    let Some(ws) = landlock_workspace() else {
        return;
    };
    let elsewhere = outside_tmp();
    let command = format!("touch inside; touch {}/outside", path_str(elsewhere.path()));
    let out = run_dsh(&["run", "--cwd", path_str(ws.path()), "--", &command]);
    assert_wrote_inside_only(&out, &ws, &elsewhere);
}

/// A `PATH` holding only `bash` (and what it needs): no `bwrap` can be found on it.
fn path_without_bwrap() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for tool in ["bash", "touch", "true"] {
        let found = ["/usr/bin", "/bin"]
            .iter()
            .map(|d| Path::new(d).join(tool))
            .find(|p| p.exists())
            .unwrap();
        std::os::unix::fs::symlink(found, dir.path().join(tool)).unwrap();
    }
    dir
}

/// `dsh <args>` with [`path_without_bwrap`] as its `PATH`, logging warnings.
fn run_without_bwrap(args: &[&str]) -> Output {
    let path = path_without_bwrap();
    Command::new(env!("CARGO_BIN_EXE_dsh"))
        .args(args)
        .env("PATH", path.path())
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

#[test]
fn an_explicit_confined_mode_fails_closed_at_startup_without_a_backend() {
    let out = run_without_bwrap(&[
        "run",
        "--sandbox",
        "read-only",
        "--sandbox-backend",
        "bwrap",
        "--",
        "true",
    ]);
    assert_startup_error(
        &out,
        "sandbox mode \"read-only\" is requested but no sandbox backend is usable on this host; \
         refusing to run the command unconfined.",
    );
    assert!(text(&out).is_empty());
}

#[test]
fn no_backend_and_no_mode_runs_unconfined_and_says_so_loudly() {
    let ws = outside_tmp();
    let out = run_without_bwrap(&[
        "run",
        "--sandbox-backend",
        "bwrap",
        "--cwd",
        path_str(ws.path()),
        "--",
        "touch made",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(stderr(&out).contains("NO SANDBOX"));
    assert!(ws.path().join("made").exists());
}

fn escalation(command: &str) -> Value {
    bash(
        command,
        json!({"sandbox_permissions": "workspace-write", "justification": "it writes its output file"}),
    )
}

fn call_in_session(server: &mut Server, id: &str, arguments: Value) {
    server.send(&json!({"id": id, "session": "s1", "tool": "bash", "arguments": arguments}));
}

/// The approval question for call `id`, checked, and its number.
fn question(server: &mut Server, id: &str) -> u64 {
    let line = server.line_where(|l| l.get("approval").is_some() && l["id"] == json!(id));
    assert_eq!(line["session"], "s1");
    assert_eq!(
        line["reason"],
        "escalate sandbox to workspace-write: it writes its output file"
    );
    line["approval"].as_u64().unwrap()
}

#[test]
fn jsonl_escalation_granted_rejected_and_cancelled() {
    let Some((ws, mut server)) = read_only_server() else {
        return;
    };
    // Denied first, with the hint.
    call_in_session(&mut server, "plain", bash("touch granted", json!({})));
    let denied = server.text("plain");
    assert!(denied.contains(&format!("{DENIED_RO}\n{HINT}")), "{denied}");
    // Granted.
    call_in_session(&mut server, "g", escalation("touch granted"));
    let n = question(&mut server, "g");
    server.send(&json!({"approve": n, "outcome": "allowed-once"}));
    assert_eq!(server.text("g"), "(no output)");
    assert!(ws.path().join("granted").exists());
    // Rejected.
    call_in_session(&mut server, "r", escalation("touch rejected"));
    let n = question(&mut server, "r");
    server.send(&json!({"approve": n, "outcome": "rejected"}));
    let reply = server.reply("r");
    assert_eq!(reply["is_error"], true);
    assert_eq!(
        reply["text"],
        "Error: the user rejected escalating this command to \"workspace-write\""
    );
    // Cancelled by the answer.
    call_in_session(&mut server, "c", escalation("touch cancelled"));
    let n = question(&mut server, "c");
    server.send(&json!({"approve": n, "outcome": "cancelled"}));
    assert_eq!(server.text("c"), CANCELLED);
    // Cancelled by a cancel of the call while it waits.
    call_in_session(&mut server, "k", escalation("touch killed"));
    let withdrawn = question(&mut server, "k");
    server.send(&json!({"cancel": "k"}));
    assert_eq!(server.text("k"), CANCELLED);
    // The question went with the call: a late answer is an error line, and nothing runs.
    server.send(&json!({"id": "late", "approve": withdrawn, "outcome": "allowed-once"}));
    assert!(server.reply("late")["error"].as_str().is_some());
    // An answer to nothing is an error line.
    server.send(&json!({"id": "stray", "approve": 999, "outcome": "allowed-once"}));
    assert!(
        server.reply("stray")["error"]
            .as_str()
            .unwrap()
            .contains("999")
    );
    for name in ["rejected", "cancelled", "killed"] {
        assert!(!ws.path().join(name).exists(), "{name} ran");
    }
    server.finish();
}

#[test]
fn jsonl_end_of_input_cancels_a_waiting_approval() {
    let Some((ws, mut server)) = read_only_server() else {
        return;
    };
    call_in_session(&mut server, "eof", escalation("touch eof"));
    question(&mut server, "eof");
    server.close_input();
    assert_eq!(server.text("eof"), CANCELLED);
    server.wait_exit();
    assert!(!ws.path().join("eof").exists());
}

/// The provider the binary would build with `config`, if it has a backend here.
fn provider(config: dsh::LocalSandboxConfig) -> Option<dsh::LocalSandboxProvider> {
    let provider = dsh::LocalSandboxProvider::new(config).unwrap();
    match provider.verdict() {
        Ok(_) => Some(provider),
        Err(reason) => {
            eprintln!("skipped: no backend for this configuration here: {reason}");
            None
        }
    }
}

#[test]
fn network_deny_blocks_a_listener_on_loopback() {
    let deny = dsh::LocalSandboxConfig {
        network: dsh::NetworkPolicy::Deny,
        ..Default::default()
    };
    if provider(deny).is_none() {
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let command = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");
    let out = run_dsh(&[
        "run",
        "--sandbox",
        "read-only",
        "--network",
        "deny",
        "--",
        &command,
    ]);
    let printed = text(&out);
    assert!(!printed.contains("connected"), "{printed}");
    assert!(printed.contains("[exit code: 1]"), "{printed}");
    assert!(
        listener.accept().is_err(),
        "the connection reached the listener"
    );
    // The default allows it.
    let out = run_dsh(&["run", "--sandbox", "read-only", "--", &command]);
    assert_eq!(text(&out), "connected\n");
}

#[test]
fn signal_scope_protects_the_server_from_its_commands() {
    let Some(provider) = provider(dsh::LocalSandboxConfig::default()) else {
        return;
    };
    if !provider.signals_scoped() {
        eprintln!("skipped: signal scoping needs Landlock ABI 6");
        return;
    }
    let mut server = Server::start(&["--sandbox", "workspace-write"]).unwrap();
    let pid = server.child.id();
    server.call(
        "kill",
        "bash",
        bash(&format!("kill -TERM {pid}"), json!({})),
    );
    let said = server.text("kill");
    assert!(said.contains("Operation not permitted"), "{said}");
    server.call("alive", "bash", bash("echo still here", json!({})));
    assert_eq!(server.text("alive"), "still here\n");
    server.finish();
}

#[test]
fn a_confined_background_task_shows_the_denial_marker_once_settled() {
    let Some((ws, mut server)) = read_only_server() else {
        return;
    };
    call_in_session(
        &mut server,
        "bg",
        bash("touch bg-made", json!({"run_in_background": true})),
    );
    let started = server.text("bg");
    let task = started
        .strip_prefix("started background task ")
        .unwrap()
        .to_owned();
    let mut last = String::new();
    let mut n = 0;
    let settled = wait_until(SOON, || {
        n += 1;
        last = read_task(&mut server, &format!("read-{n}"), &task, json!({}));
        !last.contains("[status: running]")
    });
    assert!(settled, "{last}");
    assert!(
        last.ends_with(&format!(
            "[status: completed, exit code: 1]\n{DENIED_RO}\n{HINT}"
        )),
        "{last}"
    );
    assert!(!ws.path().join("bg-made").exists());
    // Every later read ends with the markers too, after the task's output was read to its end.
    let again = read_task(&mut server, "again", &task, json!({}));
    assert_eq!(
        again,
        format!("(no new output)\n[status: completed, exit code: 1]\n{DENIED_RO}\n{HINT}")
    );
    server.finish();
}

#[test]
fn network_deny_without_confinement_is_a_startup_error() {
    let out = run_dsh(&[
        "run",
        "--sandbox",
        "danger-full-access",
        "--network",
        "deny",
        "--",
        "true",
    ]);
    assert_startup_error(&out, "--network deny needs a confined --sandbox mode");
}

#[test]
fn danger_full_access_runs_unconfined_with_its_facts() {
    let elsewhere = outside_tmp();
    let target = elsewhere.path().join("free");
    let out = run_dsh(&[
        "run",
        "--sandbox",
        "danger-full-access",
        "--",
        &format!("touch {}", path_str(&target)),
    ]);
    assert_eq!(
        (text(&out).as_str(), out.status.code()),
        ("(no output)", Some(0))
    );
    assert!(target.exists());
}

#[test]
fn runner_settings_are_checked_at_startup_and_a_runner_confines() {
    for (settings, message) in [
        (
            &["--sandbox-runner-failure-signature", "x: "][..],
            "sandbox-local: runnerFailureSignatures requires runnerCommand",
        ),
        (
            &["--sandbox-runner", "/opt/runner"][..],
            "sandbox-local: runnerCommand requires at least one runnerFailureSignatures entry",
        ),
        (
            &[
                "--sandbox-runner",
                "",
                "--sandbox-runner-failure-signature",
                "x: ",
            ][..],
            "sandbox-local: runnerCommand entries must be non-empty",
        ),
    ] {
        let out = run_dsh(&[&["run"][..], settings, &["--", "true"]].concat());
        assert_startup_error(&out, message);
    }
    let Some(bwrap) = dsh::actors::bash::sandbox::local::find_on_path("bwrap") else {
        eprintln!("skipped the working-runner half: bwrap is not on PATH");
        return;
    };
    if provider(dsh::LocalSandboxConfig {
        backend: dsh::BackendChoice::Bwrap,
        ..Default::default()
    })
    .is_none()
    {
        return;
    }
    let elsewhere = outside_tmp();
    let out = run_dsh(&[
        "run",
        "--sandbox",
        "read-only",
        "--sandbox-runner",
        path_str(&bwrap),
        "--sandbox-runner-failure-signature",
        "bwrap: ",
        "--",
        &format!("touch {}/nope", path_str(elsewhere.path())),
    ]);
    assert_shows(&out, DENIED_RO);
    assert!(!elsewhere.path().join("nope").exists());
}

/// Under each containment mode, a confined command's grandchild that left the group and the session
/// still dies when the task is killed (here by its timeout).
#[test]
fn a_confined_commands_escaped_grandchild_dies_under_cgroup_and_subreaper_containment() {
    if !landlock_usable() {
        return;
    }
    for mode in ["cgroup", "subreaper"] {
        let Some(mut server) = Server::start_or_skip(&[
            "--sandbox",
            "read-only",
            "--containment",
            mode,
            "--grace-ms",
            "200",
        ]) else {
            continue;
        };
        server.call(
            "escape",
            "bash",
            bash(
                "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!; sleep 300",
                json!({"timeoutMs": 1000}),
            ),
        );
        let said = server.text("escape");
        assert!(said.contains("[timed out after 1000ms]"), "{mode}: {said}");
        let pid: i32 = said.lines().next().unwrap().trim().parse().unwrap();
        assert!(
            wait_until(SOON, || !dsh::actors::process::signal::pid_is_live(pid)),
            "{mode}: the escaped grandchild {pid} of a confined command survived"
        );
        server.finish();
    }
}

/// A confined call that `--on-timeout background` moves to the background keeps its sandbox
/// facts: when it is later denied a write, its `bash_output` ends with the denial marker.
#[test]
fn a_confined_call_moved_to_the_background_keeps_its_denial_marker() {
    let Some(ws) = landlock_workspace() else {
        return;
    };
    let gate = ws.path().join("go");
    let mut server = Server::start(&[
        "--sandbox",
        "read-only",
        "--on-timeout",
        "background",
        "--cwd",
        path_str(ws.path()),
    ])
    .unwrap();
    // It waits for the test's go (a file only the test can create: the command may not write),
    // so it is surely still running at its timeout.
    let script = format!(
        "echo waiting; while [ ! -e '{}' ]; do sleep 0.05; done; touch late-made",
        gate.display()
    );
    call_in_session(&mut server, "fg", bash(&script, json!({"timeoutMs": 300})));
    let moved = server.text("fg");
    let task = moved
        .split("moved to background task ")
        .nth(1)
        .and_then(|rest| rest.split(';').next())
        .unwrap_or_else(|| panic!("not moved: {moved}"))
        .to_owned();
    std::fs::write(&gate, b"").unwrap();
    let read = read_task(
        &mut server,
        "read",
        &task,
        json!({"wait": true, "timeout_ms": 30000}),
    );
    assert!(
        read.ends_with(&format!(
            "[status: completed, exit code: 1]\n{DENIED_RO}\n{HINT}"
        )),
        "{read}"
    );
    assert!(!ws.path().join("late-made").exists());
    server.finish();
}
