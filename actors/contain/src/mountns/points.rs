//! Mount points made in the private temp, and mounts attached on them, without following links.
//!
//! Why: the private temp is writable to confined commands, and a namespace is built again later (a
//! workspace made anew at the same path, a ruleset cache starting over). A command may have put a
//! symbolic link where a mount point goes (`/tmp/a → /anywhere`); dsh, root and unconfined, must
//! not follow it, neither to create directories wherever it leads nor to mount a workspace there.
//! Every step here resolves one name below a directory handle with `RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS`; a name that is a link or of the wrong kind is removed and made again (the
//! temp is the runtime's own), and a mount is attached to a handle of its target, not a path.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use nix::libc;

/// `MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH`: from a detached tree's handle to a target's.
const MOVE_MOUNT_BOTH_EMPTY: libc::c_uint = 0x4 | 0x40;

/// What a mount point must be.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Directory,
    File,
}

/// Makes `rest` (relative) below the directory `root` a mount point of `kind`, its parents
/// directories, replacing whatever link or wrong kind of entry a command left on the way.
pub(super) fn make_beneath(root: &Path, rest: &Path, kind: Kind) -> io::Result<()> {
    let names: Vec<&OsStr> = rest
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name),
            _ => None,
        })
        .collect();
    // The temp itself: dsh's own directory, named by its canonical path.
    let mut dir = open_how(
        libc::AT_FDCWD,
        root.as_os_str(),
        libc::O_PATH | libc::O_DIRECTORY,
        0,
    )?;
    for (i, name) in names.iter().enumerate() {
        let wanted = if i + 1 == names.len() {
            kind
        } else {
            Kind::Directory
        };
        let next = match open(dir.as_raw_fd(), name, wanted) {
            Ok(fd) => fd,
            Err(_) => {
                replace(dir.as_raw_fd(), name, wanted)?;
                open(dir.as_raw_fd(), name, wanted)?
            }
        };
        dir = next;
    }
    Ok(())
}

/// Attaches the detached tree `tree` on `target`, resolved with no symbolic link anywhere in it.
pub(super) fn attach(tree: &OwnedFd, target: &Path) -> io::Result<()> {
    let at = open_how(libc::AT_FDCWD, target.as_os_str(), libc::O_PATH, 0)?;
    // SAFETY: move_mount from a detached tree's handle to a target's handle, both with empty
    // paths (static NUL-terminated strings).
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            at.as_raw_fd(),
            c"".as_ptr(),
            MOVE_MOUNT_BOTH_EMPTY,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `name` below `dir`, no link followed, as a handle; an error unless it is of `kind`.
fn open(dir: RawFd, name: &OsStr, kind: Kind) -> io::Result<OwnedFd> {
    let fd = open_how(
        dir,
        name,
        libc::O_PATH | libc::O_NOFOLLOW,
        libc::RESOLVE_BENEATH,
    )?;
    // SAFETY: an all-zero `stat` is a valid out-buffer.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a handle we own and a valid out-pointer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut stat) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let is = match stat.st_mode & libc::S_IFMT {
        libc::S_IFDIR => Kind::Directory,
        libc::S_IFREG => Kind::File,
        _ => return Err(io::Error::from_raw_os_error(libc::ELOOP)),
    };
    if is != kind {
        return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
    }
    Ok(fd)
}

/// Removes whatever `name` below `dir` is (a link, a file, an empty directory; never following a
/// link) and makes it anew as `kind`, empty.
fn replace(dir: RawFd, name: &OsStr, kind: Kind) -> io::Result<()> {
    let c = CString::new(name.as_bytes()).map_err(io::Error::other)?;
    // SAFETY: unlinkat of one name below a handle we own; a missing name is no error here, and a
    // directory goes only if empty.
    unsafe {
        if libc::unlinkat(dir, c.as_ptr(), 0) != 0 {
            libc::unlinkat(dir, c.as_ptr(), libc::AT_REMOVEDIR);
        }
    }
    // SAFETY: mkdirat/openat of one name below a handle we own; O_EXCL and O_NOFOLLOW make a new
    // file or fail.
    let made = unsafe {
        match kind {
            Kind::Directory => libc::mkdirat(dir, c.as_ptr(), 0o700),
            Kind::File => {
                let fd = libc::openat(
                    dir,
                    c.as_ptr(),
                    libc::O_WRONLY
                        | libc::O_CREAT
                        | libc::O_EXCL
                        | libc::O_NOFOLLOW
                        | libc::O_CLOEXEC,
                    0o600,
                );
                if fd >= 0 {
                    libc::close(fd);
                }
                fd.min(0)
            }
        }
    };
    if made != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `path` below `dir` (or from `AT_FDCWD`), with no symbolic link anywhere, plus `resolve`.
fn open_how(dir: RawFd, path: &OsStr, flags: libc::c_int, resolve: u64) -> io::Result<OwnedFd> {
    let c = CString::new(path.as_bytes()).map_err(io::Error::other)?;
    crate::openat2::openat2(dir, &c, flags, libc::RESOLVE_NO_SYMLINKS | resolve)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_planted_link_is_replaced_and_never_followed() {
        let temp = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        // A command's link where a mount point's parent goes, and a file where a directory goes.
        std::os::unix::fs::symlink(elsewhere.path(), temp.path().join("a")).unwrap();
        std::fs::write(temp.path().join("f"), b"x").unwrap();
        make_beneath(temp.path(), Path::new("a/ws"), Kind::Directory).unwrap();
        make_beneath(temp.path(), Path::new("f/g"), Kind::File).unwrap();
        assert!(
            std::fs::read_dir(elsewhere.path())
                .unwrap()
                .next()
                .is_none()
        );
        let a = std::fs::symlink_metadata(temp.path().join("a")).unwrap();
        assert!(a.is_dir(), "the link was replaced by a directory");
        assert!(temp.path().join("a/ws").is_dir());
        assert!(temp.path().join("f").is_dir());
        assert!(temp.path().join("f/g").is_file());
        // What is already right is kept.
        std::fs::write(temp.path().join("a/ws/kept"), b"x").unwrap();
        make_beneath(temp.path(), Path::new("a/ws"), Kind::Directory).unwrap();
        assert!(temp.path().join("a/ws/kept").exists());
    }

    #[test]
    fn a_target_with_a_link_in_it_is_refused() {
        let temp = tempfile::tempdir().unwrap();
        std::fs::create_dir(temp.path().join("real")).unwrap();
        std::os::unix::fs::symlink("real", temp.path().join("link")).unwrap();
        let resolved = open_how(
            libc::AT_FDCWD,
            temp.path().join("link").as_os_str(),
            libc::O_PATH,
            0,
        );
        assert_eq!(
            resolved.err().and_then(|e| e.raw_os_error()),
            Some(libc::ELOOP)
        );
    }
}
