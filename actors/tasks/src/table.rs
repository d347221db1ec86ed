//! The task table: every task record and every rule about them, with no actor in sight.
//!
//! The [`TaskRegistry`](crate::TaskRegistry) actor owns one table and does only what needs a
//! scheduler: it waits for producers to finish, tells subscribers, checks owners on a timer and awaits
//! kills. Each method here changes the records and returns what the actor must deliver or await.
//!
//! Record life cycle (a record's [`Life`]):
//!
//! ```text
//!   register ──► running ──finished──► settled: completed | killed | out of memory  (one TaskDone)
//!                  └──kill──► killing (reads `killed`, signal unknown yet; reported)
//!                                └──finished──► settled: killed (by SIG…) | out of memory
//!   settled records stay readable until retention discards them (over `max_finished` records, over
//!   `max_retained_bytes` of output in memory or over `max_spill_bytes` of spill files on disk; those
//!   whose end the owner already saw go first, then the oldest), or their owner is released. A read
//!   that shows the end has consumed everything: the record then drops its producer (and with it the
//!   process and its output in memory), keeping a [`Drained`] stand-in with the spill paths, whose
//!   bytes still count until the task is discarded. Reading a discarded task is an error of its own.
//! ```
//!
//! Access fence: a task with an owner is visible only to callers presenting the owner's session id
//! (`task <id> belongs to another session`); tasks without one are open to every caller.

mod eviction;
mod record;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::SystemTime;

use futures::future::BoxFuture;
use tokio::sync::oneshot;

use crate::agent::TaskOwner;
use crate::errors::TaskError;
use crate::messages::{KillReply, ReadReply, TaskDone, TaskKillOutcome};
use crate::producer::{Drained, TaskProducer, TaskStatus};
use crate::retention::{RetentionLimits, RetentionPolicy};
use crate::snapshot::TaskSnapshot;

#[cfg(test)]
use record::MAX_LABEL_BYTES;
use record::{Ended, Life, Record, bounded_label, record_bytes};

/// A registered task: its id, and the future that resolves when its producer has finished.
pub(crate) struct Registered {
    pub id: String,
    pub finished: BoxFuture<'static, TaskStatus>,
}

/// A task as a wait sees it.
pub(crate) struct Watch {
    pub producer: Arc<dyn TaskProducer>,
    /// Fires when the record settles (or is forgotten); `None`: already settled.
    pub settled: Option<oneshot::Receiver<()>>,
}

/// Every task of one registry.
pub(crate) struct TaskTable {
    /// The retention stack: the built-in limits first, then a host's policies.
    limits: RetentionLimits,
    retention: Vec<Box<dyn RetentionPolicy>>,
    /// Notices for owners whose task was discarded before they saw its end, for the registry to send.
    discard_notices: Vec<(TaskOwner, String)>,
    /// Ids forgotten because their owner was released (they read as unknown, not as discarded).
    released: std::collections::HashSet<String>,
    /// Settled records now, the output bytes they hold and the bytes of their spill files.
    settled_count: usize,
    retained_total: usize,
    spill_total: u64,
    records: HashMap<String, Record>,
    /// The settled records in the built-in limits' order of discard (read ones first, then the
    /// oldest): keyed by (not yet reported, registration order). The limits pick their victim here
    /// instead of walking every record: past `max_finished`, every settlement discards one, and a
    /// walk each time made a thousand settlements cost a million steps.
    finished: BTreeMap<(bool, u64), String>,
    /// The same, for the settled records that hold spill files (the disk budget's candidates).
    spilled: BTreeMap<(bool, u64), String>,
    /// Next ordinal per kind (`bash` → 3 means `bash-3` is next).
    counters: HashMap<String, u64>,
    registered: u64,
    shutting_down: bool,
}

impl TaskTable {
    #[cfg(test)]
    pub(crate) fn new(max_finished: usize) -> Self {
        Self::with_retention(RetentionLimits {
            max_finished,
            max_retained_bytes: usize::MAX,
            max_spill_bytes: u64::MAX,
        })
    }

