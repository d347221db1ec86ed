//! Process descriptors: signalling a process by pid without hitting a stranger that reused it.
//!
//! A pid read from `/proc` or `cgroup.procs` may belong to another process by the time a signal is
//! sent. A pidfd names one process for good: open it, then check through the pid that it is still
//! the process meant (it carries the marker, it is in the leaf), then signal through the pidfd. If
//! the process died after the open, the signal fails with ESRCH instead of reaching whoever holds
//! the pid now. The same holds for reaping a child ([`reap`]): through its pidfd, a wait can only
//! ever collect the child it was opened for.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use nix::libc;

/// `pidfd_open(pid, 0)`.
pub fn open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Registers `pidfd` with tokio's reactor for readability (its process's exit); needs a tokio
/// runtime with IO enabled.
pub fn watch(pidfd: OwnedFd) -> io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    // SAFETY: the descriptor moves into the `AsyncFd`, which keeps it open and unchanged until it
    // drops.
    unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE)
    }
    .map_err(|err| err.into_parts().1)
}

/// Resolves once the process of `pidfd` has exited (its pidfd is readable then); needs a tokio
/// runtime with IO enabled.
pub async fn exited(pidfd: OwnedFd) -> io::Result<()> {
    let watched = watch(pidfd)?;
    let _ready = watched.readable().await?;
    Ok(())
}

/// `pidfd_send_signal(pidfd, signal, NULL, 0)`: whether the signal was delivered.
pub fn send_signal(pidfd: &OwnedFd, signal: i32) -> bool {
    // SAFETY: a valid pidfd, a signal number, no siginfo and no flags.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0u32,
        )
    };
    r == 0
}

/// The wait status a `waitid` siginfo describes, as `waitpid` would have returned it.
pub fn wait_status(info: &libc::siginfo_t) -> ExitStatus {
    // SAFETY: `info` was filled in by waitid for a child's state change (a SIGCHLD siginfo).
    let status = unsafe { info.si_status() };
    let raw = match info.si_code {
        libc::CLD_EXITED => (status & 0xff) << 8,
        libc::CLD_DUMPED => status | 0x80,
        _ => status,
    };
    ExitStatus::from_raw(raw)
}

/// `waitid(P_PIDFD, pidfd, WEXITED | flags)`: reaps the child `pidfd` names once it has exited and
/// returns its status; `Ok(None)` while it runs (with `WNOHANG` in `flags`). Through the pidfd, never
/// through its pid: if someone else reaped the child first, this fails with ECHILD instead of
/// reaping a stranger that reused the pid. Retries on EINTR.
pub fn reap(pidfd: BorrowedFd<'_>, flags: i32) -> io::Result<Option<ExitStatus>> {
    waitid(libc::P_PIDFD, pidfd.as_raw_fd() as libc::id_t, flags)
}

/// `waitid(idtype, id, WEXITED | flags)`: the status of the child once it has exited; `Ok(None)`
/// while it runs (with `WNOHANG` in `flags`). Retries on EINTR.
///
/// The raw call rather than nix's `waitid`: nix turns the status into a `WaitStatus`, which cannot
/// hold a real-time signal (the conversion fails with EINVAL), and a child ended by one must still
/// settle with its signal.
pub(crate) fn waitid(
    idtype: libc::idtype_t,
    id: libc::id_t,
    flags: i32,
) -> io::Result<Option<ExitStatus>> {
    loop {
        // SAFETY: an all-zero siginfo is a valid out-buffer; with WNOHANG its pid stays 0 while the
        // child runs.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid on one child (by pid or pidfd) with a valid out-pointer.
        let result = unsafe { libc::waitid(idtype, id, &mut info, libc::WEXITED | flags) };
        if result == 0 {
            // SAFETY: waitid filled in a SIGCHLD siginfo or left it zeroed.
            if unsafe { info.si_pid() } == 0 {
                return Ok(None);
            }
            return Ok(Some(wait_status(&info)));
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            return Err(err);
        }
    }
}

/// `waitpid(pid, flags)`: reaps the child `pid` once it has exited and returns its status; `Ok(None)`
/// while it runs (with `WNOHANG` in `flags`). Retries on EINTR. The raw call for the reason
/// [`waitid`] gives: the status stays as the kernel gave it.
pub(crate) fn waitpid(pid: i32, flags: i32) -> io::Result<Option<ExitStatus>> {
    let mut status = 0;
    loop {
        // SAFETY: waitpid on one child with a valid out-pointer for the duration of the call.
        let reaped = unsafe { libc::waitpid(pid, &mut status, flags) };
        if reaped == pid {
            return Ok(Some(ExitStatus::from_raw(status)));
        }
        if reaped == 0 {
            return Ok(None);
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            return Err(err);
        }
    }
}
