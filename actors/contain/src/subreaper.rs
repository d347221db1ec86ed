//! Containment without cgroups: the runtime is a child subreaper, every task's processes carry an
//! inherited marker, and a `/proc` scan finds (and kills) every live process with it.
//!
//! **Marker.** Each task's environment gets `DSH_TASK=<runtime-nonce>:<task>` ([`Marker`]). The
//! environment is inherited across fork, exec, `setsid`, `nohup`, `timeout` and `set -m` alike, and
//! `/proc/<pid>/environ` shows the environment a process was exec'd with, so the marker survives
//! every route out of the process group. It is not tamper-proof: a command that execs with a
//! cleaned environment (`env -i`, `env -u DSH_TASK`) escapes attribution; the process group kill
//! still reaches it while it stays in the task's group, and nothing else does. The runtime-wide
//! prefix `DSH_TASK=<runtime-nonce>:` selects every task of one runtime (what the watchdog uses).
//!
//! **Kills without pid reuse races.** A scan yields pids; each is opened as a pidfd, its environ is
//! re-read *through that pid* (a reused pid would no longer carry the marker) and only then is it
//! signalled with `pidfd_send_signal`. Scans repeat until one finds nothing, so a process that
//! forked between scan and kill is caught by the next pass.
//!
//! **Reaping adopted orphans.** Orphans re-parent to the runtime and must be reaped, but the process
//! crate reaps its own direct children through pidfds with `waitpid(pid)`, and a `waitpid(-1)` here
//! would steal their statuses. So [`ChildRegistry`] records every direct child, and
//! [`ChildRegistry::reap_orphans`] reaps only zombies whose parent is this process and whose pid is
//! not registered, found by a `/proc/*/stat` scan (a zombie pid cannot be reused before it is
//! reaped). Registration happens under a read lock held from before the spawn until the pid is
//! recorded, and the reaper re-checks each zombie its scan found under the write lock, so a direct
//! child that dies before it is registered is never mistaken for an orphan. The scan itself runs
//! without the lock: spawns wait only while actual orphans are reaped.

use std::collections::HashSet;
use std::io;
use std::sync::{Mutex, RwLock, RwLockReadGuard};

use nix::libc;

use crate::lock_unpoisoned as lock;

/// The environment variable that carries a task's marker.
pub const MARKER_VAR: &str = "DSH_TASK";

/// Makes this process a child subreaper: orphaned descendants re-parent to it instead of init.
pub fn become_subreaper() -> io::Result<()> {
    nix::sys::prctl::set_child_subreaper(true).map_err(io::Error::from)
}

/// Which processes a scan selects.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Marker {
    /// Exactly one task: `DSH_TASK=<runtime>:<task>`.
    Task(String),
    /// Every task of a runtime: entries starting with `DSH_TASK=<runtime>:`.
    Runtime(String),
}

impl Marker {
    /// The marker of `task` in runtime `runtime` (neither may contain `:` or NUL).
    pub fn task(runtime: &str, task: &str) -> Self {
        Marker::Task(format!("{MARKER_VAR}={runtime}:{task}"))
    }

    /// Every task of runtime `runtime`.
    pub fn runtime(runtime: &str) -> Self {
        Marker::Runtime(format!("{MARKER_VAR}={runtime}:"))
    }

    /// The `(name, value)` to put in the task's environment (only for [`Marker::Task`]).
    pub fn env_entry(&self) -> Option<(&str, &str)> {
        match self {
            Marker::Task(entry) => entry.split_once('='),
            Marker::Runtime(_) => None,
        }
    }

    /// Whether a NUL-separated environment block carries this marker.
    pub fn matches(&self, environ: &[u8]) -> bool {
        environ.split(|b| *b == 0).any(|entry| match self {
            Marker::Task(m) => entry == m.as_bytes(),
            Marker::Runtime(p) => entry.starts_with(p.as_bytes()),
        })
    }
}

fn pids() -> impl Iterator<Item = i32> {
    let own = std::process::id() as i32;
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(move |pid| *pid != own)
}

/// Whether `pid` is alive and carries `marker`. Gone processes, zombies (no environment left) and
/// unreadable ones (`EACCES`: another user's) do not match.
fn carries(pid: i32, marker: &Marker) -> bool {
    std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| marker.matches(&env))
}

/// Every live process (other than this one) that carries `marker`.
pub fn find_marked(marker: &Marker) -> Vec<i32> {
    pids().filter(|pid| carries(*pid, marker)).collect()
}

