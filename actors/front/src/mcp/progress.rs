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

/// How often progress is sent unless `--progress-interval-ms` says otherwise.
pub const DEFAULT_INTERVAL_MS: u64 = 1_000;

/// The longest last line quoted in a message, in characters.
const LINE_CHARS: usize = 80;

/// Sends progress until dropped.
pub struct ProgressTicker(JoinHandle<()>);

impl Drop for ProgressTicker {
    fn drop(&mut self) {
        self.0.abort();
    }
}

pub fn start(
    peer: Peer<RoleServer>,
    token: ProgressToken,
    peek: OutputPeek,
    interval: Duration,
) -> ProgressTicker {
    let started = Instant::now();
    ProgressTicker(tokio::spawn(async move {
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        loop {
            ticks.tick().await;
            let elapsed = started.elapsed().as_millis() as f64;
            let param = ProgressNotificationParam::new(token.clone(), elapsed)
                .with_message(message(peek.snapshot().as_ref()));
            if let Err(err) = peer.notify_progress(param).await {
                tracing::debug!(%err, "cannot send progress; stopping");
                return;
            }
        }
    }))
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
