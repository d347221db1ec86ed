//! A read-only window onto a running foreground command's output.
//!
//! A front end that reports progress (MCP `notifications/progress`) wants to say how much a command
//! has printed so far and what its last line was, while the call is still running. The caller puts an
//! [`OutputPeek`] in the request; the executor attaches the process's shared output to it right after
//! the spawn. Reads go straight to the collectors: no actor mailbox, nothing consumed. A `bash_write`
//! attaches the task's output the same way (a background task's producer hands out its [`Glance`]),
//! so progress during its wait says what the program printed.

use std::sync::{Arc, Mutex};

use dsh_process::{SharedOutput, StreamKind};
use dsh_tasks::OutputGlance;
pub use dsh_tasks::PeekSnapshot;

/// How far back from the end of a stream the last line is looked for.
const TAIL_WINDOW: u64 = 1024;

/// A shared, cloneable slot the executor fills with the running command's output (or `bash_write`
/// with the task's, [`OutputPeek::attach_glance`]).
#[derive(Clone, Debug, Default)]
pub struct OutputPeek(Arc<Mutex<Option<Arc<dyn OutputGlance>>>>);

impl OutputPeek {
    /// An empty peek, to put in a request before the command is spawned.
    pub fn new() -> Self {
        Self::default()
    }

    /// Called by the executor once the process is spawned.
    pub fn attach(&self, output: SharedOutput) {
        self.attach_glance(Arc::new(Glance(output)));
    }

    /// Looks at a task's output instead (a `bash_write` waiting on it).
    pub fn attach_glance(&self, glance: Arc<dyn OutputGlance>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(glance);
    }

    /// The output so far; `None` until the command has been spawned.
    pub fn snapshot(&self) -> Option<PeekSnapshot> {
        let glance = self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()?;
        Some(glance.snapshot())
    }
}

/// A process's output, looked at straight in its collectors: no actor mailbox, nothing consumed.
#[derive(Debug)]
pub(crate) struct Glance(pub(crate) SharedOutput);

impl OutputGlance for Glance {
    fn snapshot(&self) -> PeekSnapshot {
        let output = &self.0;
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
        PeekSnapshot {
            stdout_bytes,
            stderr_bytes,
            last_line,
        }
    }
}
