//! SIGINT/SIGTERM handling for the front ends: the first signal asks for a graceful shutdown (kill and
//! join everything, SIGKILL to whatever is left when `--shutdown-grace-ms` runs out, since a host that
//! sends SIGTERM usually sends SIGKILL a few seconds later), a second one SIGKILLs everything at once.
//!
//! The streams are created once and kept: tokio delivers a signal only to streams that exist when it
//! arrives, so a stream made afresh in a loop can miss one (and the default action no longer applies).

use std::time::Duration;

use dsh::Runtime;
use tokio::signal::unix::{Signal, SignalKind, signal};

/// `--shutdown-grace-ms`'s default: everything is dead within a second of the first signal.
pub const DEFAULT_SHUTDOWN_GRACE_MS: u64 = 1_000;

/// SIGINT and SIGTERM, installed once.
pub struct Interrupts {
    streams: Option<(Signal, Signal)>,
    /// How long a shutdown may take before everything left is SIGKILLed.
    grace: Duration,
}

impl Interrupts {
    pub fn install(grace: Duration) -> Self {
        let streams = match (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) {
            (Ok(interrupt), Ok(terminate)) => Some((interrupt, terminate)),
            _ => {
                tracing::warn!("cannot install signal handlers");
                None
            }
        };
        Self { streams, grace }
    }

    /// Resolves at the next SIGINT or SIGTERM (never, if the handlers could not be installed).
    pub async fn next(&mut self) {
        match &mut self.streams {
            Some((interrupt, terminate)) => {
                tokio::select! {
                    _ = interrupt.recv() => {}
                    _ = terminate.recv() => {}
                }
            }
            None => std::future::pending().await,
        }
    }
}

/// Kills and joins every process of `runtime`; a signal arriving meanwhile, or the shutdown grace
/// running out, SIGKILLs everything at once.
pub async fn shutdown(runtime: &Runtime, interrupts: &mut Interrupts) {
    let deadline = interrupts.deadline();
    within_grace(runtime, interrupts, deadline, runtime.shutdown()).await;
}

impl Interrupts {
    /// When a shutdown that starts now must be over.
    pub fn deadline(&self) -> tokio::time::Instant {
        tokio::time::Instant::now() + self.grace
    }
}

/// Awaits `work` (a call being aborted, a shutdown), but SIGKILLs everything of `runtime` at
/// `deadline` or at the next signal, whichever comes first, and then awaits the rest of `work`
/// (which ends once its processes are dead).
pub async fn within_grace<T>(
    runtime: &Runtime,
    interrupts: &mut Interrupts,
    deadline: tokio::time::Instant,
    work: impl Future<Output = T>,
) -> T {
    tokio::pin!(work);
    tokio::select! {
        output = &mut work => output,
        () = interrupts.next() => {
            runtime.kill_all_now();
            work.await
        }
        () = tokio::time::sleep_until(deadline) => {
            tracing::info!("shutdown grace over; SIGKILL to everything left");
            runtime.kill_all_now();
            work.await
        }
    }
}
