//! The spawn spec: everything a spawn needs, stated explicitly. This layer applies no defaults; the bash
//! executor decides caps, grace and environment and passes them here.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::abort::AbortSignal;

/// Fires once when the manager puts a spawn in its admission queue instead of starting it, so a
/// caller that must answer at once (a background start) can stop waiting for the start itself.
#[derive(Clone, Debug, Default)]
pub struct QueuedNotice(CancellationToken);

impl QueuedNotice {
    /// A notice that has not fired.
    pub fn new() -> Self {
        Self::default()
    }

    pub(crate) fn fire(&self) {
        self.0.cancel();
    }

    /// Whether the spawn was queued.
    pub fn has_fired(&self) -> bool {
        self.0.is_cancelled()
    }

    /// Resolves once the spawn is queued (never, if it is started or refused at once).
    pub async fn fired(&self) {
        self.0.cancelled().await
    }
}

/// A fully explicit request to start one process in its own session and process group.
#[derive(Clone, Debug)]
pub struct ProcessSpawnSpec {
    /// Program and arguments; `argv[0]` is looked up on `PATH` and never shell-interpreted.
    pub argv: Vec<String>,
    /// Working directory. A missing one is an error naming the path and the OS error.
    pub cwd: PathBuf,
    /// Ordinary variables, merged over the scrubbed ambient environment. `DSH_*` names are refused.
    pub env: BTreeMap<String, String>,
    /// Managed `DSH_*` variables, merged last. Other names are refused.
    pub dsh_env: BTreeMap<String, String>,
    /// Bytes written to the child's stdin (a pipe) and then closed. `None`: stdin is `/dev/null`.
    pub stdin: Option<Vec<u8>>,
    /// In-memory cap of stdout, in bytes; the tail is kept and the whole stream spilled beyond it.
    pub stdout_max_bytes: usize,
    /// In-memory cap of stderr, in bytes.
    pub stderr_max_bytes: usize,
    /// Per-stream cap of the spill file; a stream larger than this keeps only its tail, no file.
    pub max_spill_bytes: u64,
    /// SIGTERM→SIGKILL delay and the post-exit pipe-drain grace.
    pub grace: Duration,
    /// Where spill files go; `None` means the manager's private directory.
    pub spill_dir: Option<PathBuf>,
    /// Firing this starts the group kill. Already fired at spawn time: the spawn fails. Fired while
    /// the spawn waits for admission: it leaves the queue and fails at once.
    pub abort: Option<AbortSignal>,
    /// The agent session the spawn is for (policies see it; admission is fair across sessions).
    pub session: Option<String>,
    /// A background task rather than a foreground call (policies see it). Background work is read
    /// through [`SharedOutput::read`](crate::SharedOutput::read): its settled outcome carries no second
    /// copy of the kept text (`CollectedOutput::text` is empty), so a finished task holds its tail once.
    pub background: bool,
    /// Fired if the spawn has to wait for admission.
    pub queued: Option<QueuedNotice>,
    /// How the child is confined right before exec (the sandbox executor's confinement); `None`
    /// runs it unconfined. A refused confinement fails the spawn.
    pub confinement: Option<dsh_contain::confine::Confinement>,
    /// How the child takes input: closed (`stdin` bytes or `/dev/null`), an open pipe, or a
    /// pseudo-terminal on 0–2 (issue 22). Written through [`SharedOutput::write`](crate::SharedOutput::write).
    pub input: InputMode,
}

/// How a child takes input (issue 22).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InputMode {
    /// No input after the start: stdin is `/dev/null`, or a pipe fed [`ProcessSpawnSpec::stdin`]
    /// and then closed.
    #[default]
    Closed,
    /// A pipe on stdin kept open for writes; stdout and stderr are pipes as usual.
    Open,
    /// A pseudo-terminal of this size on 0, 1 and 2, the child's controlling terminal: one output
    /// stream (stdout) rendered through the terminal emulator.
    Terminal(dsh_contain::pty::Size),
}

impl InputMode {
    /// Whether input can be written after the start.
    pub fn is_open(self) -> bool {
        self != InputMode::Closed
    }
}

impl ProcessSpawnSpec {
    /// A spec with every cap given and no env, stdin, spill directory or abort signal.
    pub fn new(
        argv: Vec<String>,
        cwd: impl Into<PathBuf>,
        max_bytes: usize,
        max_spill_bytes: u64,
        grace: Duration,
    ) -> Self {
        Self {
            argv,
            cwd: cwd.into(),
            env: BTreeMap::new(),
            dsh_env: BTreeMap::new(),
            stdin: None,
            stdout_max_bytes: max_bytes,
            stderr_max_bytes: max_bytes,
            max_spill_bytes,
            grace,
            spill_dir: None,
            abort: None,
            session: None,
            background: false,
            queued: None,
            confinement: None,
            input: InputMode::Closed,
        }
    }
}
