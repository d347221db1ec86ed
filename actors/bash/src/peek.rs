//! A read-only window onto a running foreground command's output.
//!
//! A front end that reports progress (MCP `notifications/progress`) wants to say how much a command
//! has printed so far and what its last line was, while the call is still running. The caller puts an
//! [`OutputPeek`] in the request; the executor attaches the process's shared output to it right after
//! the spawn. Reads go straight to the collectors: no actor mailbox, nothing consumed.

use std::sync::{Arc, Mutex};

use dsh_process::{SharedOutput, StreamKind};

/// How far back from the end of a stream the last line is looked for.
const TAIL_WINDOW: u64 = 1024;

/// A shared, cloneable slot the executor fills with the running command's output.
#[derive(Clone, Debug, Default)]
pub struct OutputPeek(Arc<Mutex<Option<SharedOutput>>>);

/// What a peek saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeekSnapshot {
    /// Bytes the command has written to stdout so far (whole stream, not just what is kept).
    pub stdout_bytes: u64,
    /// Bytes written to stderr so far.
    pub stderr_bytes: u64,
    /// The last non-empty line of stdout, else of stderr (empty when neither has one yet).
    pub last_line: String,
}

impl OutputPeek {
    /// An empty peek, to put in a request before the command is spawned.
    pub fn new() -> Self {
        Self::default()
    }

    /// Called by the executor once the process is spawned.
    pub fn attach(&self, output: SharedOutput) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(output);
    }

    /// The output so far; `None` until the command has been spawned.
    pub fn snapshot(&self) -> Option<PeekSnapshot> {
        let output = self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()?;
        let total = |stream| output.read(stream, u64::MAX).next_offset;
        let (stdout_bytes, stderr_bytes) = (total(StreamKind::Stdout), total(StreamKind::Stderr));
        let last_line = |stream, total: u64| {
            let tail = output.read(stream, total.saturating_sub(TAIL_WINDOW)).text;
            tail.lines()
                .rev()
                .find(|line| !line.trim().is_empty())
                .map(str::to_owned)
        };
        let last_line = last_line(StreamKind::Stdout, stdout_bytes)
            .or_else(|| last_line(StreamKind::Stderr, stderr_bytes))
            .unwrap_or_default();
        Some(PeekSnapshot {
            stdout_bytes,
            stderr_bytes,
            last_line,
        })
    }
}
