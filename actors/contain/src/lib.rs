//! Kernel-facing containment primitives for dsh: a task is all of its descendants.
//!
//! - [`host`]: what the host gives (cgroup mounts, delegation, subreaper, pidfd, `clone3`), for
//!   `dsh doctor` and `--containment auto`;
//! - [`cgroup`] and [`pool`]: the runtime-owned cgroup tree with one leaf per process, kill, "all
//!   gone", limits, OOM detection, and recycling of emptied leaves;
//! - [`spawn`](mod@spawn): starting a child in a new session with a clean signal state, only fds 0–2, and
//!   inside its cgroup leaf before it can fork;
//! - [`subreaper`]: without cgroups, the runtime adopts escaped descendants and attributes them by
//!   an inherited environment marker; [`census`]: one `/proc` walk that answers for many tasks;
//! - [`watchdog`]: a small process that kills everything when the runtime dies without goodbye;
//! - [`landlock`]: Landlock rulesets built in the parent and applied by the spawned child to itself
//!   right before exec (the sandbox executor's in-spawn confinement); [`seccomp`]: the filter that
//!   keeps a confined command's hands off other processes' limits and scheduling (and off UDP and
//!   raw IP under `--network deny`); [`confine`]: how the spawn applies both, after dropping every
//!   capability (`caps.rs`), or hands the filter to bubblewrap; [`mountns`]: the read-only mount
//!   namespace the Landlock child enters first, for the metadata Landlock does not mediate;
//!   [`netns`]: the runtime's own network namespace with only loopback, which confined children
//!   join (`--network loopback`); [`sockgate`]: every `connect` of a confined command made by dsh
//!   after a check, so no Unix socket outside its sandbox is reached;
//! - [`reap`]: waiting for a child's exit through its pidfd and reaping it only when told;
//!   [`orphans`]: the process-wide registry of direct children and the reaper of adopted orphans;
//!   [`rlimit`]: the open-files limit children start with;
//! - [`pages`]: page-backed byte buffers (a private anonymous mapping), for the process crate's
//!   output tails.
//!
//! Every `unsafe` block of dsh's process layer is in this crate, each with a note on why it holds,
//! so the crates above it are safe Rust. Nothing here knows about actors or tasks: the process manager
//! decides when to call what. Its own threads: the orphan reaper, the socket gate (`dsh-sockgate`),
//! and one confined spawning thread per Landlock policy and session in use
//! ([`confined_thread`]).
//!
//! ## How the process manager uses it
//!
//! - **Start-up:** [`HostFacts::discover`]; resolve `--containment` with [`HostFacts::auto_mode`] /
//!   [`HostFacts::check_mode`] (an error string says why a requested mode is impossible) and the
//!   limits with [`HostFacts::pids_limit`] / [`HostFacts::memory_limit`]; log the mode. Start the
//!   [`watchdog::Watchdog`] (`dsh __watchdog` calls [`watchdog::watchdog_main`] on fd 0) and
//!   register the spill directory; await its [`watchdog::ExitNotice`], and when it fires
//!   [`watchdog::Watchdog::reap_if_exited`] and start a new one told everything still live. Cgroup mode: [`CgroupTree::create`] with the requested limits,
//!   register [`CgroupTree::path`] and [`CgroupTree::v1_paths`], keep a [`LeafPool`]. Subreaper
//!   mode: [`subreaper::become_subreaper`], register the runtime nonce with the process-wide
//!   [`orphans::registry`], and start [`orphans::reap_on_sigchld`] (it calls
//!   [`subreaper::ChildRegistry::reap_orphans`] on SIGCHLD).
//! - **Spawn:** build a [`Program`] (resolved path, argv, the child's whole environment including
//!   `DSH_TASK` in subreaper mode, cwd); [`spawn()`](fn@spawn) with stdio fds and, in cgroup mode,
//!   `Some(leaf.target())` from [`LeafPool::acquire`]. The returned [`Child`] has the pid (= pgid =
//!   sid) and a pidfd for the [`reap::ExitWatcher`]. Every spawn holds
//!   [`subreaper::ChildRegistry::spawning`] of [`orphans::registry`] across the spawn and
//!   `register`s the pid (the exit watcher `forget`s it after reaping); subreaper and group mode send
//!   `Registration::Group(pid)` to the watchdog.
//! - **Kill:** SIGTERM to the group; at the grace's end [`Leaf::kill`] (cgroup) or
//!   `kill(-pgid, SIGKILL)` plus [`subreaper::kill_marked`] with the task's marker (subreaper).
//! - **Settle:** the shell's exit is not the end: await [`Leaf::wait_empty`] (cgroup) or ask
//!   [`census::Census::take`] until nothing of the task is alive (subreaper and group: the process
//!   crate batches the questions of every task into one census); then [`Leaf::oom_kills`] says whether
//!   the kernel killed for memory; then [`LeafPool::release`].
//! - **Shutdown:** kill every leaf (or [`CgroupTree::destroy`]) / every marker of the runtime, then
//!   [`watchdog::Watchdog::goodbye`]. Dying without it makes the watchdog do the same.
#![deny(missing_docs)]

#[cfg(not(target_os = "linux"))]
compile_error!("dsh runs on Linux only: it is built on cgroups, pidfds, clone3 and Landlock");

pub(crate) mod caps;
pub mod census;
pub mod cgroup;
pub mod confine;
pub mod confined_thread;
pub mod devpts;
pub mod error;
pub mod events;
pub mod host;
pub mod input_wait;
pub mod landlock;
pub mod mountinfo;
pub mod mountns;
pub mod netns;
mod openat2;
pub mod orphans;
pub mod pages;
pub mod pidfd;
pub mod pool;
pub mod private_dir;
pub mod pty;
pub mod reap;
pub mod rlimit;
pub mod seccomp;
pub mod sockgate;
pub mod spawn;
pub mod subreaper;
pub mod watchdog;

pub use cgroup::{CgroupTarget, CgroupTree, Leaf, Limits, Spent};
pub use error::{Error, Result};
pub use host::{HostFacts, LimitSource, Mode, UnknownMode};
pub use pool::{LeafPool, Released};
pub use spawn::{
    Child, ControllingTerminal, Method, Program, SpawnError, Stdio, spawn, spawn_with,
};

/// A value unique to this process and call (time, pid and a counter), for names in shared
/// namespaces such as cgroup directories and markers.
pub fn nonce() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{SystemTime, UNIX_EPOCH};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(
        "{:x}",
        nanos ^ (u64::from(std::process::id()) << 40) ^ n.rotate_left(17)
    )
}

/// A mutex's guard, poisoned or not: the crate's tables (the subreaper's sets, the socket gate's
/// connects in progress) change by single inserts and removes, which a panic cannot leave half-done.
pub(crate) fn lock_unpoisoned<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
