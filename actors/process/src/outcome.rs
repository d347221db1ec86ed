//! What a finished process and an offset read report.

use std::path::PathBuf;

use crate::signal::Signal;

/// Which output stream of a child.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StreamKind {
    /// Standard output (fd 1).
    Stdout,
    /// Standard error (fd 2).
    Stderr,
}

impl StreamKind {
    /// `stdout` or `stderr`: the label used in spill file names.
    pub fn label(self) -> &'static str {
        match self {
            StreamKind::Stdout => "stdout",
            StreamKind::Stderr => "stderr",
        }
    }
}

/// The final view of one stream: its tail when truncated, with the full output's path when the spill
/// file is complete and intact.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CollectedOutput {
    /// Everything the stream printed, or its tail (cut on a UTF-8 boundary) when `truncated`.
    pub text: String,
    /// Whether bytes were dropped from memory.
    pub truncated: bool,
    /// The complete output, present only when truncated and the spill file is whole.
    pub spill_path: Option<PathBuf>,
}

/// A non-consuming read of a stream from a whole-stream byte offset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadResult {
    /// The bytes from the offset on, decoded as UTF-8 (invalid bytes replaced). When `lossy`, the oldest
    /// bytes still in memory onwards.
    pub text: String,
    /// The offset to read from next. While the stream is open it stops before an incomplete UTF-8
    /// sequence at the end, so a character is never split across two reads.
    pub next_offset: u64,
    /// The offset fell out of memory: some bytes after it are only in the spill file (if any).
    pub lossy: bool,
    /// The spill file, whenever one currently exists.
    pub spill_path: Option<PathBuf>,
}

/// How the driver decided that a process had settled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settlement {
    /// The leader exited and both pipes reached end of file.
    Closed,
    /// The leader exited but a descendant still held a pipe after the drain grace; the descendant keeps
    /// running and the manager remembers its group.
    DrainGrace,
}

/// The end of one process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessOutcome {
    /// The exit code, or `None` when a signal ended the leader (or it never ran).
    pub exit_code: Option<i32>,
    /// The signal that ended the leader, by name (`SIGTERM`).
    pub signal: Option<String>,
    /// What the process printed on standard output.
    pub stdout: CollectedOutput,
    /// What the process printed on standard error.
    pub stderr: CollectedOutput,
    /// Whether it settled with both pipes closed or at the end of the drain grace.
    pub settlement: Settlement,
    /// The signals its driver sent to every process of it, in order (`SIGTERM`, then maybe
    /// `SIGKILL`).
    pub signals_sent: Vec<Signal>,
    /// The kernel killed a process of it for memory (a `--task-max-memory` limit was hit).
    pub oom_killed: bool,
    /// At [`Settlement::DrainGrace`]: the processes of it still running (lowest pid first), which the
    /// manager keeps as a straggler under the leader's pid ([`crate::KillLeftovers`]). Empty
    /// otherwise.
    pub left_running: Vec<LeftProcess>,
}

/// A process a command left running after its leader exited.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeftProcess {
    /// Its pid.
    pub pid: i32,
    /// Its command line, arguments joined by spaces (empty for a kernel thread or one already gone).
    pub command: String,
}
