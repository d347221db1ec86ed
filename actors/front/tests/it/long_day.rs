//! The long day: one `dsh jsonl` server per containment mode lives through every kind of ending a
//! command can have, and after each one the **same** server still runs three plain `echo`s and a
//! background task to completion, correctly and quickly (issue 19).
//!
//! A fresh runtime per test hides every defect that needs history: the first SIGKILL escalation in
//! cgroup mode used to make every later command of the runtime die at birth (a killed cgroup leaf
//! was recycled; see `dsh_contain::Spent::Killed`). Endings: a foreground timeout with SIGTERM
//! ignored, `bash_kill` of a TERM-ignoring task, a cancel of a TERM-ignoring call, a timeout of a
//! `setsid` escapee, a fork bomb (under `--task-max-pids` in cgroup mode; a bounded fork burst in the
//! others, which cannot limit), an OOM kill under `--task-max-memory` (cgroup mode only), `kill -9 $$`,
//! a straggler left holding the pipes after the drain grace, and daemons that let go of the pipes,
//! of a foreground call and of a background task. At the end, end of input shuts the
//! server down (exit 0) and nothing any call started is left running.

use crate::jsonl_server;

use std::time::{Duration, Instant};

use dsh_test_support::procfs::{live_with_cmdline, threads_named};
use dsh_test_support::wait::wait_until;
use jsonl_server::{SOON, Server, bash};
use serde_json::json;

/// The task id of a reply that is `output` followed by
/// `[left running: pid <pid> (<command>); stop it with bash_kill <task>]`.
fn left_running_task(text: &str, output: &str, pid: i32, command: &str) -> Option<String> {
    let prefix = format!("{output}[left running: pid {pid} ({command}); stop it with bash_kill ");
    let task = text.strip_prefix(&prefix)?.strip_suffix(']')?;
    task.starts_with("bash-").then(|| task.to_owned())
}

/// The pid and task id of a reply that is `output` followed by
/// `[left running: pid <pid> (<command>); stop it with bash_kill <task>]`, whatever the command line
/// showed (a daemon caught between its fork and its `exec` shows the shell's, or none in the middle
/// of the `exec`).
fn left_pid_and_task(text: &str, output: &str) -> Option<(i32, String)> {
    let rest = text.strip_prefix(&format!("{output}[left running: pid "))?;
    // `pid <n> (<command>)`, or `pid <n>` alone when the command line read empty (mid-`exec`).
    let digits = rest.find(|c: char| !c.is_ascii_digit())?;
    let (_, task) = rest.rsplit_once("; stop it with bash_kill ")?;
    let task = task.strip_suffix(']')?;
    Some((rest[..digits].parse().ok()?, task.to_owned()))
}

/// A plain call's round trip on a healthy server takes milliseconds; this bound only catches a server
/// that stalls (it is generous for shared, noisy machines).
const QUICK: Duration = Duration::from_secs(5);

struct Day {
    server: Server,
    mode: &'static str,
    /// Every marker a call of this day used, to check at the end that nothing is left.
    markers: Vec<String>,
    next: u32,
    /// The workspace of a confined day (`--sandbox workspace-write`).
    workspace: Option<tempfile::TempDir>,
}

impl Day {
    fn start(mode: &'static str, extra: &[&str]) -> Option<Self> {
        let mut args = vec!["--containment", mode, "--grace-ms", "300"];
        args.extend_from_slice(extra);
        let server = Server::start_or_skip(&args)?;
        Some(Day {
            server,
            mode,
            markers: Vec::new(),
            next: 0,
            workspace: None,
        })
    }

    fn marker(&mut self) -> String {
        let marker = jsonl_server::unique_marker(4100);
        self.markers.push(marker.clone());
        marker
    }

    fn id(&mut self, what: &str) -> String {
        self.next += 1;
        format!("{what}-{}", self.next)
    }

    /// Runs `command` in the foreground and returns its text.
    fn run(&mut self, command: &str, extra: serde_json::Value) -> String {
        let id = self.id("fg");
        self.server.call(&id, "bash", bash(command, extra));
        self.server.text(&id)
    }