/// Resolves once no live process carries `marker` (the subreaper-mode "all gone"), re-scanning
/// every `interval`. There is no kernel event for this, so it polls; 20–50 ms suits a settle.
pub async fn wait_unmarked(marker: &Marker, interval: std::time::Duration) {
    while !find_marked(marker).is_empty() {
        tokio::time::sleep(interval).await;
    }
}

/// The last pid the kernel handed out in this process's pid namespace
/// (`/proc/sys/kernel/ns_last_pid`; threads take pids too), or `None` where it cannot be read.
pub fn last_allocated_pid() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Whether the process `pid` (a task's first process) can have started any other process: `false`
/// only when no pid at all was handed out in this pid namespace since `pid` itself was, which a
/// `bash -c` that execs its one command leaves true. Every descendant takes a pid of this namespace
/// after its ancestor's, so the answer is sound; the pid counter would have to go once around all
/// of `pid_max` (4 million on 64-bit hosts) and stop exactly on `pid` to fool it. This lets the
/// common end of a command skip the `/proc` scan of [`find_marked`].
pub fn may_have_descendants(pid: i32) -> bool {
    last_allocated_pid() != Some(pid)
}

/// Sends `signal` to every live process carrying `marker`, rescanning until a pass finds none (at
/// most 100 passes). Returns how many signals were delivered.
pub fn kill_marked(marker: &Marker, signal: i32) -> usize {
    let mut sent = 0;
    for _ in 0..100 {
        let found = find_marked(marker);
        if found.is_empty() {
            break;
        }
        let mut progress = false;
        for pid in found {
            if signal_verified(pid, marker, signal) {
                sent += 1;
                progress = true;
            }
        }
        if !progress || signal != libc::SIGKILL {
            // Only SIGKILL is sure to make the next scan smaller; other signals get one pass.
            break;
        }
    }
    sent
}

/// Opens a pidfd for `pid`, checks through it that the process still carries `marker`, and signals
/// it. `false` when it is gone or no longer matches.
pub fn signal_verified(pid: i32, marker: &Marker, signal: i32) -> bool {
    let Ok(pidfd) = crate::pidfd::open(pid) else {
        return false;
    };
    // The pidfd pins the process: if `pid` was reused before the open, the new process is what is
    // checked here, so the kill reaches a process carrying the marker or nothing.
    carries(pid, marker) && crate::pidfd::send_signal(&pidfd, signal)
}

/// The direct children of this process that someone else reaps (see the module docs).
#[derive(Debug, Default)]
pub struct ChildRegistry {
    gate: RwLock<()>,
    direct: Mutex<HashSet<i32>>,
    /// Every direct child ever registered: each leads the session (and group) of its task, so a
    /// zombie in one of these sessions or groups is a task's descendant.
    task_sessions: Mutex<HashSet<i32>>,
    /// Runtimes whose marker identifies a live adopted child as theirs.
    runtimes: Mutex<Vec<Marker>>,
    /// Live children seen carrying a runtime's marker (escapees that started a session of their own):
    /// once they die they are reaped like any other adopted orphan.
    adopted: Mutex<HashSet<i32>>,
}

/// Held from before a spawn until its pid is registered.
#[derive(Debug)]
pub struct SpawnGuard<'a> {
    registry: &'a ChildRegistry,
    _gate: RwLockReadGuard<'a, ()>,
}

impl SpawnGuard<'_> {
    /// Records the direct child `pid`; the reaper will leave it alone until [`ChildRegistry::forget`].
    pub fn register(self, pid: i32) {
        lock(&self.registry.direct).insert(pid);
        lock(&self.registry.task_sessions).insert(pid);
    }
}

