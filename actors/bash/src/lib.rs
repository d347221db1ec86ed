//! dsh-bash: the bash executor seam and its local implementation.
//!
//! The seam is a [`Resolver`] (a plain function from request to spec) and two messages, [`Run`] and
//! [`Start`], so a sandboxed or remote executor can stand in by handling them. [`LocalBashExecutor`] runs a fresh non-login `bash -c` per call through the
//! process manager; [`Supervised`] restarts a host's background command by its [`RestartPolicy`].
//! This crate re-exports the process and task vocabulary its callers need, so a
//! consumer has one import root.

mod background;
mod config;
mod errors;
mod executor;
mod leftovers;
mod messages;
mod peek;
mod request;
mod resolve;
pub mod sandbox;
mod supervised;

pub use background::{BashProcess, merge_streams};
pub use config::{
    BashConfig, DEFAULT_GRACE_MS, DEFAULT_MAX_OUTPUT_BYTES, DEFAULT_MAX_SPILL_BYTES,
    DEFAULT_MAX_TIMEOUT_MS, DEFAULT_TIMEOUT_MS, OnTimeout,
};
pub use errors::ExecError;
pub use executor::{LocalBashExecutor, TERMINAL_ENV};
pub use leftovers::{Leftovers, describe as describe_left_running};
pub use messages::{BashRunResult, MoveReason, MovedToBackground, Run, RunEnding, Start};
pub use peek::{OutputPeek, PeekSnapshot};
pub use request::{BashExecRequest, BashExecSpec};
pub use resolve::Resolver;
pub use sandbox::{
    Enforcement, SandboxBashExecutor, SandboxFacts, SandboxMode, SandboxPolicy,
    SandboxPolicyResolver, SandboxProvider, sandbox_unavailable_text,
};
pub use supervised::{Restart, RestartPolicy, Supervised};

pub use dsh_process::{
    AbortSignal, CollectedOutput, DSH_ENV_PREFIX, InputMode, ManagerConfig, ProcessManager,
    ProcessPolicy, SpawnError, TerminalSize, wait_abort,
};
pub use dsh_tasks::{TaskOutput, TaskProducer, TaskStatus};
