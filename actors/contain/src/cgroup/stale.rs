//! Trees left behind by runtimes that died without cleaning up.
//!
//! A runtime removes its `dsh-<pid>-<nonce>` tree at shutdown, and its watchdog does when it dies
//! without goodbye. A runtime embedded as a library runs without a watchdog unless its host gives it
//! one, so a host killed with SIGKILL leaves its tree behind: empty directories, or directories
//! still holding whatever its commands left running. Each new tree's creation sweeps its parent
//! once: a `dsh-<pid>-…` directory whose `<pid>` no longer exists is removed when it holds no
//! process. One that still holds processes is left (and logged): they belong to a dead runtime's
//! commands, but deciding to kill them is for an operator, not for whichever runtime starts next.
//!
//! The pid in the name is read in this process's pid namespace; a cgroup parent shared with a
//! runtime in another pid namespace is not a configuration dsh supports (its pool would lose parked
//! leaves, which it recreates, see `LeafPool::acquire`).

use std::path::Path;

/// Removes the stale, empty `dsh-<pid>-…` trees directly under `parent`. Returns how many went.
pub(crate) fn sweep(parent: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(creator_pid) else {
            continue;
        };
        if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        if remove_if_empty(&entry.path()) {
            removed += 1;
        } else {
            tracing::warn!(
                path = %entry.path().display(),
                "a dead runtime's cgroup tree still holds processes; left in place"
            );
        }
    }
    removed
}

/// The `<pid>` of a `dsh-<pid>-<nonce>` name.
fn creator_pid(name: &str) -> Option<u32> {
    let (pid, nonce) = name.strip_prefix("dsh-")?.split_once('-')?;
    if nonce.is_empty() {
        return None;
    }
    pid.parse().ok()
}

/// Removes `dir` after its sub-directories, deepest first, without waiting: a cgroup that holds a
/// process refuses `rmdir` (EBUSY), and then so do its ancestors. Whether all of it went.
fn remove_if_empty(dir: &Path) -> bool {
    let children_gone = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                // Every child is tried, so a busy one does not spare its empty siblings.
                .filter(|e| !remove_if_empty(&e.path()))
                .count()
                == 0
        })
        .unwrap_or(true);
    children_gone && std::fs::remove_dir(dir).is_ok()
}

#[cfg(test)]
mod tests {
    use super::creator_pid;

    #[test]
    fn only_dsh_tree_names_carry_a_creator() {
        assert_eq!(creator_pid("dsh-123-abc"), Some(123));
        assert_eq!(creator_pid("dsh-123-"), None);
        assert_eq!(creator_pid("dsh-proc-1"), None);
        assert_eq!(creator_pid("dsh-x-abc"), None);
        assert_eq!(creator_pid("other-123-abc"), None);
    }
}
