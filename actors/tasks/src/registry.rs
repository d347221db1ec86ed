//! The `TaskRegistry` actor and its messages.
//!
//! Record life cycle:
//!
//! ```text
//!   Register ──► running ──producer finished──► completed | killed   (settled; TaskDone emitted once)
//!                  └──KillTask──► killed (signal unknown yet; reported) ──finished──► killed by SIG…
//!   settled records stay readable until evicted (over `max_finished`, reported ones first) or their
//!   owner is released; an owner whose mailbox closed is released automatically.
//! ```
//!
//! Access fence: a task with an owner is visible only to callers presenting the owner's session id
//! (`task <id> belongs to another session`); tasks without one are open to every caller.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use actix::prelude::*;
use tokio::sync::oneshot;

use crate::agent::{AgentRef, TaskOwner};
use crate::errors::TaskError;
use crate::producer::{TaskOutput, TaskProducer, TaskStatus};
use crate::snapshot::TaskSnapshot;

/// Registry settings.
#[derive(Clone, Debug)]
pub struct RegistryConfig {
    /// Settled records kept; beyond it the oldest reported ones are evicted first, then the oldest.
    pub max_finished: usize,
    /// How often the registry looks for owners whose mailbox closed.
    pub owner_check_interval: Duration,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        Self {
            max_finished: 1024,
            owner_check_interval: Duration::from_millis(500),
        }
    }
}

/// Register running work as a task; replies with its id.
#[derive(Message)]
#[rtype(result = "Result<String, TaskError>")]
pub struct Register {
    pub kind: String,
    pub label: String,
    pub owner: Option<AgentRef>,
    pub producer: Box<dyn TaskProducer>,
}

/// Consuming read of a task's new output, with its status as of just before the read.
#[derive(Message, Debug)]
#[rtype(result = "Result<ReadReply, TaskError>")]
pub struct ReadTask {
    pub id: String,
    /// The caller's session id; `None` for a caller with no agent.
    pub caller: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadReply {
    pub output: TaskOutput,
    /// Taken before the read, so a terminal status here means the output read is final.
    pub snapshot: TaskSnapshot,
}

/// Kill a running task.
#[derive(Message, Debug)]
#[rtype(result = "Result<KillReply, TaskError>")]
pub struct KillTask {
    pub id: String,
    pub caller: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KillOutcome {
    /// The task was running; its kill has started.
    Killed,
    /// The task had already ended (or was already being killed).
    AlreadyFinished,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KillReply {
    pub outcome: KillOutcome,
    pub snapshot: TaskSnapshot,
}

/// A non-consuming look at one task.
#[derive(Message, Debug)]
#[rtype(result = "Result<TaskSnapshot, TaskError>")]
pub struct GetTask {
    pub id: String,
    pub caller: Option<String>,
}

/// The tasks a caller may see, in registration order.
#[derive(Message, Debug)]
#[rtype(result = "Vec<TaskSnapshot>")]
pub struct ListTasks {
    pub caller: Option<String>,
}

/// Be told about every task that ends.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Subscribe(pub Recipient<TaskDone>);

/// Sent once per task, after its output is final.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct TaskDone {
    pub snapshot: TaskSnapshot,
    pub owner: Option<TaskOwner>,
}

/// Kill and join the live tasks of a session, then forget all its tasks.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct ReleaseOwner {
    pub session_id: String,
}

/// Kill and join every task and refuse new ones. Idempotent. No `TaskDone` is sent after it begins.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct Shutdown;

/// Internal: a producer ended.
#[derive(Message)]
#[rtype(result = "()")]
struct Settle {
    id: String,
    status: TaskStatus,
}

struct Record {
    order: u64,
    kind: String,
    label: String,
    owner: Option<TaskOwner>,
    producer: Box<dyn TaskProducer>,
    status: TaskStatus,
    settled: bool,
    started_at: SystemTime,
    finished_at: Option<SystemTime>,
    reported: bool,
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
            status: self.status.clone(),
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
}

/// The registry of one runtime's background tasks.
pub struct TaskRegistry {
    config: RegistryConfig,
    records: HashMap<String, Record>,
    /// Next ordinal per kind (`bash` → 3 means `bash-3` is next).
    counters: HashMap<String, u64>,
    registered: u64,
    subscribers: Vec<Recipient<TaskDone>>,
    shutting_down: bool,
}

impl TaskRegistry {
    pub fn new(config: RegistryConfig) -> Self {
        Self {
            config,
            records: HashMap::new(),
            counters: HashMap::new(),
            registered: 0,
            subscribers: Vec::new(),
            shutting_down: false,
        }
    }

