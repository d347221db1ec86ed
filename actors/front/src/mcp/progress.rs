//! MCP progress for a running `tools/call`: when the request carries a `progressToken`, a
//! `notifications/progress` goes out every interval until the call ends, so a client using
//! `resetTimeoutOnProgress` keeps waiting for a long command instead of giving up at its timeout.
//!
//! progress = milliseconds since the call started (always increasing); message = bytes printed so far
//! and the last line, shortened.

use std::time::{Duration, Instant};

use dsh::actors::tool_bash::{OutputPeek, PeekSnapshot};
use rmcp::RoleServer;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::Peer;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How often progress is sent unless `--progress-interval-ms` says otherwise.
pub const DEFAULT_INTERVAL_MS: u64 = 1_000;

/// The longest last line quoted in a message, in characters.
const LINE_CHARS: usize = 80;

/// Sends progress until stopped (or dropped).
pub struct ProgressTicker {
    /// `None` once [`ProgressTicker::stop`] has waited for it.
    task: Option<JoinHandle<()>>,
    stop: CancellationToken,
}

impl ProgressTicker {
    /// Stops the ticks and waits for a notification already on its way to be written, so no
    /// progress for the call can follow its response (rmcp answers a sent notification only once
    /// the transport has taken it).
    pub async fn stop(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for ProgressTicker {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

pub fn start(
    peer: Peer<RoleServer>,
    token: ProgressToken,
    peek: OutputPeek,
    interval: Duration,
) -> ProgressTicker {
    let started = Instant::now();
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    let task = tokio::spawn(async move {
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                () = stopped.cancelled() => return,
            }
            let elapsed = started.elapsed().as_millis() as f64;
            let param = ProgressNotificationParam::new(token.clone(), elapsed)
                .with_message(message(peek.snapshot().as_ref()));
            if let Err(err) = peer.notify_progress(param).await {
                tracing::debug!(%err, "cannot send progress; stopping");
                return;
            }
        }
    });
    ProgressTicker {
        task: Some(task),
        stop,
    }
}

/// `"123 bytes so far; last line: …"`, or `"no output yet"`.
pub fn message(seen: Option<&PeekSnapshot>) -> String {
    let Some(seen) = seen.filter(|s| s.stdout_bytes + s.stderr_bytes > 0) else {
        return "no output yet".to_owned();
    };
    let bytes = seen.stdout_bytes + seen.stderr_bytes;
    let line = seen.last_line.trim();
    if line.is_empty() {
        return format!("{bytes} bytes so far");
    }
    let mut short: String = line.chars().take(LINE_CHARS).collect();
    if short.len() < line.len() {
        short.push('…');
    }
    format!("{bytes} bytes so far; last line: {short}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_short_and_say_bytes_and_last_line() {
        assert_eq!(message(None), "no output yet");
        let seen = PeekSnapshot {
            stdout_bytes: 10,
            stderr_bytes: 2,
            last_line: "x".repeat(200),
        };
        let text = message(Some(&seen));
        assert!(text.starts_with("12 bytes so far; last line: xxx"));
        assert!(text.chars().count() < 120, "{text}");
    }
}
