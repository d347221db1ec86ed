//! One process's cgroup leaf: what a spawn needs to start a child in it, kill, "all gone", the
//! OOM counter, and whether it may take another process ([`Spent`]).
//!
//! Apart from the tree (`cgroup.rs`) because a leaf is what the pool, the spawn and the process
//! crate hold and ask, one per process, while the tree is made and destroyed once per runtime.

use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use nix::fcntl::{OFlag, open, openat};
use nix::sys::stat::Mode;

use super::{Limits, mkdir, remove_dirs, write};
use crate::error::{Error, Result};
use crate::events;
use crate::host::LimitSource;

/// One process's cgroup leaf (and its v1 twins when limits are on). Dropping it does not remove the
/// directories: [`Leaf::remove`], [`crate::LeafPool::release`] or the tree's destroy does.
#[derive(Debug)]
pub struct Leaf {
    pub(super) v2: PathBuf,
    pub(super) v2_dir: OwnedFd,
    /// The v2 leaf's `cgroup.events`, opened at the first look and kept for the life of the leaf:
    /// a cgroup file read again from offset 0 shows its current state, so each later look is one
    /// `pread` instead of a path walk, an open, a size query, two reads and a close (a command
    /// costs four looks).
    pub(super) events: OnceLock<File>,
    pub(super) v1: Vec<PathBuf>,
    pub(super) v1_procs: Vec<OwnedFd>,
    pub(super) oom: Option<OomSource>,
    pub(super) limits: Limits,
    /// Whether `cgroup.kill` was written for this leaf (see [`Spent::Killed`]).
    pub(super) kill_sent: AtomicBool,
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

/// Where a leaf's OOM kills are counted.
#[derive(Debug, Clone)]
pub(super) enum OomSource {
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

impl Leaf {
    /// Opens the fresh v2 leaf directory `v2` (already made) as a leaf with `limits`, no v1 twins
    /// and no OOM counter yet.
    pub(super) fn new(v2: PathBuf, limits: Limits) -> Result<Self> {
        let v2_dir = open(
            &v2,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| Error::io("open", &v2, e.into()))?;
        Ok(Leaf {
            events: OnceLock::new(),
            v2_dir,
            v2,
            v1: Vec::new(),
            v1_procs: Vec::new(),
            oom: None,
            limits,
            kill_sent: AtomicBool::new(false),
        })
    }

    /// Counts the leaf's OOM kills at `source` (a memory limit is on).
    pub(super) fn watch_oom(&mut self, source: OomSource) {
        self.oom = Some(source);
    }

    /// The leaf's directory under `parent` for a limit from `source`: the v2 leaf itself, or a v1
    /// twin made (and its `cgroup.procs` opened) the first time.
    pub(super) fn dir_for(
        &mut self,
        parent: &Path,
        source: LimitSource,
        name: &str,
    ) -> Result<PathBuf> {
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
    /// the `cgroup.procs` of its v1 twins, the OOM counter) and from what only the leaf itself
    /// knows (that `cgroup.kill` was written). The v2 leaf's own `cgroup.procs` is not read:
    /// `populated 0` in its `cgroup.events` already says no live process is in it. Costs one
    /// `pread` without v1 twins.
    pub fn check_reusable(&self) -> std::result::Result<(), Spent> {
        if self.kill_sent.load(Ordering::Relaxed) {
            return Err(Spent::Killed);
        }
        self.check_still_idle()?;
        // v1 has no `cgroup.events`: a twin's emptiness shows only in its `cgroup.procs`.
        for dir in &self.v1 {
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
        let mut buf = [0; EVENTS_BYTES];
        let events = self.read_events(&mut buf).map_err(|_| Spent::Unreadable)?;
        if events::field(events, "populated").is_none_or(|v| v != 0) {
            return Err(Spent::Populated);
        }
        if events::field(events, "frozen").is_some_and(|v| v != 0) {
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
    pub fn members(&self) -> Result<Vec<i32>> {
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
        let mut buf = [0; EVENTS_BYTES];
        let events = self
            .read_events(&mut buf)
            .map_err(|e| Error::io("read", self.v2.join("cgroup.events"), e))?;
        Ok(events::field(events, "populated").is_some_and(|v| v != 0))
    }

    /// The current text of the leaf's `cgroup.events`, read into `buf`.
    fn read_events<'b>(&self, buf: &'b mut [u8; EVENTS_BYTES]) -> std::io::Result<&'b str> {
        let file = match self.events.get() {
            Some(file) => file,
            None => {
                let opened = openat(
                    &self.v2_dir,
                    "cgroup.events",
                    OFlag::O_RDONLY | OFlag::O_CLOEXEC,
                    Mode::empty(),
                )?;
                // One thread at a time asks a leaf; should two race, the loser's file is closed.
                let _ = self.events.set(File::from(opened));
                self.events.get().ok_or(std::io::ErrorKind::NotFound)?
            }
        };
        let n = file.read_at(buf, 0)?;
        std::str::from_utf8(&buf[..n]).map_err(|_| std::io::ErrorKind::InvalidData.into())
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
            if !self.is_populated()? {
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

/// Room for the whole of a `cgroup.events` (`populated 0\nfrozen 0\n` today).
const EVENTS_BYTES: usize = 128;