    /// Starts `command` in the background and returns its task id.
    fn start_task(&mut self, command: &str) -> String {
        let id = self.id("bg");
        self.server.call(
            &id,
            "bash",
            bash(command, json!({"run_in_background": true})),
        );
        let started = self.server.text(&id);
        started
            .strip_prefix("started background task ")
            .unwrap_or_else(|| panic!("{}: not started: {started}", self.mode))
            .to_owned()
    }

    /// Waits for `task` to settle and returns the read that shows its end.
    fn wait_task(&mut self, task: &str) -> String {
        let id = self.id("wait");
        self.server.call(
            &id,
            "bash_output",
            json!({"task_id": task, "wait": true, "timeout_ms": 60000}),
        );
        self.server.text(&id)
    }

    /// A TERM-ignoring sleep whose process calls itself `<marker>-armed` once the trap is set.
    fn armed_sleeper(&mut self) -> (String, String) {
        let marker = self.marker();
        let command =
            format!("trap '' TERM; exec -a \"$(printf '%s-%s' {marker} armed)\" sleep {marker}");
        (command, format!("{marker}-armed"))
    }

    /// After an ending: three `echo`s and a background task, right and quick.
    fn still_serves(&mut self, after: &str) {
        for n in 0..3 {
            let asked = Instant::now();
            let text = self.run(&format!("echo ok-{n}"), json!({}));
            let took = asked.elapsed();
            assert_eq!(
                text,
                format!("ok-{n}\n"),
                "{}: after {after}, echo {n} went wrong",
                self.mode
            );
            assert!(
                took < QUICK,
                "{}: after {after}, echo {n} took {took:?}",
                self.mode
            );
        }
        let task = self.start_task("echo bg-done");
        let read = self.wait_task(&task);
        assert_eq!(
            read, "bg-done\n[status: completed, exit code: 0]",
            "{}: after {after}, a background task went wrong",
            self.mode
        );
    }

    fn foreground_timeout_with_term_ignored(&mut self) {
        let (command, _) = self.armed_sleeper();
        let text = self.run(&command, json!({"timeoutMs": 500}));
        assert!(text.contains("[timed out after 500ms]"), "{text}");
        assert!(text.ends_with("[killed by signal: SIGKILL]"), "{text}");
        self.still_serves("a foreground timeout with SIGTERM ignored");
    }

    fn bash_kill_of_a_term_ignoring_task(&mut self) {
        let (command, armed) = self.armed_sleeper();
        let task = self.start_task(&command);
        assert!(wait_until(SOON, || live_with_cmdline(&armed).len() == 1));
        let id = self.id("kill");
        self.server
            .call(&id, "bash_kill", json!({"task_id": task.clone()}));
        assert_eq!(
            self.server.text(&id),
            format!("killed background task {task}")
        );
        let read = self.wait_task(&task);
        assert!(read.ends_with("[status: killed by SIGKILL]"), "{read}");
        self.still_serves("bash_kill of a TERM-ignoring task");
    }

    fn cancel_of_a_term_ignoring_call(&mut self) {
        let (command, armed) = self.armed_sleeper();
        let id = self.id("cancelled");
        self.server.call(&id, "bash", bash(&command, json!({})));
        assert!(wait_until(SOON, || live_with_cmdline(&armed).len() == 1));
        self.server.send(&json!({"cancel": id}));
        assert_eq!(self.server.text(&id), "Error: command aborted");
        assert!(wait_until(SOON, || live_with_cmdline(&armed).is_empty()));
        self.still_serves("a cancel of a TERM-ignoring call");
    }

    fn timeout_of_a_setsid_escapee(&mut self) {
        let marker = self.marker();
        let command = format!("setsid sleep {marker} >/dev/null 2>&1 & sleep 30");
        let text = self.run(&command, json!({"timeoutMs": 500}));
        assert!(text.contains("[timed out after 500ms]"), "{text}");
        if self.mode == "group" {
            // Group mode follows no escapee (README, "Containment"): it is the test's to stop.
            assert_eq!(live_with_cmdline(&marker).len(), 1, "{text}");
            kill_marked(&marker);
        } else {
            assert!(live_with_cmdline(&marker).is_empty(), "{text}");
        }
        self.still_serves("a timeout of a setsid escapee");
    }

