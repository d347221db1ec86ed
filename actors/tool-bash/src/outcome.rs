//! What a tool call did, typed: a host reads the exit code, the task id or the kill result from
//! [`ToolOutcome`] instead of the model's text. The MCP `structuredContent` is this type serialized
//! (its JSON Schema is [`crate::output_schema`]; a test holds the two together), and the text is
//! rendered from the same facts (`render.rs`), so neither can say something the other does not.

use std::path::PathBuf;
use std::time::Duration;

use dsh_bash::{
    BashRunResult, CollectedOutput, PeekSnapshot, RunEnding, SandboxFacts, TaskOutput, TaskStatus,
};
use dsh_tasks::TaskInput;
use serde::ser::{Serialize, SerializeMap, Serializer};

use crate::task_id::TaskId;

/// The outcome of a tool call that got as far as doing something.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolOutcome {
    /// A foreground `bash` command ran to its end (by itself, at its timeout, or on a cancel).
    Ran(Ran),
    /// A `bash` call started a background task.
    Started {
        /// The new task.
        task_id: TaskId,
    },
    /// A foreground `bash` call reached its timeout and became a background task of the caller
    /// (`on_timeout: background`).
    MovedToBackground {
        /// The task it became.
        task_id: TaskId,
        /// The timeout it reached.
        timeout: Duration,
    },
    /// A foreground `bash` call whose command waits for input (issue 22) and became a background
    /// task of the caller.
    WaitingForInput {
        /// The task it became.
        task_id: TaskId,
        /// At a password-style prompt.
        hidden: bool,
    },
    /// A `bash_output` read, or the read `bash_write` ends with.
    Read(Read),
    /// A `bash_kill`.
    Kill {
        /// The task.
        task_id: TaskId,
        /// Whether this call killed it.
        result: KillResult,
    },
}

impl ToolOutcome {
    /// The background task the call started, moved to, read or killed.
    pub fn task_id(&self) -> Option<&TaskId> {
        match self {
            ToolOutcome::Ran(_) => None,
            ToolOutcome::Started { task_id }
            | ToolOutcome::MovedToBackground { task_id, .. }
            | ToolOutcome::WaitingForInput { task_id, .. }
            | ToolOutcome::Kill { task_id, .. } => Some(task_id),
            ToolOutcome::Read(read) => Some(&read.task_id),
        }
    }

    /// The outcome as the MCP `structuredContent` object.
    pub fn structured(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }
}

/// How a foreground command ended, as the tool reports it (`timed_out`, `aborted`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// The command ended by itself (an exit, or a signal dsh did not send).
    Exited,
    /// The call's timeout fired first (`[timed out after <N>ms]`).
    TimedOut,
    /// The call's cancel fired first (`Error: command aborted`).
    Aborted,
}

/// A signal's name, as the text shows it (`SIGTERM`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Signal(String);

impl Signal {
    /// `SIGKILL`, which ends a task the kernel killed for memory.
    pub fn kill() -> Self {
        Signal("SIGKILL".to_owned())
    }

    /// The name (`SIGTERM`).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<String> for Signal {
    fn from(name: String) -> Self {
        Signal(name)
    }
}

impl std::fmt::Display for Signal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A foreground command that ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ran {
    /// Who ended it: itself, the timeout, or the cancel.
    pub ending: Ending,
    /// `None` when a signal ended the command.
    pub exit_code: Option<i32>,
    /// The signal that ended the command, however it was sent.
    pub signal: Option<Signal>,
    /// The kernel killed the command, or a process of it, for its memory limit.
    pub out_of_memory: bool,
    /// The effective timeout.
    pub timeout: Duration,
    /// How long the call took.
    pub duration: Duration,
    /// stdout's size and spill file.
    pub stdout: StreamFacts,
    /// stderr's size and spill file.
    pub stderr: StreamFacts,
    /// The sandbox facts, when the executor sandboxes.
    pub sandbox: Option<SandboxFacts>,
    /// What the command left running, now the caller's task (`[left running: …]`).
    pub left_running: Option<Box<LeftRunning>>,
}

/// Processes a command left running, and the task that stops them.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LeftRunning {
    /// The task `bash_kill` stops them with.
    pub task_id: TaskId,
    /// Their pids, lowest first.
    pub pids: Vec<i32>,
}

