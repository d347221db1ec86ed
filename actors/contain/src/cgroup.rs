//! The runtime's cgroup tree: one parent the runtime owns, one leaf per process.
//!
//! Layout (`<own>` is the runtime's own cgroup in each hierarchy, from `/proc/self/cgroup`):
//! ```text
//! v2:          <own>/dsh-<pid>-<nonce>/p<slot>-<gen>     kill, "all gone", and limits on pure v2
//! v1 pids:     <own>/dsh-<pid>-<nonce>/p<slot>-<gen>     pids.max       (hybrid hosts, if asked)
//! v1 memory:   <own>/dsh-<pid>-<nonce>/p<slot>-<gen>     memory.limit_in_bytes (hybrid, if asked)
//! ```
//! The runtime itself stays where it is and no process ever lives in the `dsh-…` parent, so the v2
//! "no internal processes" rule holds for the tree. On a controller-less v2 hierarchy (hybrid hosts)
//! the rule does not bite at all. On pure v2, limits need `+pids`/`+memory` in the `subtree_control`
//! of `<own>` and of the parent; a non-root `<own>` that holds processes refuses that (`EBUSY`), so
//! [`CgroupTree::create`] then moves the runtime into a leaf `<own>/dsh-runtime-<pid>` of its own and
//! retries. That is the one place the runtime moves itself, and only when v2 limits are asked for.
//! Create the tree before starting the watchdog, so the watchdog is born in the runtime's leaf and
//! does not make `<own>` an interior node with a process. (Not exercised here: this host has no v2
//! controllers. `dsh-runtime-<pid>` holds the runtime itself, so it outlives the runtime; its
//! removal is left to whoever owns `<own>`, e.g. systemd removing the scope.)
//!
//! The v1 leaves hold the same processes as the v2 leaf (the child joins them before exec, see
//! `spawn.rs`), so kill and emptiness are always answered by the v2 leaf alone.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::fcntl::{OFlag, open};
use nix::sys::stat::Mode;

use crate::error::{Error, Result};
use crate::events;
use crate::host::{HostFacts, LimitSource};

mod parked;

pub(crate) use parked::ParkedLeaf;
use parked::remove_dirs;

mod stale;

/// Per-leaf limits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// Most processes (and threads) the leaf may hold at once.
    pub max_pids: Option<u64>,
    /// Most memory in bytes; the kernel OOM-kills inside the leaf past it.
    pub max_memory: Option<u64>,
}

/// The runtime-owned parent cgroup(s). Dropping it kills and removes everything under it.
#[derive(Debug)]
pub struct CgroupTree {
    v2: PathBuf,
    pids: Option<(PathBuf, LimitSource)>,
    memory: Option<(PathBuf, LimitSource)>,
    destroyed: bool,
}

/// One process's cgroup leaf (and its v1 twins when limits are on). Dropping it does not remove the
/// directories: [`Leaf::remove`], [`crate::LeafPool::release`] or the tree's destroy does.
#[derive(Debug)]
pub struct Leaf {
    v2: PathBuf,
    v2_dir: OwnedFd,
    v1: Vec<PathBuf>,
    v1_procs: Vec<OwnedFd>,
    oom: Option<OomSource>,
    limits: Limits,
    /// Whether `cgroup.kill` was written for this leaf (see [`Spent::Killed`]).
    kill_sent: AtomicBool,
}

/// Why an emptied leaf may not take another process: it is removed and a fresh one is made instead.
/// [`crate::LeafPool`] asks [`Leaf::check_reusable`] before parking a leaf and
/// [`Leaf::check_still_idle`] before issuing it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spent {
    /// `cgroup.kill` was written for it. On the kernels dsh runs on (seen on 6.18) a process created
    /// straight into such a cgroup with `clone3(CLONE_INTO_CGROUP)` is SIGKILLed at birth, however
    /// long ago the kill was and although the cgroup was empty since: the cgroup's kill sequence
    /// number stays raised, and the child's snapshot of it, taken from the parent's own cgroup,
    /// never matches. (A process moved in through `cgroup.procs` is spared, and a cgroup created
    /// afterwards is clean.) The kernel shows the raised number in no file, so the leaf's own record
    /// of the write is what tells.
    Killed,
    /// The kernel OOM-killed in it: a v1 memory leaf keeps charges and OOM state across owners (the
    /// next command in it was killed at once, with no OOM kill counted).
    OomKilled,
    /// `cgroup.events` or `cgroup.procs` still shows a process.
    Populated,
    /// It is frozen (`cgroup.events` `frozen 1`): a child would stop at birth.
    Frozen,
    /// Its state files cannot be read (removed from outside, or the hierarchy went away).
    Unreadable,
}

