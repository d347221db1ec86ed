//! The kernel side of the gate: receiving a listener's notifications, reading what the stopped
//! thread asked for (its socket and address), and answering.
//!
//! Nothing the thread can change after this is trusted: the address is copied out of its memory
//! once ([`Request::address`]) and its socket is duplicated into dsh ([`Request::socket`], with
//! `pidfd_getfd`), so dsh connects the socket it checked to the address it checked. Answering with
//! "continue" would let the kernel read both again, after a second thread of the program had
//! swapped them; the gate never does.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use nix::libc::{self, c_int};

/// `PIDFD_THREAD` (Linux 6.9): a pidfd for the thread itself, not its thread group.
const PIDFD_THREAD: u32 = libc::O_EXCL as u32;
/// `sizeof(struct sockaddr_storage)`: the kernel refuses longer addresses with `EINVAL`.
const MAX_ADDRESS: usize = 128;

/// One `connect` a confined thread is stopped in.
pub(crate) struct Request {
    /// The notification's cookie, for [`answer`] and [`still_waiting`].
    pub id: u64,
    /// The stopped thread (in dsh's pid namespace).
    pub tid: i32,
    /// Its socket, duplicated into dsh.
    pub socket: OwnedFd,
    /// The address it passed, as copied from its memory.
    pub address: Vec<u8>,
}

/// What `listener` reports now (`poll` with no wait): its `revents`, 0 when nothing.
fn readiness(listener: BorrowedFd<'_>) -> libc::c_short {
    let mut poll = libc::pollfd {
        fd: listener.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll on one pollfd we own, no wait.
    match unsafe { libc::poll(&mut poll, 1, 0) } {
        1 => poll.revents,
        _ => 0,
    }
}

/// Whether a notification is pending on `listener` (no wait).
pub(crate) fn pending(listener: BorrowedFd<'_>) -> bool {
    readiness(listener) & libc::POLLIN != 0
}

/// Whether no process holds `listener`'s filter any more and nothing is pending (no wait). Only
/// the hang-up says so: the kernel also answers `POLLERR` when a signal interrupts its poll, with
/// the command still alive.
pub(crate) fn ended(listener: BorrowedFd<'_>) -> bool {
    let revents = readiness(listener);
    revents & libc::POLLHUP != 0 && revents & libc::POLLIN == 0
}

/// Receives one notification. `Ok(None)`: the thread it was for is gone (killed while waiting).
pub(crate) fn receive(listener: BorrowedFd<'_>) -> io::Result<Option<libc::seccomp_notif>> {
    // SAFETY: a zeroed seccomp_notif is what SECCOMP_IOCTL_NOTIF_RECV requires; the kernel fills it.
    let mut notif: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: the ioctl writes one seccomp_notif into `notif`.
    let ret = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_RECV,
            &mut notif,
        )
    };
    if ret == 0 {
        return Ok(Some(notif));
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::ENOENT | libc::EINTR) => Ok(None),
        _ => Err(err),
    }
}

/// Asks the kernel to wake the gate and the stopped thread synchronously (Linux 6.6,
/// `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP`): each `connect` pays one scheduler hand-off instead of
/// two wake-ups. Older kernels refuse it, which changes nothing but the latency.
pub(crate) fn wake_synchronously(listener: BorrowedFd<'_>) {
    const SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP: u64 = 1;
    // SAFETY: the ioctl reads one u64 of flags.
    unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS,
            SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP,
        )
    };
}

/// Whether the thread of notification `id` still waits for its answer (not killed, its pid not
/// reused): checked after reading its memory and descriptors.
pub(crate) fn still_waiting(listener: BorrowedFd<'_>, id: u64) -> bool {
    // SAFETY: the ioctl reads one u64.
    unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_ID_VALID,
            &id,
        ) == 0
    }
}

/// Answers notification `id`: the `connect` returns 0 (`errno` 0) or fails with `errno`. Whether
/// the answer reached its thread (it may have been killed, or interrupted by a signal).
pub(crate) fn answer(listener: BorrowedFd<'_>, id: u64, errno: i32) -> bool {
    let mut resp = libc::seccomp_notif_resp {
        id,
        val: 0,
        error: -errno,
        flags: 0,
    };
    // SAFETY: the ioctl reads one seccomp_notif_resp. A thread killed or interrupted meanwhile
    // makes it fail with ENOENT.
    unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SEND,
            &mut resp,
        ) == 0
    }
}

impl Request {
    /// What notification `notif` asks: its socket and address. `Err(errno)`: the answer the thread
    /// gets without a connect (a bad descriptor, a bad address pointer or length).
    pub(crate) fn read(notif: &libc::seccomp_notif) -> Result<Request, i32> {
        let tid = notif.pid as i32;
        let [fd, pointer, length, ..] = notif.data.args;
        let length = length as i32;
        if length < 0 || length as usize > MAX_ADDRESS {
            return Err(libc::EINVAL);
        }
        let address = read_memory(tid, pointer, length as usize)?;
        let socket = duplicate(tid, fd as c_int)?;
        Ok(Request {
            id: notif.id,
            tid,
            socket,
            address,
        })
    }
}

/// `len` bytes at `pointer` in thread `tid`'s memory (`process_vm_readv`); `EFAULT` when they cannot
/// be read, as the kernel would answer.
fn read_memory(tid: i32, pointer: u64, len: usize) -> Result<Vec<u8>, i32> {
    let mut buf = vec![0u8; len];
    if len == 0 {
        return Ok(buf);
    }
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: pointer as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: `local` covers `buf`, which is `len` bytes; the remote side is only read.
    let n = unsafe { libc::process_vm_readv(tid, &local, 1, &remote, 1, 0) };
    if n != len as isize {
        return Err(libc::EFAULT);
    }
    Ok(buf)
}

/// The thread's descriptor `fd`, duplicated into dsh (`pidfd_getfd`, close-on-exec).
fn duplicate(tid: i32, fd: c_int) -> Result<OwnedFd, i32> {
    let pidfd = open_pidfd(tid).map_err(|_| libc::ESRCH)?;
    // SAFETY: pidfd_getfd with a pidfd we own, a descriptor number and no flags; returns a new
    // descriptor or -1.
    let dup = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    if dup < 0 {
        let errno = io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EBADF);
        return Err(if errno == libc::EPERM {
            libc::EACCES
        } else {
            errno
        });
    }
    // SAFETY: pidfd_getfd just returned it and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(dup as c_int) })
}

/// A pidfd for thread `tid` (`PIDFD_THREAD`), or for its process on a kernel without that flag
/// (its descriptor table is the process's either way).
fn open_pidfd(tid: i32) -> io::Result<OwnedFd> {
    for flags in [PIDFD_THREAD, 0] {
        // SAFETY: pidfd_open with a pid and flags; returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, tid, flags) };
        if fd >= 0 {
            // SAFETY: pidfd_open just returned it and nothing else owns it.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd as c_int) });
        }
    }
    Err(io::Error::last_os_error())
}
