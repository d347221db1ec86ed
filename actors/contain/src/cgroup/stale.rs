//! Trees left behind by runtimes that died without cleaning up.
//!
//! A runtime removes its `dsh-<pid>-<nonce>` tree at shutdown, and its watchdog does when it dies
//! without goodbye. A runtime embedded as a library runs without a watchdog unless its host gives it
//! one, so a host killed with SIGKILL leaves its tree behind: empty directories, or directories
//! still holding whatever its commands left running. Each new tree's creation sweeps its parent
//! once: a `dsh-<pid>-…` directory whose `<pid>` no longer exists is removed when it holds no
//! process. One that still holds processes is left (and logged): they belong to a dead runtime's
//! commands, but deciding to kill them is for an operator, not for whichever runtime starts next.
//! The warning is given once per tree, not by every runtime that starts (every `dsh run`): the
//! first one marks the tree with the extended attribute [`WARNED`] (cgroupfs keeps `user.*`
//! attributes since Linux 5.7; where it cannot, the warning repeats).
//!
//! The pid in the name is read in this process's pid namespace; a cgroup parent shared with a
//! runtime in another pid namespace is not a configuration dsh supports (its pool would lose parked
//! leaves, which it recreates, see `LeafPool::acquire`).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::libc;

/// The extended attribute a tree carries once its warning was given.
const WARNED: &std::ffi::CStr = c"user.dsh.warned";

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
        } else if mark_warned(&entry.path()) {
            tracing::warn!(
                path = %entry.path().display(),
                "a dead runtime's cgroup tree still holds processes; left in place"
            );
        }
    }
    removed
}

/// Marks `dir` as warned about; whether it was not marked before (so the warning is due). A tree
/// that cannot carry the mark is always due.
fn mark_warned(dir: &Path) -> bool {
    let Ok(path) = CString::new(dir.as_os_str().as_bytes()) else {
        return true;
    };
    let mut byte = 0u8;
    // SAFETY: both strings are NUL-terminated and live across the call; the buffer is one valid,
    // writable byte and its length says so.
    let read = unsafe { libc::getxattr(path.as_ptr(), WARNED.as_ptr(), (&raw mut byte).cast(), 1) };
    if read >= 0 {
        return false;
    }
    // SAFETY: as above; the value is one readable byte and its length says so. XATTR_CREATE: of
    // two runtimes starting at once, one warns.
    let made = unsafe {
        libc::setxattr(
            path.as_ptr(),
            WARNED.as_ptr(),
            b"1".as_ptr().cast(),
            1,
            libc::XATTR_CREATE,
        )
    };
    made == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST)
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
