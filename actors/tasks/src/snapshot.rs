//! The public view of one task record.

use std::time::SystemTime;

use crate::producer::TaskStatus;

/// A copy of a task record at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskSnapshot {
    /// `<kind>-<n>`, e.g. `bash-1`.
    pub id: String,
    /// The id prefix given at registration (`bash`).
    pub kind: String,
    /// One-line label; for bash, the command. At most 256 bytes: a longer one was cut, ending in `…`.
    pub label: String,
    /// The owner's session id; `None` for tasks open to every caller.
    pub owner_session: Option<String>,
    /// `Killed { signal: None }` right after a kill, until the work has ended.
    pub status: TaskStatus,
    /// The work has ended and its output is final.
    pub settled: bool,
    /// When the task was registered.
    pub started_at: SystemTime,
    /// When the work ended; `None` until then.
    pub finished_at: Option<SystemTime>,
    /// Whether the task takes input and waits for it (issue 22), as of the snapshot.
    pub input: crate::TaskInput,
    /// The owner already saw the end (through a read after it, or a kill): no notice is needed.
    pub reported: bool,
    /// What the work left running when it ended, now a task of its own.
    pub left_running: Option<crate::LeftRunning>,
}
