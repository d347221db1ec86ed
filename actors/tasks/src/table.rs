//! The task table: every task record and every rule about them, with no actor in sight.
//!
//! The [`TaskRegistry`](crate::TaskRegistry) actor owns one table and does only what needs a
//! scheduler: it waits for producers to finish, tells subscribers, checks owners on a timer and awaits
//! kills. Each method here changes the records and returns what the actor must deliver or await.
//!
//! Record life cycle:
//!
//! ```text
//!   register ──► running ──finished──► completed | killed   (settled once; one TaskDone)
//!                  └──kill──► killed (signal unknown yet; reported) ──finished──► killed by SIG…
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

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::SystemTime;

use futures::future::BoxFuture;
use tokio::sync::oneshot;

use crate::agent::TaskOwner;
use crate::errors::TaskError;
use crate::messages::{KillReply, ReadReply, TaskDone, TaskKillOutcome};
use crate::producer::{Drained, TaskProducer, TaskStatus};
use crate::retention::{
    FinishedTask, RetentionLimits, RetentionLoad, RetentionPolicy, heap_block_bytes,
};
use crate::snapshot::TaskSnapshot;

/// Bytes of a label a record keeps (a bash task's label is its command, which may be a heredoc of
/// many KiB; a finished, fully read task keeps little more than its label).
pub(crate) const MAX_LABEL_BYTES: usize = 256;

