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
//!
//! This file is the tree (create, destroy, remove); one leaf and what it answers is `cgroup/leaf.rs`,
//! a leaf kept for reuse `cgroup/parked.rs`, trees of dead runtimes `cgroup/stale.rs`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::events;
use crate::host::{HostFacts, LimitSource};

mod leaf;
mod parked;
mod stale;

use leaf::OomSource;
pub use leaf::{CgroupTarget, Leaf, Spent};
pub(crate) use parked::ParkedLeaf;

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

pub(crate) fn write(path: &Path, value: &str) -> Result<()> {
    std::fs::write(path, value).map_err(|e| Error::io("write", path, e))
}

pub(crate) fn mkdir(path: &Path) -> Result<()> {
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

/// Removes `dirs` (each with [`rmdir_retry`]); the first error is returned after trying them all.
pub(crate) fn remove_dirs<'a>(dirs: impl Iterator<Item = &'a PathBuf>) -> Result<()> {
    let mut result = Ok(());
    for dir in dirs {
        if let Err(e) = rmdir_retry(dir) {
            result = result.and(Err(e));
        }
    }
    result
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
        let mut leaf = Leaf::new(v2, limits)?;
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
                    leaf.watch_oom(OomSource::V2Events(dir.join("memory.events")));
                }
                LimitSource::V1 => {
                    write(&dir.join("memory.limit_in_bytes"), &max.to_string())?;
                    let memsw = dir.join("memory.memsw.limit_in_bytes");
                    if memsw.exists() {
                        write(&memsw, &max.to_string())?;
                    }
                    leaf.watch_oom(OomSource::V1Control(dir.join("memory.oom_control")));
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
