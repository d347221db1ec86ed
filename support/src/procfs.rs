//! What `/proc` says about a pid: alive or not, its parent, its descriptors, threads and status
//! fields.

use std::path::Path;
use std::time::Duration;

use crate::wait::{SOON, poll_until};

/// State letter and parent pid from `/proc/<pid>/stat`, or `None` once the pid is gone. The
/// command name may hold spaces and parentheses, so fields are counted from the last `)`.
pub fn state_and_parent(pid: i32) -> Option<(char, i32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut rest = text[text.rfind(')')? + 1..].split_whitespace();
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Running, sleeping or stopped: anything but gone, a zombie or a dead task.
pub fn is_live(pid: i32) -> bool {
    state_and_parent(pid).is_some_and(|(state, _)| !matches!(state, 'Z' | 'X' | 'x'))
}

/// The calling process's children that are zombies (exited, not yet reaped).
pub fn zombie_children() -> Vec<i32> {
    let me = std::process::id() as i32;
    all_pids()
        .into_iter()
        .filter(|pid| state_and_parent(*pid) == Some(('Z', me)))
        .collect()
}

/// Every pid in `/proc`.
pub fn all_pids() -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// Live (not zombie) processes whose command line contains `needle`: how a test finds the processes
/// it marked with a unique argument (never `kill -0`, which counts zombies and may hit a reused pid).
pub fn live_with_cmdline(needle: &str) -> Vec<i32> {
    all_pids()
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains(needle))
                && is_live(*pid)
        })
        .collect()
}

/// The thread ids of `pid`'s threads named `name` (as `comm` shows it: at most 15 bytes).
pub fn threads_named(pid: impl std::fmt::Display, name: &str) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm"))
                .is_ok_and(|comm| comm.trim_end() == name)
        })
        .filter_map(|task| task.file_name().to_str()?.parse().ok())
        .collect()
}

/// How many descriptors `pid` has open (`"self"` works too).
pub fn open_fds(pid: impl std::fmt::Display) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("read /proc/<pid>/fd")
        .count()
}

/// The number in a `/proc/<pid>/status` line such as `VmHWM:  1234 kB` or `Threads:  5`.
pub fn status_field(pid: impl std::fmt::Display, name: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    let line = status
        .lines()
        .find(|l| l.starts_with(name))
        .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"));
    line.split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unreadable {line:?}"))
}

/// The most descriptors of cgroup files an idle runtime keeps by design: the leaf pool's warm
/// leaves (`dsh_contain::pool::WARM_LEAVES`, 8), each with its directory, its `cgroup.events` and
/// up to two v1 twins' `cgroup.procs`. How many are warm depends on the concurrency seen so far, not
/// on the number of calls, so [`Usage::assert_no_growth`] judges them against this bound instead.
pub const MAX_WARM_CGROUP_FDS: usize = 8 * 4;

/// What a long-running process holds, sampled to show it does not grow with the work it serves.
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    /// Open descriptors, the cgroup files among them included.
    pub fds: usize,
    /// Open descriptors of cgroup files (under `/sys/fs/cgroup`).
    pub cgroup_fds: usize,
    /// Threads.
    pub threads: u64,
    /// Resident set, in KiB.
    pub rss_kib: u64,
}

impl Usage {
    /// Open descriptors other than cgroup files: what must not grow at all.
    pub fn plain_fds(&self) -> usize {
        self.fds - self.cgroup_fds
    }

    /// Asserts that `end`, sampled after `self`, holds no more descriptors or threads than `self`
    /// and at most `max_rss_growth_kib` more resident memory; `what` names the process.
    pub fn assert_no_growth(self, end: Usage, max_rss_growth_kib: u64, what: &str) {
        println!("{what}: after warm-up {self:?}, at the end {end:?}");
        assert!(
            end.plain_fds() <= self.plain_fds(),
            "{what}: descriptors grew: {self:?} → {end:?}"
        );
        assert!(
            end.cgroup_fds <= self.cgroup_fds.max(MAX_WARM_CGROUP_FDS),
            "{what}: cgroup descriptors grew past what the leaf pool keeps warm: {self:?} → {end:?}"
        );
        assert!(
            end.threads <= self.threads,
            "{what}: threads grew: {self:?} → {end:?}"
        );
        assert!(
            end.rss_kib <= self.rss_kib + max_rss_growth_kib,
            "{what}: RSS grew by more than {max_rss_growth_kib} KiB: {self:?} → {end:?}"
        );
    }
}

/// How many of `pid`'s descriptors are cgroup files.
fn cgroup_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|entries| {
            entries
                .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter(|target| target.starts_with("/sys/fs/cgroup"))
                .count()
        })
        .unwrap_or(0)
}

/// `pid`'s descriptors, threads and resident set now.
pub fn usage(pid: u32) -> Usage {
    Usage {
        fds: open_fds(pid),
        cgroup_fds: cgroup_fds(pid),
        threads: status_field(pid, "Threads:"),
        rss_kib: status_field(pid, "VmRSS:"),
    }
}

/// Waits until `pid` is gone or a zombie, failing after [`SOON`].
pub async fn assert_gone(pid: i32) {
    assert!(
        poll_until(SOON, || !is_live(pid)).await,
        "pid {pid} is still alive"
    );
}

/// Waits until none of `pids` is live, failing after `timeout` with the ones still running.
pub fn assert_all_gone(pids: &[i32], timeout: Duration) {
    let gone = crate::wait::wait_until(timeout, || !pids.iter().any(|pid| is_live(*pid)));
    let live: Vec<i32> = pids.iter().copied().filter(|pid| is_live(*pid)).collect();
    assert!(gone, "still running: {live:?}");
}

/// Waits until no live process has `needle` in its command line, failing after `timeout` with the
/// ones still running.
pub fn assert_none_with_cmdline(needle: &str, timeout: Duration) {
    assert!(
        crate::wait::wait_until(timeout, || live_with_cmdline(needle).is_empty()),
        "left running: {:?}",
        live_with_cmdline(needle)
    );
}

/// Waits until a file has content that parses as a pid, failing after [`SOON`].
pub async fn read_pid_file(path: &Path) -> i32 {
    let mut pid = None;
    let filled = poll_until(SOON, || {
        pid = std::fs::read_to_string(path)
            .ok()
            .and_then(|text| text.trim().parse().ok());
        pid.is_some()
    })
    .await;
    assert!(filled, "pid file {} never filled", path.display());
    pid.expect("filled")
}

/// SIGKILLs a leftover pid a test started indirectly, and waits for it to be gone.
pub async fn cleanup_pid(pid: i32) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
    assert_gone(pid).await;
}
