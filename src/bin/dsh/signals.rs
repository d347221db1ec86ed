//! SIGINT/SIGTERM handling for the front ends: the first signal asks for a graceful shutdown (kill and
//! join everything, SIGKILL to whatever is left when `--shutdown-grace-ms` runs out, since a host that
//! sends SIGTERM usually sends SIGKILL a few seconds later), a second one SIGKILLs everything at once.
//!
//! The streams are created once and kept: tokio delivers a signal only to streams that exist when it
//! arrives, so a stream made afresh in a loop can miss one (and the default action no longer applies).

use std::time::Duration;

use dsh::Runtime;
use tokio::signal::unix::{Signal, SignalKind, signal};

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
    let shutdown = runtime.shutdown();
    tokio::pin!(shutdown);
    let grace = interrupts.grace;
    tokio::select! {
        () = &mut shutdown => {}
        () = interrupts.next() => {
            runtime.kill_all_now();
            shutdown.await;
        }
        () = tokio::time::sleep(grace) => {
            tracing::info!("shutdown grace over; SIGKILL to everything left");
            runtime.kill_all_now();
            shutdown.await;
        }
    }
}