    fn access(&mut self, id: &str, caller: Option<&str>) -> Result<&mut Record, TaskError> {
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

    /// Kills the given live tasks and returns receivers that fire when each has settled.
    fn kill_and_watch(&mut self, ids: &[String]) -> Vec<oneshot::Receiver<()>> {
        let mut watches = Vec::new();
        for id in ids {
            let Some(record) = self.records.get_mut(id) else {
                continue;
            };
            if record.settled {
                continue;
            }
            if record.status.is_running() {
                record.producer.kill();
                record.status = TaskStatus::Killed { signal: None };
            }
            record.reported = true;
            let (tx, rx) = oneshot::channel();
            record.settle_waiters.push(tx);
            watches.push(rx);
        }
        watches
    }

    fn settle(&mut self, id: String, end: TaskStatus) {
        let Some(record) = self.records.get_mut(&id) else {
            return;
        };
        if record.settled {
            return;
        }
        record.settled = true;
        record.finished_at = Some(SystemTime::now());
        record.status = match (&record.status, end) {
            // A task we killed stays killed even if it trapped the signal and exited 0.
            (TaskStatus::Killed { .. }, TaskStatus::Killed { signal }) => {
                TaskStatus::Killed { signal }
            }
            (TaskStatus::Killed { .. }, _) => TaskStatus::Killed { signal: None },
            (_, end) => end,
        };
        for waiter in record.settle_waiters.drain(..) {
            let _ = waiter.send(());
        }
        tracing::debug!(task = %id, status = ?record.status, reported = record.reported, "task settled");
        if !self.shutting_down {
            let done = TaskDone {
                snapshot: record.snapshot(&id),
                owner: record.owner.clone(),
            };
            self.subscribers.retain(|s| s.connected());
            for subscriber in &self.subscribers {
                subscriber.do_send(done.clone());
            }
        }
        self.evict_over_cap();
    }

    /// Keeps at most `max_finished` settled records: the oldest reported ones go first.
    fn evict_over_cap(&mut self) {
        let settled = self.records.values().filter(|r| r.settled).count();
        for _ in self.config.max_finished..settled {
            let victim = self
                .records
                .iter()
                .filter(|(_, r)| r.settled)
                .min_by_key(|(_, r)| (!r.reported, r.order))
                .map(|(id, _)| id.clone());
            if let Some(id) = victim {
                tracing::debug!(task = %id, "evicting finished task record");
                self.records.remove(&id);
            }
        }
    }

    /// Releases the tasks whose own owner's mailbox closed. Matching is by the exact mailbox each task
    /// was registered with, so a replacement agent with the same session id keeps its tasks.
    fn release_gone_owners(&mut self, ctx: &mut Context<Self>) {
        let gone: Vec<String> = self
            .records
            .iter()
            .filter(|(_, r)| r.owner.as_ref().is_some_and(TaskOwner::is_gone))
            .map(|(id, _)| id.clone())
            .collect();
        if !gone.is_empty() {
            tracing::debug!(tasks = ?gone, "owner gone; releasing its tasks");
            ctx.spawn(self.release(gone));
        }
    }

    /// The ids of every task owned by `session_id`.
    fn session_tasks(&self, session_id: &str) -> Vec<String> {
        self.records
            .iter()
            .filter(|(_, r)| r.owner.as_ref().is_some_and(|o| o.session_id == session_id))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Kills and joins the given tasks, then removes their records.
    fn release(&mut self, ids: Vec<String>) -> impl ActorFuture<Self, Output = ()> + use<> {
        let watches = self.kill_and_watch(&ids);
        async move {
            for watch in watches {
                let _ = watch.await;
            }
        }
        .into_actor(self)
        .map(move |(), registry, _| {
            for id in &ids {
                registry.records.remove(id);
            }
        })
    }
}

impl Actor for TaskRegistry {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(4096);
        ctx.run_interval(self.config.owner_check_interval, |registry, ctx| {
            registry.release_gone_owners(ctx)
        });
    }
}

impl Handler<Register> for TaskRegistry {
    type Result = Result<String, TaskError>;

