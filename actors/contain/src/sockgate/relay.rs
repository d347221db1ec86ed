//! Connecting a confined thread's socket on its behalf, with the semantics its own `connect` has.
//!
//! dsh holds a duplicate of the thread's socket (one open file, shared), so whatever dsh connects
//! is connected for the thread. A blocking socket is made non-blocking for the call only, so dsh
//! never blocks: a TCP connect in progress is awaited (up to the socket's `SO_SNDTIMEO`) while the
//! thread stays stopped; a Unix listener whose backlog is full is tried again until it takes the
//! connection or the thread is gone. A non-blocking socket gets the kernel's answer as it is
//! (`EINPROGRESS`, `EAGAIN`).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use nix::libc::{self, c_int};
use tokio::io::unix::AsyncFd;

/// How long to wait before trying a full Unix backlog again (doubling up to the second value).
const BACKLOG_RETRY: Duration = Duration::from_millis(5);
const BACKLOG_RETRY_MAX: Duration = Duration::from_millis(200);
/// How often a connect in progress asks whether its thread still waits.
const GONE_CHECK: Duration = Duration::from_secs(1);

/// `getsockopt(SOL_SOCKET, name)` into a `T` (an integer, `ucred`, `timeval`: plain data).
fn option<T: Copy>(socket: BorrowedFd<'_>, name: c_int, mut value: T) -> Result<T, i32> {
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes, the size of `value`.
    let ret = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            name,
            (&mut value as *mut T).cast(),
            &mut len,
        )
    };
    if ret != 0 {
        return Err(last_errno());
    }
    Ok(value)
}

/// `getsockopt(SOL_SOCKET, name)` as an integer.
pub(crate) fn int_option(socket: BorrowedFd<'_>, name: c_int) -> Result<c_int, i32> {
    option(socket, name, 0)
}

fn last_errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// The pid of the peer a connected Unix socket reached (`SO_PEERCRED`), 0 when unknown.
pub(crate) fn peer_pid(socket: BorrowedFd<'_>) -> i32 {
    let none = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    option(socket, libc::SO_PEERCRED, none).map_or(0, |cred| cred.pid)
}

/// Ends a connection dsh made but the policy refuses after all (an abstract peer outside the
/// sandbox): nothing can be read or written through it.
pub(crate) fn sever(socket: BorrowedFd<'_>) {
    // SAFETY: shutdown on a socket descriptor we hold.
    unsafe { libc::shutdown(socket.as_raw_fd(), libc::SHUT_RDWR) };
}

/// One `connect(2)` of `socket` to the raw `address`, made non-blocking for the call. Returns the
/// errno (0 on success) and whether the socket was blocking.
fn connect_once(socket: BorrowedFd<'_>, address: &[u8]) -> (i32, bool) {
    let fd = socket.as_raw_fd();
    // SAFETY: fcntl on a descriptor we hold.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    let blocking = flags >= 0 && flags & libc::O_NONBLOCK == 0;
    if blocking {
        // SAFETY: as above.
        unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) };
    }
    // SAFETY: `address` is valid for its length, which fits a socklen_t (at most 128 bytes).
    let ret = unsafe {
        libc::connect(
            fd,
            address.as_ptr().cast(),
            address.len() as libc::socklen_t,
        )
    };
    let errno = if ret == 0 { 0 } else { last_errno() };
    if blocking {
        // SAFETY: as above; the thread's flags as they were.
        unsafe { libc::fcntl(fd, libc::F_SETFL, flags) };
    }
    (errno, blocking)
}

/// The socket's `SO_SNDTIMEO`, which bounds a blocking connect; `None`: no bound.
fn send_timeout(socket: BorrowedFd<'_>) -> Option<Duration> {
    let zero = libc::timeval {
        tv_sec: 0,
        tv_usec: 0,
    };
    let tv = option(socket, libc::SO_SNDTIMEO, zero).ok()?;
    let timeout = Duration::from_secs(tv.tv_sec.max(0) as u64)
        + Duration::from_micros(tv.tv_usec.max(0) as u64);
    (!timeout.is_zero()).then_some(timeout)
}

/// Connects an Internet socket: the errno its own `connect` would have returned. `waiting` says
/// whether the thread still waits; a blocking connect in progress is given up (and dsh's copy of
/// the socket closed) within [`GONE_CHECK`] of the thread's end, so a killed command's connects to
/// a black hole hold nothing of dsh's for the two minutes TCP would try.
pub(crate) async fn connect_inet(
    socket: OwnedFd,
    address: &[u8],
    waiting: impl Fn() -> bool,
) -> i32 {
    let (errno, blocking) = connect_once(socket.as_fd(), address);
    if !blocking || !matches!(errno, libc::EINPROGRESS | libc::EALREADY) {
        return errno;
    }
    let timeout = send_timeout(socket.as_fd());
    // SAFETY: the descriptor moves into the `AsyncFd` and stays open and unchanged until it drops.
    let registered =
        unsafe { AsyncFd::register_with_interest(socket, tokio::io::Interest::WRITABLE) };
    let Ok(watched) = registered else {
        return libc::EIO;
    };
    let writable = async {
        match watched.writable().await {
            Ok(mut guard) => {
                guard.clear_ready();
                int_option(watched.get_ref().as_fd(), libc::SO_ERROR).unwrap_or_else(|e| e)
            }
            Err(err) => err.raw_os_error().unwrap_or(libc::EIO),
        }
    };
    let gone = async {
        loop {
            tokio::time::sleep(GONE_CHECK).await;
            if !waiting() {
                return libc::EINTR;
            }
        }
    };
    let bounded = async {
        match timeout {
            Some(limit) => tokio::time::timeout(limit, writable)
                .await
                .unwrap_or(libc::EINPROGRESS),
            None => writable.await,
        }
    };
    tokio::select! {
        errno = bounded => errno,
        errno = gone => errno,
    }
}

/// Connects a Unix socket to `address` (a path as `/proc/self/fd/N`, or an abstract name): the
/// errno its own `connect` would have returned. `waiting` says whether the thread still waits.
pub(crate) async fn connect_unix(
    socket: BorrowedFd<'_>,
    address: &[u8],
    waiting: impl Fn() -> bool,
) -> i32 {
    let mut pause = BACKLOG_RETRY;
    let mut asked = tokio::time::Instant::now();
    loop {
        let (errno, blocking) = connect_once(socket, address);
        if errno != libc::EAGAIN || !blocking {
            return errno;
        }
        // Whether the thread still waits costs the kernel a walk of the listener's pending
        // notifications: asked about once a second, not at every try.
        if asked.elapsed() >= GONE_CHECK {
            if !waiting() {
                return errno;
            }
            asked = tokio::time::Instant::now();
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(BACKLOG_RETRY_MAX);
    }
}

/// A `sockaddr_un` for `path` (at most 107 bytes).
pub(crate) fn unix_address(path: &str) -> Vec<u8> {
    let mut bytes = (libc::AF_UNIX as u16).to_ne_bytes().to_vec();
    bytes.extend_from_slice(path.as_bytes());
    bytes.push(0);
    bytes
}
