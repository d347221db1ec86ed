//! Waiting for and reaping our own children, without tokio's `Child`.
//!
//! Children are started with `posix_spawn` (see `spawn.rs`), so tokio does not know them. Each child
//! gets a pidfd, which becomes readable when the child exits; then `waitpid(pid, WNOHANG)` reaps exactly
//! that child. Nothing here ever calls `waitpid(-1)`, so tokio's own children are never stolen.
//! Without pidfd support (Linux < 5.3) a blocking-pool thread waits instead.

use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use nix::libc;
use tokio::io::unix::AsyncFd;
use tokio::sync::oneshot;

/// How a child's exit is awaited.
enum Watch {
    Pidfd(AsyncFd<OwnedFd>),
    Thread(oneshot::Receiver<io::Result<ExitStatus>>),
    Reaped(ExitStatus),
}

/// Waits for one child's exit and reaps it. If dropped first, a background task reaps it later, so no
/// zombie is left behind.
pub(crate) struct ExitWatcher {
    pid: i32,
    watch: Option<Watch>,
}

impl ExitWatcher {
    /// Must be called inside a tokio runtime with IO enabled. `pidfd` is the child's pidfd if the
    /// spawn gave one; otherwise one is opened here.
    pub(crate) fn new(pid: i32, pidfd: Option<OwnedFd>) -> Self {
        let pidfd = match pidfd {
            Some(fd) => Ok(fd),
            None => pidfd_open(pid),
        };
        let watch = match pidfd.and_then(register) {
            Ok(fd) => Watch::Pidfd(fd),
            Err(err) => {
                tracing::debug!(pid, %err, "no pidfd; waiting on a blocking thread");
                let (tx, rx) = oneshot::channel();
                tokio::task::spawn_blocking(move || {
                    let _ = tx.send(
                        waitpid(pid, 0)
                            .map(|status| status.unwrap_or_else(|| ExitStatus::from_raw(0))),
                    );
                });
                Watch::Thread(rx)
            }
        };
        Self {
            pid,
            watch: Some(watch),
        }
    }

    /// Resolves with the exit status once the child has exited (and been reaped). Cancel-safe.
    pub(crate) async fn wait(&mut self) -> io::Result<ExitStatus> {
        loop {
            match &mut self.watch {
                Some(Watch::Reaped(status)) => return Ok(*status),
                Some(Watch::Pidfd(fd)) => {
                    let mut ready = fd.readable().await?;
                    match waitpid(self.pid, libc::WNOHANG)? {
                        Some(status) => self.watch = Some(Watch::Reaped(status)),
                        None => ready.clear_ready(),
                    }
                }
                Some(Watch::Thread(rx)) => {
                    let status = rx
                        .await
                        .map_err(|_| io::Error::other("reaper thread vanished"))??;
                    self.watch = Some(Watch::Reaped(status));
                }
                None => return Err(io::Error::other("exit watcher already dropped")),
            }
        }
    }
}

impl Drop for ExitWatcher {
    fn drop(&mut self) {
        let pid = self.pid;
        match self.watch.take() {
            Some(Watch::Pidfd(fd)) => {
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    runtime.spawn(async move {
                        let mut watcher = ExitWatcher {
                            pid,
                            watch: Some(Watch::Pidfd(fd)),
                        };
                        let _ = watcher.wait().await;
                    });
                } else {
                    std::thread::spawn(move || waitpid(pid, 0));
                }
            }
            // A waiting thread reaps on its own; a reaped child needs nothing.
            Some(Watch::Thread(_)) | Some(Watch::Reaped(_)) | None => {}
        }
    }
}

/// Registers a pidfd with the reactor for readability (the child's exit).
fn register(fd: OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: the `OwnedFd` moves into the `AsyncFd`, which keeps it open and unchanged until dropped.
    unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
        .map_err(|err| err.into_parts().1)
}

fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    dsh_contain::pidfd::open(pid)
}

/// `waitpid(pid, flags)`: `Ok(None)` while the child still runs (with `WNOHANG`).
fn waitpid(pid: i32, flags: i32) -> io::Result<Option<ExitStatus>> {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid out-pointer for the duration of the call.
        let result = unsafe { libc::waitpid(pid, &mut status, flags) };
        if result == pid {
            crate::orphans::registry().forget(pid);
            return Ok(Some(ExitStatus::from_raw(status)));
        }
        if result == 0 {
            return Ok(None);
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            return Err(err);
        }
    }
}
