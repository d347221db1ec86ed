//! The namespace's own `/dev`: the few devices a command needs, and none of the host's others.
//!
//! Why: Landlock grants reading everything below `/`, and a confined command runs as dsh's user. As
//! root (or as a user in the `audio`, `video`, `input` or `disk` groups) that user may read the
//! host's devices by their permission bits: the consoles' screens (`/dev/vcs*`) and terminals
//! (`/dev/tty<N>`, `/dev/console`), keyboards and mice (`/dev/input/*`), microphones and cameras
//! (`/dev/snd/*`, `/dev/video*`), raw disks. So the namespace mounts a small read-only `tmpfs` on
//! `/dev` holding what bubblewrap's `--dev` holds: `null`, `zero`, `full`, `random`, `urandom` and
//! `tty` (the host's nodes, bound on empty files, read-only so their metadata cannot change), the
//! links `fd`, `stdin`, `stdout`, `stderr` (into `/proc/self/fd`) and `ptmx` (into `pts`), and the
//! directories `pts` (where `crate::devpts` mounts the namespace's terminals) and `shm` (the
//! session's shared memory, or the host's, read-only, as before).
//!
//! The host's nodes are cloned before the `tmpfs` covers them. The Landlock ruleset's grants of
//! `/dev/null` and `/dev/tty` name the host's inodes, which the binds show unchanged.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::libc;

use super::{check, clone_tree, make_read_only, points};

/// The host's device nodes the namespace shows.
const NODES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

/// The links the namespace's `/dev` holds, and where they lead.
const LINKS: [(&str, &str); 5] = [
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
    ("ptmx", "pts/ptmx"),
];

/// The host's nodes, cloned while they are still visible: each a detached, read-only bind.
pub(super) struct HostNodes {
    nodes: Vec<(OwnedFd, &'static str)>,
}

/// Clones the host's nodes that exist (a host without `/dev/full` shows none there).
pub(super) fn clone_host_nodes() -> io::Result<HostNodes> {
    let mut nodes = Vec::new();
    for name in NODES {
        let path = Path::new("/dev").join(name);
        if std::fs::symlink_metadata(&path).is_err() {
            continue;
        }
        let tree = clone_tree(&path)?;
        make_read_only(tree.as_raw_fd(), Path::new(""), libc::AT_EMPTY_PATH as _)?;
        nodes.push((tree, name));
    }
    Ok(HostNodes { nodes })
}

/// Covers `/dev` with the small `tmpfs`, then binds `host`'s nodes in it and makes it read-only.
/// Mounts on `/dev/shm` and `/dev/pts` come after, on the directories made here.
pub(super) fn mount(host: &HostNodes) -> io::Result<()> {
    // SAFETY: mount with static NUL-terminated strings; it changes only this thread's namespace.
    let mounted = unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            c"/dev".as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NOEXEC,
            c"mode=0755,size=64k".as_ptr().cast(),
        )
    };
    check(mounted.into())?;
    for dir in ["pts", "shm"] {
        let path = c_dev(dir)?;
        // SAFETY: mkdir with a NUL-terminated path in the tmpfs just mounted.
        check(unsafe { libc::mkdir(path.as_ptr(), 0o755) }.into())?;
    }
    for (name, target) in LINKS {
        let (target, path) = (CString::new(target)?, c_dev(name)?);
        // SAFETY: symlink with two NUL-terminated strings.
        check(unsafe { libc::symlink(target.as_ptr(), path.as_ptr()) }.into())?;
    }
    for (_, name) in &host.nodes {
        let path = c_dev(name)?;
        let flags = libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC;
        // SAFETY: open with a NUL-terminated path; creates an empty file to mount on.
        let fd = check(unsafe { libc::open(path.as_ptr(), flags, 0o666) }.into())?;
        // SAFETY: the descriptor open returned, closed once.
        unsafe { libc::close(fd as libc::c_int) };
    }
    make_read_only(libc::AT_FDCWD, Path::new("/dev"), 0)?;
    for (tree, name) in &host.nodes {
        points::attach(tree, &Path::new("/dev").join(name))?;
    }
    Ok(())
}

/// `/dev/<name>` as a C string.
fn c_dev(name: &str) -> io::Result<CString> {
    CString::new(Path::new("/dev").join(name).as_os_str().as_bytes()).map_err(io::Error::other)
}
