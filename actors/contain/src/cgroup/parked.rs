//! Emptied leaves parked in the pool (the pool's reason to exist is in `pool.rs`): the first few
//! *warm*, with the descriptors a live leaf keeps (its directory for `CLONE_INTO_CGROUP`, its
//! `cgroup.events`, its v1 twins' `cgroup.procs`), so the next command's spawn opens nothing; the
//! rest *cold*, as paths alone, so idle leaves beyond the warm few cost the runtime no descriptors
//! and its descriptor count does not grow with its peak concurrency.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use nix::fcntl::{OFlag, open};
use nix::sys::stat::Mode;

use super::{Leaf, Limits, OomSource, remove_dirs};
use crate::error::{Error, Result};

/// An emptied leaf waiting in the pool.
#[derive(Debug)]
pub(crate) enum ParkedLeaf {
    /// Kept as it was, descriptors open.
    Warm(Leaf),
    /// Its directories alone; reopened when issued (a few microseconds).
    Cold(ColdLeaf),
}

/// What a cold parked leaf keeps: no descriptors.
#[derive(Debug)]
pub(crate) struct ColdLeaf {
    v2: PathBuf,
    v1: Vec<PathBuf>,
    oom: Option<OomSource>,
    limits: Limits,
}

impl ParkedLeaf {
    /// The limits the leaf was created with.
    pub(crate) fn limits(&self) -> Limits {
        match self {
            ParkedLeaf::Warm(leaf) => leaf.limits,
            ParkedLeaf::Cold(cold) => cold.limits,
        }
    }

    /// Whether it kept its descriptors.
    pub(crate) fn is_warm(&self) -> bool {
        matches!(self, ParkedLeaf::Warm(_))
    }

    /// The leaf as it was parked (a cold one's descriptors reopened), for
    /// [`Leaf::check_still_idle`] to judge.
    pub(crate) fn unpark(self) -> Result<Leaf> {
        match self {
            ParkedLeaf::Warm(leaf) => Ok(leaf),
            ParkedLeaf::Cold(ColdLeaf {
                v2,
                v1,
                oom,
                limits,
            }) => Ok(Leaf {
                v2_dir: open_dir(&v2)?,
                events: std::sync::OnceLock::new(),
                v1_procs: v1
                    .iter()
                    .map(|dir| open_procs(dir))
                    .collect::<Result<_>>()?,
                v2,
                v1,
                oom,
                limits,
                kill_sent: AtomicBool::new(false),
            }),
        }
    }

    /// Removes the directories.
    pub(crate) fn remove(self) -> Result<()> {
        match self {
            ParkedLeaf::Warm(leaf) => leaf.remove(),
            ParkedLeaf::Cold(cold) => remove_dirs(cold.v1.iter().chain(std::iter::once(&cold.v2))),
        }
    }
}

fn open_dir(path: &Path) -> Result<OwnedFd> {
    open(
        path,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| Error::io("open", path, e.into()))
}

fn open_procs(dir: &Path) -> Result<OwnedFd> {
    let procs = dir.join("cgroup.procs");
    open(&procs, OFlag::O_WRONLY | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(|e| Error::io("open", &procs, e.into()))
}

impl Leaf {
    /// Parks the leaf: warm (as it is) when `warm`, else cold (its descriptors closed). Only a leaf
    /// that passed [`Leaf::check_reusable`] is parked, so a parked leaf was never killed.
    pub(crate) fn park(self, warm: bool) -> ParkedLeaf {
        if warm {
            return ParkedLeaf::Warm(self);
        }
        ParkedLeaf::Cold(ColdLeaf {
            v2: self.v2,
            v1: self.v1,
            oom: self.oom,
            limits: self.limits,
        })
    }
}
