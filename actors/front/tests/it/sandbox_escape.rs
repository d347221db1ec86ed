//! Ways out of `workspace-write`, tried as an attacker would through the `dsh` binary, under each
//! backend (`sandbox_escape::landlock::…` and `sandbox_escape::bwrap::…`; a backend this host lacks
//! is skipped, saying why): capabilities (raw sockets, mounts, namespaces), other processes'
//! `/proc` entries, abstract UNIX sockets, other processes' limits and scheduling (the seccomp
//! filter), UDP and raw IP under `--network deny`; and the everyday work the same confinement must
//! still let through. Every command carries a unique marker, and each test checks that nothing it
//! started is left running.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::path::Path;
use std::process::Command;

use dsh_test_support::procfs::live_with_cmdline;
use dsh_test_support::wait::wait_until;
use serde_json::json;

use crate::jsonl_server::{SOON, Server, bash, unique_marker};

/// The backend a test runs under.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Backend {
    Landlock,
    Bwrap,
}

impl Backend {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Backend::Landlock => "landlock",
            Backend::Bwrap => "bwrap",
        }
    }

    pub(crate) fn choice(self) -> dsh::BackendChoice {
        match self {
            Backend::Landlock => dsh::BackendChoice::Landlock,
            Backend::Bwrap => dsh::BackendChoice::Bwrap,
        }
    }

    /// Whether this backend confines here; prints why not.
    pub(crate) fn usable(self) -> bool {
        let provider = dsh::LocalSandboxProvider::new(dsh::LocalSandboxConfig {
            backend: self.choice(),
            ..Default::default()
        })
        .unwrap();
        match provider.verdict() {
            Ok(_) => true,
            Err(reason) => {
                eprintln!("skipped: {} is not usable here: {reason}", self.name());
                false
            }
        }
    }
}

/// A workspace outside `/tmp`.
pub(crate) fn workspace() -> tempfile::TempDir {
    dsh_test_support::scratch::outside_tmp("dsh-escape-", Path::new(env!("CARGO_TARGET_TMPDIR")))
}

/// A marker nobody else uses, for command lines and names.
pub(crate) fn marker() -> String {
    format!("dsh-escape-{}", unique_marker(7).replace('.', "-"))
}

/// A workspace and a marker for a case on `backend`; `None` (the case is skipped) when it is not
/// usable here.
pub(crate) fn setup(backend: Backend) -> Option<(tempfile::TempDir, String)> {
    backend.usable().then(|| (workspace(), marker()))
}

/// The flags that confine dsh's commands to `mode` under `backend` in `ws`.
fn confined<'a>(backend: Backend, mode: &'a str, ws: &'a Path) -> [&'a str; 6] {
    let cwd = ws.to_str().unwrap();
    [
        "--sandbox",
        mode,
        "--sandbox-backend",
        backend.name(),
        "--cwd",
        cwd,
    ]
}

/// `dsh run --sandbox workspace-write` under `backend` in `ws`, with `extra` flags; what it printed.
pub(crate) fn run(backend: Backend, ws: &Path, extra: &[&str], command: &str) -> String {
    run_in(backend, "workspace-write", ws, extra, command)
}

/// [`run`] under the sandbox mode `mode`.
pub(crate) fn run_in(
    backend: Backend,
    mode: &str,
    ws: &Path,
    extra: &[&str],
    command: &str,
) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .arg("run")
        .args(confined(backend, mode, ws))
        .args(extra)
        .arg("--")
        .arg(command)
        .output()
        .expect("run dsh");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `dsh jsonl` confined to `workspace-write` under `backend` in `ws`, with `extra` flags.
pub(crate) fn confined_server(backend: Backend, ws: &Path, extra: &[&str]) -> Server {
    confined_server_without_env(backend, ws, extra, &[])
}

/// [`confined_server`] with the variables `names` taken out of the server's environment.
pub(crate) fn confined_server_without_env(
    backend: Backend,
    ws: &Path,
    extra: &[&str],
    names: &[&str],
) -> Server {
    let mut args = confined(backend, "workspace-write", ws).to_vec();
    args.extend_from_slice(extra);
    Server::start_without_env(&args, names).unwrap()
}

