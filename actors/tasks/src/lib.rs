//! dsh-tasks: the registry of background tasks.
//!
//! A task is work that outlives the tool call that started it: it gets an id (`bash-1`, `bash-2`, …
//! per registry), optionally an owner (an agent's session id and mailbox), one consuming read cursor,
//! a status (`running` → `completed` | `killed`), and a `reported` flag saying the owner already saw
//! its end. The registry tells subscribers once per task when it ends ([`TaskDone`]), kills the tasks
//! of owners that are gone, and kills and joins everything at shutdown.
//!
//! It knows nothing about processes: the work behind a task is a [`TaskProducer`].

//!
//! Layout: `messages` (the registry's protocol), `table` (the plain task table and every rule about
//! records, unit-tested on its own), `registry` (the thin actor), `producer`, `agent`, `snapshot`,
//! `wait` (waiting on a task until it settles or its output matches), `condition` (what a wait
//! matches, fed as the output is written), `retention` (which finished tasks are discarded), `names` (settings spelled as words).

mod agent;
mod condition;
mod errors;
mod glance;
mod input;
mod messages;
mod names;
mod producer;
mod registry;
mod retention;
mod sandbox_facts;
mod snapshot;
mod table;
mod wait;

pub use agent::{AgentRef, Inject, Lease, TaskOwner};
pub use condition::{OutputCondition, OutputScan};
pub use errors::TaskError;
pub use glance::{OutputGlance, PeekSnapshot};
pub use input::{TaskInput, TaskInputItem, TaskKey, TaskPipeKey, WriteRefusal, WriteTask};
pub use messages::{
    GetRetentionLoad, GetTask, KillReply, KillTask, ListTasks, ReadReply, ReadTask, Register,
    ReleaseOwner, ShutdownTasks, Subscribe, TaskDone, TaskKillOutcome,
};
pub use names::{Named, UnknownValue};
pub use producer::{LeftBehind, LeftRunning, TaskOutput, TaskProducer, TaskStatus};
pub use registry::{
    DEFAULT_MAX_FINISHED, DEFAULT_MAX_RETAINED_BYTES, DEFAULT_MAX_SPILL_BYTES, RegistryConfig,
    TaskRegistry,
};
pub use retention::{
    FinishedTask, RetentionLimits, RetentionLoad, RetentionPolicy, heap_block_bytes,
};
pub use sandbox_facts::{Enforcement, SandboxFacts, SandboxMode};
pub use snapshot::TaskSnapshot;
pub use wait::{WaitOutcome, WaitTask};