impl std::fmt::Display for Spent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Spent::Killed => "its processes were killed with cgroup.kill",
            Spent::OomKilled => "the kernel killed in it for memory",
            Spent::Populated => "it still holds processes",
            Spent::Frozen => "it is frozen",
            Spent::Unreadable => "its state cannot be read",
        })
    }
}

#[derive(Debug, Clone)]
enum OomSource {
    V2Events(PathBuf),
    V1Control(PathBuf),
}

/// What a spawn needs to put a child into a leaf: the v2 directory for `CLONE_INTO_CGROUP` and the
/// opened v1 `cgroup.procs` files the child writes `0` into before exec.
#[derive(Debug, Clone, Copy)]
pub struct CgroupTarget<'a> {
    /// The v2 leaf directory (`O_PATH | O_DIRECTORY`).
    pub v2_dir: BorrowedFd<'a>,
    /// The v1 leaves' `cgroup.procs`, opened for writing.
    pub v1_procs: &'a [OwnedFd],
}

fn write(path: &Path, value: &str) -> Result<()> {
    std::fs::write(path, value).map_err(|e| Error::io("write", path, e))
}

fn mkdir(path: &Path) -> Result<()> {
    std::fs::create_dir(path).map_err(|e| Error::io("mkdir", path, e))
}

/// `rmdir`, retried for up to a second while the kernel still reports `EBUSY` (the last exits are
/// being accounted). A directory already gone is fine.
pub(crate) fn rmdir_retry(path: &Path) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        match std::fs::remove_dir(path) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(nix::libc::EBUSY) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(Error::io("rmdir", path, e)),
        }
    }
}

impl CgroupTree {
    /// Creates `dsh-<pid>-<nonce>` under the runtime's own v2 cgroup, and under its own v1 `pids` /
    /// `memory` cgroups for the limits in `want` that v2 cannot give here.
    pub fn create(facts: &HostFacts, want: Limits) -> Result<Self> {
        facts.cgroup_ready().map_err(Error::Unsupported)?;
        let own = facts
            .v2
            .as_ref()
            .and_then(|p| p.dir.clone())
            .ok_or_else(|| Error::Unsupported("no own v2 cgroup directory".into()))?;
        let name = format!("dsh-{}-{}", std::process::id(), crate::nonce());
        let swept = stale::sweep(&own);
        if swept > 0 {
            tracing::info!(swept, "removed empty cgroup trees of runtimes that died");
        }
        let pids = match want.max_pids {
            Some(_) => Some(facts.pids_limit().map_err(Error::Unsupported)?),
            None => None,
        };
        let memory = match want.max_memory {
            Some(_) => Some(facts.memory_limit().map_err(Error::Unsupported)?),
            None => None,
        };
        let mut v2_controllers = Vec::new();
        if pids == Some(LimitSource::V2) {
            v2_controllers.push("pids");
        }
        if memory == Some(LimitSource::V2) {
            v2_controllers.push("memory");
        }
        if !v2_controllers.is_empty() {
            enable_in_own(&own, &v2_controllers)?;
        }
        let v2 = own.join(&name);
        mkdir(&v2)?;
        let mut tree = CgroupTree {
            v2,
            pids: None,
            memory: None,
            destroyed: false,
        };
        if !v2_controllers.is_empty() {
            let line: Vec<String> = v2_controllers.iter().map(|c| format!("+{c}")).collect();
            write(&tree.v2.join("cgroup.subtree_control"), &line.join(" "))?;
        }
        let v1_parent = |place: &Option<crate::host::CgroupPlace>| -> Result<PathBuf> {
            let dir = place
                .as_ref()
                .and_then(|p| p.dir.as_ref())
                .ok_or_else(|| Error::Unsupported("no v1 cgroup directory".into()))?;
            stale::sweep(dir);
            let path = dir.join(&name);
            mkdir(&path)?;
            Ok(path)
        };
        tree.pids = match pids {
            Some(LimitSource::V1) => Some((v1_parent(&facts.v1_pids)?, LimitSource::V1)),
            Some(LimitSource::V2) => Some((tree.v2.clone(), LimitSource::V2)),
            None => None,
        };
        tree.memory = match memory {
            Some(LimitSource::V1) => Some((v1_parent(&facts.v1_memory)?, LimitSource::V1)),
            Some(LimitSource::V2) => Some((tree.v2.clone(), LimitSource::V2)),
            None => None,
        };
        tracing::debug!(path = %tree.v2.display(), "cgroup tree created");
        Ok(tree)
    }

