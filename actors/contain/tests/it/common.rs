//! Helpers shared by the integration tests: markers in `/proc/*/cmdline`, bounded waits, pipes.

#![allow(dead_code)]

use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use dsh_contain::{Child, Program, Stdio};
pub use dsh_test_support::wait::wait_until;

/// A marker unique to this test run, to find our processes in `/proc/*/cmdline`.
pub fn marker(name: &str) -> String {
    format!("dshtest{name}{}", dsh_contain::nonce())
}

/// Pids whose command line contains `marker`.
pub fn with_marker(marker: &str) -> Vec<i32> {
    let mut found = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        // Zombies keep no cmdline, so anything found here is alive.
        if cmdline
            .windows(marker.len())
            .any(|w| w == marker.as_bytes())
        {
            found.push(pid);
        }
    }
    found
}

/// SIGKILLs whatever carries `marker` (cleanup after a failed assertion) and asserts none is left.
pub fn assert_none_left(marker: &str) {
    let gone = wait_until(Duration::from_secs(10), || with_marker(marker).is_empty());
    if !gone {
        for pid in with_marker(marker) {
            // SAFETY: kill with a pid and signal.
            unsafe { nix::libc::kill(pid, nix::libc::SIGKILL) };
        }
    }
    assert!(gone, "processes with marker {marker} are left");
}

pub fn pipe() -> (OwnedFd, OwnedFd) {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe")
}

pub fn dev_null() -> OwnedFd {
    std::fs::File::options()
        .read(true)
        .write(true)
        .open("/dev/null")
        .expect("/dev/null")
        .into()
}

/// All three stdio slots on `null` (from [`dev_null`]).
pub fn null_stdio(null: &OwnedFd) -> Stdio<'_> {
    Stdio {
        stdin: null.as_fd(),
        stdout: null.as_fd(),
        stderr: null.as_fd(),
    }
}

pub fn bash(script: &str) -> Program {
    Program::new(
        Path::new("/bin/bash"),
        ["bash", "-c", script],
        [("PATH", "/usr/local/bin:/usr/bin:/bin")],
        None,
    )
    .expect("program")
}

/// Waits for and reaps `child`; returns the raw wait status.
pub fn reap(child: &Child) -> i32 {
    let mut status = 0;
    // SAFETY: waiting for our own child with a valid out-pointer.
    let r = unsafe { nix::libc::waitpid(child.pid, &mut status, 0) };
    assert_eq!(r, child.pid, "waitpid");
    status
}

/// Runs `script` with stdout captured, returning (output, wait status).
pub fn run_capture(
    method: dsh_contain::Method,
    script: &str,
    cgroup: Option<dsh_contain::CgroupTarget<'_>>,
) -> (String, i32) {
    let null = dev_null();
    let (read, write) = pipe();
    let child = dsh_contain::spawn_with(
        method,
        &bash(script),
        Stdio {
            stdin: null.as_fd(),
            stdout: write.as_fd(),
            stderr: null.as_fd(),
        },
        cgroup,
    )
    .expect("spawn");
    drop(write);
    let mut out = String::new();
    std::fs::File::from(read)
        .read_to_string(&mut out)
        .expect("read");
    let status = reap(&child);
    let _ = child.pidfd.as_ref().map(|p| p.as_raw_fd());
    (out, status)
}

/// Host facts, or a printed reason to skip.
pub fn cgroup_host() -> Option<dsh_contain::HostFacts> {
    let facts = dsh_contain::HostFacts::discover();
    match facts.cgroup_ready() {
        Ok(()) => Some(facts),
        Err(why) => {
            eprintln!("SKIP: cgroup containment unavailable here: {why}");
            None
        }
    }
}

/// A `sleep` duration unique to this run (`3000.<digits>`), so the sleeps of one test can be found
/// by their command line.
pub fn sleep_marker() -> String {
    let n = u128::from_str_radix(&dsh_contain::nonce(), 16).unwrap_or(0) % 1_000_000_000;
    format!("3000.{n:09}")
}

/// Starts `script` under bash with `env` added to a minimal environment; stdio on /dev/null.
pub fn spawn_script(
    script: &str,
    env: &[(&str, &str)],
    cgroup: Option<dsh_contain::CgroupTarget<'_>>,
) -> Child {
    let mut vars = vec![("PATH", "/usr/local/bin:/usr/bin:/bin")];
    vars.extend_from_slice(env);
    let program =
        Program::new(Path::new("/bin/bash"), ["bash", "-c", script], vars, None).expect("program");
    let null = dev_null();
    dsh_contain::spawn(&program, null_stdio(&null), cgroup).expect("spawn")
}

/// Every escape route out of the process group, each ending in a `sleep <m>`; `ESCAPEES` of them.
pub fn escapees_script(m: &str) -> String {
    format!(
        "setsid sleep {m} & nohup sleep {m} >/dev/null 2>&1 & (sleep {m} &) ; \
         timeout 300 sleep {m} & set -m; sleep {m} & \
         (trap '' TERM HUP; exec sleep {m}) & \
         sh -c 'sleep {m} & :' ; exit 0"
    )
}

/// Processes `escapees_script` leaves with the marker in their command line (timeout counts too).
pub const ESCAPEES: usize = 8;
