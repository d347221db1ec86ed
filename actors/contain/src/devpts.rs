//! The sandbox's own terminals: a private `devpts` instance in the read-only mount namespace.
//!
//! Why: programs make pseudo-terminals (`script`, `tmux`, `expect`, pty-based tests) by opening
//! `/dev/ptmx` and then their `/dev/pts/N`. The host's `/dev/pts` holds every other terminal of the
//! machine, the user's own among them, and a command that may open those may read what is typed
//! there; so Landlock alone grants neither. In the namespace (`crate::mountns`), dsh mounts a new
//! `devpts` instance on `/dev/pts` (`newinstance`: it starts empty and shows only the terminals
//! made through it) and binds its `ptmx` on `/dev/ptmx`, as bubblewrap's `--dev` does. The handles
//! kept here let the Landlock ruleset grant exactly that instance (a path opened by dsh outside the
//! namespace would name the host's) and let dsh open a `tty: true` command's terminal from it, so
//! the command's own terminal is one its namespace shows (`tty` prints a path that exists there).
//!
//! Runs on the namespace's thread, after it unshared its mount namespace; a host where `devpts`
//! cannot be mounted this way keeps the host's, ungranted (the terminals are then refused, as
//! before).

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use nix::libc;

/// The private instance: an `O_PATH` handle of its root (`/dev/pts`) and of its `ptmx`.
#[derive(Debug)]
pub struct Devpts {
    root: OwnedFd,
    ptmx: OwnedFd,
}

impl Devpts {
    /// The instance's root, granted writable below (its terminals).
    pub fn root(&self) -> BorrowedFd<'_> {
        self.root.as_fd()
    }

    /// Its `ptmx`, granted writable on itself (bound on `/dev/ptmx`, which a walk from the
    /// instance's root never reaches).
    pub fn ptmx(&self) -> BorrowedFd<'_> {
        self.ptmx.as_fd()
    }

    /// Opens a new terminal's master in this instance (`O_NOCTTY`, close-on-exec), unlocked, and
    /// its slave's path as the namespace shows it (`/dev/pts/<n>`; `grantpt` has nothing to do on
    /// a `devpts` the opener's own).
    pub fn open_master(&self) -> io::Result<(OwnedFd, PathBuf)> {
        // SAFETY: openat relative to a directory handle we own, with a static NUL-terminated name.
        let fd = unsafe {
            libc::openat(
                self.root.as_raw_fd(),
                c"ptmx".as_ptr(),
                libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: openat just returned it and nothing else owns it.
        let master = unsafe { OwnedFd::from_raw_fd(fd) };
        let (mut unlock, mut number): (libc::c_int, libc::c_uint) = (0, 0);
        // SAFETY: TIOCSPTLCK and TIOCGPTN on a master we own, each with a pointer to an int.
        let done = unsafe {
            libc::ioctl(master.as_raw_fd(), libc::TIOCSPTLCK, &mut unlock) == 0
                && libc::ioctl(master.as_raw_fd(), libc::TIOCGPTN, &mut number) == 0
        };
        if !done {
            return Err(io::Error::last_os_error());
        }
        Ok((master, PathBuf::from(format!("/dev/pts/{number}"))))
    }
}

/// Mounts the private instance on `/dev/pts` and its `ptmx` on `/dev/ptmx` (unless that is a link,
/// which then leads into the instance already). On the namespace's thread only.
pub(crate) fn mount_private() -> io::Result<Devpts> {
    if !Path::new("/dev/pts").is_dir() {
        return Err(io::Error::from_raw_os_error(libc::ENOENT));
    }
    // SAFETY: mount with static NUL-terminated strings; it changes only this thread's namespace.
    let mounted = unsafe {
        libc::mount(
            c"devpts".as_ptr(),
            c"/dev/pts".as_ptr(),
            c"devpts".as_ptr(),
            libc::MS_NOSUID | libc::MS_NOEXEC,
            MOUNT_OPTIONS.as_ptr().cast(),
        )
    };
    check(mounted)?;
    let held = bind_ptmx().and_then(|()| {
        Ok(Devpts {
            root: open_path(c"/dev/pts", libc::O_DIRECTORY)?,
            ptmx: open_path(c"/dev/pts/ptmx", 0)?,
        })
    });
    if held.is_err() {
        // Half made is not kept: the host's `/dev/pts` shows again, ungranted.
        // SAFETY: unmounting the instance mounted above, by a static NUL-terminated path.
        unsafe { libc::umount2(c"/dev/pts".as_ptr(), libc::MNT_DETACH) };
    }
    held
}

/// `newinstance`: a `devpts` of its own, empty. `max`: at most this many terminals per instance
/// (one per agent session and policy), so one session's commands cannot take the kernel's shared
/// pool of non-initial instances (`kernel.pty.max` less the reserve of the initial one, 3072 by
/// default) from other sandboxes and containers; many sessions each holding their 64 still could.
const MOUNT_OPTIONS: &CStr = c"newinstance,ptmxmode=0666,mode=0620,max=64";

/// Binds the instance's `ptmx` on `/dev/ptmx`, unless that is a link (leading into the instance
/// already).
fn bind_ptmx() -> io::Result<()> {
    if std::fs::symlink_metadata("/dev/ptmx").is_ok_and(|m| m.is_symlink()) {
        return Ok(());
    }
    // SAFETY: a bind mount between static NUL-terminated paths, in this thread's namespace.
    let bound = unsafe {
        libc::mount(
            c"/dev/pts/ptmx".as_ptr(),
            c"/dev/ptmx".as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    };
    check(bound)
}

fn open_path(path: &CStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: open with a NUL-terminated path; O_PATH opens nothing for reading or writing.
    let fd: RawFd = unsafe { libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC | flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: open just returned it and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn check(ret: libc::c_int) -> io::Result<()> {
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