    /// The v2 parent directory (what the watchdog kills and removes).
    pub fn path(&self) -> &Path {
        &self.v2
    }

    /// The v1 parent directories, if any (for the watchdog to remove).
    pub fn v1_paths(&self) -> Vec<PathBuf> {
        [&self.pids, &self.memory]
            .into_iter()
            .flatten()
            .filter(|(_, s)| *s == LimitSource::V1)
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// Creates leaf `name` (e.g. `p<slot>-<gen>`) with `limits`. A limit the tree was not created
    /// for is an error.
    pub fn create_leaf(&self, name: &str, limits: Limits) -> Result<Leaf> {
        let v2 = self.v2.join(name);
        mkdir(&v2)?;
        let mut leaf = Leaf {
            v2_dir: open(
                &v2,
                OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| Error::io("open", &v2, e.into()))?,
            v2,
            v1: Vec::new(),
            v1_procs: Vec::new(),
            oom: None,
            limits,
            kill_sent: AtomicBool::new(false),
        };
        // On any error below, `leaf` is dropped unremoved; remove it so no directory is left.
        let result = self.fill_leaf(&mut leaf, name, limits);
        match result {
            Ok(()) => Ok(leaf),
            Err(e) => {
                let _ = leaf.remove();
                Err(e)
            }
        }
    }

    fn fill_leaf(&self, leaf: &mut Leaf, name: &str, limits: Limits) -> Result<()> {
        let missing = |what: &str| {
            Error::Unsupported(format!(
                "the cgroup tree was created without a {what} limit"
            ))
        };
        if let Some(max) = limits.max_pids {
            let (parent, source) = self.pids.as_ref().ok_or_else(|| missing("pids"))?;
            let dir = leaf.dir_for(parent, *source, name)?;
            write(&dir.join("pids.max"), &max.to_string())?;
        }
        if let Some(max) = limits.max_memory {
            let (parent, source) = self.memory.as_ref().ok_or_else(|| missing("memory"))?;
            let dir = leaf.dir_for(parent, *source, name)?;
            match source {
                LimitSource::V2 => {
                    write(&dir.join("memory.max"), &max.to_string())?;
                    write(&dir.join("memory.oom.group"), "1")?;
                    // Without swap accounting off, a task could swap instead of being killed.
                    let _ = std::fs::write(dir.join("memory.swap.max"), "0");
                    leaf.oom = Some(OomSource::V2Events(dir.join("memory.events")));
                }
                LimitSource::V1 => {
                    write(&dir.join("memory.limit_in_bytes"), &max.to_string())?;
                    let memsw = dir.join("memory.memsw.limit_in_bytes");
                    if memsw.exists() {
                        write(&memsw, &max.to_string())?;
                    }
                    leaf.oom = Some(OomSource::V1Control(dir.join("memory.oom_control")));
                }
            }
        }
        Ok(())
    }

    /// Kills every process in the tree, waits (bounded) for them to go, and removes every leaf and
    /// the parents. Idempotent.
    pub fn destroy(&mut self) -> Result<()> {
        if self.destroyed {
            return Ok(());
        }
        self.destroyed = true;
        let mut first_error = None;
        let mut note = |r: Result<()>| {
            if let Err(e) = r {
                tracing::warn!(%e, "removing the cgroup tree");
                first_error.get_or_insert(e);
            }
        };
        note(kill_and_remove(&self.v2));
        for path in self.v1_paths() {
            note(remove_tree(&path));
        }
        first_error.map_or(Ok(()), Err)
    }
}

impl Drop for CgroupTree {
    fn drop(&mut self) {
        let _ = self.destroy();
    }
}

/// `cgroup.kill` on a v2 directory (recursive), a bounded wait for `populated 0`, then removal of
/// its sub-directories and itself. Used by shutdown and the watchdog.
pub fn kill_and_remove(v2: &Path) -> Result<()> {
    if !v2.exists() {
        return Ok(());
    }
    write(&v2.join("cgroup.kill"), "1")?;
    events::wait_unpopulated_blocking(&v2.join("cgroup.events"), Duration::from_secs(5))?;
    remove_tree(v2)
}

/// Removes a cgroup directory after its sub-directories (deepest first).
pub fn remove_tree(dir: &Path) -> Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io("read_dir", dir, e)),
    };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            remove_tree(&entry.path())?;
        }
    }
    rmdir_retry(dir)
}

