//! Pseudo-terminals for interactive tasks (issue 22): the pair, its size, and the child's side.
//!
//! A task started with `tty: true` runs with the slave side of a pseudo-terminal as its
//! controlling terminal and as fds 0, 1 and 2; the runtime keeps only the master. This module is
//! the kernel-facing part of that and nothing more:
//!
//! - [`Pty::open`] opens a pair with a given size. The master is non-blocking and close-on-exec
//!   (ready for tokio's `AsyncFd`); the slave is close-on-exec too, so that no other child inherits
//!   it: the spawn puts it on 0/1/2 with [`attach_terminal`], which clears the flag there. The
//!   parent drops its slave right after the spawn ([`Pty::take_slave`]), so that reading the master
//!   fails with `EIO` once every process of the task has closed the terminal (the end of output).
//! - [`attach_terminal`] is the child's part between `clone3` and `execve`: `setsid`,
//!   `TIOCSCTTY`, `dup2` onto 0/1/2. It is async-signal-safe (raw libc calls only, no allocation),
//!   so it fits the spawn's child code in [`crate::spawn`](mod@crate::spawn).
//! - What the input-wait check and the driver ask of a live terminal: [`line_mode`] (the `ECHO` and
//!   `ICANON` bits of the terminal's termios), [`foreground_group`] (`tcgetpgrp`),
//!   [`pending_output`] (bytes the program wrote that the runtime has not read yet), and
//!   [`resize`] (`TIOCSWINSZ`, which also sends `SIGWINCH` to the foreground group).
//!
//! Every query works on the master: for a pty master, Linux applies `TCGETS`, `TIOCGPGRP` and
//! `TIOCSWINSZ` to the pair's slave side, so the runtime never needs to hold the slave.

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::libc::{self, c_int};
use nix::sys::termios::{self, InputFlags, LocalFlags, SetArg};

use crate::devpts::Devpts;

/// A terminal size in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size {
    /// Lines.
    pub rows: u16,
    /// Columns.
    pub cols: u16,
}

impl Size {
    /// The contract's default, `40x120`.
    pub const DEFAULT: Size = Size {
        rows: 40,
        cols: 120,
    };
}

/// Why a pseudo-terminal could not be opened or asked.
#[derive(Debug, thiserror::Error)]
pub enum PtyError {
    /// `posix_openpt`, `grantpt` or `unlockpt` failed (`EMFILE`, `ENOSPC` when the kernel's
    /// `pty.max` is reached, `ENOENT` without `/dev/ptmx`).
    #[error("cannot open a pseudo-terminal: {0}")]
    Open(Errno),
    /// Opening the slave side failed.
    #[error("cannot open the pseudo-terminal's slave side: {0}")]
    Slave(Errno),
    /// A terminal ioctl (`TCGETS`, `TCSETS`, `TIOCSWINSZ`, `TIOCGPGRP`, `FIONREAD`) failed.
    #[error("terminal {what} failed: {errno}")]
    Ioctl {
        /// Which request.
        what: &'static str,
        /// The error.
        errno: Errno,
    },
}

/// The two terminal-mode bits that tell a prompt's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineMode {
    /// `ECHO`: typed characters are echoed back.
    pub echo: bool,
    /// `ICANON`: canonical (line) mode; a read returns a whole line. Line editors (readline,
    /// node's REPL, `less`, `vim`) switch it off (raw mode), which clears `ECHO` too.
    pub canonical: bool,
}

impl LineMode {
    /// A password-style prompt: a line-mode read with echo off (`read -s`, `ssh-keygen`,
    /// `getpass`). Raw mode with echo off is a line editor, not hidden input.
    pub fn hidden(self) -> bool {
        self.canonical && !self.echo
    }
}

/// An open pseudo-terminal pair: the master the runtime keeps and, until the spawn took it, the
/// slave.
#[derive(Debug)]
pub struct Pty {
    master: OwnedFd,
    slave: Option<OwnedFd>,
    slave_path: PathBuf,
    device: libc::dev_t,
}

impl Pty {
    /// Opens a pair of the given size, `IUTF8` set (so that line editing erases whole UTF-8
    /// characters), everything else as the kernel's default (`ECHO`, `ICANON`, `ISIG`, `ONLCR`).
    pub fn open(size: Size) -> Result<Pty, PtyError> {
        Self::open_in(size, None)
    }

