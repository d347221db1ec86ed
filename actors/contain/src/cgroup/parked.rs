//! Emptied leaves parked in the pool without open descriptors, so idle leaves cost the runtime none
//! (the pool's reason to exist is in `pool.rs`).

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use nix::fcntl::{OFlag, open};
use nix::sys::stat::Mode;

use super::{Leaf, Limits, OomSource, remove_dirs};
use crate::error::{Error, Result};

/// An emptied leaf waiting in the pool: its directories, without the descriptors a live leaf keeps
/// open, so idle leaves cost the runtime no descriptors.
#[derive(Debug)]
pub(crate) struct ParkedLeaf {
    v2: PathBuf,
    v1: Vec<PathBuf>,
    oom: Option<OomSource>,
    limits: Limits,
}

impl ParkedLeaf {
    /// The limits the leaf was created with.
    pub(crate) fn limits(&self) -> Limits {
        self.limits
    }

    /// Reopens the descriptors: the leaf as it was parked, for [`Leaf::check_still_idle`] to judge.
    pub(crate) fn unpark(self) -> Result<Leaf> {
        Ok(Leaf {
            v2_dir: open_dir(&self.v2)?,
            events: std::sync::OnceLock::new(),
            v1_procs: self
                .v1
                .iter()
                .map(|dir| open_procs(dir))
                .collect::<Result<_>>()?,
            v2: self.v2,
            v1: self.v1,
            oom: self.oom,
            limits: self.limits,
            kill_sent: AtomicBool::new(false),
        })
    }

    /// Removes the directories.
    pub(crate) fn remove(self) -> Result<()> {
        remove_dirs(self.v1.iter().chain(std::iter::once(&self.v2)))
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
    /// Closes its descriptors for a stay in the pool. Only a leaf that passed
    /// [`Leaf::check_reusable`] is parked, so a parked leaf was never killed.
    pub(crate) fn park(self) -> ParkedLeaf {
        ParkedLeaf {
            v2: self.v2,
            v1: self.v1,
            oom: self.oom,
            limits: self.limits,
        }
    }
}
