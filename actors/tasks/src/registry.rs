//! The `TaskRegistry` actor: a thin owner of a [`TaskTable`](crate::table) that waits for producers,
//! tells subscribers once per task, releases the tasks of owners that are gone, and kills and joins at
//! shutdown. Its messages are in [`crate::messages`]; every rule about records is in the table.

use std::time::Duration;

use actix::prelude::*;
use tokio::sync::oneshot;

use crate::agent::{Inject, TaskOwner};
use crate::errors::TaskError;
use crate::messages::{
    GetRetentionLoad, GetTask, KillReply, KillTask, ListTasks, ProducerFinished, ReadReply,
    ReadTask, Register, ReleaseOwner, ShutdownTasks, Subscribe, TaskDone,
};
use crate::retention::{RetentionLimits, RetentionLoad, RetentionPolicy};
use crate::snapshot::TaskSnapshot;
use crate::table::{Registered, TaskTable};
use crate::wait::{WaitOutcome, WaitTask, wait};

/// The default disk budget of finished tasks' spill files: 1 GiB. It holds the whole output of 8
/// finished tasks whose two streams both reached the per-stream spill cap (64 MiB), or of hundreds of
/// ordinary ones (a build log of a few MiB), sixteen times what they may keep in memory; and it
/// keeps a runaway agent from filling a small `/tmp` (often a tmpfs, so RAM, sized at half of it),
/// where a day of 60 MB floods kept 1.8 GB before there was a budget.
pub const DEFAULT_MAX_SPILL_BYTES: u64 = 1 << 30;

/// The default number of finished tasks kept ([`RegistryConfig::max_finished`]).
pub const DEFAULT_MAX_FINISHED: usize = 1000;

/// The default output bytes finished tasks keep in memory ([`RegistryConfig::max_retained_bytes`]):
/// 64 MiB.
pub const DEFAULT_MAX_RETAINED_BYTES: usize = 64 << 20;

/// Registry settings.
#[derive(Clone, Debug)]
pub struct RegistryConfig {
    /// Settled records kept; beyond it the oldest reported ones are evicted first, then the oldest.
    pub max_finished: usize,
    /// Output bytes kept in memory by settled records; beyond it records are evicted likewise.
    pub max_retained_bytes: usize,
    /// Bytes of spill files kept on disk by settled records (read ones included: their files stay
    /// until they are discarded); beyond it records are evicted likewise and their files removed.
    pub max_spill_bytes: u64,
    /// How often the registry looks for owners whose mailbox closed.
    pub owner_check_interval: Duration,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        Self {
            max_finished: DEFAULT_MAX_FINISHED,
            max_retained_bytes: DEFAULT_MAX_RETAINED_BYTES,
            max_spill_bytes: DEFAULT_MAX_SPILL_BYTES,
            owner_check_interval: Duration::from_millis(500),
        }
    }
}

/// The registry of one runtime's background tasks.
pub struct TaskRegistry {
    owner_check_interval: Duration,
    table: TaskTable,
    subscribers: Vec<Recipient<TaskDone>>,
}

impl TaskRegistry {
    /// An empty registry; start it as an actor (`TaskRegistry::new(config).start()`).
    pub fn new(config: RegistryConfig) -> Self {
        Self {
            owner_check_interval: config.owner_check_interval,
            table: TaskTable::with_retention(RetentionLimits {
                max_finished: config.max_finished,
                max_retained_bytes: config.max_retained_bytes,
                max_spill_bytes: config.max_spill_bytes,
            }),
            subscribers: Vec::new(),
        }
    }

    /// Adds a host's retention policy to the stack, after the built-in limits of the config.
    pub fn with_retention_policy(mut self, policy: Box<dyn RetentionPolicy>) -> Self {
        self.table.add_retention_policy(policy);
        self
    }

    /// Kills and joins the given tasks, then forgets them.
    fn release(&mut self, ids: Vec<String>) -> impl ActorFuture<Self, Output = ()> + use<> {
        join(self.table.kill_and_watch(&ids))
            .into_actor(self)
            .map(move |(), registry, _| registry.table.remove(&ids))
    }
}

/// Waits for every watch (a dropped sender counts as settled).
async fn join(watches: Vec<oneshot::Receiver<()>>) {
    for watch in watches {
        let _ = watch.await;
    }
}

impl Actor for TaskRegistry {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(4096);
        ctx.run_interval(self.owner_check_interval, |registry, ctx| {
            let gone = registry.table.tasks_of_gone_owners();
            if !gone.is_empty() {
                tracing::debug!(tasks = ?gone, "owner gone; releasing its tasks");
                ctx.spawn(registry.release(gone));
            }
        });
    }
}

