//! A listener's first watch, on the runtime that spawned its command, until the command's first
//! `connect` or its end.
//!
//! Why: the kernel reports a listener's hang-up when the command's last process exits, at the same
//! moment it tells dsh the spawned process ended (its pidfd, watched by the spawning runtime). A
//! listener the gate thread watches from the start wakes that thread too, at every command's end:
//! on a 2-core machine the two wake-ups compete, and the confined spawn measured 0.03 slower for it
//! (BENCHMARKS.md). Most commands never `connect`. So the spawning runtime watches the listener
//! first, where the hang-up arrives with the exit it is woken for anyway: a command that ends
//! without connecting has its listener closed right there, and the gate thread never hears of it.
//! (A bash with no `SHELL` in its environment would connect at every start: it looks up the user's
//! shell, and glibc asks nscd's socket first; dsh sets `SHELL` for it, `dsh_process::env`.)
//! The first notification hands the listener to the gate thread (`registry.rs`), which serves it
//! from then on; so does a hang-up that finds something of the command still holding the filter,
//! and so does this watch's end for any other reason (its runtime shutting down), so no command is
//! left without its gate.

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use super::notify;
use super::registry::Served;

/// Watches `served` on `runtime` until it has something for the gate thread; hands it over through
/// `to_gate`. The hand-over guard exists before the task does, so a task dropped before it first
/// runs (its runtime shutting down) still hands the listener over.
pub(crate) fn watch(runtime: &tokio::runtime::Handle, served: Served, to_gate: fn(Served)) {
    let mut parked = Parked {
        served: Some(served),
        to_gate,
    };
    runtime.spawn(async move {
        let over = match parked.served.as_ref() {
            Some(served) => wait(served).await,
            None => false,
        };
        if over {
            // No process holds the filter: nothing can connect any more. Closed here.
            drop(parked.served.take());
        }
    });
}

/// Waits for `served`'s first event; whether it was the end of its command.
async fn wait(served: &Served) -> bool {
    // SAFETY: `served` holds the listener open, unchanged, for longer than the `AsyncFd` lives
    // (dropped before this function returns).
    let registered =
        unsafe { AsyncFd::register_with_interest(served.listener(), Interest::READABLE) };
    let Ok(listener) = registered else {
        return false; // the gate thread takes it
    };
    // Woken by a notification (readable) or the hang-up (read closed).
    let _ = listener.readable().await;
    // Out of this runtime's epoll set before anything else watches it.
    drop(listener);
    notify::ended(served.listener())
}

/// A listener not yet handed over: to the gate thread when dropped, unless taken.
struct Parked {
    served: Option<Served>,
    to_gate: fn(Served),
}

impl Drop for Parked {
    fn drop(&mut self) {
        if let Some(served) = self.served.take() {
            (self.to_gate)(served);
        }
    }
}
