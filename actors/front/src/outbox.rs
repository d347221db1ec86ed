//! The lines waiting for stdout, counted in bytes, so the server can stop reading while the client
//! is not reading what it already wrote.
//!
//! Every reply, notice, approval question and error line goes through one [`Outbox`] to the writer
//! thread (`stdio.rs`). Sending never waits: a reply is produced by a call that already ran, a
//! notice by a task that already ended, and holding them back would only move the same bytes
//! elsewhere. The bound comes from the other side: while more than [`HIGH_BYTES`] are queued the
//! front ends read no more input (`flow.rs`), and every line queued is caused by input already read
//! (one reply per call, one notice per task, one question per escalating call). Reading resumes
//! once the writer has brought the queue down to [`LOW_BYTES`], so a slow client is not answered
//! one line per wake-up.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{Notify, mpsc};

/// From this many queued bytes on, the front ends stop reading input: 1 MiB, room for a few
/// thousand ordinary replies, or one reply of two full 64 000-byte streams as escaped JSON.
pub const HIGH_BYTES: usize = 1 << 20;

/// Reading resumes once the queue is down to this many bytes.
pub const LOW_BYTES: usize = HIGH_BYTES / 4;

/// The queue's fill, shared by the senders and the writer.
#[derive(Default)]
struct Fill {
    bytes: AtomicUsize,
    /// Woken when the writer brings the queue down to [`LOW_BYTES`].
    room: Notify,
}

/// The sending side: cheap to clone, never blocks.
#[derive(Clone)]
pub struct Outbox {
    lines: mpsc::UnboundedSender<String>,
    fill: Arc<Fill>,
}

/// The writer is gone (stdout failed or the server is ending): the line was dropped.
#[derive(Debug)]
pub struct Closed;

impl Outbox {
    /// A new queue and the writer's end of it.
    pub fn new() -> (Self, OutboxReceiver) {
        let (lines, rx) = mpsc::unbounded_channel();
        let fill = Arc::new(Fill::default());
        (
            Self {
                lines,
                fill: fill.clone(),
            },
            OutboxReceiver { lines: rx, fill },
        )
    }

    /// Queues `line` (written followed by `\n`).
    pub fn send(&self, line: String) -> Result<(), Closed> {
        let size = line.len() + 1;
        self.fill.bytes.fetch_add(size, Ordering::SeqCst);
        self.lines.send(line).map_err(|_| {
            self.fill.bytes.fetch_sub(size, Ordering::SeqCst);
            Closed
        })
    }

    /// Whether input may be read: fewer than [`HIGH_BYTES`] are waiting for stdout.
    pub fn has_room(&self) -> bool {
        self.fill.bytes.load(Ordering::SeqCst) < HIGH_BYTES
    }

    /// Waits until the writer has brought the queue down to [`LOW_BYTES`].
    pub async fn room(&self) {
        loop {
            let woken = self.fill.room.notified();
            if self.fill.bytes.load(Ordering::SeqCst) <= LOW_BYTES {
                return;
            }
            woken.await;
        }
    }
}

/// The writer thread's end.
pub struct OutboxReceiver {
    lines: mpsc::UnboundedReceiver<String>,
    fill: Arc<Fill>,
}

impl OutboxReceiver {
    /// The next line, waiting for one; `None` once every sender is gone and the queue is empty.
    pub fn blocking_recv(&mut self) -> Option<String> {
        self.lines.blocking_recv()
    }

    /// The next line if one is queued.
    pub fn try_recv(&mut self) -> Option<String> {
        self.lines.try_recv().ok()
    }

    /// `line` has left the queue (it is in the writer's buffer or on stdout).
    pub fn written(&self, line: &str) {
        let size = line.len() + 1;
        let before = self.fill.bytes.fetch_sub(size, Ordering::SeqCst);
        if before > LOW_BYTES && before - size <= LOW_BYTES {
            // `notify_one` keeps the wake-up for a reader that is about to wait.
            self.fill.room.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reading_pauses_at_the_high_mark_and_resumes_at_the_low_one() {
        let (outbox, mut rx) = Outbox::new();
        let line = "x".repeat(1023);
        while outbox.has_room() {
            outbox.send(line.clone()).unwrap();
        }
        assert_eq!(outbox.fill.bytes.load(Ordering::SeqCst), HIGH_BYTES);
        let waiter = tokio::spawn({
            let outbox = outbox.clone();
            async move { outbox.room().await }
        });
        let writer = std::thread::spawn(move || {
            let mut written = 0;
            while let Some(line) = rx.try_recv() {
                rx.written(&line);
                written += 1;
            }
            written
        });
        assert_eq!(writer.join().unwrap(), HIGH_BYTES / 1024);
        waiter.await.unwrap();
        assert!(outbox.has_room());
        assert!(outbox.send("gone".into()).is_err(), "the writer is gone");
        assert_eq!(outbox.fill.bytes.load(Ordering::SeqCst), 0);
    }
}
