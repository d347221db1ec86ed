//! The output of one process, shared between its driver (the only writer) and any number of readers,
//! and the one place its outcome is stored once it has settled.
//!
//! Readers that wait for output (a `bash_output` with `until`) register a scan on a stream
//! ([`SharedOutput::watch`], `scan.rs`): the collector feeds it each chunk as the driver stores it, so
//! a waiter is woken by the write that makes its condition hold, never by polling, and sees every
//! byte even when the stream floods past what memory keeps.

use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use tokio::sync::watch;

use crate::collector::OutputCollector;
use crate::input::{InputChannel, InputError, InputItem};
use crate::lock::lock_unpoisoned;
use crate::outcome::{CollectedOutput, ProcessOutcome, ReadResult, StreamKind};
use crate::scan::{ScanWatch, StreamScan};

/// The two collectors of one process and, once it has settled, its outcome: shared between its driver
/// (the only writer) and any number of readers, so reads never wait for an actor's mailbox.
#[derive(Clone, Debug)]
pub struct SharedOutput {
    stdout: Arc<Mutex<OutputCollector>>,
    stderr: Arc<Mutex<OutputCollector>>,
    outcome: Arc<OnceLock<ProcessOutcome>>,
    /// Flips to `true` right after `outcome` is set; closed if the driver is dropped unsettled.
    settled: watch::Receiver<bool>,
    /// The input and the terminal's live text of an interactive process (issue 22).
    interaction: Option<Interaction>,
}

/// What an interactive process shares besides its output.
#[derive(Clone, Debug)]
pub(crate) struct Interaction {
    pub(crate) input: InputChannel,
    /// Under a terminal: what a read shows after the stream (see [`Live`]), as a channel so a
    /// wait can match it as it changes.
    pub(crate) live: Option<watch::Sender<Live>>,
}

/// The part of a terminal's output that is not in the stream (yet): the cursor's line (a prompt,
/// a progress bar's current state), or the whole screen while a full-screen program holds it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Live {
    /// Nothing.
    #[default]
    Empty,
    /// The cursor's row and what is below it, after the stream's lines.
    Line(String),
    /// The visible screen, instead of the stream's tail (the alternate screen, or a program
    /// painting the main one).
    Screen(String),
}

/// The driver's end of [`SharedOutput::settled`]: dropping it unsettled wakes waiters with `None`.
pub(crate) struct SettleSignal(watch::Sender<bool>);

impl SharedOutput {
    pub(crate) fn new(stdout: OutputCollector, stderr: OutputCollector) -> (Self, SettleSignal) {
        let (tx, rx) = watch::channel(false);
        let output = Self {
            stdout: Arc::new(Mutex::new(stdout)),
            stderr: Arc::new(Mutex::new(stderr)),
            outcome: Arc::new(OnceLock::new()),
            settled: rx,
            interaction: None,
        };
        (output, SettleSignal(tx))
    }

    /// The same output, with an input channel and, under a terminal, its live text.
    pub(crate) fn with_interaction(mut self, interaction: Interaction) -> Self {
        self.interaction = Some(interaction);
        self
    }

    /// The process's input, when it was started with one.
    pub fn input(&self) -> Option<&InputChannel> {
        self.interaction.as_ref().map(|i| &i.input)
    }

    /// Queues `items` for the process's input (never blocks).
    pub fn write(&self, items: Vec<InputItem>) -> Result<(), InputError> {
        self.input().ok_or(InputError::NoInput)?.write(items)
    }

    /// Under a terminal, what a read shows after the stream's lines; [`Live::Empty`] otherwise.
    pub fn live(&self) -> Live {
        self.interaction
            .as_ref()
            .and_then(|i| i.live.as_ref())
            .map(|live| live.borrow().clone())
            .unwrap_or_default()
    }

    /// Under a terminal, the live text's changes from now on (the current text counts as seen);
    /// `None` without a terminal. A `bash_output`/`bash_write` wait matches `until` against each new
    /// prompt line or screen, which the stream does not hold until the line is completed.
    pub fn live_changes(&self) -> Option<watch::Receiver<Live>> {
        let live = self.interaction.as_ref()?.live.as_ref()?;
        Some(live.subscribe())
    }

    /// The outcome, once the process has settled (set before the manager hears of it).
    pub fn outcome(&self) -> Option<&ProcessOutcome> {
        self.outcome.get()
    }

    /// Stores the outcome and wakes every waiter: a process settles once, so later calls change
    /// nothing.
    pub(crate) fn settle(&self, signal: SettleSignal, outcome: ProcessOutcome) {
        let _ = self.outcome.set(outcome);
        signal.0.send_replace(true);
    }

