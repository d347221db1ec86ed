//! The input side of an interactive process (issue 22): what readers write and what they learn
//! about the program waiting for it.
//!
//! A process started with [`InputMode::Open`](crate::InputMode::Open) or
//! [`InputMode::Terminal`](crate::InputMode::Terminal) has an [`InputChannel`], shared (like its
//! output) between its driver and any number of writers. Writers append to a queue bounded by
//! [`INPUT_QUEUE_BYTES`] not yet taken by the program; the driver drains it as the terminal or
//! the pipe accepts bytes, so a write never blocks the runtime. The driver publishes whether the
//! program waits for input ([`InputState`]); a write resets it at once, so a writer that then
//! waits for the next prompt never sees the one it just answered.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, watch};

use crate::lock::lock_unpoisoned;

/// The most bytes written and not yet taken by the program (the contract's 64 KiB).
pub const INPUT_QUEUE_BYTES: usize = 64 * 1024;

/// One thing written to a process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InputItem {
    /// Bytes for the terminal or the pipe.
    Bytes(Vec<u8>),
    /// A named key: the driver picks its bytes by what the input is.
    Key(KeyInput),
}

/// A key's meaning under a terminal and on a pipe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyInput {
    /// Its bytes under a terminal in normal cursor mode.
    pub normal: &'static [u8],
    /// Its bytes under a terminal in application cursor mode (DECCKM).
    pub application: &'static [u8],
    /// What it does on a pipe.
    pub on_pipe: PipeKey,
}

/// What a key does on a stdin pipe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PipeKey {
    /// Write these bytes.
    Bytes(&'static [u8]),
    /// `SIGINT` to the process's group and containment (`C-c`).
    Interrupt,
    /// Close the pipe: end of input (`C-d`).
    EndOfInput,
}

/// Why a write was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    /// The process was started without input ([`InputMode::Closed`](crate::InputMode::Closed)).
    #[error("the process takes no input")]
    NoInput,
    /// The process has settled, or its input was closed.
    #[error("the process's input is closed")]
    Closed,
    /// More than [`INPUT_QUEUE_BYTES`] would wait for the program.
    #[error("input buffer full")]
    Full,
}

/// Whether the program waits for input, as the driver last judged it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InputState {
    /// Running, writing, or not (yet) seen waiting.
    #[default]
    Busy,
    /// Blocked reading its terminal or its stdin, output settled.
    Waiting,
    /// As `Waiting`, at a password-style prompt (terminal echo off in line mode).
    WaitingHidden,
    /// The input is closed (end of input sent, or the process settled).
    Closed,
}

impl InputState {
    /// `Waiting` or `WaitingHidden`.
    pub fn is_waiting(self) -> bool {
        matches!(self, InputState::Waiting | InputState::WaitingHidden)
    }
}

/// The queue and the state, shared by the driver and the writers.
#[derive(Debug)]
struct Shared {
    queue: Mutex<Queue>,
    /// Wakes the driver when something was queued.
    queued: Notify,
    state: watch::Sender<InputState>,
}

#[derive(Debug, Default)]
struct Queue {
    items: VecDeque<InputItem>,
    bytes: usize,
    /// Set once the input closed: later writes are refused.
    closed: bool,
}

/// A process's input, shared between its driver and its writers.
#[derive(Clone, Debug)]
pub struct InputChannel(Arc<Shared>);

impl InputChannel {
    pub(crate) fn new() -> Self {
        let (state, _) = watch::channel(InputState::Busy);
        InputChannel(Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            queued: Notify::new(),
            state,
        }))
    }

    /// Queues `items` in order, all or nothing, and marks the program busy (the answer is on its
    /// way). Never blocks.
    pub fn write(&self, items: Vec<InputItem>) -> Result<(), InputError> {
        let mut queue = lock_unpoisoned(&self.0.queue);
        if queue.closed {
            return Err(InputError::Closed);
        }
        let adding: usize = items
            .iter()
            .map(|item| match item {
                InputItem::Bytes(bytes) => bytes.len(),
                InputItem::Key(key) => key.normal.len(),
            })
            .sum();
        if queue.bytes + adding > INPUT_QUEUE_BYTES {
            return Err(InputError::Full);
        }
        queue.bytes += adding;
        queue.items.extend(items);
        drop(queue);
        self.0.state.send_if_modified(|state| {
            let was_waiting = state.is_waiting();
            if was_waiting {
                *state = InputState::Busy;
            }
            was_waiting
        });
        self.0.queued.notify_one();
        Ok(())
    }

    /// What the driver last judged.
    pub fn state(&self) -> InputState {
        *self.0.state.borrow()
    }

    /// A receiver of the state's changes.
    pub fn subscribe(&self) -> watch::Receiver<InputState> {
        self.0.state.subscribe()
    }

    /// Waits until the program waits for input or its input closed; the state then.
    pub async fn waiting_or_closed(&self) -> InputState {
        let mut rx = self.subscribe();
        let state = rx
            .wait_for(|state| state.is_waiting() || *state == InputState::Closed)
            .await
            .map(|state| *state);
        state.unwrap_or(InputState::Closed)
    }

    pub(crate) fn publish(&self, state: InputState) {
        self.0.state.send_if_modified(|current| {
            let changed = *current != state && *current != InputState::Closed;
            if changed {
                *current = state;
            }
            changed
        });
    }

    /// The next queued item, if any (the driver's side).
    pub(crate) fn pop(&self) -> Option<InputItem> {
        let mut queue = lock_unpoisoned(&self.0.queue);
        let item = queue.items.pop_front()?;
        queue.bytes -= match &item {
            InputItem::Bytes(bytes) => bytes.len(),
            InputItem::Key(key) => key.normal.len(),
        };
        Some(item)
    }

    /// Whether something is queued.
    pub(crate) fn has_queued(&self) -> bool {
        !lock_unpoisoned(&self.0.queue).items.is_empty()
    }

    /// Resolves once something was queued since the last call (or is queued now).
    pub(crate) async fn queued(&self) {
        if self.has_queued() {
            return;
        }
        self.0.queued.notified().await;
    }

    /// Refuses every later write and drops what is queued; the state becomes `Closed`.
    pub(crate) fn close(&self) {
        let mut queue = lock_unpoisoned(&self.0.queue);
        queue.closed = true;
        queue.items.clear();
        queue.bytes = 0;
        drop(queue);
        self.0.state.send_replace(InputState::Closed);
    }
}
