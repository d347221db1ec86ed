//! Recycling emptied leaves, because the first process ever to enter a cgroup is expensive.
//!
//! Measured here (kernel 6.18, hybrid host, release build): `clone3(CLONE_INTO_CGROUP)` into a
//! cgroup that never held a process takes a median 0.7–2 ms (p90 2–8 ms), into one that held a
//! process before about 0.12 ms, whether or not that process is still alive; `mkdir` and `rmdir` of
//! a leaf cost only 25–40 µs each. Creating leaves ahead of time does not help; reusing them does.
//! So a settled process's leaf, once empty, goes back to a small pool and is handed to the next
//! process with the same limits. The first few idle leaves keep their descriptors open, so the spawn
//! of the next command opens nothing; the rest keep none (reopened when issued, a few microseconds),
//! so the runtime's descriptor count does not grow with its peak concurrency (`cgroup/parked.rs`).
//!
//! Only a leaf whose command ended by itself is recycled. A leaf whose processes were killed with
//! `cgroup.kill`, or in which the kernel OOM-killed, is *spent* ([`Spent`]): it is removed once empty
//! and the next process gets a fresh one. The reason is a kernel behaviour, not a policy: a cgroup
//! that was ever written `cgroup.kill` kills every process later created into it with
//! `CLONE_INTO_CGROUP` at birth, so one recycled killed leaf made every later command of a runtime
//! die in 0 ms (`actors/front/tests/it/long_day.rs` runs every kind of ending against one
//! server). The pool checks a leaf in full when it comes back ([`LeafPool::release`]: the leaf's
//! own record of the kill, the OOM counter, `cgroup.events`, the v1 twins' `cgroup.procs`), and when it is
//! issued again ([`LeafPool::acquire`]) re-reads `cgroup.events`: while parked only an outside
//! writer can change it, and a process moved in shows there as `populated 1`.
//! A killed task costs one fresh leaf (BENCHMARKS.md, "Cgroup leaves"). After a kill of the
//! whole tree every leaf in it is spent, so [`LeafPool::retire`] empties the pool for good.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::cgroup::{CgroupTree, Leaf, Limits, ParkedLeaf, Spent};
use crate::error::{Error, Result};

/// How many parked leaves keep their descriptors open: the v2 directory and its `cgroup.events`,
/// plus one `cgroup.procs` per v1 twin. A runtime running one command at a time, the common case,
/// always finds a warm one; the descriptors idle leaves hold stay bounded by this.
pub const WARM_LEAVES: usize = 8;

/// Emptied leaves waiting for their next process.
#[derive(Debug)]
pub struct LeafPool {
    idle: Mutex<Idle>,
    max_idle: usize,
    next: AtomicU64,
}

/// The pool's shelf: open while leaves may be recycled, retired for good after a kill of the whole
/// tree (which spends every leaf in it, parked ones included).
#[derive(Debug)]
enum Idle {
    Open(Vec<ParkedLeaf>),
    Retired,
}

/// What [`LeafPool::release`] did with a leaf.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// Parked for the next process.
    Parked,
    /// Removed: the pool is full (or retired).
    Removed,
    /// Removed because it must not take another process.
    Spent(Spent),
}

impl LeafPool {
    /// A pool keeping at most `max_idle` emptied leaves; the rest are removed.
    pub fn new(max_idle: usize) -> Self {
        LeafPool {
            idle: Mutex::new(Idle::Open(Vec::new())),
            max_idle,
            next: AtomicU64::new(0),
        }
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Idle> {
        // The shelf stays consistent even if a holder panicked (push/pop/replace only).
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An empty leaf with `limits`: a recycled one that is still fit to use if any, else a new
    /// `l<n>` leaf under `tree`.
    pub fn acquire(&self, tree: &CgroupTree, limits: Limits) -> Result<Leaf> {
        while let Some(parked) = self.take_parked(limits) {
            let leaf = match parked.unpark() {
                Ok(leaf) => leaf,
                // A cold leaf's directory went (removed from outside): a fresh leaf replaces it.
                Err(err) => {
                    tracing::debug!(%err, "a parked cgroup leaf could not be reopened");
                    continue;
                }
            };
            match leaf.check_still_idle() {
                Ok(()) => return Ok(leaf),
                Err(spent) => {
                    tracing::debug!(leaf = %leaf.path().display(), %spent, "a parked cgroup leaf is not reused");
                    if spent != Spent::Populated {
                        let _ = leaf.remove();
                    }
                }
            }
        }
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        tree.create_leaf(&format!("l{n}"), limits)
    }

    fn take_parked(&self, limits: Limits) -> Option<ParkedLeaf> {
        match &mut *self.idle() {
            // A warm leaf first: it costs the spawn no `open`.
            Idle::Open(idle) => idle
                .iter()
                .position(|l| l.is_warm() && l.limits() == limits)
                .or_else(|| idle.iter().position(|l| l.limits() == limits))
                .map(|i| idle.swap_remove(i)),
            Idle::Retired => None,
        }
    }

    /// Takes back a leaf whose processes are all gone: parked for reuse if it is fit
    /// ([`Leaf::check_reusable`]) and there is room, else removed. A leaf still populated is refused
    /// with an error and dropped unremoved: its directory stays in the tree, whose `destroy` kills
    /// and removes it.
    pub fn release(&self, leaf: Leaf) -> Result<Released> {
        match leaf.check_reusable() {
            Ok(()) => {}
            Err(Spent::Populated) => {
                return Err(Error::Unsupported(format!(
                    "{} still holds processes; kill it and wait for it to empty first",
                    leaf.path().display()
                )));
            }
            Err(spent) => {
                tracing::debug!(leaf = %leaf.path().display(), %spent, "a spent cgroup leaf is removed");
                leaf.remove()?;
                return Ok(Released::Spent(spent));
            }
        }
        let mut idle = self.idle();
        if let Idle::Open(shelf) = &mut *idle
            && shelf.len() < self.max_idle
        {
            let warm = shelf.iter().filter(|l| l.is_warm()).count() < WARM_LEAVES;
            shelf.push(leaf.park(warm));
            return Ok(Released::Parked);
        }
        drop(idle);
        leaf.remove()?;
        Ok(Released::Removed)
    }

    /// The whole tree was killed (`cgroup.kill` on its parent reaches every leaf, parked ones
    /// included): removes every idle leaf and recycles none from now on.
    pub fn retire(&self) -> Result<()> {
        let shelf = std::mem::replace(&mut *self.idle(), Idle::Retired);
        match shelf {
            Idle::Open(leaves) => leaves.into_iter().try_for_each(ParkedLeaf::remove),
            Idle::Retired => Ok(()),
        }
    }

    /// How many leaves are waiting.
    pub fn idle_count(&self) -> usize {
        match &*self.idle() {
            Idle::Open(shelf) => shelf.len(),
            Idle::Retired => 0,
        }
    }

    /// Removes every idle leaf (the tree's `destroy` also removes them); later releases may park
    /// again.
    pub fn clear(&self) -> Result<()> {
        let leaves = match &mut *self.idle() {
            Idle::Open(shelf) => std::mem::take(shelf),
            Idle::Retired => Vec::new(),
        };
        leaves.into_iter().try_for_each(ParkedLeaf::remove)
    }
}