    /// [`Pty::open`] in `devpts`, a sandbox's own terminals (`crate::devpts`), when given: the
    /// command's terminal is then one its mount namespace shows at [`Pty::slave_path`]. When the
    /// sandbox's commands hold all of them (`ENOSPC`), one of the host's: usable, though unnamed.
    pub fn open_in(size: Size, devpts: Option<&Devpts>) -> Result<Pty, PtyError> {
        let (master, slave_path, devpts) = match devpts.map(|d| (private_master(d), d)) {
            Some((Ok((master, path)), devpts)) => (master, path, Some(devpts)),
            None | Some((Err(PtyError::Open(Errno::ENOSPC)), _)) => {
                let (master, path) = host_master()?;
                (master, path, None)
            }
            Some((Err(err), _)) => return Err(err),
        };
        let slave = open_slave(&master, &slave_path, devpts)?;
        set_nonblocking(master.as_fd())?;
        let mut mode = termios::tcgetattr(&slave).map_err(|errno| PtyError::Ioctl {
            what: "TCGETS",
            errno,
        })?;
        mode.input_flags.insert(InputFlags::IUTF8);
        termios::tcsetattr(&slave, SetArg::TCSANOW, &mode).map_err(|errno| PtyError::Ioctl {
            what: "TCSETS",
            errno,
        })?;
        resize(master.as_fd(), size)?;
        let device = nix::sys::stat::fstat(&slave)
            .map_err(PtyError::Slave)?
            .st_rdev;
        Ok(Pty {
            master,
            slave: Some(slave),
            slave_path,
            device,
        })
    }

    /// The master side: read the program's output, write its input.
    pub fn master(&self) -> BorrowedFd<'_> {
        self.master.as_fd()
    }

    /// Gives the master away (to an `AsyncFd`), keeping nothing.
    pub fn into_master(self) -> OwnedFd {
        self.master
    }

    /// The slave side, for the spawn; `None` once taken. Drop it in the parent as soon as the
    /// child has it (after the spawn returned), or the master never reports the end of output.
    pub fn take_slave(&mut self) -> Option<OwnedFd> {
        self.slave.take()
    }

    /// The slave's path (`/dev/pts/N`), what `tty` prints inside.
    pub fn slave_path(&self) -> &Path {
        &self.slave_path
    }

    /// The slave's device number (`st_rdev`), for telling whether a process's descriptor or
    /// controlling terminal is this terminal.
    pub fn device(&self) -> libc::dev_t {
        self.device
    }

    /// See [`resize`].
    pub fn resize(&self, size: Size) -> Result<(), PtyError> {
        resize(self.master(), size)
    }

    /// See [`size`].
    pub fn size(&self) -> Result<Size, PtyError> {
        size(self.master())
    }

    /// See [`line_mode`].
    pub fn line_mode(&self) -> Result<LineMode, PtyError> {
        line_mode(self.master())
    }

    /// See [`foreground_group`].
    pub fn foreground_group(&self) -> Result<Option<i32>, PtyError> {
        foreground_group(self.master())
    }

    /// See [`pending_output`].
    pub fn pending_output(&self) -> Result<usize, PtyError> {
        pending_output(self.master())
    }
}

/// A master of the host's terminals, and its slave's path.
fn host_master() -> Result<(OwnedFd, PathBuf), PtyError> {
    let master = nix::pty::posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)
        .map_err(PtyError::Open)?;
    nix::pty::grantpt(&master).map_err(PtyError::Open)?;
    nix::pty::unlockpt(&master).map_err(PtyError::Open)?;
    let path = PathBuf::from(nix::pty::ptsname_r(&master).map_err(PtyError::Open)?);
    // SAFETY: `into_raw_fd` hands over the only owner of a valid, open descriptor.
    let master = unsafe { OwnedFd::from_raw_fd(master.into_raw_fd()) };
    Ok((master, path))
}

/// A master of `devpts`'s terminals, and its slave's path as the sandbox sees it.
fn private_master(devpts: &Devpts) -> Result<(OwnedFd, PathBuf), PtyError> {
    devpts
        .open_master()
        .map_err(|err| PtyError::Open(Errno::from_raw(err.raw_os_error().unwrap_or(libc::EIO))))
}

