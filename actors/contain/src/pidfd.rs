//! Process descriptors: signalling a process by pid without hitting a stranger that reused it.
//!
//! A pid read from `/proc` or `cgroup.procs` may belong to another process by the time a signal is
//! sent. A pidfd names one process for good: open it, then check through the pid that it is still
//! the process meant (it carries the marker, it is in the leaf), then signal through the pidfd. If
//! the process died after the open, the signal fails with ESRCH instead of reaching whoever holds
//! the pid now.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

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

/// Resolves once the process of `pidfd` has exited (its pidfd is readable then); needs a tokio
/// runtime with IO enabled.
pub async fn exited(pidfd: OwnedFd) -> io::Result<()> {
    // SAFETY: the descriptor moves into the `AsyncFd`, which keeps it open and unchanged until it
    // drops.
    let watched = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE)
    }
    .map_err(|err| err.into_parts().1)?;
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
