//! Waiting for and reaping our own children, without tokio's `Child`.
//!
//! Children are started with `clone3` ([`crate::spawn()`]), so tokio does not know them. Each child
//! comes with a pidfd (`CLONE_PIDFD`), which becomes readable when the child exits. Its exit status is then read with
//! `waitid(WNOWAIT)`, which leaves it a zombie, and it is reaped only when [`ExitWatcher::reap`] is
//! called (the driver does so when the process has settled): while the zombie is there, its pid —
//! which is also its process group's number — cannot be handed to another process, so every group
//! signal the driver sends before settlement reaches our group and no other. Nothing here ever calls
//! `waitpid(-1)`, so tokio's own children are never stolen. Without pidfd support (Linux < 5.3) a
//! blocking-pool thread waits instead.

use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use nix::libc;
use tokio::io::unix::AsyncFd;
use tokio::sync::oneshot;

/// Where the wait for a child's exit stands.
enum Watch {
    /// Running: its pidfd becomes readable when it exits.
    Pidfd(AsyncFd<OwnedFd>),
    /// Running, watched by a blocking thread (no pidfd).
    Thread(oneshot::Receiver<io::Result<ExitStatus>>),
    /// Exited and still a zombie: its pid and group number are pinned until [`ExitWatcher::reap`].
    Exited(ExitStatus),
    /// Exited and reaped.
    Reaped(ExitStatus),
}

/// Waits for one child's exit, and reaps it when told to. If dropped first, it reaps the child then
/// (or a background task does once it exits), so no zombie is left behind.
pub struct ExitWatcher {
    pid: i32,
    watch: Option<Watch>,
}

impl ExitWatcher {
    /// Must be called inside a tokio runtime with IO enabled. `pidfd` is the child's pidfd if the
    /// spawn gave one; otherwise one is opened here.
    pub fn new(pid: i32, pidfd: Option<OwnedFd>) -> Self {
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
                    let status = exited(pid, 0)
                        .map(|status| status.unwrap_or_else(|| ExitStatus::from_raw(0)));
                    // The watcher was dropped first: nobody will reap, so this thread does.
                    if tx.send(status).is_err() {
                        let _ = waitpid(pid, libc::WNOHANG);
                    }
                });
                Watch::Thread(rx)
            }
        };
        Self {
            pid,
            watch: Some(watch),
        }
    }

    /// Resolves with the exit status once the child has exited; it stays a zombie until
    /// [`ExitWatcher::reap`]. Cancel-safe.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        loop {
            match &mut self.watch {
                Some(Watch::Exited(status)) | Some(Watch::Reaped(status)) => return Ok(*status),
                Some(Watch::Pidfd(fd)) => {
                    let mut ready = fd.readable().await?;
                    match exited(self.pid, libc::WNOHANG)? {
                        Some(status) => self.watch = Some(Watch::Exited(status)),
                        None => ready.clear_ready(),
                    }
                }
                Some(Watch::Thread(rx)) => {
                    let status = rx
                        .await
                        .map_err(|_| io::Error::other("reaper thread vanished"))??;
                    self.watch = Some(Watch::Exited(status));
                }
                None => return Err(io::Error::other("exit watcher already dropped")),
            }
        }
    }

    /// Reaps the child if [`ExitWatcher::wait`] saw it exit, freeing its pid; does nothing before
    /// that (a child still running is reaped when the watcher is dropped).
    pub fn reap(&mut self) {
        if let Some(Watch::Exited(status)) = self.watch {
            if let Err(err) = waitpid(self.pid, libc::WNOHANG) {
                tracing::warn!(pid = self.pid, %err, "reaping an exited child failed");
            }
            self.watch = Some(Watch::Reaped(status));
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
            // Exited: reaping cannot block.
            Some(Watch::Exited(_)) => {
                let _ = waitpid(pid, libc::WNOHANG);
            }
            // Closed, the waiting thread's send fails and it reaps; an exit it sent before is
            // reaped here.
            Some(Watch::Thread(mut rx)) => {
                rx.close();
                if let Ok(Ok(_)) = rx.try_recv() {
                    let _ = waitpid(pid, libc::WNOHANG);
                }
            }
            Some(Watch::Reaped(_)) | None => {}
        }
    }
}

/// Registers a pidfd with the reactor for readability (the child's exit).
fn register(fd: OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
    crate::pidfd::watch(fd)
}

fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    crate::pidfd::open(pid)
}

/// The exit status of `pid` once it has exited, leaving it a zombie (`waitid` with `WNOWAIT`):
/// `Ok(None)` while it still runs (with `WNOHANG` in `flags`).
fn exited(pid: i32, flags: i32) -> io::Result<Option<ExitStatus>> {
    crate::pidfd::waitid(libc::P_PID, pid as libc::id_t, libc::WNOWAIT | flags)
}

/// `waitpid(pid, flags)` ([`crate::pidfd::waitpid`]); a reaped pid is forgotten by the registry of
/// direct children.
fn waitpid(pid: i32, flags: i32) -> io::Result<Option<ExitStatus>> {
    let reaped = crate::pidfd::waitpid(pid, flags)?;
    if reaped.is_some() {
        crate::orphans::registry().forget(pid);
    }
    Ok(reaped)
}