impl Ran {
    /// The facts of a finished foreground run. `totals` are the whole-stream byte counts when
    /// known (else the bytes kept in memory are reported).
    pub fn new(result: &BashRunResult, duration: Duration, totals: Option<&PeekSnapshot>) -> Self {
        Ran {
            ending: match result.ending {
                RunEnding::TimedOut => Ending::TimedOut,
                RunEnding::Aborted => Ending::Aborted,
                // A run moved to the background did not end; it has no `Ran`.
                RunEnding::Exited | RunEnding::MovedToBackground(_) => Ending::Exited,
            },
            exit_code: result.exit_code,
            signal: result.signal.clone().map(Signal),
            out_of_memory: result.oom_killed,
            timeout: Duration::from_millis(result.timeout_ms),
            duration,
            stdout: StreamFacts::new(&result.stdout, totals.map(|t| t.stdout_bytes)),
            stderr: StreamFacts::new(&result.stderr, totals.map(|t| t.stderr_bytes)),
            sandbox: result.sandbox.clone(),
            // Registered as a task by the tool, which fills this in.
            left_running: None,
        }
    }
}

/// One output stream of a foreground run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamFacts {
    /// Bytes the stream produced.
    pub bytes: u64,
    /// The head was dropped from the text; the spill file has it all.
    pub truncated: bool,
    /// The file holding the full stream, when truncated.
    pub spill_path: Option<PathBuf>,
}

impl StreamFacts {
    fn new(output: &CollectedOutput, bytes: Option<u64>) -> Self {
        StreamFacts {
            bytes: bytes.unwrap_or(output.text.len() as u64),
            truncated: output.truncated,
            spill_path: output.spill_path.clone(),
        }
    }
}

/// A `bash_output` read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Read {
    /// The task read.
    pub task_id: TaskId,
    /// Output produced since the previous read.
    pub output: String,
    /// Some output was dropped from memory.
    pub output_dropped: bool,
    /// The files holding the full output, when some was dropped.
    pub spill_paths: Vec<PathBuf>,
    /// The task's state at the read.
    pub status: TaskStatus,
    /// The sandbox facts, once the task has ended.
    pub sandbox: Option<SandboxFacts>,
    /// Whether the task takes input and waits for it (issue 22).
    pub input: TaskInput,
    /// What the task left running when it ended, now a task of its own.
    pub left_running: Option<Box<LeftRunning>>,
}

impl Read {
    /// The facts of a read of `task_id`.
    pub fn new(task_id: TaskId, output: &TaskOutput, status: &TaskStatus) -> Self {
        Read {
            task_id,
            output: output.delta.clone(),
            output_dropped: output.lossy,
            spill_paths: output.spill_paths.clone(),
            status: status.clone(),
            sandbox: output.sandbox.clone().filter(|_| !status.is_running()),
            input: TaskInput::None,
            left_running: None,
        }
    }

    /// The same read, naming what the task left running.
    pub fn with_left_running(mut self, left: Option<&dsh_tasks::LeftRunning>) -> Self {
        self.left_running = left.map(|left| {
            Box::new(LeftRunning {
                task_id: TaskId::from(left.task_id.clone()),
                pids: left.pids.clone(),
            })
        });
        self
    }

    /// The same read, with where the task's input stands.
    pub fn with_input(mut self, input: TaskInput) -> Self {
        self.input = input;
        self
    }
}

/// What a `bash_kill` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KillResult {
    /// This call killed the task.
    Killed,
    /// The task had already finished.
    AlreadyFinished,
}

fn path_text(path: &std::path::Path) -> String {
    path.display().to_string()
}

/// `{mode, denied, enforcement?, runner_failed?}`: the optional facts only when they hold.
pub(crate) struct SandboxView<'a>(pub(crate) &'a SandboxFacts);

impl Serialize for SandboxView<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let facts = self.0;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("mode", facts.mode.as_str())?;
        map.serialize_entry("denied", &facts.denied)?;
        if let Some(enforcement) = facts.enforcement {
            map.serialize_entry("enforcement", enforcement.as_str())?;
        }
        if facts.runner_failed {
            map.serialize_entry("runner_failed", &true)?;
        }
        map.end()
    }
}

