//! Waiting for a cgroup to empty: `cgroup.events` changes `populated 1` to `populated 0` when the
//! last process of the cgroup and all its descendants has exited (zombies do not count), and the
//! kernel signals the change as an inotify `IN_MODIFY` on that file.
//!
//! The async wait registers the inotify descriptor with tokio; the blocking wait (for shutdown
//! paths and the watchdog, which run without a runtime) polls it with a deadline. Without inotify
//! both fall back to re-reading the file every 10 ms.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

use nix::libc;
use tokio::io::unix::AsyncFd;

use crate::error::{Error, Result};

const FALLBACK_POLL: Duration = Duration::from_millis(10);

/// Reads `populated` from a `cgroup.events` file.
pub fn populated(events: &Path) -> Result<bool> {
    let text = std::fs::read_to_string(events).map_err(|e| Error::io("read", events, e))?;
    Ok(field(&text, "populated").is_some_and(|v| v != 0))
}

/// The value of `key` in a flat-keyed cgroup file (`key value` per line).
pub fn field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        if k == key {
            v.trim().parse().ok()
        } else {
            None
        }
    })
}

/// An inotify descriptor watching one file for modification.
struct Watch(OwnedFd);

impl AsFd for Watch {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl AsRawFd for Watch {
    fn as_raw_fd(&self) -> i32 {
        self.0.as_raw_fd()
    }
}

fn register(watch: Watch) -> io::Result<AsyncFd<Watch>> {
    // SAFETY: the descriptor moves into the `AsyncFd` and stays open and unchanged until it drops.
    unsafe { AsyncFd::register_with_interest(watch, tokio::io::Interest::READABLE) }
        .map_err(|err| err.into_parts().1)
}

impl Watch {
    fn new(file: &Path) -> io::Result<Self> {
        // SAFETY: inotify_init1 takes flags and returns a new descriptor or -1.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel just returned this descriptor; nothing else owns it.
        let watch = Watch(unsafe { OwnedFd::from_raw_fd(fd) });
        let path = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(file.as_os_str()))
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: `path` is a valid NUL-terminated string for the duration of the call.
        let wd = unsafe { libc::inotify_add_watch(fd, path.as_ptr(), libc::IN_MODIFY) };
        if wd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(watch)
    }

    /// Reads and discards every queued event.
    fn drain(&self) {
        let mut buf = [0u8; 1024];
        loop {
            // SAFETY: `buf` is valid for writes of its length.
            let n = unsafe { libc::read(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                return;
            }
        }
    }

    /// Waits up to `timeout` for an event. `Ok(false)` on timeout.
    fn poll(&self, timeout: Duration) -> io::Result<bool> {
        let mut pfd = libc::pollfd {
            fd: self.0.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n < 0 {
            let err = io::Error::last_os_error();
            return if err.raw_os_error() == Some(libc::EINTR) {
                Ok(false)
            } else {
                Err(err)
            };
        }
        Ok(n > 0)
    }
}

/// Resolves once `events` (a `cgroup.events` file) says `populated 0`. Costs an inotify instance
/// only if the cgroup is populated at first: closing one waits for an RCU grace period.
pub async fn wait_unpopulated(events: &Path) -> Result<()> {
    if !populated(events)? {
        return Ok(());
    }
    // The watch is set up before the next read, so no change between the two is missed.
    let watch = Watch::new(events).and_then(register);
    loop {
        if !populated(events)? {
            return Ok(());
        }
        match &watch {
            Ok(fd) => {
                let mut ready = fd
                    .readable()
                    .await
                    .map_err(|e| Error::io("inotify wait", events, e))?;
                fd.get_ref().drain();
                ready.clear_ready();
            }
            Err(_) => tokio::time::sleep(FALLBACK_POLL).await,
        }
    }
}

/// Blocks until `events` says `populated 0`, or `timeout` passes (`Ok(false)`).
pub fn wait_unpopulated_blocking(events: &Path, timeout: Duration) -> Result<bool> {
    let deadline = Instant::now() + timeout;
    let watch = Watch::new(events).ok();
    loop {
        if !populated(events)? {
            return Ok(true);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        match &watch {
            Some(w) => {
                if w.poll(left.min(Duration::from_millis(500)))
                    .map_err(|e| Error::io("inotify poll", events, e))?
                {
                    w.drain();
                }
            }
            None => std::thread::sleep(FALLBACK_POLL.min(left)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::field;

    #[test]
    fn reads_flat_keyed_fields() {
        let text = "populated 1\nfrozen 0\n";
        assert_eq!(field(text, "populated"), Some(1));
        assert_eq!(field(text, "frozen"), Some(0));
        assert_eq!(field("oom 0\noom_kill 3\n", "oom_kill"), Some(3));
        assert_eq!(field(text, "missing"), None);
    }
}
