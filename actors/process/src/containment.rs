//! Containment: a process is all of its descendants, whatever group or session they move to.
//!
//! This module exists so the table and the driver can ask one question each ("signal everything of
//! this process", "is all of it gone", "does any of it remain") without knowing how the host keeps
//! a task together. The kernel primitives are in `dsh-contain`; here they are put to work:
//! - [`Mode::Cgroup`]: one cgroup leaf per process from a [`LeafPool`] under the runtime's
//!   [`CgroupTree`]; the child is inside it before it can fork; kill = `cgroup.kill`, all gone =
//!   `populated 0`; an emptied leaf goes back to the pool unless it was killed (the pool decides).
//! - [`Mode::Subreaper`]: the runtime is a child subreaper and every child carries the marker
//!   `DSH_TASK=<runtime>:<process>`; kill = every marked process, all gone = none left marked;
//!   adopted orphans are reaped on SIGCHLD (`dsh_contain::orphans`).
//! - [`Mode::Group`]: the process group only.
//!
//! In subreaper and group modes, what needs a walk over `/proc` (the marked processes to signal,
//! "alive?", "all gone?") is asked of `liveness.rs`, which answers many at once off the runtime's
//! thread; the group itself is signalled here, at once.
//!
//! The process group is always signalled too: it is free and catches a command that scrubbed its
//! environment in subreaper mode. One [`Containment`] is shared by a manager, its table and its
//! drivers; it also owns the link to the watchdog (`watchdog_link`), which kills everything if the
//! runtime dies without goodbye, and is replaced if it dies itself.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use dsh_contain::subreaper::{self, Marker};
use dsh_contain::watchdog::Registration;
use dsh_contain::{CgroupTree, HostFacts, Leaf, LeafPool, Limits, Mode};
use nix::libc;
use nix::sys::signal::Signal;

use crate::errors::SpawnError;
use crate::liveness;
use crate::lock::lock_unpoisoned;
use crate::signal::{live_group_members, signal_group};
use crate::watchdog_link::{self, WatchdogCommand, WatchdogLink, WatchdogStatus};

/// Emptied cgroup leaves kept for reuse.
const MAX_IDLE_LEAVES: usize = 64;

/// How a manager keeps each process together, and what it limits per process.
#[derive(Debug, Clone, Default)]
pub struct ContainmentConfig {
    /// The mode; `None` is `auto`: the strongest the host gives ([`HostFacts::auto_mode`]).
    pub mode: Option<Mode>,
    /// Per-process limits (cgroup mode only; a limit the host cannot give is an error).
    pub limits: Limits,
    /// The program that runs [`dsh_contain::watchdog::watchdog_main`] on its stdin, e.g. the `dsh`
    /// binary with `__watchdog`; `None`: no watchdog (a killed host leaves its processes running).
    pub watchdog: Option<WatchdogCommand>,
}

/// Why containment could not start as asked.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ContainmentError {
    /// The requested mode is impossible here.
    #[error("--containment {mode} is not available on this host: {reason}")]
    ModeUnavailable {
        /// The mode that was asked for.
        mode: Mode,
        /// What the host lacks.
        reason: String,
    },
    /// A requested limit is impossible here.
    #[error("the per-task {what} limit is not available on this host: {reason}")]
    LimitUnavailable {
        /// Which limit: `pids` or `memory`.
        what: &'static str,
        /// What the host lacks.
        reason: String,
    },
}

/// One process's handle: what its kill and its "all gone" act on besides its group.
#[derive(Debug)]
pub(crate) enum Contained {
    Group,
    Leaf(Leaf),
    Marker(Marker),
}

/// The containment state of one manager.
#[derive(Debug)]
pub(crate) struct Containment {
    mode: Mode,
    limits: Limits,
    tree: Option<Mutex<CgroupTree>>,
    pool: LeafPool,
    /// The marker prefix of this runtime (subreaper mode).
    nonce: String,
    /// The last marker number handed out (subreaper mode).
    tag: AtomicU64,
    /// Shared with the task that watches the watchdog ([`Containment::watch_watchdog`]).
    watchdog: Arc<WatchdogLink>,
}

impl Containment {
    /// Group mode with no host probing and no watchdog (table unit tests, fallbacks).
    pub(crate) fn group() -> Self {
        Self {
            mode: Mode::Group,
            limits: Limits::default(),
            tree: None,
            pool: LeafPool::new(0),
            nonce: dsh_contain::nonce(),
            tag: AtomicU64::new(0),
            watchdog: Arc::new(WatchdogLink::off()),
        }
    }

