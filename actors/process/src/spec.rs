//! The spawn spec: everything a spawn needs, stated explicitly. This layer applies no defaults; the bash
//! executor decides caps, grace and environment and passes them here.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::abort::AbortSignal;

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
    /// Firing this starts the group kill. Already fired at spawn time: the spawn fails.
    pub abort: Option<AbortSignal>,
    /// A Landlock ruleset the child restricts itself with right before exec (the sandbox
    /// executor's confinement); `None` runs it unconfined. A refused restriction fails the spawn.
    pub landlock: Option<dsh_contain::landlock::Ruleset>,
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
            landlock: None,
        }
    }
}
