//! Event-based waits with generous bounds: a shared two-core machine may be slow, never wrong.

use std::future::Future;
use std::time::{Duration, Instant};

/// Generous upper bound for anything that should happen "soon" on a noisy shared machine.
pub const SOON: Duration = Duration::from_secs(10);

/// Awaits `fut`, failing the test if it takes longer than `limit`.
pub async fn within<T>(limit: Duration, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(limit, fut)
        .await
        .expect("timed out waiting")
}

/// How often the polling waits look again.
const POLL: Duration = Duration::from_millis(10);

/// One look of a polling wait: `Some(true)` once `cond` holds, `Some(false)` once the deadline
/// has passed, `None` to look again.
fn look(deadline: Instant, cond: &mut impl FnMut() -> bool) -> Option<bool> {
    if cond() {
        Some(true)
    } else if Instant::now() >= deadline {
        Some(false)
    } else {
        None
    }
}

/// Polls `cond` every 10 ms (blocking the thread) until it holds or `timeout` passes; returns
/// whether it held.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(held) = look(deadline, &mut cond) {
            return held;
        }
        std::thread::sleep(POLL);
    }
}

/// Polls `cond` every 10 ms (without blocking the runtime) until it holds or `timeout` passes;
/// returns whether it held.
pub async fn poll_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(held) = look(deadline, &mut cond) {
            return held;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Reads `source` line by line on a thread of its own, sending `parse(line)` for each until the
/// source ends or the receiver is dropped: a child's output as a channel to wait on with a bound.
pub fn line_channel<T: Send + 'static>(
    source: impl std::io::Read + Send + 'static,
    parse: impl Fn(String) -> T + Send + 'static,
) -> std::sync::mpsc::Receiver<T> {
    use std::io::BufRead;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(source).lines() {
            let Ok(line) = line else { break };
            if tx.send(parse(line)).is_err() {
                break;
            }
        }
    });
    rx
}
