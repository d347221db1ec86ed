//! Nothing outlives a task or the runtime: every escape route a command can take out of its process
//! group (a new session, job control, coreutils `timeout`, `nohup`, a double fork, a trapped SIGTERM
//! with and without the pipes, two hundred sleeps) is killed on every kill path (timeout, cancel,
//! `bash_kill`, end of input, SIGTERM of the server, SIGKILL of the server), under
//! `--containment cgroup` and `--containment subreaper`.
//!
//! Each escapee is a `sleep` whose argument is a number unique to the test run; "nothing left" is
//! read from `/proc/*/cmdline` (never `kill -0`, which counts zombies as alive and may hit a reused
//! pid).

use crate::jsonl_server;

use std::time::{Duration, Instant};

use dsh_test_support::procfs::live_with_cmdline as live_with_marker;
use jsonl_server::{SOON, Server, bash};
use serde_json::json;

/// How long a kill path may take to leave nothing behind: the grace (500 ms) plus generous slack.
const ALL_GONE_WITHIN: Duration = Duration::from_secs(30);

/// The escape routes, each a command that leaves `sleep <marker>` processes outside the shell's
/// process group (or holding a trapped SIGTERM), then keeps the shell busy.
fn escape_routes(marker: &str) -> Vec<(&'static str, String)> {
    vec![
        ("setsid", format!("setsid sleep {marker} & sleep 300")),
        ("set -m", format!("set -m; sleep {marker} & sleep 300")),
        (
            "coreutils timeout",
            format!("timeout 300 sleep {marker}; sleep 300"),
        ),
        (
            "nohup",
            format!("nohup sleep {marker} >/dev/null 2>&1 & sleep 300"),
        ),
        ("double fork", format!("(sleep {marker} &); sleep 300")),
        (
            "TERM trapped, pipes held",
            format!("(trap '' TERM; exec sleep {marker}) & echo started; sleep 300"),
        ),
        (
            "TERM trapped, pipes closed",
            format!("(trap '' TERM HUP; exec sleep {marker}) >/dev/null 2>&1 & sleep 300"),
        ),
        (
            "200 sleeps",
            format!("for i in $(seq 200); do sleep {marker} & done; sleep 300"),
        ),
    ]
}

