//! The sandbox's mount namespace: what Landlock does not mediate, a read-only mount refuses.
//!
//! Landlock controls opening, creating and removing files, not their metadata: a confined root
//! command (capabilities dropped, but owner of the files) can still `chmod`, `utimes`, set xattrs on,
//! hard-link or rename files outside its writable roots. A mount namespace in which `/` is read-only
//! and only the writable roots are bound read-write refuses all of these with `EROFS`, whatever the
//! file's owner, as bubblewrap's `--ro-bind / /` does.
//!
//! [`MountNamespace::build`] prepares one namespace in the unconfined parent, once per writable set
//! (the caller caches it): a short-lived thread unshares its mount namespace (allowed per thread),
//! makes every mount private (nothing done here propagates to the host, nothing the host mounts later
//! propagates in), takes detached copies (`open_tree(OPEN_TREE_CLONE | AT_RECURSIVE)`) of every
//! writable root, of every path that must stay visible (the workspace of a `read-only` command, made
//! read-only) and of the private temp, then makes the whole tree read-only
//! (`mount_setattr(AT_RECURSIVE, MOUNT_ATTR_RDONLY)`), attaches the private temp on `/tmp` and
//! `/var/tmp` (hiding the host's), a given directory on `/dev/shm` in place of the host's shared
//! memory ([`MountSpec::shm`]), and the copies on their own paths (the spill directory among the
//! visible ones, so results' spill paths stay readable), covers `/dev` with a small read-only `tmpfs`
//! holding only the devices commands need (`dev.rs`), mounts the namespace's own terminals
//! (`crate::devpts`), and keeps the namespace by a descriptor of `/proc/thread-self/ns/mnt`. Copies keep the host's own
//! mount flags, so a host read-only mount inside a workspace stays read-only. A writable root or
//! visible path below `/tmp` or `/var/tmp` gets an empty directory in the private temp to be mounted
//! on. The spawned child enters it with `enter` (`setns`), before its `chdir`.
//!
//! Needs `CAP_SYS_ADMIN` (and `CAP_SYS_CHROOT` for `setns`) and Linux 5.12 (`mount_setattr`); without
//! them [`MountNamespace::build`] fails and the caller runs without one (and says so).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::libc;

use crate::devpts::Devpts;

mod dev;
mod points;

const OPEN_TREE_CLONE: libc::c_uint = 1;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const MOUNT_ATTR_RDONLY: u64 = 0x1;
/// Where the host's POSIX shared memory is, which [`MountSpec::shm`] replaces.
pub const SHM: &str = "/dev/shm";

/// `struct mount_attr` (`MOUNT_ATTR_SIZE_VER0`).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// What the namespace shows writable, visible and as temp.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct MountSpec {
    /// Bound read-write on themselves (directories and regular files; devices need no bind: a
    /// read-only mount does not refuse writes to a device node).
    pub writable: Vec<PathBuf>,
    /// Bound read-only on themselves, so they stay visible below a covered `/tmp`.
    pub visible: Vec<PathBuf>,
    /// The private temp directory, mounted on `/tmp` and `/var/tmp` (read-write when it is in
    /// `writable`, else read-only).
    pub temp: Option<PathBuf>,
    /// A directory mounted read-write on `/dev/shm` instead of the host's shared memory (when it is
    /// in `writable`; it is not also bound on itself).
    pub shm: Option<PathBuf>,
}

/// A prepared mount namespace, held by a descriptor (shared: clones are cheap).
#[derive(Debug, Clone)]
pub struct MountNamespace {
    fd: Arc<OwnedFd>,
    /// Its private terminals (`crate::devpts`), where the host lets dsh mount them.
    devpts: Option<Arc<Devpts>>,
}

