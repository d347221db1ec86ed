//! One task record: who owns it, its producer, and where it is in its life ([`Life`]), with what
//! it costs the registry once settled.

use std::sync::Arc;
use std::time::SystemTime;

use tokio::sync::oneshot;

use crate::agent::TaskOwner;
use crate::producer::{TaskProducer, TaskStatus};
use crate::retention::heap_block_bytes;
use crate::snapshot::TaskSnapshot;

/// Bytes of a label a record keeps (a bash task's label is its command, which may be a heredoc of
/// many KiB; a finished, fully read task keeps little more than its label).
pub(super) const MAX_LABEL_BYTES: usize = 256;

/// `label` cut to at most [`MAX_LABEL_BYTES`] on a character boundary, `…` marking the cut, and
/// holding no spare capacity.
pub(super) fn bounded_label(mut label: String) -> String {
    if label.len() > MAX_LABEL_BYTES {
        const MARK: &str = "…";
        let mut end = MAX_LABEL_BYTES - MARK.len();
        while !label.is_char_boundary(end) {
            end -= 1;
        }
        label.truncate(end);
        label.push_str(MARK);
    }
    label.shrink_to_fit();
    label
}

/// What a record costs the registry besides its producer, in [`heap_block_bytes`] terms: its slot
/// in the records map, counted at the map's emptiest (a hash map doubles when 7/8 full, so right
/// after growing it has 16/7 slots per record, each slot a key, a record and a control byte), and the
/// strings and the owner's mailbox handle it holds.
pub(super) fn record_bytes(id: &str, record: &Record) -> usize {
    let slot = std::mem::size_of::<(String, Record)>() + 1;
    let owner = record.owner.as_ref().map_or(0, |owner| {
        // The weak mailbox handle is a boxed trait object of its own.
        heap_block_bytes(owner.session_id.len())
            + heap_block_bytes(2 * std::mem::size_of::<usize>())
    });
    slot * 16 / 7
        + heap_block_bytes(id.len())
        + heap_block_bytes(record.kind.capacity())
        + heap_block_bytes(record.label.capacity())
        + owner
}

/// Woken when a record settles (a wait, an owner release, shutdown).
type Waiters = Vec<oneshot::Sender<()>>;

/// Where a record is in its life (the diagram in the table's module doc).
pub(super) enum Life {
    /// The work has not ended.
    Running(Waiters),
    /// A kill was started: the task reads `killed` (signal unknown yet) until it settles.
    Killing(Waiters),
    /// The work ended; the record settled once.
    Settled(Ended),
}

/// What a settled record keeps, and what it costs retention.
pub(super) struct Ended {
    /// The final status ("killed stays killed" applied).
    pub status: TaskStatus,
    pub finished_at: SystemTime,
    /// Memory it holds since it settled: what its producer reported then (once drained, what the
    /// stand-in costs) and the record itself.
    pub retained: usize,
    /// Bytes of its spill files when it settled (kept when drained: the files stay).
    pub spill: u64,
    /// The producer was replaced by a [`Drained`](crate::producer::Drained) stand-in.
    pub drained: bool,
}

pub(super) struct Record {
    pub order: u64,
    pub kind: String,
    pub label: String,
    pub owner: Option<TaskOwner>,
    pub producer: Arc<dyn TaskProducer>,
    pub started_at: SystemTime,
    /// The owner has seen the end (it read the final status, or killed the task).
    pub reported: bool,
    pub life: Life,
    /// What the work left running, made a task at its end ([`crate::TaskProducer::left_behind`]).
    pub left_running: Option<crate::LeftRunning>,
}

impl Record {
    /// The settled state, once there is one.
    pub(super) fn ended(&self) -> Option<&Ended> {
        match &self.life {
            Life::Settled(ended) => Some(ended),
            Life::Running(_) | Life::Killing(_) => None,
        }
    }

    /// Whether the record has settled.
    pub(super) fn settled(&self) -> bool {
        self.ended().is_some()
    }

    /// Who to wake when the record settles; `None` once it has.
    pub(super) fn waiters(&mut self) -> Option<&mut Waiters> {
        match &mut self.life {
            Life::Running(waiters) | Life::Killing(waiters) => Some(waiters),
            Life::Settled(_) => None,
        }
    }

    pub(super) fn snapshot(&self, id: &str) -> TaskSnapshot {
        TaskSnapshot {
            id: id.to_owned(),
            kind: self.kind.clone(),
            label: self.label.clone(),
            owner_session: self.owner.as_ref().map(|o| o.session_id.clone()),
            status: match &self.life {
                Life::Running(_) if self.producer.queued() => TaskStatus::Queued,
                Life::Running(_) => TaskStatus::Running,
                Life::Killing(_) => TaskStatus::Killed { signal: None },
                Life::Settled(ended) => ended.status.clone(),
            },
            settled: self.settled(),
            started_at: self.started_at,
            finished_at: self.ended().map(|ended| ended.finished_at),
            reported: self.reported,
            left_running: self.left_running.clone(),
            input: match self.producer.input() {
                input if self.settled() && input != crate::TaskInput::None => {
                    crate::TaskInput::Closed
                }
                input => input,
            },
        }
    }

    pub(super) fn visible_to(&self, caller: Option<&str>) -> bool {
        match &self.owner {
            None => true,
            Some(owner) => caller == Some(owner.session_id.as_str()),
        }
    }

    /// Starts the kill of running work; `true` while the work has not settled (this call started
    /// the kill, or one is under way: the work is still being killed, not finished). Either way the
    /// owner has now seen the end, so no notice is needed.
    pub(super) fn kill(&mut self) -> bool {
        self.reported = true;
        match &mut self.life {
            Life::Settled(_) => false,
            Life::Killing(_) => true,
            Life::Running(waiters) => {
                let waiters = std::mem::take(waiters);
                self.producer.kill();
                self.life = Life::Killing(waiters);
                true
            }
        }
    }
}