    /// Probes the host, resolves the mode, creates the cgroup tree or becomes a subreaper, and
    /// starts the watchdog.
    pub(crate) fn start(config: &ContainmentConfig) -> Result<Self, ContainmentError> {
        let facts = HostFacts::discover();
        let mode = config.mode.unwrap_or_else(|| facts.auto_mode());
        facts
            .check_mode(mode)
            .map_err(|reason| ContainmentError::ModeUnavailable { mode, reason })?;
        let limits = config.limits;
        for (what, asked, check) in [
            ("pids", limits.max_pids.is_some(), facts.pids_limit()),
            ("memory", limits.max_memory.is_some(), facts.memory_limit()),
        ] {
            if !asked {
                continue;
            }
            if mode != Mode::Cgroup {
                return Err(ContainmentError::LimitUnavailable {
                    what,
                    reason: format!("limits need --containment cgroup, not {mode}"),
                });
            }
            check.map_err(|reason| ContainmentError::LimitUnavailable { what, reason })?;
        }
        let mut containment = Self::group();
        containment.mode = mode;
        containment.limits = limits;
        match mode {
            Mode::Cgroup => {
                let tree = CgroupTree::create(&facts, limits).map_err(|e| {
                    ContainmentError::ModeUnavailable {
                        mode,
                        reason: e.to_string(),
                    }
                })?;
                containment.tree = Some(Mutex::new(tree));
                containment.pool = LeafPool::new(MAX_IDLE_LEAVES);
            }
            Mode::Subreaper => {
                subreaper::become_subreaper().map_err(|e| ContainmentError::ModeUnavailable {
                    mode,
                    reason: e.to_string(),
                })?;
                dsh_contain::orphans::registry().add_runtime(Marker::runtime(&containment.nonce));
            }
            Mode::Group => {}
        }
        if let Some(command) = &config.watchdog {
            containment.start_watchdog(command.clone());
        }
        tracing::info!(containment = %mode, ?limits, "containment mode in force");
        Ok(containment)
    }

    /// Starts the watchdog and tells it the cgroup tree (v2 parent and v1 limit parents), or the
    /// runtime's marker.
    fn start_watchdog(&mut self, command: WatchdogCommand) {
        let link = match &self.tree {
            Some(tree) => {
                let tree = lock_unpoisoned(tree);
                let v1 = tree.v1_paths();
                let initial: Vec<Registration<'_>> =
                    std::iter::once(Registration::Cgroup(tree.path()))
                        .chain(v1.iter().map(|p| Registration::CgroupV1(p)))
                        .collect();
                WatchdogLink::start(command, &initial)
            }
            None => WatchdogLink::start(command, &[Registration::Runtime(&self.nonce)]),
        };
        self.watchdog = Arc::new(link);
    }

    fn tell_watchdog(&self, registration: Registration<'_>) {
        self.watchdog.register(registration);
    }