impl Handler<Register> for TaskRegistry {
    type Result = Result<String, TaskError>;

    fn handle(&mut self, msg: Register, ctx: &mut Self::Context) -> Self::Result {
        let owner = msg.owner.as_ref().map(TaskOwner::from_agent);
        let registered = self
            .table
            .register(msg.kind, msg.label, owner, msg.producer)?;
        let id = registered.id.clone();
        watch_finish(registered, ctx);
        Ok(id)
    }
}

/// Tells the registry when `registered`'s work has finished. Runs on the arbiter, not in the
/// actor's context, so a settlement arriving during shutdown is still delivered.
fn watch_finish(registered: Registered, ctx: &mut Context<TaskRegistry>) {
    let me = ctx.address();
    let Registered { id, finished } = registered;
    actix::spawn(async move {
        let status = finished.await;
        me.do_send(ProducerFinished { id, status });
    });
}

impl Handler<ProducerFinished> for TaskRegistry {
    type Result = ();

    fn handle(
        &mut self,
        ProducerFinished { id, status }: ProducerFinished,
        ctx: &mut Self::Context,
    ) {
        if let Some(left) = self.table.adopt_left_behind(&id) {
            tracing::debug!(task = %id, left = %left.id, "what the task left running is a task");
            watch_finish(left, ctx);
        }
        if let Some(done) = self.table.settle(&id, status) {
            self.subscribers.retain(|s| s.connected());
            for subscriber in &self.subscribers {
                subscriber.do_send(done.clone());
            }
        }
        // An owner whose task was discarded before it saw the end should know its output is gone.
        for (owner, text) in self.table.take_discard_notices() {
            if let Some(inbox) = owner.inbox() {
                inbox.do_send(Inject {
                    text,
                    source: "tasks",
                });
            }
        }
    }
}

impl Handler<ReadTask> for TaskRegistry {
    type Result = Result<ReadReply, TaskError>;

    fn handle(&mut self, ReadTask { id, caller }: ReadTask, _: &mut Self::Context) -> Self::Result {
        self.table.read(&id, caller.as_deref())
    }
}

impl Handler<WaitTask> for TaskRegistry {
    type Result = ResponseFuture<Result<WaitOutcome, TaskError>>;

    /// Owner-checked at once; the wait itself runs beside the actor, which keeps serving messages.
    fn handle(&mut self, msg: WaitTask, _: &mut Self::Context) -> Self::Result {
        let watch = self.table.watch(&msg.id, msg.caller.as_deref());
        Box::pin(async move {
            Ok(wait(watch?, msg.timeout, msg.until, msg.for_input, msg.cancel).await)
        })
    }
}

impl Handler<crate::WriteTask> for TaskRegistry {
    type Result = Result<Option<std::sync::Arc<dyn crate::OutputGlance>>, TaskError>;

    fn handle(&mut self, msg: crate::WriteTask, _: &mut Self::Context) -> Self::Result {
        self.table.write(&msg.id, msg.caller.as_deref(), msg.items)
    }
}

impl Handler<KillTask> for TaskRegistry {
    type Result = Result<KillReply, TaskError>;

    fn handle(&mut self, KillTask { id, caller }: KillTask, _: &mut Self::Context) -> Self::Result {
        self.table.kill(&id, caller.as_deref())
    }
}

impl Handler<GetTask> for TaskRegistry {
    type Result = Result<TaskSnapshot, TaskError>;

    fn handle(&mut self, GetTask { id, caller }: GetTask, _: &mut Self::Context) -> Self::Result {
        self.table.get(&id, caller.as_deref())
    }
}

impl Handler<ListTasks> for TaskRegistry {
    type Result = MessageResult<ListTasks>;

    fn handle(&mut self, ListTasks { caller }: ListTasks, _: &mut Self::Context) -> Self::Result {
        MessageResult(self.table.list(caller.as_deref()))
    }
}

impl Handler<GetRetentionLoad> for TaskRegistry {
    type Result = RetentionLoad;

    fn handle(&mut self, _: GetRetentionLoad, _: &mut Self::Context) -> RetentionLoad {
        self.table.load()
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
        let ids = self.table.session_tasks(&session_id);
        Box::pin(self.release(ids))
    }
}

impl Handler<ShutdownTasks> for TaskRegistry {
    type Result = ResponseActFuture<Self, ()>;

    fn handle(&mut self, _: ShutdownTasks, _: &mut Self::Context) -> Self::Result {
        let watches = self.table.begin_shutdown();
        Box::pin(
            join(watches)
                .into_actor(self)
                .map(|(), registry, _| registry.table.clear()),
        )
    }
}
