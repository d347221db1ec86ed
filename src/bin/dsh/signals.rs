//! SIGINT/SIGTERM handling for the front ends: the first signal asks for a graceful shutdown (kill and
//! join everything), a second one SIGKILLs every group at once.
//!
//! The streams are created once and kept: tokio delivers a signal only to streams that exist when it
//! arrives, so a stream made afresh in a loop can miss one (and the default action no longer applies).

use dsh::Runtime;
use tokio::signal::unix::{Signal, SignalKind, signal};

/// SIGINT and SIGTERM, installed once.
pub struct Interrupts {
    streams: Option<(Signal, Signal)>,
}

impl Interrupts {
    pub fn install() -> Self {
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
        Self { streams }
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

/// Kills and joins every process of `runtime`; a signal arriving meanwhile SIGKILLs every group at once.
pub async fn shutdown(runtime: &Runtime, interrupts: &mut Interrupts) {
    let shutdown = runtime.shutdown();
    tokio::pin!(shutdown);
    tokio::select! {
        () = &mut shutdown => {}
        () = interrupts.next() => {
            runtime.kill_all_now();
            shutdown.await;
        }
    }
}