    fn fork_bomb(&mut self) {
        let marker = self.marker();
        let text = if self.mode == "cgroup" {
            // Under --task-max-pids the bomb runs into the limit; the timeout kills what it made.
            let command = format!("b() {{ sleep {marker} & b | b & }}; b; wait");
            self.run(&command, json!({"timeoutMs": 1500}))
        } else {
            let command = format!("for i in $(seq 60); do sleep {marker} & done; wait");
            self.run(&command, json!({"timeoutMs": 1000}))
        };
        assert!(text.contains("[timed out after"), "{text}");
        assert!(
            wait_until(SOON, || live_with_cmdline(&marker).is_empty()),
            "{}: the bomb's processes are left",
            self.mode
        );
        self.still_serves("a fork bomb");
    }

    fn oom_kill(&mut self) {
        let text = self.run("perl -e '$x = \"a\" x (400 * 1024 * 1024)'", json!({}));
        assert!(text.ends_with("[killed: out of memory]"), "{text}");
        self.still_serves("an OOM kill");
    }

    fn self_inflicted_sigkill(&mut self) {
        let text = self.run("echo before; kill -9 $$", json!({}));
        assert_eq!(text, "before\n[killed by signal: SIGKILL]");
        self.still_serves("kill -9 $$");
    }

    fn drained_straggler(&mut self) {
        let marker = self.marker();
        // The sleeper keeps stdout open after the shell exits: the call returns at the drain grace,
        // naming it, and it runs on as the caller's task (issue 21).
        let id = self.id("fg");
        let command = format!("sleep {marker} & echo started");
        self.server.call(&id, "bash", bash(&command, json!({})));
        let reply = self.server.reply(&id);
        let text = reply["text"].as_str().unwrap_or_default();
        let live = live_with_cmdline(&marker);
        assert_eq!(live.len(), 1, "{}: the straggler runs on", self.mode);
        let task = left_running_task(text, "started\n", live[0], &format!("sleep {marker}"))
            .unwrap_or_else(|| panic!("{}: no left-running line in {text:?}", self.mode));
        // Hosts read the same from the structured result.
        assert_eq!(
            reply["structured"]["left_running"],
            json!({"task_id": task, "pids": [live[0]]}),
            "{}",
            self.mode
        );
        self.still_serves("a drained straggler");
        // A TERM-ignoring one too; `bash_kill` of its task stops it (SIGKILL after the grace).
        let (command, armed) = self.armed_sleeper();
        let text = self.run(&format!("({command}) & echo armed"), json!({}));
        let live = live_with_cmdline(&armed);
        assert_eq!(
            live.len(),
            1,
            "{}: the TERM-ignoring straggler runs on",
            self.mode
        );
        let shown = format!("{armed} {}", armed.trim_end_matches("-armed"));
        let armed_task = left_running_task(&text, "armed\n", live[0], &shown)
            .unwrap_or_else(|| panic!("{}: no left-running line in {text:?}", self.mode));
        for task in [&task, &armed_task] {
            let id = self.id("kill");
            self.server.call(&id, "bash_kill", json!({"task_id": task}));
            assert_eq!(
                self.server.text(&id),
                format!("killed background task {task}")
            );
            let end = self.wait_task(task);
            assert!(
                end.ends_with("[status: killed]"),
                "{}: {task}: {end}",
                self.mode
            );
        }
        for gone in [&marker, &armed] {
            assert!(
                wait_until(SOON, || live_with_cmdline(gone).is_empty()),
                "{}: bash_kill left {gone} running",
                self.mode
            );
        }
        // One that ends by itself ends its task as completed.
        let marker = self.marker();
        let text = self.run(
            &format!("(exec -a {marker} sleep 1) & echo brief"),
            json!({}),
        );
        let live = live_with_cmdline(&marker);
        assert_eq!(live.len(), 1, "{}: the brief straggler runs on", self.mode);
        let shown = format!("{marker} 1");
        let task = left_running_task(&text, "brief\n", live[0], &shown)
            .unwrap_or_else(|| panic!("{}: no left-running line in {text:?}", self.mode));
        let end = self.wait_task(&task);
        assert!(
            end.ends_with("[status: completed, exit code: 0]"),
            "{}: {task}: {end}",
            self.mode
        );
        self.still_serves("stopping what was left running");
    }

