//! The watchdog is watched (issue 19, point 5), through the `dsh` binary: when an operator or a
//! command kills the server's watchdog, the server starts a new one and tells it everything still
//! live, so a later SIGKILL of the server still leaves nothing — the background task started before
//! the watchdog died, a foreground straggler, a task started after, and the spill directory — in
//! every containment mode. And the server keeps serving while its watchdog is killed again and again.

use crate::jsonl_server;

use std::path::PathBuf;
use std::time::Duration;

use dsh_test_support::procfs::{live_with_cmdline, state_and_parent};
use dsh_test_support::wait::wait_until;
use jsonl_server::{SOON, Server, bash, unique_marker};
use serde_json::json;

/// The live watchdogs of `server`: its children running `__watchdog`.
fn watchdogs_of(server: u32) -> Vec<i32> {
    live_with_cmdline("__watchdog")
        .into_iter()
        .filter(|pid| state_and_parent(*pid).is_some_and(|(_, ppid)| ppid == server as i32))
        .collect()
}

/// Waits for `server`'s one watchdog other than `old` (`None`: the first one).
fn watchdog_other_than(server: u32, old: Option<i32>) -> i32 {
    let mut found = None;
    let seen = wait_until(SOON, || {
        found = watchdogs_of(server)
            .into_iter()
            .find(|pid| Some(*pid) != old);
        found.is_some()
    });
    assert!(
        seen,
        "no watchdog of {server} other than {old:?} within {SOON:?}"
    );
    found.unwrap()
}

fn sigkill(pid: i32) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
}

/// The session a process leads or belongs to, from `/proc/<pid>/stat`.
fn session_of(pid: i32) -> Option<i32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    text[text.rfind(')')? + 1..]
        .split_whitespace()
        .nth(3)?
        .parse()
        .ok()
}

/// Whatever a test started and has not seen end: SIGKILLed, and the spill directory removed, when
/// the test ends (on success nothing is left to do; on a failure the server's replacement watchdog
/// may never have come).
#[derive(Default)]
struct Leftovers {
    markers: Vec<String>,
    spill_dir: Option<PathBuf>,
}

impl Leftovers {
    fn marker(&mut self) -> String {
        let marker = unique_marker(4300);
        self.markers.push(marker.clone());
        marker
    }

