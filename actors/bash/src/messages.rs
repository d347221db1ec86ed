//! The executor seam: a [`Resolver`](crate::Resolver) and two messages are the whole contract. Any
//! actor that handles [`Run`] and [`Start`] (a sandboxed or remote executor), with its own resolver,
//! can stand in for [`crate::LocalBashExecutor`].

use actix::prelude::*;
use dsh_process::CollectedOutput;
use dsh_tasks::TaskOutput;

use crate::background::BashProcess;
use crate::errors::ExecError;
use crate::request::BashExecSpec;

/// Run a command in the foreground under one fused deadline (timeout or caller abort).
#[derive(Message, Debug)]
#[rtype(result = "Result<BashRunResult, ExecError>")]
pub struct Run(pub BashExecSpec);

/// Start a command in the background (no timeout) and return its handle at once.
#[derive(Message, Debug)]
#[rtype(result = "Result<BashProcess, ExecError>")]
pub struct Start(pub BashExecSpec);

/// The result of a foreground run. At most one of `timed_out` and `aborted` is set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BashRunResult {
    /// `None` when a signal ended the command.
    pub exit_code: Option<i32>,
    /// The signal that ended the command (`SIGTERM`), however it was sent.
    pub signal: Option<String>,
    /// Our own timer fired first (even if the command then trapped SIGTERM and exited 0).
    pub timed_out: bool,
    /// The caller's abort fired first.
    pub aborted: bool,
    /// The effective timeout.
    pub timeout_ms: u64,
    /// What the command printed on stdout (its tail when truncated).
    pub stdout: CollectedOutput,
    /// What the command printed on stderr (its tail when truncated).
    pub stderr: CollectedOutput,
    /// The kernel killed the command (or part of it) for memory: a per-task memory limit was hit.
    pub oom_killed: bool,
    /// With `on_timeout: background`: the command reached its timeout and still runs; register
    /// this handle as a task of the caller. `stdout`/`stderr` are then empty: the output so far
    /// is in it.
    pub moved_to_background: Option<MovedToBackground>,
    /// The sandbox facts; `None` from an executor that does not sandbox.
    pub sandbox: Option<dsh_tasks::SandboxFacts>,
}

/// A foreground command that reached its timeout and was left running.
#[derive(Clone, Debug)]
pub struct MovedToBackground {
    /// The running command, to register as a background task.
    pub handle: BashProcess,
    /// What it printed before the timeout (already consumed from the handle's cursor).
    pub output: TaskOutput,
}

/// Two moves are equal when they hold the same process and the same output.
impl PartialEq for MovedToBackground {
    fn eq(&self, other: &Self) -> bool {
        self.handle.pid() == other.handle.pid() && self.output == other.output
    }
}

impl Eq for MovedToBackground {}