/// Nothing whose command line holds `marker` is left running.
pub(crate) fn assert_nothing_left(marker: &str) {
    assert!(
        wait_until(SOON, || live_with_cmdline(marker).is_empty()),
        "left running: {:?}",
        live_with_cmdline(marker)
    );
}

/// Stops `server` and checks that nothing whose command line holds `marker` is left running.
fn finish(server: Server, marker: &str) {
    server.finish();
    assert_nothing_left(marker);
}

/// The hex value of `/proc/self/status`'s `field` as the command printed it.
fn status_value(printed: &str, field: &str) -> u64 {
    let line = printed
        .lines()
        .find(|l| l.starts_with(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in {printed}"));
    let value = line.split_whitespace().nth(1).unwrap();
    u64::from_str_radix(value, 16)
        .or_else(|_| value.parse())
        .unwrap()
}

pub(crate) fn commands_hold_no_capabilities(backend: Backend) {
    let Some((ws, m)) = setup(backend) else {
        return;
    };
    let printed = run(
        backend,
        ws.path(),
        &[],
        &format!("cat /proc/self/status # {m}"),
    );
    for field in ["CapEff", "CapPrm", "CapInh", "CapAmb"] {
        assert_eq!(status_value(&printed, field), 0, "{field}: {printed}");
    }
    assert_eq!(status_value(&printed, "NoNewPrivs"), 1, "{printed}");
    if let Backend::Landlock = backend {
        // bubblewrap leaves the bounding set full (docs/ARCHITECTURE.md, "Sandbox"); the spawn
        // clears it.
        assert_eq!(status_value(&printed, "CapBnd"), 0, "{printed}");
    }
    assert_nothing_left(&m);
}

pub(crate) fn raw_sockets_mounts_and_namespaces_are_refused(backend: Backend) {
    let Some((ws, m)) = setup(backend) else {
        return;
    };
    std::fs::create_dir(ws.path().join("mnt")).unwrap();
    let command = format!(
        "python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)' \
           && echo RAW-OPENED; \
         mount -t tmpfs x mnt && echo MOUNTED; \
         unshare -m true && echo UNSHARED; \
         unshare -n true && echo NET-UNSHARED; \
         echo done # {m}"
    );
    let printed = run(backend, ws.path(), &[], &command);
    for escaped in ["RAW-OPENED", "MOUNTED", "UNSHARED", "NET-UNSHARED"] {
        assert!(!printed.contains(escaped), "{escaped}: {printed}");
    }
    assert!(printed.contains("done"), "{printed}");
    assert!(printed.contains("Operation not permitted"), "{printed}");
    assert_nothing_left(&m);
}

pub(crate) fn everyday_work_in_the_workspace_still_passes(backend: Backend) {
    let Some((ws, m)) = setup(backend) else {
        return;
    };
    // A file the (root) test made with owner-only bits: its owner may still write it.
    let own = ws.path().join("owned.txt");
    std::fs::write(&own, "first\n").unwrap();
    std::fs::set_permissions(&own, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let command = format!(
        "set -e; echo second >> owned.txt; \
         git init -q repo && cd repo && echo hi > f && git add f \
         && git -c user.email=t@example.invalid -c user.name=t commit -qm first && git log --oneline | wc -l; \
         python3 -c 'print(6 * 7)'; echo ok # {m}"
    );
    let printed = run(backend, ws.path(), &[], &command);
    assert!(printed.contains("1\n42\nok\n"), "{printed}");
    assert_eq!(std::fs::read_to_string(&own).unwrap(), "first\nsecond\n");
    assert_nothing_left(&m);
}

pub(crate) fn no_process_outside_the_sandbox_shows_its_environment_or_descriptors(
    backend: Backend,
) {
    let Some((ws, m)) = setup(backend) else {
        return;
    };
    // A credential dsh scrubs from its commands' environment: only its own environ holds it. dsh
    // (the command's parent under Landlock) and the agent (this test) are outside the sandbox;
    // under bubblewrap the parent is bubblewrap's own first process, inside it. What a descriptor
    // of theirs is (its link) and their memory stay hidden; under Landlock the descriptor numbers
    // themselves can still be listed (the directory's owner bits, not ptrace, guard that).
    let secret = format!("{m}-secret");
    let mut server = Server::start_with_env(
        &confined(backend, "workspace-write", ws.path()),
        &[("OPENAI_API_KEY", &secret)],
    )
    .unwrap();
    let dsh_pid = server.child.id();
    let agent_pid = std::process::id();
    let command = format!(
        "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c -- {secret}; \
         cat /proc/{dsh_pid}/environ /proc/{agent_pid}/environ 2>/dev/null \
           | tr '\\0' '\\n' | grep -c =; \
         for fd in /proc/{dsh_pid}/fd/* /proc/{agent_pid}/fd/*; do readlink $fd; done 2>/dev/null | grep -c .; \
         head -c 16 /proc/{dsh_pid}/mem 2>/dev/null | wc -c; \
         echo done # {m}"
    );
    server.call("peek", "bash", bash(&command, json!({})));
    let printed = server.text("peek");
    let counts: Vec<&str> = printed.lines().take(4).collect();
    assert_eq!(counts, ["0", "0", "0", "0"], "{printed}");
    assert!(printed.contains("done"), "{printed}");
    finish(server, &m);
}

pub(crate) fn abstract_sockets_outside_the_sandbox_are_refused(backend: Backend) {
    let Some((ws, m)) = setup(backend) else {
        return;
    };
    let name = format!("{m}-socket");
    let listener =
        UnixListener::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
    listener.set_nonblocking(true).unwrap();
    let command = format!(
        "python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect(\"\\0{name}\"); print(\"CONNECTED\")'"
    );
    // With the network allowed (the default) bubblewrap shares the host's network namespace, where
    // abstract names live: the socket gate refuses a listener outside the command's sandbox.
    let printed = run(backend, ws.path(), &[], &command);
    assert!(!printed.contains("CONNECTED"), "{printed}");
    assert!(
        listener.accept().is_err(),
        "the connection reached the listener"
    );
    // Unconfined, the same connection works: the test's listener is reachable.
    let out = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .args(["run", "--sandbox", "danger-full-access", "--", &command])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "CONNECTED\n");
    assert!(listener.accept().is_ok());
    assert_nothing_left(&m);
}

/// `/proc/<pid>/limits`' open-files line and `/proc/<pid>/stat`'s nice value, for `pid` outside.
fn limits_and_nice(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let nofile = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .to_owned();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_name = &stat[stat.rfind(')').unwrap() + 2..];
    // Fields from the state on: nice is field 19 of the whole line, the 17th after the name.
    let nice = after_name.split_whitespace().nth(16).unwrap().to_owned();
    (nofile, nice)
}

pub(crate) fn other_processes_limits_and_scheduling_are_refused(backend: Backend) {
    let Some((ws, m)) = setup(backend) else {
        return;
    };
    let mut server = Server::start(&confined(backend, "workspace-write", ws.path())).unwrap();
    let dsh_pid = server.child.id();
    let before = limits_and_nice(dsh_pid);
    // `$PPID` is dsh under Landlock, bubblewrap's first process (inside the sandbox) under
    // bubblewrap, where dsh's pid does not exist: both are refused by the filter alike.
    let command = format!(
        "prlimit --pid $PPID --nofile=6:6; echo prlimit=$?; \
         renice -n 5 -p $PPID; echo renice=$?; \
         taskset -p 1 $PPID; echo taskset=$?; \
         ionice -c3 -p $PPID; echo ionice=$?; \
         python3 -c 'import os; os.sched_setaffinity(os.getppid(), {{0}})'; echo affinity=$?; \
         echo done # {m}"
    );
    server.call("meddle", "bash", bash(&command, json!({})));
    let printed = server.text("meddle");
    for tool in ["prlimit", "renice", "taskset", "ionice", "affinity"] {
        assert!(
            printed.contains(&format!("{tool}=1\n")),
            "{tool} was not refused: {printed}"
        );
    }
    assert!(
        printed.matches("Operation not permitted").count() >= 5,
        "{printed}"
    );
    assert_eq!(limits_and_nice(dsh_pid), before);
    // dsh keeps serving.
    server.call(
        "after",
        "bash",
        bash(&format!("echo still here # {m}"), json!({})),
    );
    assert_eq!(server.text("after"), "still here\n");
    finish(server, &m);
}

pub(crate) fn a_command_may_change_its_own_limits_and_niceness(backend: Backend) {
    let Some((ws, m)) = setup(backend) else {
        return;
    };
    // "Myself" is pid 0 to the filter: `ulimit`, `nice` and `taskset`/`ionice` of a new command
    // work; naming its own pid (`renice -p $$`) is refused like any other pid (the filter cannot
    // compare with the caller's pid: docs/ARCHITECTURE.md, "Sandbox").
    let command = format!(
        "ulimit -n 100 && ulimit -n; \
         nice -n 5 cut -d' ' -f19 /proc/self/stat; \
         taskset 1 true && echo taskset-ok; \
         ionice -c3 true && echo ionice-ok; \
         renice -n 5 -p $$ >/dev/null 2>&1; echo own-renice=$?; \
         echo done # {m}"
    );
    let printed = run(backend, ws.path(), &[], &command);
    assert!(
        printed.starts_with("100\n5\ntaskset-ok\nionice-ok\nown-renice=1\ndone\n"),
        "{printed}"
    );
    assert_nothing_left(&m);
}

pub(crate) fn network_deny_also_stops_udp_and_raw_ip(backend: Backend) {
    let Some((ws, m)) = setup(backend) else {
        return;
    };
    let command = format!(
        "python3 -c '
import socket
for family in (socket.AF_INET, socket.AF_INET6):
    for kind in (socket.SOCK_DGRAM, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC, socket.SOCK_RAW):
        try:
            socket.socket(family, kind)
            print(\"opened\", family, kind)
        except PermissionError:
            print(\"refused\")
socket.socket(socket.AF_INET, socket.SOCK_STREAM)
print(\"tcp socket made\")
'; echo done # {m}"
    );
    let printed = run(backend, ws.path(), &["--network", "deny"], &command);
    assert_eq!(
        printed,
        format!("{}tcp socket made\ndone\n", "refused\n".repeat(6)),
        "{printed}"
    );
    // With the network allowed, UDP works.
    let udp = "python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM); print(\"udp ok\")'";
    assert_eq!(run(backend, ws.path(), &[], udp), "udp ok\n");
    assert_nothing_left(&m);
}

/// A daemon an earlier call left running with its output sent elsewhere (`nohup … > log 2>&1 &`,
/// how agents start dev servers) no longer holds the call's pipes, yet it is named in that call's
/// reply and becomes the caller's task: a later confined command may not signal it (each command is
/// a sandbox of its own), `bash_kill` of that task stops it. Under bubblewrap it ends with its
/// command's pid namespace, so nothing is left and nothing is named.
fn a_daemon_an_earlier_call_left_is_stopped_with_bash_kill(backend: Backend) {
    let Some((ws, m)) = setup(backend) else {
        return;
    };
    let mut server = confined_server(backend, ws.path(), &[]);
    let daemon =
        format!("nohup bash -c 'exec -a {m}-daemon sleep 600' > daemon.log 2>&1 & echo started");
    server.call("start", "bash", bash(&daemon, json!({})));
    let reply = server.reply("start");
    let text = reply["text"].as_str().unwrap_or_default().to_owned();
    if matches!(backend, Backend::Bwrap) {
        assert_eq!(text, "started\n");
        assert_nothing_left(&m);
        server.finish();
        return;
    }
    let (pid, task) = named_daemon(&reply, "started\n", &m);
    a_later_command_cannot_signal(&mut server, pid);
    server.call("stop", "bash_kill", json!({"task_id": task}));
    assert_eq!(
        server.text("stop"),
        format!("killed background task {task}")
    );
    assert_nothing_left(&m);
    server.call("after", "bash", bash("echo after", json!({})));
    assert_eq!(server.text("after"), "after\n");
    server.finish();
    assert_nothing_left(&m);
}

/// The same for a daemon a background task left: the task ends `completed`, its end names the
/// daemon as a new task of the caller (structured too), a later confined command may not signal
/// it, and that task's `bash_kill` stops it. Before, the background task's end said nothing and a
/// `bash_kill` of it answered `had already finished`: the daemon ran until shutdown.
fn a_daemon_a_background_task_left_is_stopped_with_bash_kill(backend: Backend) {
    let Some((ws, m)) = setup(backend) else {
        return;
    };
    let mut server = confined_server(backend, ws.path(), &[]);
    let daemon =
        format!("nohup bash -c 'exec -a {m}-daemon sleep 600' > daemon.log 2>&1 & echo started");
    let bg = server.start_background("start", &daemon);
    server.call(
        "end",
        "bash_output",
        json!({"task_id": bg, "wait": true, "timeout_ms": 60000}),
    );
    let reply = server.reply("end");
    let text = reply["text"].as_str().unwrap_or_default().to_owned();
    let ended = "started\n[status: completed, exit code: 0]";
    if matches!(backend, Backend::Bwrap) {
        assert_eq!(text, ended);
        assert_nothing_left(&m);
        server.finish();
        return;
    }
    let (pid, task) = named_daemon(&reply, &format!("{ended}\n"), &m);
    assert_ne!(task, bg);
    a_later_command_cannot_signal(&mut server, pid);
    // A kill of the ended task says what it left, and how to stop that.
    server.call("ended", "bash_kill", json!({"task_id": bg}));
    let ended_kill = server.text("ended");
    assert!(
        ended_kill.starts_with(&format!(
            "task {bg} had already finished\n[left running: pid {pid}"
        )),
        "{ended_kill}"
    );
    assert!(
        ended_kill.ends_with(&format!("; stop it with bash_kill {task}]")),
        "{ended_kill}"
    );
    server.call("stop", "bash_kill", json!({"task_id": task}));
    assert_eq!(
        server.text("stop"),
        format!("killed background task {task}")
    );
    assert_nothing_left(&m);
    server.call(
        "gone",
        "bash_output",
        json!({"task_id": task, "wait": true}),
    );
    assert!(server.text("gone").ends_with("[status: killed]"));
    server.call("after", "bash", bash("echo after", json!({})));
    assert_eq!(server.text("after"), "after\n");
    server.finish();
    assert_nothing_left(&m);
}

/// The pid and task id of the `[left running: pid <pid> …; stop it with bash_kill <task>]` line that
/// follows `before` in `reply`: the pid is the daemon's (`<m>-daemon`), and the structured result
/// names both. Named by pid: its command line is whatever it was when the command ended (a daemon
/// caught between its fork and its `exec` shows the shell's, or none in the middle of the `exec`).
fn named_daemon(reply: &serde_json::Value, before: &str, m: &str) -> (i32, String) {
    let text = reply["text"].as_str().unwrap_or_default();
    let (pid, task) = text
        .strip_prefix(&format!("{before}[left running: pid "))
        .and_then(|rest| {
            let digits = rest.find(|c: char| !c.is_ascii_digit())?;
            let task = rest.rsplit_once("; stop it with bash_kill ")?.1;
            Some((
                rest[..digits].parse::<i32>().ok()?,
                task.strip_suffix(']')?.to_owned(),
            ))
        })
        .unwrap_or_else(|| panic!("the daemon is not named: {text:?}"));
    assert!(
        wait_until(SOON, || live_with_cmdline(&format!("{m}-daemon")) == [pid]),
        "the daemon is not pid {pid}: {text}"
    );
    assert_eq!(
        reply["structured"]["left_running"],
        json!({"task_id": task, "pids": [pid]})
    );
    (pid, task)
}

/// The host's devices stay out of sight: a confined command's `/dev` holds `null`, `zero`, `full`,
/// `random`, `urandom`, `tty`, `ptmx`, `pts`, `shm` and the `fd` links, and none of the host's
/// consoles (`/dev/console`, `/dev/tty<N>`, `/dev/vcs*`: what is on their screens), input devices,
/// sound and video devices, disks or `/dev/kmsg`; what it keeps still works.
pub(crate) fn the_hosts_devices_are_hidden(backend: Backend) {
    let Some((ws, m)) = setup(backend) else {
        return;
    };
    let candidates = [
        "/dev/console",
        "/dev/tty0",
        "/dev/tty1",
        "/dev/vcs",
        "/dev/vcsa",
        "/dev/vcs1",
        "/dev/kmsg",
        "/dev/input",
        "/dev/snd",
        "/dev/video0",
        "/dev/sda",
        "/dev/vda",
        "/dev/nvme0n1",
        "/dev/kvm",
        "/dev/fuse",
        "/dev/mem",
        "/dev/ttyS0",
        "/dev/hidraw0",
        "/dev/loop0",
    ];
    let present: Vec<&str> = candidates
        .into_iter()
        .filter(|p| std::fs::symlink_metadata(p).is_ok())
        .collect();
    assert!(
        present.contains(&"/dev/console"),
        "no host console to hide: {present:?}"
    );
    let probes: String = present
        .iter()
        .map(|p| format!("test -e {p} && echo VISIBLE {p}; "))
        .collect();
    let command = format!(
        "{probes} ls /dev | tr '\\n' ' '; echo; \
         echo x > /dev/null && echo null-ok; head -c 4 /dev/urandom | wc -c; cat <(echo fd-ok); \
         echo done # {m}"
    );
    let printed = run(backend, ws.path(), &[], &command);
    assert!(!printed.contains("VISIBLE"), "{printed}");
    let listed: Vec<&str> = printed
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    for kept in [
        "null", "zero", "urandom", "random", "tty", "ptmx", "pts", "shm", "fd",
    ] {
        assert!(listed.contains(&kept), "{kept} is missing: {printed}");
    }
    assert!(listed.len() <= 16, "more than the minimal /dev: {printed}");
    assert!(printed.contains("null-ok\n4\nfd-ok\ndone"), "{printed}");
    assert_nothing_left(&m);
}

/// `/proc/<pid>/task/<tid>/status`'s `field`, as text.
fn task_status(pid: u32, tid: &str, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in {status}"))
        .trim()
        .to_owned()
}

/// Under Landlock, a session's commands are spawned by a thread of dsh that is confined as they
/// are but stays outside their Landlock domains (`dsh_contain::confined_thread`). A
/// command that finds it among dsh's threads can neither signal it (`tgkill`, even `SIGKILL`), trace
/// it, read its environment or memory, nor change its limits or priority; dsh keeps serving. The
/// thread holds no capability, no new privileges and the filter; dsh's own main thread keeps its
/// capabilities.
#[test]
fn the_confined_spawning_thread_is_out_of_a_commands_reach() {
    let Some((ws, m)) = setup(Backend::Landlock) else {
        return;
    };
    let mut server =
        Server::start(&confined(Backend::Landlock, "workspace-write", ws.path())).unwrap();
    let dsh_pid = server.child.id();
    server.call(
        "first",
        "bash",
        bash(&format!("echo first # {m}"), json!({})),
    );
    assert_eq!(server.text("first"), "first\n");
    let spawner: Vec<String> = dsh_test_support::procfs::threads_named(dsh_pid, "dsh-confined-sp")
        .iter()
        .map(u32::to_string)
        .collect();
    assert_eq!(
        spawner.len(),
        1,
        "dsh's confined spawning threads: {spawner:?}"
    );
    let tid = &spawner[0];
    assert_eq!(task_status(dsh_pid, tid, "CapEff"), "0000000000000000");
    assert_eq!(task_status(dsh_pid, tid, "CapBnd"), "0000000000000000");
    assert_eq!(task_status(dsh_pid, tid, "NoNewPrivs"), "1");
    assert_eq!(task_status(dsh_pid, tid, "Seccomp"), "2");
    let main = dsh_pid.to_string();
    assert_eq!(
        task_status(dsh_pid, &main, "Seccomp"),
        "0",
        "dsh itself is filtered"
    );
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { nix::libc::geteuid() } == 0 {
        assert_ne!(
            task_status(dsh_pid, &main, "CapEff"),
            "0000000000000000",
            "dsh itself lost its capabilities"
        );
    }
    let probe = ws.path().join("probe.py");
    std::fs::write(
        &probe,
        r#"import ctypes, errno, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
pid, tid = int(sys.argv[1]), int(sys.argv[2])
def said(ret):
    return "ok" if ret == 0 else errno.errorcode.get(ctypes.get_errno(), "?")
print("tgkill", said(libc.syscall(234, pid, tid, signal.SIGKILL)))
print("ptrace", said(libc.ptrace(16, tid, None, None)))
for name in ("environ", "mem", "stack"):
    try:
        open(f"/proc/{pid}/task/{tid}/{name}", "rb").read(8)
        print(name, "read")
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, "?"))
"#,
    )
    .unwrap();
    let command = format!(
        "python3 probe.py {dsh_pid} {tid}; \
         prlimit --pid {tid} --nofile=6:6; echo prlimit=$?; \
         renice -n 5 -p {tid}; echo renice=$?; \
         echo done # {m}"
    );
    server.call("probe", "bash", bash(&command, json!({})));
    let printed = server.text("probe");
    for refused in [
        "tgkill EPERM",
        "ptrace EPERM",
        "environ EACCES",
        "mem EACCES",
        "stack EACCES",
        "prlimit=1",
        "renice=1",
    ] {
        assert!(printed.contains(refused), "not {refused}: {printed}");
    }
    assert!(printed.contains("done"), "{printed}");
    // dsh and its spawning thread live on: the next command runs, from the same thread.
    server.call(
        "after",
        "bash",
        bash(&format!("echo after # {m}"), json!({})),
    );
    assert_eq!(server.text("after"), "after\n");
    assert_eq!(task_status(dsh_pid, tid, "Name"), "dsh-confined-sp");
    finish(server, &m);
}

/// A later command is a sandbox of its own: it may not signal `pid`, another call's daemon.
fn a_later_command_cannot_signal(server: &mut Server, pid: i32) {
    server.call("kill", "bash", bash(&format!("kill {pid}"), json!({})));
    let refused = server.text("kill");
    assert!(refused.contains("Operation not permitted"), "{refused}");
}

/// One `#[test]` per backend for each check named (this module's, and `sandbox_workflows`'), each
/// a function of the calling module taking a [`Backend`].
macro_rules! under_each_backend {
    ($($check:ident),* $(,)?) => {
        mod landlock {
            $(#[test]
            fn $check() {
                super::$check(super::Backend::Landlock);
            })*
        }
        mod bwrap {
            $(#[test]
            fn $check() {
                super::$check(super::Backend::Bwrap);
            })*
        }
    };
}
pub(crate) use under_each_backend;

under_each_backend!(
    commands_hold_no_capabilities,
    raw_sockets_mounts_and_namespaces_are_refused,
    everyday_work_in_the_workspace_still_passes,
    no_process_outside_the_sandbox_shows_its_environment_or_descriptors,
    abstract_sockets_outside_the_sandbox_are_refused,
    other_processes_limits_and_scheduling_are_refused,
    a_command_may_change_its_own_limits_and_niceness,
    network_deny_also_stops_udp_and_raw_ip,
    a_daemon_an_earlier_call_left_is_stopped_with_bash_kill,
    a_daemon_a_background_task_left_is_stopped_with_bash_kill,
    the_hosts_devices_are_hidden,
);