    pub(crate) fn with_retention(limits: RetentionLimits) -> Self {
        Self {
            limits,
            retention: Vec::new(),
            released: Default::default(),
            discard_notices: Vec::new(),
            settled_count: 0,
            retained_total: 0,
            spill_total: 0,
            records: HashMap::new(),
            finished: BTreeMap::new(),
            spilled: BTreeMap::new(),
            counters: HashMap::new(),
            registered: 0,
            shutting_down: false,
        }
    }

    /// Why `id` has no record: it was issued and is gone (discarded), or it never was. Only an id
    /// spelled as it was issued counts (`bash-0299` or `bash-+299` never was, even while `bash-299`
    /// runs).
    fn missing(&self, id: &str) -> TaskError {
        let issued = id.rsplit_once('-').and_then(|(kind, digits)| {
            let n: u64 = digits.parse().ok()?;
            let as_issued = n.to_string() == digits;
            (as_issued && n >= 1 && self.counters.get(kind).is_some_and(|last| n <= *last))
                .then_some(kind)
        });
        match issued {
            Some(kind) if !self.released.contains(id) => TaskError::Discarded {
                kind: kind.to_owned(),
                id: id.to_owned(),
            },
            _ => TaskError::Unknown(id.to_owned()),
        }
    }

    fn access(&mut self, id: &str, caller: Option<&str>) -> Result<&mut Record, TaskError> {
        if !self.records.contains_key(id) {
            return Err(self.missing(id));
        }
        let record = self
            .records
            .get_mut(id)
            .ok_or_else(|| TaskError::Unknown(id.to_owned()))?;
        if record.visible_to(caller) {
            Ok(record)
        } else {
            Err(TaskError::Foreign(id.to_owned()))
        }
    }

    /// Records new running work under the next `<kind>-<n>` id.
    pub(crate) fn register(
        &mut self,
        kind: String,
        label: String,
        owner: Option<TaskOwner>,
        producer: Box<dyn TaskProducer>,
    ) -> Result<Registered, TaskError> {
        if self.shutting_down {
            // The producer is dropped here; a bash producer releases (and so kills) its process.
            producer.kill();
            return Err(TaskError::ShutDown);
        }
        if kind.trim().is_empty() {
            return Err(TaskError::EmptyKind);
        }
        if label.trim().is_empty() {
            return Err(TaskError::EmptyLabel);
        }
        let counter = self.counters.entry(kind.clone()).or_insert(0);
        *counter += 1;
        let id = format!("{kind}-{counter}");
        self.registered += 1;
        let finished = producer.finished();
        self.records.insert(
            id.clone(),
            Record {
                order: self.registered,
                kind,
                label: bounded_label(label),
                owner,
                producer: Arc::from(producer),
                started_at: SystemTime::now(),
                reported: false,
                life: Life::Running(Vec::new()),
                left_running: None,
            },
        );
        tracing::debug!(task = %id, "task registered");
        Ok(Registered { id, finished })
    }

    /// The producer of `id` finished: what it left running becomes a task of the same owner and
    /// kind (`left running by: <label>`), named by the record; asked before [`TaskTable::settle`],
    /// so the end's notice names it too, and not during shutdown. A task killed meanwhile
    /// (`bash_kill`, a released owner) has it killed instead: a kill takes every process of it.
    pub(crate) fn adopt_left_behind(&mut self, id: &str) -> Option<Registered> {
        let record = self.records.get(id)?;
        if self.shutting_down || record.settled() {
            return None;
        }
        let left = record.producer.left_behind()?;
        if matches!(record.life, Life::Killing(_)) {
            left.producer.kill();
            return None;
        }
        let (kind, owner) = (record.kind.clone(), record.owner.clone());
        let label = format!("left running by: {}", record.label);
        let registered = self.register(kind, label, owner, left.producer).ok()?;
        if let Some(record) = self.records.get_mut(id) {
            record.left_running = Some(crate::LeftRunning {
                task_id: registered.id.clone(),
                description: left.description,
                pids: left.pids,
            });
        }
        Some(registered)
    }