/// Enables `controllers` in the own cgroup's `subtree_control`, moving the runtime into a leaf of
/// its own first when the kernel refuses because the own cgroup holds processes.
fn enable_in_own(own: &Path, controllers: &[&str]) -> Result<()> {
    let control = own.join("cgroup.subtree_control");
    let enabled = std::fs::read_to_string(&control).map_err(|e| Error::io("read", &control, e))?;
    let missing: Vec<String> = controllers
        .iter()
        .filter(|c| !enabled.split_whitespace().any(|e| e == **c))
        .map(|c| format!("+{c}"))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    match std::fs::write(&control, missing.join(" ")) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(nix::libc::EBUSY) => {
            let runtime = own.join(format!("dsh-runtime-{}", std::process::id()));
            mkdir(&runtime)?;
            write(
                &runtime.join("cgroup.procs"),
                &std::process::id().to_string(),
            )?;
            write(&control, &missing.join(" "))
        }
        Err(e) => Err(Error::io("write", &control, e)),
    }
}

impl Leaf {
    fn dir_for(&mut self, parent: &Path, source: LimitSource, name: &str) -> Result<PathBuf> {
        if source == LimitSource::V2 {
            return Ok(self.v2.clone());
        }
        let dir = parent.join(name);
        if !self.v1.contains(&dir) {
            mkdir(&dir)?;
            self.v1.push(dir.clone());
            let procs = dir.join("cgroup.procs");
            self.v1_procs.push(
                open(&procs, OFlag::O_WRONLY | OFlag::O_CLOEXEC, Mode::empty())
                    .map_err(|e| Error::io("open", &procs, e.into()))?,
            );
        }
        Ok(dir)
    }

    /// The v2 leaf directory.
    pub fn path(&self) -> &Path {
        &self.v2
    }