    /// Waits for the process to settle and returns its outcome, straight from its driver: no actor's
    /// mailbox lies between the child's exit and this future waking. `None` if the driver was dropped
    /// before the process settled (its actor system stopped; the driver killed the group as it went).
    pub async fn settled(&self) -> Option<ProcessOutcome> {
        if let Some(outcome) = self.outcome.get() {
            return Some(outcome.clone());
        }
        let mut settled = self.settled.clone();
        // An error means the sender is gone; the outcome may still have been set just before.
        let _ = settled.wait_for(|settled| *settled).await;
        self.outcome.get().cloned()
    }

    fn lock(&self, stream: StreamKind) -> MutexGuard<'_, OutputCollector> {
        let mutex = match stream {
            StreamKind::Stdout => &self.stdout,
            StreamKind::Stderr => &self.stderr,
        };
        lock_unpoisoned(mutex)
    }

    /// Non-consuming read of `stream` from whole-stream offset `from`.
    pub fn read(&self, stream: StreamKind, from: u64) -> ReadResult {
        self.lock(stream).read_from(from)
    }

    pub(crate) fn push(&self, stream: StreamKind, chunk: &[u8]) {
        self.lock(stream).push(chunk);
    }

    /// Resolves once `scan` holds on `stream`'s text from whole-stream offset `from` on (a reader's
    /// cursor): fed what is already there (read back from the spill file where it has left memory),
    /// then each chunk as it is stored. Watching starts with this call; dropping the future stops it.
    pub fn watch(&self, stream: StreamKind, from: u64, scan: Box<dyn StreamScan>) -> ScanWatch {
        let collector = match stream {
            StreamKind::Stdout => self.stdout.clone(),
            StreamKind::Stderr => self.stderr.clone(),
        };
        crate::collector::watch_scan(collector, from, scan)
    }

    /// What the output held in memory costs, both streams together: the buffers of their kept
    /// tails (whole pages for large ones), not just the bytes in them.
    pub fn retained_bytes(&self) -> usize {
        self.lock(StreamKind::Stdout).memory_bytes() + self.lock(StreamKind::Stderr).memory_bytes()
    }

    /// Bytes of the spill files that exist now, both streams together.
    pub fn spill_bytes(&self) -> u64 {
        self.lock(StreamKind::Stdout).spill_bytes() + self.lock(StreamKind::Stderr).spill_bytes()
    }

    /// The spill files that exist now (stdout's first).
    pub fn spill_paths(&self) -> Vec<std::path::PathBuf> {
        [StreamKind::Stdout, StreamKind::Stderr]
            .into_iter()
            .filter_map(|stream| self.lock(stream).spill_path())
            .collect()
    }

    pub(crate) fn finalize(&self, stream: StreamKind) -> CollectedOutput {
        self.lock(stream).finalize()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::outcome::Settlement;

    fn shared_output() -> (SharedOutput, SettleSignal) {
        SharedOutput::new(
            OutputCollector::new(StreamKind::Stdout, 1024, 0, None),
            OutputCollector::new(StreamKind::Stderr, 1024, 0, None),
        )
    }

    #[actix_rt::test]
    async fn settled_is_none_when_the_driver_goes_away_unsettled() {
        let (output, signal) = shared_output();
        let waiter = actix_rt::spawn({
            let output = output.clone();
            async move { output.settled().await }
        });
        drop(signal);
        let settled = tokio::time::timeout(Duration::from_secs(30), waiter)
            .await
            .expect("a waiter must wake when the driver is dropped")
            .unwrap();
        assert!(settled.is_none());
    }

    #[actix_rt::test]
    async fn settled_wakes_every_waiter_with_the_outcome() {
        let (output, signal) = shared_output();
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let output = output.clone();
                actix_rt::spawn(async move { output.settled().await })
            })
            .collect();
        let outcome = ProcessOutcome {
            exit_code: Some(7),
            signal: None,
            stdout: output.finalize(StreamKind::Stdout),
            stderr: output.finalize(StreamKind::Stderr),
            settlement: Settlement::Closed,
            signals_sent: Vec::new(),
            oom_killed: false,
            left_running: Vec::new(),
        };
        // Settling consumes the signal: its end is dropped here.
        output.settle(signal, outcome);
        for waiter in waiters {
            let settled = tokio::time::timeout(Duration::from_secs(30), waiter)
                .await
                .expect("every waiter wakes")
                .unwrap();
            assert_eq!(settled.and_then(|o| o.exit_code), Some(7));
        }
        // A late caller gets the outcome at once, and the signal's end no longer matters.
        assert_eq!(output.settled().await.and_then(|o| o.exit_code), Some(7));
    }
}
