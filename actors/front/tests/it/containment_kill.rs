//! The kill means what it says, children start clean, and per-task limits hold, all through the
//! `dsh` binary:
//! - a background task that traps SIGTERM is ended by SIGKILL and says so, and a second `bash_kill`
//!   while the first is under way answers "killed background task";
//! - a foreground command whose trapping child left the pipes is killed whole on timeout;
//! - a command inherits exactly descriptors 0, 1 and 2 even when the server has others open;
//! - `--task-max-pids` makes fork fail, `--task-max-memory` reports `[killed: out of memory]`;
//! - SIGTERM of the server kills a trapping task within `--shutdown-grace-ms`, not the kill grace.
//!
//! Limits need cgroups: where the host refuses them, those tests print why and skip.

use crate::jsonl_server;

use std::process::Command;
use std::time::{Duration, Instant};

use dsh_test_support::procfs::live_with_cmdline;
use dsh_test_support::wait::wait_until as wait_bounded;
use jsonl_server::{SOON, Server, bash};
use serde_json::json;

/// A `sleep` argument nobody else uses.
fn unique_marker() -> String {
    jsonl_server::unique_marker(4000)
}

/// How many live processes carry `marker`.
fn live_with_marker(marker: &str) -> usize {
    live_with_cmdline(marker).len()
}

fn wait_until(what: &str, done: impl FnMut() -> bool) {
    assert!(wait_bounded(SOON, done), "{what}: not within {SOON:?}");
}

/// Starts a server that needs cgroup limits, or prints why the host refuses and returns `None`.
fn limited_server(args: &[&str]) -> Option<Server> {
    Server::start_or_skip(args)
}

/// Starts `sleep <marker>` in the background with SIGTERM ignored, waits until it runs so, and
/// returns its task id. The shell's own command line holds the marker too, so "running" is read
/// from a name that only appears once the trap is set: the sleep that replaced the shell calls
/// itself `<marker>-armed`.
fn start_term_trapping_task(server: &mut Server, marker: &str) -> String {
    let command =
        format!("trap '' TERM; exec -a \"$(printf '%s-%s' {marker} armed)\" sleep {marker}");
    let task = server.start_background("bg", &command);
    let armed = format!("{marker}-armed");
    wait_until("the task runs with SIGTERM ignored", || {
        live_with_marker(&armed) == 1
    });
    task
}

#[test]
fn a_term_trapping_background_task_is_killed_by_sigkill_and_says_so() {
    let marker = unique_marker();
    let mut server = Server::start(&["--grace-ms", "1500"]).expect("start");
    let task = start_term_trapping_task(&mut server, &marker);
    server.call("k1", "bash_kill", json!({"task_id": task}));
    assert_eq!(server.text("k1"), format!("killed background task {task}"));
    // The first kill is still waiting out its grace: the task is not finished yet.
    server.call("k2", "bash_kill", json!({"task_id": task}));
    assert_eq!(server.text("k2"), format!("killed background task {task}"));
    let mut status = String::new();
    // `[status: killed]` while the kill is under way; the signal is named once the task settled.
    wait_until("the task ends", || {
        server.call("out", "bash_output", json!({"task_id": task}));
        status = server.text("out");
        !status.ends_with("[status: running]") && !status.ends_with("[status: killed]")
    });
    assert!(status.ends_with("[status: killed by SIGKILL]"), "{status}");
    assert_eq!(live_with_marker(&marker), 0);
    server.finish();
}

#[test]
fn a_foreground_timeout_kills_a_trapping_child_that_left_the_pipes() {
    let marker = unique_marker();
    let mut server = Server::start(&["--grace-ms", "500"]).expect("start");
    let command = format!("(trap '' TERM HUP; exec sleep {marker}) >/dev/null 2>&1 & sleep 30");
    server.call("fg", "bash", bash(&command, json!({"timeoutMs": 1500})));
    let text = server.text("fg");
    assert!(text.contains("[timed out after 1500ms]"), "{text}");
    assert!(text.ends_with("[killed by signal: SIGKILL]"), "{text}");
    // Settled means all of it is gone: nothing is left when the reply arrives.
    assert_eq!(live_with_marker(&marker), 0, "{text}");
    server.finish();
}