    /// The producer of `id` finished: the record settles once. Returns the notice for subscribers,
    /// unless the registry is shutting down.
    pub(crate) fn settle(&mut self, id: &str, end: TaskStatus) -> Option<TaskDone> {
        let record = self.records.get_mut(id)?;
        let (killed, waiters) = match &mut record.life {
            Life::Settled(_) => return None,
            Life::Running(waiters) => (false, std::mem::take(waiters)),
            Life::Killing(waiters) => (true, std::mem::take(waiters)),
        };
        let finished_at = SystemTime::now();
        let retained = record.producer.retained_bytes() + record_bytes(id, record);
        let spill = record.producer.spill_bytes();
        self.settled_count += 1;
        self.retained_total += retained;
        self.spill_total += spill;
        let status = end.stays_killed(killed);
        tracing::debug!(task = %id, ?status, reported = record.reported, "task settled");
        record.life = Life::Settled(Ended {
            status,
            finished_at,
            retained,
            spill,
            drained: false,
        });
        // A wait that ended otherwise (matched, timed out, cancelled) has dropped its receiver.
        let awaited = waiters.iter().any(|waiter| !waiter.is_closed());
        for waiter in waiters {
            let _ = waiter.send(());
        }
        let done = (!self.shutting_down).then(|| TaskDone {
            snapshot: record.snapshot(id),
            owner: record.owner.clone(),
            awaited,
        });
        let key = (!record.reported, record.order);
        if spill > 0 {
            self.spilled.insert(key, id.to_owned());
        }
        self.finished.insert(key, id.to_owned());
        self.evict_over_cap();
        done
    }

    /// A consuming read. The status is taken first: if it says the task has ended, the read is final.
    pub(crate) fn read(&mut self, id: &str, caller: Option<&str>) -> Result<ReadReply, TaskError> {
        let record = self.access(id, caller)?;
        let settled = record.settled();
        let newly_reported = settled && !record.reported;
        let order = record.order;
        if settled {
            record.reported = true;
        }
        let snapshot = record.snapshot(id);
        let output = record.producer.read();
        if record.ended().is_some_and(|ended| !ended.drained) {
            // The end was read and everything with it: keep only what a later discard removes.
            let drained = Drained {
                spill_paths: output.spill_paths.clone(),
                sandbox: output.sandbox.clone(),
                input: match record.producer.input() {
                    crate::TaskInput::None => crate::TaskInput::None,
                    _ => crate::TaskInput::Closed,
                },
            };
            let kept = drained.retained_bytes() + record_bytes(id, record);
            record.producer = Arc::new(drained);
            if let Life::Settled(ended) = &mut record.life {
                ended.drained = true;
                let before = std::mem::replace(&mut ended.retained, kept);
                self.retained_total = self.retained_total - before + kept;
            }
        }
        if newly_reported {
            self.reported_now(order);
        }
        Ok(ReadReply { output, snapshot })
    }

    /// What a wait on `id` needs: its producer (to watch output) and, unless the task has already
    /// settled, a receiver that fires when it does.
    pub(crate) fn watch(&mut self, id: &str, caller: Option<&str>) -> Result<Watch, TaskError> {
        let record = self.access(id, caller)?;
        let settled = record.waiters().map(|waiters| {
            // Waits that ended (timed out, aborted) leave closed senders behind: drop them here.
            waiters.retain(|waiter| !waiter.is_closed());
            let (tx, rx) = oneshot::channel();
            waiters.push(tx);
            rx
        });
        Ok(Watch {
            producer: record.producer.clone(),
            settled,
        })
    }