/// Waits until no process carries `marker`; on failure, kills the survivors and fails the test.
fn assert_all_gone(marker: &str, what: &str) {
    let deadline = Instant::now() + ALL_GONE_WITHIN;
    loop {
        let left = live_with_marker(marker);
        if left.is_empty() {
            return;
        }
        if Instant::now() > deadline {
            for pid in &left {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(*pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            panic!("{what}: {} process(es) left running: {left:?}", left.len());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until at least `count` processes carry `marker` (the escapees really started).
fn wait_started(marker: &str, count: usize, what: &str) {
    let deadline = Instant::now() + SOON;
    while live_with_marker(marker).len() < count {
        assert!(Instant::now() < deadline, "{what}: escapees never started");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn escapees_expected(route: &str) -> usize {
    if route == "200 sleeps" { 200 } else { 1 }
}

/// How a test ends the tasks.
#[derive(Clone, Copy, Debug)]
enum KillPath {
    Timeout,
    Cancel,
    BashKill,
    EndOfInput,
    ServerSigterm,
    ServerSigkill,
}

/// One command of a test: which route, in the foreground or the background, under which marker.
struct Call {
    id: String,
    marker: String,
    route: &'static str,
    background: bool,
}

/// Which kinds of call a kill path applies to: a timeout and a cancel end foreground calls,
/// `bash_kill` and end of input end background tasks, and the server's death ends both.
fn kinds(path: KillPath) -> &'static [bool] {
    match path {
        KillPath::Timeout | KillPath::Cancel => &[false],
        KillPath::BashKill | KillPath::EndOfInput => &[true],
        KillPath::ServerSigterm | KillPath::ServerSigkill => &[false, true],
    }
}

/// Runs every escape route at once on one server, ends them by `path`, and checks nothing is left.
fn every_route_dies(mode: &str, path: KillPath) {
    let Some(mut server) = Server::start_or_skip(&["--grace-ms", "500", "--containment", mode])
    else {
        return;
    };
    let mut calls = Vec::new();
    for &background in kinds(path) {
        for (route, _) in escape_routes("") {
            let marker = jsonl_server::unique_marker(3000);
            let command = escape_routes(&marker)
                .into_iter()
                .find(|(name, _)| *name == route)
                .map(|(_, command)| command)
                .expect("route");
            let id = format!("c{}", calls.len());
            let extra = match (path, background) {
                (_, true) => json!({"run_in_background": true}),
                // Long enough for every escapee to be seen running before the timeout fires.
                (KillPath::Timeout, false) => json!({"timeoutMs": 8000}),
                (_, false) => json!({}),
            };
            server.call(&id, "bash", bash(&command, extra));
            calls.push(Call {
                id,
                marker,
                route,
                background,
            });
        }
    }
    let mut task_ids = Vec::new();
    for call in calls.iter().filter(|c| c.background) {
        let reply = server.reply(&call.id);
        let text = reply["text"].as_str().unwrap_or_default();
        let task = text
            .strip_prefix("started background task ")
            .unwrap_or_else(|| panic!("not started: {reply}"));
        task_ids.push(task.to_owned());
    }
    for call in &calls {
        wait_started(&call.marker, escapees_expected(call.route), call.route);
    }
    match path {
        KillPath::Timeout => {
            for call in &calls {
                let reply = server.reply(&call.id);
                let text = reply["text"].as_str().unwrap_or_default();
                assert!(text.contains("[timed out after 8000ms]"), "{text}");
            }
        }
        KillPath::Cancel => {
            for call in &calls {
                server.send(&json!({"cancel": call.id}));
            }
            for call in &calls {
                let reply = server.reply(&call.id);
                assert!(reply.to_string().contains("aborted"), "{reply}");
            }
        }
        KillPath::BashKill => {
            for (i, task) in task_ids.iter().enumerate() {
                let id = format!("k{i}");
                server.call(&id, "bash_kill", json!({"task_id": task}));
                let reply = server.reply(&id);
                assert_eq!(
                    reply["text"],
                    json!(format!("killed background task {task}"))
                );
            }
        }
        KillPath::EndOfInput => {
            server.close_input();
            server.wait_exit();
        }
        KillPath::ServerSigterm => {
            let pid = nix::unistd::Pid::from_raw(server.child.id() as i32);
            nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
            server.wait_exit();
        }
        KillPath::ServerSigkill => {
            server.child.kill().expect("SIGKILL the server");
            server.wait_exit();
        }
    }
    for call in &calls {
        let kind = if call.background {
            "background"
        } else {
            "foreground"
        };
        assert_all_gone(
            &call.marker,
            &format!("{mode} / {path:?} / {kind} / {}", call.route),
        );
    }
}

#[test]
fn cgroup_timeout_kills_every_escapee() {
    every_route_dies("cgroup", KillPath::Timeout);
}

#[test]
fn cgroup_cancel_kills_every_escapee() {
    every_route_dies("cgroup", KillPath::Cancel);
}

#[test]
fn cgroup_bash_kill_kills_every_escapee() {
    every_route_dies("cgroup", KillPath::BashKill);
}

#[test]
fn cgroup_end_of_input_kills_every_escapee() {
    every_route_dies("cgroup", KillPath::EndOfInput);
}

#[test]
fn cgroup_server_sigterm_kills_every_escapee() {
    every_route_dies("cgroup", KillPath::ServerSigterm);
}

#[test]
fn cgroup_server_sigkill_leaves_the_watchdog_to_kill_every_escapee() {
    every_route_dies("cgroup", KillPath::ServerSigkill);
}

#[test]
fn subreaper_timeout_kills_every_escapee() {
    every_route_dies("subreaper", KillPath::Timeout);
}

#[test]
fn subreaper_cancel_kills_every_escapee() {
    every_route_dies("subreaper", KillPath::Cancel);
}

#[test]
fn subreaper_bash_kill_kills_every_escapee() {
    every_route_dies("subreaper", KillPath::BashKill);
}

#[test]
fn subreaper_end_of_input_kills_every_escapee() {
    every_route_dies("subreaper", KillPath::EndOfInput);
}

#[test]
fn subreaper_server_sigterm_kills_every_escapee() {
    every_route_dies("subreaper", KillPath::ServerSigterm);
}

#[test]
fn subreaper_server_sigkill_leaves_the_watchdog_to_kill_every_escapee() {
    every_route_dies("subreaper", KillPath::ServerSigkill);
}
