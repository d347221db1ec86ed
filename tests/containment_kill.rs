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
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const SOON: Duration = Duration::from_secs(60);

fn dsh() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dsh"))
}

/// A `sleep` argument nobody else uses.
fn unique_marker() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    format!(
        "4000.{}{:04}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Live (non-zombie) processes whose command line contains `marker`.
fn live_with_marker(marker: &str) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let zombie = stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
            !zombie && String::from_utf8_lossy(&cmdline).contains(marker)
        })
        .count()
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + SOON;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {SOON:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A `dsh jsonl` server.
struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<Value>,
}

impl Server {
    /// `Err` with the server's stderr when it refused to start.
    fn start(args: &[&str]) -> Result<Self, String> {
        let mut child = dsh()
            .arg("jsonl")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start dsh jsonl");
        let stdout = child.stdout.take().expect("stdout");
        let mut stderr = child.stderr.take().expect("stderr");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Ok(value) = serde_json::from_str::<Value>(&line)
                    && tx.send(value).is_err()
                {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        let mut server = Self {
            child,
            stdin,
            lines,
        };
        // A refused start exits at once; a good one answers a first call.
        server.call(
            "ping",
            "bash",
            json!({"command": "true", "description": "ping"}),
        );
        match server.lines.recv_timeout(SOON) {
            Ok(_) => {
                std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::stderr()));
                Ok(server)
            }
            Err(_) => {
                let mut said = String::new();
                let _ = std::io::Read::read_to_string(&mut stderr, &mut said);
                Err(said)
            }
        }
    }

    fn call(&mut self, id: &str, tool: &str, arguments: Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        let line = json!({"id": id, "tool": tool, "arguments": arguments});
        writeln!(stdin, "{line}").expect("write a request");
        stdin.flush().expect("flush");
    }

    /// The text of the reply to `id` (other lines, e.g. notices, are skipped).
    fn text(&mut self, id: &str) -> String {
        let deadline = Instant::now() + SOON;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.lines.recv_timeout(left).expect("a reply");
            if line.get("id") == Some(&json!(id)) {
                return line["text"].as_str().unwrap_or_default().to_owned();
            }
        }
    }

    fn finish(mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + SOON;
        while self.child.try_wait().expect("try_wait").is_none() {
            assert!(Instant::now() < deadline, "the server did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn bash(command: &str, extra: Value) -> Value {
    let mut arguments = json!({"command": command, "description": "test"});
    if let (Some(arguments), Some(extra)) = (arguments.as_object_mut(), extra.as_object()) {
        arguments.extend(extra.clone());
    }
    arguments
}

/// Starts a server that needs cgroup limits, or prints why the host refuses and returns `None`.
fn limited_server(args: &[&str]) -> Option<Server> {
    match Server::start(args) {
        Ok(server) => Some(server),
        Err(said) => {
            assert!(
                said.contains("is not available on this host"),
                "the server refused to start for another reason: {said}"
            );
            eprintln!("skipping: {}", said.trim());
            None
        }
    }
}

#[test]
fn a_term_trapping_background_task_is_killed_by_sigkill_and_says_so() {
    let marker = unique_marker();
    let mut server = Server::start(&["--grace-ms", "1500"]).expect("start");
    // The shell's own command line holds the marker too, so "running" is read from a name that only
    // appears once the trap is set: the sleep that replaced the shell calls itself `<marker>-armed`.
    let command =
        format!("trap '' TERM; exec -a \"$(printf '%s-%s' {marker} armed)\" sleep {marker}");
    server.call(
        "bg",
        "bash",
        bash(&command, json!({"run_in_background": true})),
    );
    let started = server.text("bg");
    let task = started
        .strip_prefix("started background task ")
        .unwrap_or_else(|| panic!("not started: {started}"))
        .to_owned();
    let armed = format!("{marker}-armed");
    wait_until("the task runs with SIGTERM ignored", || {
        live_with_marker(&armed) == 1
    });
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

#[test]
fn task_max_memory_reports_out_of_memory_in_the_foreground_and_in_bash_output() {
    let Some(mut server) = limited_server(&["--task-max-memory", "64MiB"]) else {
        return;
    };
    let hog = "head -c 300M /dev/zero | tail | wc -c";
    server.call("fg", "bash", bash(hog, json!({})));
    let text = server.text("fg");
    assert!(text.ends_with("[killed: out of memory]"), "{text}");
    server.call("bg", "bash", bash(hog, json!({"run_in_background": true})));
    let started = server.text("bg");
    let task = started
        .strip_prefix("started background task ")
        .unwrap_or_else(|| panic!("not started: {started}"))
        .to_owned();
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
    server.finish();
}

#[test]
fn sigterm_of_the_server_kills_a_trapping_task_within_the_shutdown_grace() {
    let marker = unique_marker();
    // The kill grace (3 s by default) is longer than the shutdown grace (1 s by default): a host
    // that sends SIGKILL two seconds after SIGTERM must still find everything gone.
    let mut server = Server::start(&[]).expect("start");
    // The shell's own command line holds the marker too, so "running" is read from a name that only
    // appears once the trap is set: the sleep that replaced the shell calls itself `<marker>-armed`.
    let command =
        format!("trap '' TERM; exec -a \"$(printf '%s-%s' {marker} armed)\" sleep {marker}");
    server.call(
        "bg",
        "bash",
        bash(&command, json!({"run_in_background": true})),
    );
    let started = server.text("bg");
    assert!(started.starts_with("started background task "), "{started}");
    let armed = format!("{marker}-armed");
    wait_until("the task runs with SIGTERM ignored", || {
        live_with_marker(&armed) == 1
    });
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
