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

/// The result of a foreground run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BashRunResult {
    /// How the run ended: on its own, at its timeout, on the caller's abort, or moved to the
    /// background still running.
    pub ending: RunEnding,
    /// `None` when a signal ended the command.
    pub exit_code: Option<i32>,
    /// The signal that ended the command (`SIGTERM`), however it was sent.
    pub signal: Option<String>,
    /// The effective timeout.
    pub timeout_ms: u64,
    /// What the command printed on stdout (its tail when truncated).
    pub stdout: CollectedOutput,
    /// What the command printed on stderr (its tail when truncated).
    pub stderr: CollectedOutput,
    /// The kernel killed the command (or part of it) for memory: a per-task memory limit was hit.
    pub oom_killed: bool,
    /// The sandbox facts; `None` from an executor that does not sandbox.
    pub sandbox: Option<dsh_tasks::SandboxFacts>,
    /// What the command left running (a descendant still held its pipes at the end of the drain
    /// grace), for the caller to register as a task it can stop.
    pub left_running: Option<crate::Leftovers>,
}

/// How a foreground run ended. Exactly one holds; who fired first decides (the timer, the caller's
/// abort, or neither), whatever the command did afterwards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunEnding {
    /// The command ended by itself: an exit, or a signal nobody in dsh sent.
    Exited,
    /// Our own timer fired first (even if the command then trapped SIGTERM and exited 0).
    TimedOut,
    /// The caller's abort fired first.
    Aborted,
    /// With `on_timeout: background`: the command reached its timeout and still runs; register
    /// its handle as a task of the caller. `stdout`/`stderr` of the result are then empty: the
    /// output so far is in the move.
    MovedToBackground(MovedToBackground),
}

impl RunEnding {
    /// Our timer fired first.
    pub fn timed_out(&self) -> bool {
        matches!(self, RunEnding::TimedOut)
    }

    /// The caller's abort fired first.
    pub fn aborted(&self) -> bool {
        matches!(self, RunEnding::Aborted)
    }
}

/// A foreground command that reached its timeout and was left running.
#[derive(Clone, Debug)]
pub struct MovedToBackground {
    /// Why it was moved.
    pub reason: MoveReason,
    /// The running command, to register as a background task.
    pub handle: BashProcess,
    /// What it printed before the timeout (already consumed from the handle's cursor).
    pub output: TaskOutput,
}

/// Why a foreground command was left running as a background task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MoveReason {
    /// It reached its timeout under `on_timeout: background`.
    Timeout,
    /// It waits for input (issue 22).
    WaitingForInput,
    /// It waits for input at a password-style prompt.
    WaitingForHiddenInput,
}

/// Two moves are equal when they hold the same process and the same output.
impl PartialEq for MovedToBackground {
    fn eq(&self, other: &Self) -> bool {
        self.reason == other.reason
            && self.handle.pid() == other.handle.pid()
            && self.output == other.output
    }
}

impl Eq for MovedToBackground {}