    /// A daemon that let go of the call's pipes (`nohup … > log 2>&1 &`) is named too, as the
    /// caller's task, and `bash_kill` stops it; in cgroup mode also one that left the process group.
    fn daemon_that_let_go_of_the_pipes(&mut self) {
        self.daemon_named_and_stopped("nohup", "daemon");
        // One that also left the process group is followed only by a cgroup leaf (group
        // containment does not see it, README; subreaper mode kills it only at shutdown).
        if self.mode == "cgroup" {
            self.daemon_named_and_stopped("setsid", "setsid");
        }
        self.still_serves("a daemon that let go of the pipes");
    }

    /// `<how> bash -c 'exec -a <marker> sleep 600' > /dev/null 2>&1 < /dev/null & echo <said>`:
    /// the reply names the daemon by pid as a task of the caller, and its `bash_kill` stops it.
    fn daemon_named_and_stopped(&mut self, how: &str, said: &str) {
        let marker = self.marker();
        let text = self.run(
            &format!(
                "{how} bash -c 'exec -a {marker} sleep 600' > /dev/null 2>&1 < /dev/null & echo {said}"
            ),
            json!({}),
        );
        let (pid, task) = left_pid_and_task(&text, &format!("{said}\n"))
            .unwrap_or_else(|| panic!("{}: {how}: no left-running line in {text:?}", self.mode));
        assert!(
            wait_until(SOON, || live_with_cmdline(&marker) == [pid]),
            "{}: {how}: the daemon is not pid {pid}: {:?}",
            self.mode,
            live_with_cmdline(&marker)
        );
        let id = self.id("kill");
        self.server.call(&id, "bash_kill", json!({"task_id": task}));
        assert_eq!(
            self.server.text(&id),
            format!("killed background task {task}")
        );
        assert!(
            wait_until(SOON, || live_with_cmdline(&marker).is_empty()),
            "{}: {how}: bash_kill left the daemon running",
            self.mode
        );
    }

    /// A background task whose daemon let go of the pipes ends `completed`; its end names the
    /// daemon as a task of the caller (on every read of it, and in its notice), whose `bash_kill`
    /// stops it.
    fn daemon_a_background_task_left(&mut self) {
        let marker = self.marker();
        let id = self.id("bg");
        let daemon = format!(
            "nohup bash -c 'exec -a {marker} sleep 600' > /dev/null 2>&1 < /dev/null & echo spawned"
        );
        self.server.call_as(
            "day",
            &id,
            "bash",
            bash(&daemon, json!({"run_in_background": true})),
        );
        let started = self.server.text(&id);
        let bg = started
            .strip_prefix("started background task ")
            .unwrap_or_else(|| panic!("{}: not started: {started}", self.mode))
            .to_owned();
        // Not awaited: its end comes as a notice, which names what it left.
        let notice = self.server.line_where(|line| line.get("notice").is_some());
        let notice = notice["notice"].as_str().unwrap_or_default().to_owned();
        let said = format!(
            "background bash task {bg} finished [status: completed, exit code: 0]. Read its output \
             with bash_output. "
        );
        let (pid, task) = left_pid_and_task(&notice, &said)
            .unwrap_or_else(|| panic!("{}: no left-running line in {notice:?}", self.mode));
        let id = self.id("read");
        self.server
            .call_as("day", &id, "bash_output", json!({"task_id": bg}));
        let end = self.server.text(&id);
        let output = "spawned\n[status: completed, exit code: 0]\n";
        assert_eq!(
            left_pid_and_task(&end, output),
            Some((pid, task.clone())),
            "{}: {end:?}",
            self.mode
        );
        assert!(
            wait_until(SOON, || live_with_cmdline(&marker) == [pid]),
            "{}: the daemon is not pid {pid}: {:?}",
            self.mode,
            live_with_cmdline(&marker)
        );
        // The caller's own: another session may not stop it.
        let id = self.id("other");
        self.server
            .call_as("night", &id, "bash_kill", json!({"task_id": task}));
        assert_eq!(
            self.server.text(&id),
            format!("Error: task {task} belongs to another session")
        );
        let id = self.id("kill");
        self.server
            .call_as("day", &id, "bash_kill", json!({"task_id": task}));
        assert_eq!(
            self.server.text(&id),
            format!("killed background task {task}")
        );
        assert!(
            wait_until(SOON, || live_with_cmdline(&marker).is_empty()),
            "{}: bash_kill left the background task's daemon running",
            self.mode
        );
        self.still_serves("a daemon a background task left");
    }