impl Serialize for StreamFacts {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("bytes", &self.bytes)?;
        map.serialize_entry("truncated", &self.truncated)?;
        map.serialize_entry("spill_path", &self.spill_path.as_deref().map(path_text))?;
        map.end()
    }
}

impl Serialize for Signal {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

/// The status name, exit code and signal a read reports for a task's state.
fn status_fields(status: &TaskStatus) -> (&'static str, Option<i32>, Option<Signal>) {
    match status {
        TaskStatus::Queued => ("queued", None, None),
        TaskStatus::Running => ("running", None, None),
        TaskStatus::Completed { exit_code } => ("completed", Some(*exit_code), None),
        TaskStatus::Killed { signal } => ("killed", None, signal.clone().map(Signal)),
        TaskStatus::OutOfMemory => ("killed", None, Some(Signal::kill())),
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The `structuredContent` shapes: `bash` (`background` false, or true with `task_id`),
/// `bash_output` and `bash_kill`, field for field as [`crate::output_schema`] states them.
impl Serialize for ToolOutcome {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        match self {
            ToolOutcome::Ran(ran) => {
                map.serialize_entry("background", &false)?;
                map.serialize_entry("exit_code", &ran.exit_code)?;
                map.serialize_entry("signal", &ran.signal)?;
                map.serialize_entry("out_of_memory", &ran.out_of_memory)?;
                map.serialize_entry("timed_out", &(ran.ending == Ending::TimedOut))?;
                map.serialize_entry("aborted", &(ran.ending == Ending::Aborted))?;
                map.serialize_entry("timeout_ms", &millis(ran.timeout))?;
                map.serialize_entry("duration_ms", &millis(ran.duration))?;
                map.serialize_entry("stdout", &ran.stdout)?;
                map.serialize_entry("stderr", &ran.stderr)?;
                if let Some(facts) = &ran.sandbox {
                    map.serialize_entry("sandbox", &SandboxView(facts))?;
                }
                if let Some(left) = &ran.left_running {
                    map.serialize_entry("left_running", left)?;
                }
            }
            ToolOutcome::Started { task_id } => {
                map.serialize_entry("background", &true)?;
                map.serialize_entry("task_id", task_id)?;
            }
            ToolOutcome::MovedToBackground { task_id, timeout } => {
                map.serialize_entry("background", &true)?;
                map.serialize_entry("task_id", task_id)?;
                map.serialize_entry("timed_out", &true)?;
                map.serialize_entry("timeout_ms", &millis(*timeout))?;
            }
            ToolOutcome::WaitingForInput { task_id, hidden } => {
                map.serialize_entry("background", &true)?;
                map.serialize_entry("task_id", task_id)?;
                map.serialize_entry("waiting_for_input", &true)?;
                map.serialize_entry("input_hidden", hidden)?;
            }
            ToolOutcome::Read(read) => {
                let (status, exit_code, signal) = status_fields(&read.status);
                let spill_paths: Vec<String> =
                    read.spill_paths.iter().map(|p| path_text(p)).collect();
                map.serialize_entry("task_id", &read.task_id)?;
                map.serialize_entry("output", &read.output)?;
                map.serialize_entry("output_dropped", &read.output_dropped)?;
                map.serialize_entry("spill_paths", &spill_paths)?;
                map.serialize_entry("status", status)?;
                map.serialize_entry("exit_code", &exit_code)?;
                map.serialize_entry("signal", &signal)?;
                map.serialize_entry(
                    "out_of_memory",
                    &matches!(read.status, TaskStatus::OutOfMemory),
                )?;
                if let Some(facts) = &read.sandbox {
                    map.serialize_entry("sandbox", &SandboxView(facts))?;
                }
                if read.input != TaskInput::None {
                    map.serialize_entry("waiting_for_input", &read.input.is_waiting())?;
                    map.serialize_entry("input_hidden", &(read.input == TaskInput::WaitingHidden))?;
                }
                if let Some(left) = &read.left_running {
                    map.serialize_entry("left_running", left)?;
                }
            }
            ToolOutcome::Kill { task_id, result } => {
                let outcome = match result {
                    KillResult::Killed => "killed",
                    KillResult::AlreadyFinished => "already_finished",
                };
                map.serialize_entry("task_id", task_id)?;
                map.serialize_entry("outcome", outcome)?;
            }
        }
        map.end()
    }
}