/// Opens the slave through the master (`TIOCGPTPEER`, Linux 4.13+: no path lookup, so it works
/// in any mount namespace), falling back to the path: in `devpts` when the master is one of its
/// (dsh's own `/dev/pts/N` would be the host's terminal of that number).
fn open_slave(master: &OwnedFd, path: &Path, devpts: Option<&Devpts>) -> Result<OwnedFd, PtyError> {
    let flags = libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC;
    // SAFETY: TIOCGPTPEER takes the open flags as its integer argument and returns a new
    // descriptor or -1; `master` is a valid descriptor for the call's duration.
    let fd = unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCGPTPEER, flags) };
    if fd >= 0 {
        // SAFETY: the kernel just returned this new descriptor; nothing else owns it.
        return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
    }
    let (dir, path) = match devpts {
        Some(devpts) => (
            devpts.root().as_raw_fd(),
            path.file_name().map(Path::new).unwrap_or(path),
        ),
        None => (libc::AT_FDCWD, path),
    };
    let c_path =
        CString::new(path.as_os_str().as_bytes()).map_err(|_| PtyError::Slave(Errno::EINVAL))?;
    // SAFETY: `c_path` is a valid NUL-terminated string for the call's duration, relative to a
    // directory handle `devpts` keeps open, or to the working directory.
    let fd = unsafe { libc::openat(dir, c_path.as_ptr(), flags) };
    if fd < 0 {
        return Err(PtyError::Slave(Errno::last()));
    }
    // SAFETY: as above, a new descriptor only we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn set_nonblocking(fd: BorrowedFd<'_>) -> Result<(), PtyError> {
    let ioctl_err = |errno| PtyError::Ioctl {
        what: "F_SETFL",
        errno,
    };
    let flags = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFL).map_err(ioctl_err)?;
    let flags = OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETFL(flags)).map_err(ioctl_err)?;
    Ok(())
}

/// The master, registered with tokio's reactor for reads and writes (it is non-blocking since
/// [`Pty::open`]). Must be called inside a tokio runtime with IO enabled.
pub fn watch_master(master: OwnedFd) -> std::io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    // SAFETY: the descriptor moves into the `AsyncFd`, which keeps it open and unchanged until it
    // is dropped; an `OwnedFd` always returns the same descriptor.
    unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(
            master,
            tokio::io::Interest::READABLE | tokio::io::Interest::WRITABLE,
        )
    }
    .map_err(|err| err.into_parts().1)
}

/// Sets the terminal's size (`TIOCSWINSZ` on the master); the kernel sends `SIGWINCH` to the
/// foreground process group when it changed.
pub fn resize(master: BorrowedFd<'_>, size: Size) -> Result<(), PtyError> {
    let ws = libc::winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one `winsize` from the pointer, valid for the call.
    let rc = unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &ws) };
    if rc < 0 {
        return Err(PtyError::Ioctl {
            what: "TIOCSWINSZ",
            errno: Errno::last(),
        });
    }
    Ok(())
}