/// `label` cut to at most [`MAX_LABEL_BYTES`] on a character boundary, `…` marking the cut, and
/// holding no spare capacity.
fn bounded_label(mut label: String) -> String {
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
fn record_bytes(id: &str, record: &Record) -> usize {
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

struct Record {
    order: u64,
    kind: String,
    label: String,
    owner: Option<TaskOwner>,
    producer: Arc<dyn TaskProducer>,
    status: TaskStatus,
    settled: bool,
    started_at: SystemTime,
    finished_at: Option<SystemTime>,
    reported: bool,
    /// Memory it holds since it settled: what its producer reported then (once drained, what the
    /// stand-in costs) and the record itself.
    retained: usize,
    /// Bytes of its spill files when it settled (kept when drained: the files stay).
    spill: u64,
    /// The producer was replaced by a [`Drained`] stand-in.
    drained: bool,
    /// Woken when the record settles (owner release, shutdown).
    settle_waiters: Vec<oneshot::Sender<()>>,
}

impl Record {
    fn snapshot(&self, id: &str) -> TaskSnapshot {
        TaskSnapshot {
            id: id.to_owned(),
            kind: self.kind.clone(),
            label: self.label.clone(),
            owner_session: self.owner.as_ref().map(|o| o.session_id.clone()),
            status: match &self.status {
                TaskStatus::Running if self.producer.queued() => TaskStatus::Queued,
                status => status.clone(),
            },
            settled: self.settled,
            started_at: self.started_at,
            finished_at: self.finished_at,
            reported: self.reported,
        }
    }

    fn visible_to(&self, caller: Option<&str>) -> bool {
        match &self.owner {
            None => true,
            Some(owner) => caller == Some(owner.session_id.as_str()),
        }
    }

    /// Starts the kill of running work; `true` while the work has not settled (this call started
    /// the kill, or one is under way: the work is still being killed, not finished). Either way the
    /// owner has now seen the end, so no notice is needed.
    fn kill(&mut self) -> bool {
        self.reported = true;
        if self.settled {
            return false;
        }
        if self.status.is_running() {
            self.producer.kill();
            self.status = TaskStatus::Killed { signal: None };
        }
        true
    }
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

    /// Why `id` has no record: it was issued and is gone (discarded), or it never was.
    fn missing(&self, id: &str) -> TaskError {
        let issued = id.rsplit_once('-').and_then(|(kind, n)| {
            let n: u64 = n.parse().ok()?;
            (n >= 1 && self.counters.get(kind).is_some_and(|last| n <= *last)).then_some(kind)
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
                status: TaskStatus::Running,
                settled: false,
                started_at: SystemTime::now(),
                finished_at: None,
                reported: false,
                retained: 0,
                spill: 0,
                drained: false,
                settle_waiters: Vec::new(),
            },
        );
        tracing::debug!(task = %id, "task registered");
        Ok(Registered { id, finished })
    }

    /// The producer of `id` finished: the record settles once. Returns the notice for subscribers,
    /// unless the registry is shutting down.
    pub(crate) fn settle(&mut self, id: &str, end: TaskStatus) -> Option<TaskDone> {
        let record = self.records.get_mut(id)?;
        if record.settled {
            return None;
        }
        record.settled = true;
        record.finished_at = Some(SystemTime::now());
        record.retained = record.producer.retained_bytes() + record_bytes(id, record);
        record.spill = record.producer.spill_bytes();
        self.settled_count += 1;
        self.retained_total += record.retained;
        self.spill_total += record.spill;
        let killed = matches!(record.status, TaskStatus::Killed { .. });
        record.status = end.stays_killed(killed);
        for waiter in record.settle_waiters.drain(..) {
            let _ = waiter.send(());
        }
        tracing::debug!(task = %id, status = ?record.status, reported = record.reported, "task settled");
        let done = (!self.shutting_down).then(|| TaskDone {
            snapshot: record.snapshot(id),
            owner: record.owner.clone(),
        });
        let key = (!record.reported, record.order);
        if record.spill > 0 {
            self.spilled.insert(key, id.to_owned());
        }
        self.finished.insert(key, id.to_owned());
        self.evict_over_cap();
        done
    }

    /// Adds a host's retention policy after the built-in limits.
    pub(crate) fn add_retention_policy(&mut self, policy: Box<dyn RetentionPolicy>) {
        self.retention.push(policy);
    }

    /// Asks the retention stack for finished tasks to discard until no policy names one (see
    /// `retention.rs`). A discarded record's producer removes its spill files.
    fn evict_over_cap(&mut self) {
        while let Some((id, by)) = self.retention_victim() {
            let Some(record) = self.records.remove(&id) else {
                break;
            };
            self.forget_settled(&record);
            tracing::debug!(
                target: "dsh::policy",
                task = %id,
                policy = %by,
                reported = record.reported,
                retained = record.retained,
                spill = record.spill,
                finished = self.settled_count,
                retained_total = self.retained_total,
                spill_total = self.spill_total,
                "evict: finished task discarded (retention limit)"
            );
            record.producer.discard();
            if !record.reported
                && !self.shutting_down
                && let Some(owner) = record.owner
            {
                let text = format!(
                    "background {} task {id} finished and was discarded unread (retention limit).",
                    record.kind
                );
                self.discard_notices.push((owner, text));
            }
        }
    }

    /// The notices for owners whose unread tasks were discarded since the last call.
    pub(crate) fn take_discard_notices(&mut self) -> Vec<(TaskOwner, String)> {
        std::mem::take(&mut self.discard_notices)
    }

    /// The first finished task a policy of the stack names, and that policy's name. The built-in
    /// limits' rule ([`RetentionLimits`]) is applied through the ordered indexes; only a host's
    /// policies are shown every finished task.
    fn retention_victim(&mut self) -> Option<(String, String)> {
        let load = self.load();
        if !self.limits.holds(load) {
            let any_kind = load.finished > self.limits.max_finished
                || load.retained_bytes > self.limits.max_retained_bytes;
            let index = if any_kind {
                &self.finished
            } else {
                &self.spilled
            };
            if let Some((_, id)) = index.first_key_value() {
                return Some((id.clone(), self.limits.name().to_owned()));
            }
        }
        if self.retention.is_empty() {
            return None;
        }
        let finished: Vec<FinishedTask<'_>> = self
            .records
            .iter()
            .filter(|(_, r)| r.settled)
            .map(|(id, r)| FinishedTask {
                id,
                owner_session: r.owner.as_ref().map(|o| o.session_id.as_str()),
                reported: r.reported,
                order: r.order,
                finished_at: r.finished_at,
                retained_bytes: r.retained,
                spill_bytes: r.spill,
            })
            .collect();
        for policy in self.retention.iter_mut() {
            if let Some(task) = policy
                .discard(load, &finished)
                .and_then(|i| finished.get(i))
            {
                return Some((task.id.to_owned(), policy.name().to_owned()));
            }
        }
        None
    }

    /// What finished tasks hold now, as retention policies see it.
    pub(crate) fn load(&self) -> RetentionLoad {
        RetentionLoad {
            finished: self.settled_count,
            retained_bytes: self.retained_total,
            spill_bytes: self.spill_total,
        }
    }

    /// Takes a removed settled record out of the retention counts and indexes.
    fn forget_settled(&mut self, record: &Record) {
        if record.settled {
            self.settled_count -= 1;
            self.retained_total -= record.retained;
            self.spill_total -= record.spill;
            let key = (!record.reported, record.order);
            self.finished.remove(&key);
            self.spilled.remove(&key);
        }
    }

    /// A settled record's owner has now seen its end: it moves ahead in the order of discard.
    fn reported_now(&mut self, order: u64) {
        for index in [&mut self.finished, &mut self.spilled] {
            if let Some(id) = index.remove(&(true, order)) {
                index.insert((false, order), id);
            }
        }
    }

    /// A consuming read. The status is taken first: if it says the task has ended, the read is final.
    pub(crate) fn read(&mut self, id: &str, caller: Option<&str>) -> Result<ReadReply, TaskError> {
        let record = self.access(id, caller)?;
        let newly_reported = record.settled && !record.reported;
        let order = record.order;
        if record.settled {
            record.reported = true;
        }
        let snapshot = record.snapshot(id);
        let output = record.producer.read();
        if record.settled && !record.drained {
            // The end was read and everything with it: keep only what a later discard removes.
            let drained = Drained {
                spill_paths: output.spill_paths.clone(),
                sandbox: output.sandbox.clone(),
            };
            let kept = drained.retained_bytes() + record_bytes(id, record);
            record.producer = Arc::new(drained);
            record.drained = true;
            let before = std::mem::replace(&mut record.retained, kept);
            self.retained_total = self.retained_total - before + kept;
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
        let settled = if record.settled {
            None
        } else {
            // Waits that ended (timed out, aborted) leave closed senders behind: drop them here.
            record.settle_waiters.retain(|waiter| !waiter.is_closed());
            let (tx, rx) = oneshot::channel();
            record.settle_waiters.push(tx);
            Some(rx)
        };
        Ok(Watch {
            producer: record.producer.clone(),
            settled,
        })
    }

    pub(crate) fn kill(&mut self, id: &str, caller: Option<&str>) -> Result<KillReply, TaskError> {
        let record = self.access(id, caller)?;
        let newly_reported = record.settled && !record.reported;
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
            if record.settled {
                continue;
            }
            record.kill();
            let (tx, rx) = oneshot::channel();
            record.settle_waiters.push(tx);
            watches.push(rx);
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
            .filter(|(_, r)| !r.settled)
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