    /// A write to the task's input: refused when it takes none or has ended.
    pub(crate) fn write(
        &mut self,
        id: &str,
        caller: Option<&str>,
        items: Vec<crate::TaskInputItem>,
    ) -> Result<Option<std::sync::Arc<dyn crate::OutputGlance>>, TaskError> {
        let record = self.access(id, caller)?;
        if record.settled() {
            return Err(match record.producer.input() {
                crate::TaskInput::None => TaskError::NoInput(id.to_owned()),
                _ => TaskError::InputClosed(id.to_owned()),
            });
        }
        record
            .producer
            .write(items)
            .map_err(|refusal| match refusal {
                crate::WriteRefusal::NoInput => TaskError::NoInput(id.to_owned()),
                crate::WriteRefusal::Closed => TaskError::InputClosed(id.to_owned()),
                crate::WriteRefusal::Full => TaskError::InputFull,
            })?;
        Ok(record.producer.glance())
    }

    pub(crate) fn kill(&mut self, id: &str, caller: Option<&str>) -> Result<KillReply, TaskError> {
        let record = self.access(id, caller)?;
        let newly_reported = record.settled() && !record.reported;
        let order = record.order;
        let outcome = if record.kill() {
            TaskKillOutcome::Killed
        } else {
            TaskKillOutcome::AlreadyFinished
        };
        let reply = KillReply {
            outcome,
            snapshot: record.snapshot(id),
        };
        if newly_reported {
            self.reported_now(order);
        }
        Ok(reply)
    }

    pub(crate) fn get(
        &mut self,
        id: &str,
        caller: Option<&str>,
    ) -> Result<TaskSnapshot, TaskError> {
        Ok(self.access(id, caller)?.snapshot(id))
    }

    /// The tasks `caller` may see, in registration order.
    pub(crate) fn list(&self, caller: Option<&str>) -> Vec<TaskSnapshot> {
        let mut visible: Vec<(&String, &Record)> = self
            .records
            .iter()
            .filter(|(_, r)| r.visible_to(caller))
            .collect();
        visible.sort_by_key(|(_, r)| r.order);
        visible.into_iter().map(|(id, r)| r.snapshot(id)).collect()
    }

    /// The tasks whose own owner's mailbox closed. Matching is by the exact mailbox each task was
    /// registered with, so a replacement agent with the same session id keeps its tasks.
    pub(crate) fn tasks_of_gone_owners(&self) -> Vec<String> {
        self.records
            .iter()
            .filter(|(_, r)| r.owner.as_ref().is_some_and(TaskOwner::is_gone))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// The ids of every task owned by `session_id`.
    pub(crate) fn session_tasks(&self, session_id: &str) -> Vec<String> {
        self.records
            .iter()
            .filter(|(_, r)| r.owner.as_ref().is_some_and(|o| o.session_id == session_id))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Kills the given unsettled tasks and returns receivers that fire when each has settled.
    pub(crate) fn kill_and_watch(&mut self, ids: &[String]) -> Vec<oneshot::Receiver<()>> {
        let mut watches = Vec::new();
        for id in ids {
            let Some(record) = self.records.get_mut(id) else {
                continue;
            };
            if record.settled() {
                continue;
            }
            record.kill();
            if let Some(waiters) = record.waiters() {
                let (tx, rx) = oneshot::channel();
                waiters.push(tx);
                watches.push(rx);
            }
        }
        watches
    }

    /// Forgets the given tasks (their owner was released).
    pub(crate) fn remove(&mut self, ids: &[String]) {
        for id in ids {
            if let Some(record) = self.records.remove(id) {
                self.forget_settled(&record);
                self.released.insert(id.clone());
            }
        }
    }

    /// Refuses new tasks and stops notices; kills every live task and returns receivers that fire as
    /// each settles.
    pub(crate) fn begin_shutdown(&mut self) -> Vec<oneshot::Receiver<()>> {
        self.shutting_down = true;
        let live: Vec<String> = self
            .records
            .iter()
            .filter(|(_, r)| !r.settled())
            .map(|(id, _)| id.clone())
            .collect();
        tracing::debug!(live = live.len(), "task registry shutting down");
        self.kill_and_watch(&live)
    }

    /// Forgets every task (the end of a shutdown).
    pub(crate) fn clear(&mut self) {
        self.records.clear();
        self.finished.clear();
        self.spilled.clear();
        self.settled_count = 0;
        self.retained_total = 0;
        self.spill_total = 0;
    }
}

#[cfg(test)]
mod tests;