    /// Keeps the watchdog running: a task to run on the manager's arbiter that replaces a watchdog
    /// that dies. It ends with the runtime (it holds the link weakly), at goodbye, or on giving up.
    pub(crate) fn watch_watchdog(&self) -> impl std::future::Future<Output = ()> + 'static {
        watchdog_link::watch(Arc::downgrade(&self.watchdog))
    }

    /// Whether a watchdog guards the runtime, and how many were started to replace one that died.
    pub(crate) fn watchdog_status(&self) -> (WatchdogStatus, u64) {
        self.watchdog.status()
    }

    /// The mode in force.
    pub(crate) fn mode(&self) -> Mode {
        self.mode
    }

    /// Registers the spill directory with the watchdog (removed if the runtime dies).
    pub(crate) fn register_spill_dir(&self, dir: &Path) {
        self.tell_watchdog(Registration::Spill(dir));
    }

    /// The handle a new process gets before it is spawned: a leaf or a marker.
    pub(crate) fn prepare(&self) -> Result<Contained, SpawnError> {
        match (self.mode, &self.tree) {
            (Mode::Cgroup, Some(tree)) => {
                let tree = lock_unpoisoned(tree);
                self.pool
                    .acquire(&tree, self.limits)
                    .map(Contained::Leaf)
                    .map_err(|e| SpawnError::Containment(e.to_string()))
            }
            (Mode::Subreaper, _) => {
                let tag = self.tag.fetch_add(1, Ordering::Relaxed) + 1;
                Ok(Contained::Marker(Marker::task(
                    &self.nonce,
                    &tag.to_string(),
                )))
            }
            _ => Ok(Contained::Group),
        }
    }

    /// A new process `pgid` runs under `contained`.
    pub(crate) fn started(&self, pgid: i32, contained: &Contained) {
        if !matches!(contained, Contained::Leaf(_)) {
            self.tell_watchdog(Registration::Group(pgid));
        }
    }

    /// Sends `signal` to the group `pgid` and every other process of `contained`.
    pub(crate) fn signal(&self, pgid: i32, contained: &Contained, signal: Signal) {
        signal_group(pgid, signal);
        signal_beyond_group(contained, signal);
    }

    /// Sends `signal` to what is left of a straggler: a process whose leader was reaped long ago.
    /// Its group number is free for reuse once the group empties (pids wrap at `pid_max`, 32768 on
    /// many hosts), so the group is signalled only while `/proc` shows live members in it, and in
    /// cgroup mode not at all: the leaf holds every process of the task, group members included.
    pub(crate) fn signal_straggler(&self, pgid: i32, contained: &Contained, signal: Signal) {
        if !matches!(contained, Contained::Leaf(_)) {
            signal_group_if_members(pgid, signal);
        }
        signal_beyond_group(contained, signal);
    }

    /// Resolves once no process of `pgid` / `contained` is alive.
    pub(crate) async fn all_gone(&self, pgid: i32, contained: &Contained) {
        match contained {
            Contained::Leaf(leaf) => {
                if let Err(err) = leaf.wait_empty().await {
                    tracing::warn!(%err, "waiting for a cgroup leaf to empty");
                }
            }
            Contained::Marker(marker) => liveness::gone(Some(pgid), Some(marker.clone())).await,
            Contained::Group => liveness::gone(Some(pgid), None).await,
        }
    }

    /// Whether any process of `pgid` / `contained` is alive: in cgroup mode the leaf holds them all
    /// (group members included); otherwise the group's live members and the marked processes.
    pub(crate) async fn alive(&self, pgid: i32, contained: &Contained) -> bool {
        match contained {
            Contained::Leaf(leaf) => leaf.is_populated().unwrap_or(true),
            Contained::Marker(marker) => liveness::alive(Some(pgid), Some(marker.clone())).await,
            Contained::Group => liveness::alive(Some(pgid), None).await,
        }
    }

    /// Whether anything of a settled `contained` (led by `pgid`) outside its group is alive, asked
    /// off the runtime's thread (the group is asked separately): the cgroup leaf is populated, or
    /// (subreaper) a process carrying the marker lives, looked for only if the leader may have
    /// started any ([`subreaper::may_have_descendants`]).
    pub(crate) async fn remains_beyond_group(&self, pgid: i32, contained: &Contained) -> bool {
        match contained {
            Contained::Group => false,
            Contained::Leaf(leaf) => leaf.is_populated().unwrap_or(false),
            Contained::Marker(marker) => {
                subreaper::may_have_descendants(pgid)
                    && liveness::alive(None, Some(marker.clone())).await
            }
        }
    }

    /// Whether something of `contained` (led by `pgid`, its leader reaped) may still run, asked at
    /// every settlement and so cheap: the leaf's populated flag, else whether the group still has
    /// members (a subreaper's descendants that left the group are not looked for here).
    pub(crate) fn may_remain(&self, pgid: i32, contained: &Contained) -> bool {
        match contained {
            Contained::Leaf(leaf) => leaf.is_populated().unwrap_or(false),
            Contained::Group | Contained::Marker(_) => crate::signal::group_exists(pgid),
        }
    }

    /// Whether anything of `contained` (led by `pgid`) outside the group `pgid` is alive (the group
    /// is asked separately). Walks `/proc` on this thread in subreaper mode: for the straggler
    /// list's occasional pruning only.
    pub(crate) fn remains_outside_group(&self, pgid: i32, contained: &Contained) -> bool {
        match contained {
            Contained::Group => false,
            Contained::Leaf(leaf) => leaf.is_populated().unwrap_or(false),
            Contained::Marker(marker) => marked_remain(pgid, marker),
        }
    }

    /// Whether the kernel killed a process of `contained` for memory.
    pub(crate) fn oom_killed(&self, contained: &Contained) -> bool {
        match contained {
            Contained::Leaf(leaf) => leaf.oom_kills().ok().flatten().is_some_and(|n| n > 0),
            _ => false,
        }
    }

    /// Returns an emptied leaf to the pool right away (so the next command reuses it rather than
    /// creating one); what it hands back is left for the table to judge.
    pub(crate) fn recycle_if_empty(&self, contained: Contained) -> Contained {
        match contained {
            Contained::Leaf(leaf) if !leaf.is_populated().unwrap_or(true) => {
                self.release_leaf(leaf);
                Contained::Group
            }
            other => other,
        }
    }

    /// Gives an emptied leaf back to the pool, which recycles it only if its command ended by
    /// itself: a killed or OOM-killed leaf is spent and removed (`dsh_contain::Spent`).
    fn release_leaf(&self, leaf: Leaf) {
        if let Err(err) = self.pool.release(leaf) {
            tracing::debug!(%err, "cgroup leaf not recycled");
        }
    }

    /// `contained` is over and empty: its leaf goes back to the pool, its group off the watchdog.
    pub(crate) fn finish(&self, pgid: i32, contained: Contained) {
        match contained {
            Contained::Leaf(leaf) => self.release_leaf(leaf),
            Contained::Marker(_) | Contained::Group if self.mode != Mode::Cgroup => {
                self.tell_watchdog(Registration::Ungroup(pgid));
            }
            Contained::Marker(_) | Contained::Group => {}
        }
    }

    /// SIGKILLs every process of every task of this manager at once (cgroup: the whole tree;
    /// subreaper: every process with the runtime's marker).
    pub(crate) fn kill_everything(&self) {
        match (self.mode, &self.tree) {
            (Mode::Cgroup, Some(tree)) => {
                // Every leaf of the tree is spent by this, parked ones included.
                if let Err(err) = self.pool.retire() {
                    tracing::debug!(%err, "removing idle cgroup leaves");
                }
                let path = lock_unpoisoned(tree).path().join("cgroup.kill");
                if let Err(err) = std::fs::write(&path, "1") {
                    tracing::warn!(%err, path = %path.display(), "cgroup.kill of the tree failed");
                }
            }
            (Mode::Subreaper, _) => {
                subreaper::kill_marked(&Marker::runtime(&self.nonce), libc::SIGKILL);
            }
            _ => {}
        }
    }

    /// Shutdown, after every process settled: kills whatever is left, removes the cgroup tree, and
    /// says goodbye to the watchdog. Idempotent.
    pub(crate) fn shut_down(&self) {
        self.kill_everything();
        if let Some(tree) = &self.tree {
            let _ = self.pool.clear();
            if let Err(err) = lock_unpoisoned(tree).destroy() {
                tracing::warn!(%err, "removing the cgroup tree");
            }
        }
        self.watchdog.goodbye();
    }
}