    /// What a spawn needs to start a child inside this leaf.
    pub fn target(&self) -> CgroupTarget<'_> {
        CgroupTarget {
            v2_dir: self.v2_dir.as_fd(),
            v1_procs: &self.v1_procs,
        }
    }

    /// SIGKILLs every process in the leaf, including any that fork meanwhile (`cgroup.kill`). The
    /// leaf is spent from then on ([`Spent::Killed`]), whether or not the write succeeded.
    pub fn kill(&self) -> Result<()> {
        self.kill_sent.store(true, Ordering::Relaxed);
        write(&self.v2.join("cgroup.kill"), "1")
    }

    /// Whether the leaf may take another process, judged from the kernel's files (`cgroup.events`,
    /// `cgroup.procs` of the v2 leaf and its v1 twins, the OOM counter) and from what only the leaf
    /// itself knows (that `cgroup.kill` was written). Costs a few small reads.
    pub fn check_reusable(&self) -> std::result::Result<(), Spent> {
        if self.kill_sent.load(Ordering::Relaxed) {
            return Err(Spent::Killed);
        }
        self.check_still_idle()?;
        for dir in self.v1.iter().chain(std::iter::once(&self.v2)) {
            let procs =
                std::fs::read_to_string(dir.join("cgroup.procs")).map_err(|_| Spent::Unreadable)?;
            if !procs.trim().is_empty() {
                return Err(Spent::Populated);
            }
        }
        match self.oom_kills() {
            Ok(None | Some(0)) => Ok(()),
            Ok(Some(_)) => Err(Spent::OomKilled),
            Err(_) => Err(Spent::Unreadable),
        }
    }

    /// The check a parked leaf gets again when it is taken off the shelf: it passed
    /// [`Leaf::check_reusable`] when it was parked, and while parked dsh neither spawns into it nor
    /// kills it, so only an outside writer can have changed it; a process moved in (and so anything it
    /// could have done there) shows in `cgroup.events`, which is the one read this costs on the spawn
    /// path.
    pub fn check_still_idle(&self) -> std::result::Result<(), Spent> {
        let events = std::fs::read_to_string(self.v2.join("cgroup.events"))
            .map_err(|_| Spent::Unreadable)?;
        if events::field(&events, "populated").is_none_or(|v| v != 0) {
            return Err(Spent::Populated);
        }
        if events::field(&events, "frozen").is_some_and(|v| v != 0) {
            return Err(Spent::Frozen);
        }
        Ok(())
    }

    /// Sends `signal` to every process in the leaf (`cgroup.kill` sends only SIGKILL). Each pid of
    /// `cgroup.procs` is opened as a pidfd and signalled only if a second read still lists it, so a
    /// pid reused by a process outside the leaf is never signalled (see [`crate::pidfd`]). A process
    /// forked meanwhile may be missed; the SIGKILL that follows a grace is not. Returns how many
    /// were signalled.
    pub fn signal_members(&self, signal: i32) -> Result<usize> {
        let opened: Vec<(i32, std::os::fd::OwnedFd)> = self
            .members()?
            .into_iter()
            .filter_map(|pid| crate::pidfd::open(pid).ok().map(|fd| (pid, fd)))
            .collect();
        if opened.is_empty() {
            return Ok(0);
        }
        let still = self.members()?;
        Ok(opened
            .iter()
            .filter(|(pid, fd)| still.contains(pid) && crate::pidfd::send_signal(fd, signal))
            .count())
    }

    /// The pids in the leaf's `cgroup.procs`.
    fn members(&self) -> Result<Vec<i32>> {
        let path = self.v2.join("cgroup.procs");
        let procs = std::fs::read_to_string(&path).map_err(|e| Error::io("read", &path, e))?;
        Ok(procs
            .lines()
            .filter_map(|l| l.trim().parse::<i32>().ok())
            .filter(|pid| *pid > 1)
            .collect())
    }

    /// Whether any process is left in the leaf.
    pub fn is_populated(&self) -> Result<bool> {
        events::populated(&self.v2.join("cgroup.events"))
    }

    /// Resolves once every process of the leaf has exited (`populated 0`; zombies do not count).
    /// Needs a tokio runtime with IO enabled; cancel-safe.
    ///
    /// It waits on a pidfd of each member (readable once that process has exited), then looks
    /// again, until the leaf is empty: the usual killed command is empty at the first look, and one
    /// whose processes are still dying costs a few descriptors that close at once. An inotify
    /// instance per leaf would cost its closing thread an RCU grace period (12–20 ms on this
    /// kernel), which, on the runtime's thread, held every other process back: 100 kills took 1.3 s
    /// to settle one after another. Only a leaf that is populated with no member listed (no such
    /// state is known) falls back to inotify on `cgroup.events`.
    pub async fn wait_empty(&self) -> Result<()> {
        let events = self.v2.join("cgroup.events");
        loop {
            if !events::populated(&events)? {
                return Ok(());
            }
            let opened: Vec<(i32, std::os::fd::OwnedFd)> = self
                .members()?
                .into_iter()
                .filter_map(|pid| crate::pidfd::open(pid).ok().map(|fd| (pid, fd)))
                .collect();
            // A pid reused outside the leaf between the listing and the open is no member.
            let still = self.members()?;
            let members: Vec<std::os::fd::OwnedFd> = opened
                .into_iter()
                .filter(|(pid, _)| still.contains(pid))
                .map(|(_, fd)| fd)
                .collect();
            if members.is_empty() {
                if still.is_empty() {
                    return events::wait_unpopulated(&events).await;
                }
                // Members that appeared since the first listing: look again.
                continue;
            }
            for member in members {
                crate::pidfd::exited(member)
                    .await
                    .map_err(|e| Error::io("wait for a member's pidfd", &events, e))?;
            }
        }
    }

    /// The limits the leaf was created with.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// How many processes the kernel OOM-killed in this leaf; `None` without a memory limit. A leaf
    /// is recycled only with none ([`Spent::OomKilled`]), so the count is its current owner's.
    /// v2 reads `oom_kill` from `memory.events`; v1 reads `oom_kill` from `memory.oom_control`
    /// (Linux 4.13+).
    pub fn oom_kills(&self) -> Result<Option<u64>> {
        let (path, key) = match &self.oom {
            None => return Ok(None),
            Some(OomSource::V2Events(p)) => (p, "oom_kill"),
            Some(OomSource::V1Control(p)) => (p, "oom_kill"),
        };
        let text = std::fs::read_to_string(path).map_err(|e| Error::io("read", path, e))?;
        Ok(Some(events::field(&text, key).unwrap_or(0)))
    }

    /// Removes the leaf (v2 and v1 twins). Call once it is empty; `EBUSY` is retried briefly.
    pub fn remove(self) -> Result<()> {
        remove_dirs(self.v1.iter().chain(std::iter::once(&self.v2)))
    }
}