impl MountNamespace {
    /// Builds the namespace for `spec` on a thread of its own (see the module doc).
    pub fn build(spec: &MountSpec) -> io::Result<Self> {
        let spec = spec.clone();
        let (fd, devpts) = std::thread::Builder::new()
            .name("dsh-mountns".into())
            .spawn(move || prepare(&spec))?
            .join()
            .map_err(|_| io::Error::other("the mount namespace thread panicked"))??;
        Ok(Self {
            fd: Arc::new(fd),
            devpts: devpts.map(Arc::new),
        })
    }

    /// The namespace's descriptor, for `enter` in the child.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The namespace's own terminals, if it has them.
    pub fn devpts(&self) -> Option<&Devpts> {
        self.devpts.as_deref()
    }
}

/// Enters the namespace `fd` (`setns(CLONE_NEWNS)`; it resets the working directory and root to the
/// namespace's `/`). Async-signal-safe, for the spawned child.
pub(crate) fn enter(fd: RawFd) -> bool {
    // SAFETY: setns on a descriptor number the parent keeps open; it changes only this task.
    unsafe { libc::setns(fd, libc::CLONE_NEWNS) == 0 }
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(io::Error::other)
}

fn check(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(ret)
}

/// A detached recursive copy of the mount tree at `path`.
fn clone_tree(path: &Path) -> io::Result<OwnedFd> {
    let c = c_path(path)?;
    // SAFETY: open_tree with a NUL-terminated path; returns a new descriptor or -1.
    let fd = check(unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            c.as_ptr(),
            OPEN_TREE_CLONE | AT_RECURSIVE | libc::O_CLOEXEC as libc::c_uint,
        )
    })?;
    // SAFETY: open_tree just returned it and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Sets `MOUNT_ATTR_RDONLY` on every mount below `path` (or of the detached tree `dirfd`).
fn make_read_only(dirfd: RawFd, path: &Path, flags: libc::c_uint) -> io::Result<()> {
    let c = c_path(path)?;
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: mount_setattr with a NUL-terminated path and a valid attribute of the size given.
    check(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dirfd,
            c.as_ptr(),
            flags | AT_RECURSIVE,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    })?;
    Ok(())
}

/// The canonical temp targets that exist (`/tmp`, `/var/tmp`; one when one links to the other).
fn temp_targets() -> Vec<PathBuf> {
    let mut targets: Vec<PathBuf> = ["/tmp", "/var/tmp"]
        .iter()
        .filter_map(|t| std::fs::canonicalize(t).ok())
        .filter(|t| t.is_dir())
        .collect();
    targets.dedup();
    targets
}

/// Runs on the namespace's own thread: everything after `unshare` changes only this thread's view.
fn prepare(spec: &MountSpec) -> io::Result<(OwnedFd, Option<Devpts>)> {
    let targets = if spec.temp.is_some() {
        temp_targets()
    } else {
        Vec::new()
    };
    let binds = binds(spec);
    if let Some(temp) = &spec.temp {
        make_mount_points(temp, &targets, &binds)?;
    }
    // SAFETY: unshare of this thread's mount namespace (and its fs attributes, CLONE_FS implied).
    check(unsafe { libc::unshare(libc::CLONE_NEWNS) }.into())?;
    // SAFETY: a propagation change on `/` with static NUL-terminated strings and no data.
    let private = unsafe {
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    };
    check(private.into())?;
    let mut temps = Vec::new();
    if let Some(temp) = &spec.temp {
        for target in &targets {
            let tree = clone_tree(temp)?;
            // A mode that does not write the temp sees it read-only, metadata included.
            if !spec.writable.contains(temp) {
                make_read_only(tree.as_raw_fd(), Path::new(""), libc::AT_EMPTY_PATH as _)?;
            }
            temps.push((tree, target.clone()));
        }
    }
    let mut trees = Vec::new();
    for (path, writable) in &binds {
        let tree = clone_tree(path)?;
        if !writable {
            make_read_only(tree.as_raw_fd(), Path::new(""), libc::AT_EMPTY_PATH as _)?;
        }
        trees.push((tree, path.clone()));
    }
    // The session's shared memory, else the host's, read-only (as the rest of `/`).
    let shm = match &spec.shm {
        Some(shm) if spec.writable.contains(shm) => Some(clone_tree(shm)?),
        _ if Path::new(SHM).is_dir() => {
            let host = clone_tree(Path::new(SHM))?;
            make_read_only(host.as_raw_fd(), Path::new(""), libc::AT_EMPTY_PATH as _)?;
            Some(host)
        }
        _ => None,
    };
    let nodes = dev::clone_host_nodes()?;
    make_read_only(libc::AT_FDCWD, Path::new("/"), 0)?;
    dev::mount(&nodes)?;
    for (tree, target) in &temps {
        points::attach(tree, target)?;
    }
    if let Some(tree) = &shm {
        points::attach(tree, Path::new(SHM))?;
    }
    for (tree, path) in &trees {
        points::attach(tree, path)?;
    }
    // Without them the namespace still holds; its commands then make no terminals.
    let devpts = crate::devpts::mount_private()
        .inspect_err(|err| tracing::debug!(%err, "no private /dev/pts in the mount namespace"))
        .ok();
    let ns = c"/proc/thread-self/ns/mnt";
    // SAFETY: open with a static NUL-terminated path.
    let fd = check(unsafe { libc::open(ns.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) }.into())?;
    // SAFETY: open just returned it and nothing else owns it.
    Ok((unsafe { OwnedFd::from_raw_fd(fd as RawFd) }, devpts))
}