#[test]
fn a_command_inherits_only_descriptors_0_1_2() {
    // The server gets a descriptor 7 without close-on-exec, as a careless host would leave it.
    let output = Command::new("bash")
        .arg("-c")
        .arg(r#"exec 7>/dev/null; exec "$0" run -- 'ls /proc/self/fd'"#)
        .arg(env!("CARGO_BIN_EXE_dsh"))
        .output()
        .expect("run dsh");
    let listed = String::from_utf8_lossy(&output.stdout).into_owned();
    let mut fds: Vec<u32> = listed
        .split_whitespace()
        .map(|f| f.parse().unwrap_or_else(|_| panic!("{listed}")))
        .collect();
    // `ls` opens /proc/self/fd itself, on the lowest free number.
    fds.sort();
    assert_eq!(fds.pop(), Some(3), "{listed}");
    assert_eq!(fds, [0, 1, 2], "{listed}");
}

#[test]
fn task_max_pids_makes_a_fork_loop_fail() {
    let Some(mut server) = limited_server(&["--task-max-pids", "40", "--containment", "cgroup"])
    else {
        return;
    };
    let script = "import os, time\n\
                  n = 0\n\
                  try:\n\
                  \x20   for n in range(100):\n\
                  \x20       if os.fork() == 0:\n\
                  \x20           os.close(1); os.close(2); time.sleep(30); os._exit(0)\n\
                  \x20   print('forked all 100')\n\
                  except OSError as e:\n\
                  \x20   print('fork failed after', n, e.strerror)\n";
    let command = format!("python3 -c \"{script}\"");
    server.call("fork", "bash", bash(&command, json!({})));
    let text = server.text("fork");
    assert!(text.contains("fork failed after"), "{text}");
    let forked: u32 = text
        .split_whitespace()
        .nth(3)
        .and_then(|n| n.parse().ok())
        .unwrap_or(u32::MAX);
    assert!(forked < 40, "{text}");
    server.finish();
}

/// A server whose tasks may use 64 MiB of memory, where the host can limit it.
fn memory_limited() -> Option<Server> {
    limited_server(&["--task-max-memory", "64MiB"])
}

/// Holds 300 MB at once (`tail` keeps its whole input: one line).
const HOG: &str = "head -c 300M /dev/zero | tail | wc -c";

#[test]
fn task_max_memory_reports_out_of_memory_in_the_foreground_and_in_bash_output() {
    let Some(mut server) = memory_limited() else {
        return;
    };
    let fg = server.run("fg", HOG);
    let text = fg["text"].as_str().unwrap_or_default();
    assert!(text.ends_with("[killed: out of memory]"), "{fg}");
    let task = server.start_background("bg", HOG);
    let mut status = String::new();
    wait_until("the task ends", || {
        server.call("out", "bash_output", json!({"task_id": task}));
        status = server.text("out");
        !status.contains("[status: running]")
    });
    assert!(
        status.ends_with("[status: killed: out of memory]"),
        "{status}"
    );
    server.call("last", "bash_output", json!({"task_id": task}));
    assert_eq!(server.reply("last")["structured"]["out_of_memory"], true);
    server.finish();
}

#[test]
fn a_child_killed_for_memory_while_the_shell_goes_on_is_reported_alike_in_text_and_structure() {
    let Some(mut server) = memory_limited() else {
        return;
    };
    // Under v1 memory (hybrid hosts) only the hog dies and the shell exits 0; under v2 with
    // memory.oom.group the whole leaf goes. Either way text and structure say the same.
    let hog = "perl -e '$x = \"a\" x (300 * 1024 * 1024)'; echo went on";
    let reply = server.run("fg", hog);
    let text = reply["text"].as_str().unwrap();
    assert!(text.ends_with("[killed: out of memory]"), "{reply}");
    assert_eq!(reply["structured"]["out_of_memory"], true, "{reply}");
    if reply["structured"]["exit_code"] == 0 {
        assert!(text.starts_with("went on\n"), "{reply}");
    }
    assert_eq!(
        server.run("plain", "echo fine")["structured"]["out_of_memory"],
        false
    );
    server.finish();
}

#[test]
fn sigterm_of_the_server_kills_a_trapping_task_within_the_shutdown_grace() {
    let marker = unique_marker();
    // The kill grace (3 s by default) is longer than the shutdown grace (1 s by default): a host
    // that sends SIGKILL two seconds after SIGTERM must still find everything gone.
    let mut server = Server::start(&[]).expect("start");
    start_term_trapping_task(&mut server, &marker);
    let signalled = Instant::now();
    let pid = nix::unistd::Pid::from_raw(server.child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let status = loop {
        if let Some(status) = server.child.try_wait().expect("try_wait") {
            break status;
        }
        assert!(
            signalled.elapsed() < SOON,
            "the server did not exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = signalled.elapsed();
    assert_eq!(status.code(), Some(0));
    // Without the shutdown grace the trapping task would hold the exit for the whole 3 s kill grace.
    assert!(took < Duration::from_millis(2900), "took {took:?}");
    assert_eq!(live_with_marker(&marker), 0);
}