/// Sends `signal` to every process of `contained` that its group may not hold: the leaf's members
/// (SIGKILL by `cgroup.kill`), or every process carrying the marker.
fn signal_beyond_group(contained: &Contained, signal: Signal) {
    match contained {
        Contained::Group => {}
        Contained::Leaf(leaf) if signal == Signal::SIGKILL => {
            if let Err(err) = leaf.kill() {
                tracing::warn!(%err, "cgroup.kill failed");
            }
        }
        Contained::Leaf(leaf) => {
            if let Err(err) = leaf.signal_members(signal as libc::c_int) {
                tracing::debug!(%err, "signalling a cgroup leaf's members");
            }
        }
        Contained::Marker(marker) => {
            liveness::signal_marked(marker.clone(), signal as libc::c_int);
        }
    }
}

/// Signals group `pgid` if `/proc` shows live members in it (a group with none may be a stranger's
/// that reused the number). Returns whether it signalled.
pub(crate) fn signal_group_if_members(pgid: i32, signal: Signal) -> bool {
    !live_group_members(pgid).is_empty() && signal_group(pgid, signal)
}

/// Whether a process carrying `marker` is alive, for the task whose first process is `leader`. The
/// `/proc` scan is skipped when the leader cannot have started anything
/// ([`subreaper::may_have_descendants`]): the common command that execs one program and exits.
fn marked_remain(leader: i32, marker: &Marker) -> bool {
    subreaper::may_have_descendants(leader) && !subreaper::find_marked(marker).is_empty()
}

/// A shared handle for the manager, its table and its drivers.
pub(crate) type SharedContainment = Arc<Containment>;

#[cfg(test)]
mod tests {
    use std::os::unix::process::CommandExt;

    use super::*;

    #[test]
    fn a_straggler_group_is_signalled_only_while_it_has_live_members() {
        let mut child = std::process::Command::new("sleep")
            .arg("300")
            .process_group(0)
            .spawn()
            .unwrap();
        let pgid = child.id() as i32;
        let live = signal_group_if_members(pgid, Signal::SIGKILL);
        child.wait().unwrap();
        // Reaped: the group number is free, and may be anyone's next.
        let after = signal_group_if_members(pgid, Signal::SIGKILL);
        assert!(live, "a live group was not signalled");
        assert!(!after, "an emptied group was signalled");
    }
}