/// The terminal's size (`TIOCGWINSZ`).
pub fn size(master: BorrowedFd<'_>) -> Result<Size, PtyError> {
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` through the pointer, valid for the call.
    let rc = unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) };
    if rc < 0 {
        return Err(PtyError::Ioctl {
            what: "TIOCGWINSZ",
            errno: Errno::last(),
        });
    }
    Ok(Size {
        rows: ws.ws_row,
        cols: ws.ws_col,
    })
}

/// The terminal's `ECHO` and `ICANON` bits, as the program at the other end last set them.
pub fn line_mode(master: BorrowedFd<'_>) -> Result<LineMode, PtyError> {
    let mode = termios::tcgetattr(master).map_err(|errno| PtyError::Ioctl {
        what: "TCGETS",
        errno,
    })?;
    Ok(LineMode {
        echo: mode.local_flags.contains(LocalFlags::ECHO),
        canonical: mode.local_flags.contains(LocalFlags::ICANON),
    })
}

/// The terminal's foreground process group, `None` while it has none (before the child made
/// it its controlling terminal, or after the session ended).
pub fn foreground_group(master: BorrowedFd<'_>) -> Result<Option<i32>, PtyError> {
    match nix::unistd::tcgetpgrp(master) {
        Ok(pgrp) if pgrp.as_raw() > 0 => Ok(Some(pgrp.as_raw())),
        Ok(_) => Ok(None),
        Err(errno) => Err(PtyError::Ioctl {
            what: "TIOCGPGRP",
            errno,
        }),
    }
}

/// Bytes waiting to be read from the master (`FIONREAD`): output the program wrote that the
/// runtime has not taken yet. Zero means the program's output is drained.
pub fn pending_output(master: BorrowedFd<'_>) -> Result<usize, PtyError> {
    let mut count: c_int = 0;
    // SAFETY: FIONREAD writes one `int` through the pointer, valid for the call.
    let rc = unsafe { libc::ioctl(master.as_raw_fd(), libc::FIONREAD, &mut count) };
    if rc < 0 {
        return Err(PtyError::Ioctl {
            what: "FIONREAD",
            errno: Errno::last(),
        });
    }
    Ok(usize::try_from(count).unwrap_or(0))
}

/// The step of [`attach_terminal`] that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachStep {
    /// `setsid`.
    Setsid,
    /// `ioctl(TIOCSCTTY)`: making the slave the controlling terminal.
    ControllingTerminal,
    /// `dup2` onto 0, 1 or 2, or clearing close-on-exec there.
    Stdio,
}

/// A failed [`attach_terminal`]: the step and the errno, plain data so that the child can report
/// it without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttachFailure {
    /// Which step.
    pub step: AttachStep,
    /// The errno it failed with.
    pub errno: c_int,
}

/// The child's side, between `clone3` (or `fork`) and `execve`: start a new session (unless the
/// caller did already), make `slave` the controlling terminal, and put it on fds 0, 1 and 2
/// (without close-on-exec); `slave` itself is closed when it is above 2.
///
/// Makes only async-signal-safe calls (`setsid`, `ioctl`, `dup2`, `fcntl`, `close`) and touches
/// no memory but the errno slot, so it may run in a forked copy of a multi-threaded process or in
/// a `CLONE_VM` child on its own stack.
///
/// # Safety
///
/// Only call it in a freshly created child that is about to exec: it replaces the calling
/// process's session, controlling terminal and standard descriptors. `slave` must be an open
/// descriptor of a pseudo-terminal slave.
pub unsafe fn attach_terminal(slave: RawFd, new_session: bool) -> Result<(), AttachFailure> {
    let fail = |step| AttachFailure {
        step,
        errno: Errno::last_raw(),
    };
    // SAFETY: setsid takes no arguments; the caller guarantees a fresh child about to exec.
    if new_session && unsafe { libc::setsid() } < 0 {
        return Err(fail(AttachStep::Setsid));
    }
    // SAFETY: TIOCSCTTY takes an integer (0: do not steal a terminal another session holds).
    if unsafe { libc::ioctl(slave, libc::TIOCSCTTY, 0) } < 0 {
        return Err(fail(AttachStep::ControllingTerminal));
    }
    for target in 0..3 {
        if slave == target {
            // dup2 onto itself keeps close-on-exec; clear it by hand.
            // SAFETY: F_SETFD takes an integer; `slave` is the caller's open descriptor.
            if unsafe { libc::fcntl(slave, libc::F_SETFD, 0) } < 0 {
                return Err(fail(AttachStep::Stdio));
            }
        // SAFETY: dup2 on integers; replacing 0–2 in the fresh child is the point.
        } else if unsafe { libc::dup2(slave, target) } < 0 {
            return Err(fail(AttachStep::Stdio));
        }
    }
    if slave > 2 {
        // SAFETY: the caller's descriptor, now duplicated onto 0–2 and no longer needed.
        unsafe { libc::close(slave) };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_pair_has_the_size_and_the_default_line_mode() {
        let pty = Pty::open(Size { rows: 30, cols: 90 }).unwrap();
        assert_eq!(pty.size().unwrap(), Size { rows: 30, cols: 90 });
        let mode = pty.line_mode().unwrap();
        assert!(mode.echo && mode.canonical && !mode.hidden());
        assert!(pty.slave_path().starts_with("/dev/pts"));
        assert_eq!(pty.foreground_group().unwrap(), None);
        assert_eq!(pty.pending_output().unwrap(), 0);
        let flags = nix::fcntl::fcntl(pty.master(), nix::fcntl::FcntlArg::F_GETFL).unwrap();
        assert_ne!(flags & libc::O_NONBLOCK, 0, "master must be non-blocking");
        let fd_flags = nix::fcntl::fcntl(pty.master(), nix::fcntl::FcntlArg::F_GETFD).unwrap();
        assert_ne!(
            fd_flags & libc::FD_CLOEXEC,
            0,
            "master must be close-on-exec"
        );
    }

    #[test]
    fn hidden_means_echo_off_in_line_mode_only() {
        let hidden = |echo, canonical| LineMode { echo, canonical }.hidden();
        assert!(hidden(false, true));
        assert!(!hidden(false, false));
        assert!(!hidden(true, true));
        assert!(!hidden(true, false));
    }
}