    fn handle(&mut self, msg: Register, ctx: &mut Self::Context) -> Self::Result {
        if self.shutting_down {
            // The producer is dropped here; a bash producer releases (and so kills) its process.
            msg.producer.kill();
            return Err(TaskError::ShutDown);
        }
        if msg.kind.trim().is_empty() {
            return Err(TaskError::EmptyKind);
        }
        if msg.label.trim().is_empty() {
            return Err(TaskError::EmptyLabel);
        }
        let counter = self.counters.entry(msg.kind.clone()).or_insert(0);
        *counter += 1;
        let id = format!("{}-{}", msg.kind, counter);
        self.registered += 1;
        let finished = msg.producer.finished();
        self.records.insert(
            id.clone(),
            Record {
                order: self.registered,
                kind: msg.kind,
                label: msg.label,
                owner: msg.owner.as_ref().map(TaskOwner::from_agent),
                producer: msg.producer,
                status: TaskStatus::Running,
                settled: false,
                started_at: SystemTime::now(),
                finished_at: None,
                reported: false,
                settle_waiters: Vec::new(),
            },
        );
        let me = ctx.address();
        let settle_id = id.clone();
        // Runs on the arbiter, not in this actor's context, so a settlement arriving during shutdown
        // is still delivered.
        actix::spawn(async move {
            let status = finished.await;
            me.do_send(Settle {
                id: settle_id,
                status,
            });
        });
        tracing::debug!(task = %id, "task registered");
        Ok(id)
    }
}

impl Handler<Settle> for TaskRegistry {
    type Result = ();

    fn handle(&mut self, Settle { id, status }: Settle, _: &mut Self::Context) {
        self.settle(id, status);
    }
}

impl Handler<ReadTask> for TaskRegistry {
    type Result = Result<ReadReply, TaskError>;

    fn handle(&mut self, ReadTask { id, caller }: ReadTask, _: &mut Self::Context) -> Self::Result {
        let record = self.access(&id, caller.as_deref())?;
        // The status is taken first: if it says the task has ended, the read below is final.
        if record.settled {
            record.reported = true;
        }
        let snapshot = record.snapshot(&id);
        let output = record.producer.read();
        Ok(ReadReply { output, snapshot })
    }
}

impl Handler<KillTask> for TaskRegistry {
    type Result = Result<KillReply, TaskError>;

    fn handle(&mut self, KillTask { id, caller }: KillTask, _: &mut Self::Context) -> Self::Result {
        let record = self.access(&id, caller.as_deref())?;
        let outcome = if record.status.is_running() {
            record.producer.kill();
            record.status = TaskStatus::Killed { signal: None };
            KillOutcome::Killed
        } else {
            KillOutcome::AlreadyFinished
        };
        record.reported = true;
        Ok(KillReply {
            outcome,
            snapshot: record.snapshot(&id),
        })
    }
}

impl Handler<GetTask> for TaskRegistry {
    type Result = Result<TaskSnapshot, TaskError>;

    fn handle(&mut self, GetTask { id, caller }: GetTask, _: &mut Self::Context) -> Self::Result {
        Ok(self.access(&id, caller.as_deref())?.snapshot(&id))
    }
}

impl Handler<ListTasks> for TaskRegistry {
    type Result = MessageResult<ListTasks>;

    fn handle(&mut self, ListTasks { caller }: ListTasks, _: &mut Self::Context) -> Self::Result {
        let mut visible: Vec<(&String, &Record)> = self
            .records
            .iter()
            .filter(|(_, r)| r.visible_to(caller.as_deref()))
            .collect();
        visible.sort_by_key(|(_, r)| r.order);
        MessageResult(visible.into_iter().map(|(id, r)| r.snapshot(id)).collect())
    }
}

impl Handler<Subscribe> for TaskRegistry {
    type Result = ();

    fn handle(&mut self, Subscribe(recipient): Subscribe, _: &mut Self::Context) {
        self.subscribers.push(recipient);
    }
}

impl Handler<ReleaseOwner> for TaskRegistry {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(
        &mut self,
        ReleaseOwner { session_id }: ReleaseOwner,
        _: &mut Self::Context,
    ) -> Self::Result {
        let ids = self.session_tasks(&session_id);
        Box::pin(self.release(ids))
    }
}

impl Handler<Shutdown> for TaskRegistry {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, _: Shutdown, _: &mut Self::Context) -> Self::Result {
        self.shutting_down = true;
        let live: Vec<String> = self
            .records
            .iter()
            .filter(|(_, r)| !r.settled)
            .map(|(id, _)| id.clone())
            .collect();
        tracing::debug!(live = live.len(), "task registry shutting down");
        let watches = self.kill_and_watch(&live);
        Box::pin(
            async move {
                for watch in watches {
                    let _ = watch.await;
                }
            }
            .into_actor(self)
            .map(|(), registry, _| registry.records.clear()),
        )
    }
}