/// The paths bound on themselves (`true`: read-write), shortest first so a root nested in another
/// ends on top of it. The private temp is mounted on the temp targets instead.
fn binds(spec: &MountSpec) -> Vec<(PathBuf, bool)> {
    let mut binds: Vec<(PathBuf, bool)> = spec
        .writable
        .iter()
        .filter(|p| Some(*p) != spec.temp.as_ref() && Some(*p) != spec.shm.as_ref())
        .filter(|p| p.parent().is_some())
        .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.is_dir() || m.is_file()))
        .map(|p| (p.clone(), true))
        .chain(
            spec.visible
                .iter()
                .filter(|p| p.parent().is_some() && p.is_dir() && !spec.writable.contains(p))
                .map(|p| (p.clone(), false)),
        )
        .collect();
    binds.sort_by_key(|(p, _)| p.components().count());
    binds
}

/// An empty directory (or file) in the private temp for every bind below a temp target, so the
/// bind has a place once the temp covers the target; made without following a link a command may
/// have left there (`points`).
fn make_mount_points(
    temp: &Path,
    targets: &[PathBuf],
    binds: &[(PathBuf, bool)],
) -> io::Result<()> {
    for (path, _) in binds {
        for target in targets {
            let Ok(rest) = path.strip_prefix(target) else {
                continue;
            };
            if rest.as_os_str().is_empty() {
                continue;
            }
            let kind = if path.is_dir() {
                points::Kind::Directory
            } else {
                points::Kind::File
            };
            points::make_beneath(temp, rest, kind)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_outside_the_writable_set_is_read_only_inside_and_the_host_is_untouched() {
        let ns = match MountNamespace::build(&MountSpec::default()) {
            Ok(ns) => ns,
            // Not privileged here: nothing to check.
            Err(err) if err.raw_os_error() == Some(libc::EPERM) => return,
            Err(err) => panic!("{err}"),
        };
        let outside = tempfile::tempdir_in("/var").unwrap_or_else(|_| tempfile::tempdir().unwrap());
        let fd = ns.raw_fd();
        let path = outside.path().join("f");
        let verdict = std::thread::spawn(move || {
            // SAFETY: unshare this thread's fs attributes so setns may change them.
            assert_eq!(unsafe { libc::unshare(libc::CLONE_FS) }, 0);
            assert!(enter(fd));
            std::fs::write(&path, b"x").map_err(|e| e.raw_os_error())
        })
        .join()
        .unwrap();
        assert_eq!(verdict, Err(Some(libc::EROFS)));
        std::fs::write(outside.path().join("g"), b"x").unwrap();
    }
}