    fn live(&self) -> Vec<(String, Vec<i32>)> {
        self.markers
            .iter()
            .map(|m| (m.clone(), live_with_cmdline(m)))
            .filter(|(_, pids)| !pids.is_empty())
            .collect()
    }
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        for marker in &self.markers {
            for pid in live_with_cmdline(marker) {
                sigkill(pid);
            }
        }
        if let Some(dir) = &self.spill_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Starts `command` in the background and returns its task id.
fn start_task(server: &mut Server, id: &str, command: &str) -> String {
    server.call(
        id,
        "bash",
        bash(command, json!({"run_in_background": true})),
    );
    let text = server.text(id);
    text.strip_prefix("started background task ")
        .unwrap_or_else(|| panic!("not started: {text}"))
        .to_owned()
}

/// The private spill directory of `server`, learned from a call whose output spills (the server
/// runs with `--max-output-bytes 1000`).
fn spill_dir(server: &mut Server) -> PathBuf {
    let file = server.spill_file();
    let dir = file.parent().expect("a spill file has a directory");
    assert!(dir.is_dir(), "{} missing", dir.display());
    dir.to_path_buf()
}

fn a_killed_watchdog_is_replaced_and_a_killed_server_still_leaves_nothing(mode: &str) {
    let args = [
        "--containment",
        mode,
        "--max-output-bytes",
        "1000",
        "--grace-ms",
        "300",
    ];
    let Some(mut server) = Server::start_or_skip(&args) else {
        return;
    };
    let mut left = Leftovers::default();
    let pid = server.child.id();
    let dir = spill_dir(&mut server);
    left.spill_dir = Some(dir.clone());

    // Before the watchdog dies: a background task, and a foreground straggler (its sleep holds the
    // pipes past the drain grace, so the call returns while it runs on).
    let background = left.marker();
    start_task(&mut server, "bg-before", &format!("sleep {background}"));
    let straggler = left.marker();
    server.call(
        "straggler",
        "bash",
        bash(&format!("sleep {straggler} & echo started"), json!({})),
    );
    let text = server.text("straggler");
    assert!(
        text.starts_with("started\n[left running: pid "),
        "{mode}: the straggler is named: {text}"
    );
    assert!(wait_until(SOON, || !live_with_cmdline(&background).is_empty()));
    assert!(
        !live_with_cmdline(&straggler).is_empty(),
        "{mode}: no straggler"
    );

    let old = watchdog_other_than(pid, None);
    assert_eq!(
        session_of(old),
        Some(old),
        "{mode}: the watchdog does not lead a session of its own"
    );
    sigkill(old);
    let new = watchdog_other_than(pid, Some(old));
    assert!(
        wait_until(SOON, || state_and_parent(old).is_none()),
        "{mode}: the dead watchdog {old} was not reaped"
    );
    assert_eq!(session_of(new), Some(new), "{mode}: the new watchdog");

    // After it was replaced: one more task.
    let after = left.marker();
    start_task(&mut server, "bg-after", &format!("sleep {after}"));
    assert!(wait_until(SOON, || !live_with_cmdline(&after).is_empty()));

    sigkill(pid as i32);
    server.child.wait().unwrap();
    let nothing_left = wait_until(SOON, || left.live().is_empty());
    let spill_removed = wait_until(SOON, || !dir.exists());
    let watchdog_done = wait_until(SOON, || !live_with_cmdline("__watchdog").contains(&new));
    assert!(
        nothing_left,
        "{mode}: a SIGKILLed server whose watchdog was replaced left {:?}",
        left.live()
    );
    assert!(
        spill_removed,
        "{mode}: the spill directory {} is left",
        dir.display()
    );
    assert!(
        watchdog_done,
        "{mode}: the new watchdog {new} outlived its server"
    );
}

#[test]
fn cgroup_a_killed_watchdog_is_replaced_and_a_killed_server_still_leaves_nothing() {
    a_killed_watchdog_is_replaced_and_a_killed_server_still_leaves_nothing("cgroup");
}

#[test]
fn subreaper_a_killed_watchdog_is_replaced_and_a_killed_server_still_leaves_nothing() {
    a_killed_watchdog_is_replaced_and_a_killed_server_still_leaves_nothing("subreaper");
}

#[test]
fn group_a_killed_watchdog_is_replaced_and_a_killed_server_still_leaves_nothing() {
    a_killed_watchdog_is_replaced_and_a_killed_server_still_leaves_nothing("group");
}

#[test]
fn a_server_serves_on_while_its_watchdog_is_killed_again_and_again() {
    // The flags the test writes are read by the commands: a writable root (their `/tmp` is private).
    let flags = tempfile::tempdir().unwrap();
    let flags_root = flags.path().to_str().unwrap();
    let mut server = Server::start(&["--max-output-bytes", "1000", "--writable-root", flags_root])
        .unwrap_or_else(|said| panic!("start: {said}"));
    let mut left = Leftovers::default();
    let pid = server.child.id();
    let dir = spill_dir(&mut server);
    left.spill_dir = Some(dir.clone());
    let mut watchdog = watchdog_other_than(pid, None);
    for round in 0..3 {
        // A call in flight while the watchdog dies is answered as usual: it runs until the test
        // has killed the watchdog and says so with a file.
        let id = format!("in-flight-{round}");
        let marker = left.marker();
        let flag = flags.path().join(format!("killed-{round}"));
        server.call(
            &id,
            "bash",
            bash(
                &format!(
                    "sleep {marker} & s=$!; until [ -e {} ]; do sleep 0.05; done; kill $s; \
                     echo done-{round}",
                    flag.display()
                ),
                json!({}),
            ),
        );
        assert!(wait_until(SOON, || !live_with_cmdline(&marker).is_empty()));
        sigkill(watchdog);
        std::fs::write(&flag, b"").unwrap();
        assert_eq!(server.text(&id), format!("done-{round}\n"));
        let next = watchdog_other_than(pid, Some(watchdog));
        assert!(
            wait_until(SOON, || state_and_parent(watchdog).is_none()),
            "round {round}: the dead watchdog {watchdog} was not reaped"
        );
        watchdog = next;
        for n in 0..3 {
            let id = format!("echo-{round}-{n}");
            server.call(
                &id,
                "bash",
                bash(&format!("echo ok-{round}-{n}"), json!({})),
            );
            assert_eq!(server.text(&id), format!("ok-{round}-{n}\n"));
        }
        let task = start_task(&mut server, &format!("bg-{round}"), "echo bg-done");
        let id = format!("read-{round}");
        server.call(
            &id,
            "bash_output",
            json!({"task_id": task, "wait": true, "timeout_ms": 60000}),
        );
        assert_eq!(
            server.text(&id),
            "bg-done\n[status: completed, exit code: 0]"
        );
    }
    assert_eq!(watchdogs_of(pid), [watchdog], "one watchdog at a time");
    // A clean end still says goodbye to the current watchdog.
    server.close_input();
    server.wait_exit();
    let status = server.child.try_wait().expect("try_wait");
    assert_eq!(status.and_then(|s| s.code()), Some(0));
    assert!(
        wait_until(Duration::from_secs(30), || !live_with_cmdline("__watchdog")
            .contains(&watchdog)),
        "the last watchdog outlived a clean shutdown"
    );
    assert!(left.live().is_empty(), "left: {:?}", left.live());
    assert!(!dir.exists(), "a clean shutdown left {}", dir.display());
}