impl ChildRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Call before spawning a direct child; [`SpawnGuard::register`] its pid after.
    pub fn spawning(&self) -> SpawnGuard<'_> {
        SpawnGuard {
            registry: self,
            _gate: self.gate.read().unwrap_or_else(|p| p.into_inner()),
        }
    }

    /// Forgets `pid` once its owner has reaped it.
    pub fn forget(&self, pid: i32) {
        lock(&self.direct).remove(&pid);
    }

    /// Whether `pid` is a registered direct child.
    pub fn is_registered(&self, pid: i32) -> bool {
        lock(&self.direct).contains(&pid)
    }

    /// Adds a runtime whose marked processes count as adopted orphans when they become children.
    pub fn add_runtime(&self, marker: Marker) {
        lock(&self.runtimes).push(marker);
    }

    /// Reaps every zombie child of this process that is an adopted orphan of a task, and remembers
    /// live adopted children by their marker. Returns the reaped pids and wait statuses.
    ///
    /// Only a task's descendants are reaped: a zombie in a task's session or group, or one seen alive
    /// with a runtime's marker. A host that embeds dsh keeps its own children (a `Command` it waits
    /// on, with or without a session of its own): reaping one would steal the status its `wait`
    /// expects (it would fail with ECHILD). An escapee that started its own session and died before
    /// any scan saw it alive stays a zombie until this process exits.
    pub fn reap_orphans(&self) -> Vec<(i32, i32)> {
        let own = std::process::id() as i32;
        // The scan runs without the gate so spawns are not held up by it; only zombies found here
        // are looked at again under the gate, where no spawn is between its clone and its
        // registration.
        let candidates: Vec<i32> = pids()
            .filter(|pid| !self.is_registered(*pid))
            .filter(|pid| match child_stat(*pid, own) {
                Some(child) if child.zombie => true,
                Some(_) => {
                    self.remember_if_marked(*pid);
                    false
                }
                None => false,
            })
            .collect();
        if candidates.is_empty() {
            return Vec::new();
        }
        let _gate = self.gate.write().unwrap_or_else(|p| p.into_inner());
        let mut reaped = Vec::new();
        for pid in candidates {
            if self.is_registered(pid) {
                continue;
            }
            // Still an unregistered zombie child: a zombie's pid cannot be reused until it is
            // reaped, so this is the process the scan saw or a newer zombie of ours in its place.
            let Some(child) = child_stat(pid, own).filter(|c| c.zombie) else {
                continue;
            };
            let of_a_task = {
                let sessions = lock(&self.task_sessions);
                sessions.contains(&child.session) || sessions.contains(&child.pgrp)
            };
            if !of_a_task && !lock(&self.adopted).remove(&pid) {
                continue;
            }
            let mut status = 0;
            // SAFETY: waitpid on one specific pid with a valid out-pointer; WNOHANG never blocks.
            if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
                reaped.push((pid, status));
            }
        }
        reaped
    }

    /// Records a live child of ours that carries one of the runtimes' markers.
    fn remember_if_marked(&self, pid: i32) {
        if lock(&self.adopted).contains(&pid) {
            return;
        }
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            return;
        };
        if lock(&self.runtimes).iter().any(|m| m.matches(&environ)) {
            lock(&self.adopted).insert(pid);
        }
    }
}

/// What `/proc/<pid>/stat` says of a child of `parent`.
struct ChildStat {
    zombie: bool,
    pgrp: i32,
    session: i32,
}

/// `/proc/<pid>/stat` of `pid` if its parent is `parent`. The command name may hold spaces and
/// parentheses, so fields are read after the last `)`.
fn child_stat(pid: i32, parent: i32) -> Option<ChildStat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')').map(|(_, r)| r)?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    let ppid = fields.next()?.parse::<i32>().ok()?;
    let pgrp = fields.next()?.parse::<i32>().ok()?;
    let session = fields.next()?.parse::<i32>().ok()?;
    (ppid == parent).then_some(ChildStat {
        zombie: state == "Z",
        pgrp,
        session,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_match_whole_entries_or_the_runtime_prefix() {
        let env = b"PATH=/bin\0DSH_TASK=rt1:7\0HOME=/root\0";
        assert!(Marker::task("rt1", "7").matches(env));
        assert!(!Marker::task("rt1", "70").matches(env));
        assert!(!Marker::task("rt1", "").matches(env));
        assert!(Marker::runtime("rt1").matches(env));
        assert!(!Marker::runtime("rt").matches(env));
        assert!(!Marker::task("rt1", "7").matches(b"XDSH_TASK=rt1:7\0"));
        assert_eq!(
            Marker::task("a", "b").env_entry(),
            Some(("DSH_TASK", "a:b"))
        );
    }

    #[test]
    fn a_process_that_forked_may_have_descendants() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 0 & wait"])
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        assert!(child.wait().unwrap().success());
        assert!(last_allocated_pid().is_some(), "ns_last_pid unreadable");
        assert!(
            may_have_descendants(pid),
            "the shell forked a sleep after itself"
        );
    }
}