    /// End of input: the server exits 0 and nothing any call started is left.
    fn end(mut self) {
        self.server.close_input();
        self.server.wait_exit();
        let status = self.server.child.try_wait().expect("try_wait");
        assert_eq!(status.and_then(|s| s.code()), Some(0), "{}", self.mode);
        for marker in &self.markers {
            assert!(
                wait_until(SOON, || live_with_cmdline(marker).is_empty()),
                "{}: processes with {marker} are left",
                self.mode
            );
        }
    }
}

fn kill_marked(marker: &str) {
    for pid in live_with_cmdline(marker) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(wait_until(SOON, || live_with_cmdline(marker).is_empty()));
}

fn every_ending(mut day: Day) {
    day.still_serves("the start");
    day.foreground_timeout_with_term_ignored();
    day.bash_kill_of_a_term_ignoring_task();
    day.cancel_of_a_term_ignoring_call();
    day.timeout_of_a_setsid_escapee();
    day.fork_bomb();
    if day.mode == "cgroup" {
        day.oom_kill();
    }
    day.self_inflicted_sigkill();
    day.drained_straggler();
    day.daemon_that_let_go_of_the_pipes();
    day.daemon_a_background_task_left();
    // Each ending once more, in another order: history, not only the first time, must not matter.
    day.self_inflicted_sigkill();
    day.cancel_of_a_term_ignoring_call();
    day.foreground_timeout_with_term_ignored();
    day.bash_kill_of_a_term_ignoring_task();
    if day.workspace.is_some() {
        // One confined spawning thread per agent session that ran a command (the default one and
        // `day`; `night` only asked for a kill), whatever ended how: none piles up per call.
        let threads = confined_spawning_threads(day.server.child.id());
        assert_eq!(threads, 2, "{}: confined spawning threads", day.mode);
    }
    day.end();
}

/// How many threads of dsh (`pid`) are confined spawning threads (`dsh-confined-spawn`, which
/// `comm` cuts to 15 bytes).
fn confined_spawning_threads(pid: u32) -> usize {
    threads_named(pid, "dsh-confined-sp").len()
}

#[test]
fn a_cgroup_server_serves_after_every_kind_of_ending() {
    let limits = ["--task-max-pids", "64", "--task-max-memory", "256MiB"];
    if let Some(day) = Day::start("cgroup", &limits) {
        every_ending(day);
    }
}

/// The same day under the Landlock sandbox (`workspace-write`): every command is spawned by the
/// session's confined spawning thread, which must live through every ending as the runtime does.
#[test]
fn a_confined_cgroup_server_serves_after_every_kind_of_ending() {
    let workspace = tempfile::tempdir().unwrap();
    let cwd = workspace.path().to_str().unwrap().to_owned();
    let args = [
        "--task-max-pids",
        "64",
        "--task-max-memory",
        "256MiB",
        "--sandbox",
        "workspace-write",
        "--cwd",
        &cwd,
    ];
    if let Some(mut day) = Day::start("cgroup", &args) {
        day.workspace = Some(workspace);
        every_ending(day);
    }
}

#[test]
fn a_subreaper_server_serves_after_every_kind_of_ending() {
    if let Some(day) = Day::start("subreaper", &[]) {
        every_ending(day);
    }
}

#[test]
fn a_group_server_serves_after_every_kind_of_ending() {
    if let Some(day) = Day::start("group", &[]) {
        every_ending(day);
    }
}
