//! What a caller asks an executor for ([`BashExecRequest`]) and what the executor runs
//! ([`BashExecSpec`]); [`BashConfig::resolve`](crate::BashConfig::resolve) turns the first into the
//! second.

use std::collections::BTreeMap;
use std::path::PathBuf;

use dsh_process::AbortSignal;

use crate::peek::OutputPeek;

/// What a caller asks for. Numbers are `f64` because they come from model-made JSON.
#[derive(Clone, Debug, Default)]
pub struct BashExecRequest {
    /// The shell command, run as `bash -c <command>`.
    pub command: String,
    /// The working directory; `None` takes the configured one, else the runtime's current directory.
    pub workdir: Option<PathBuf>,
    /// The foreground timeout in milliseconds; `None` takes the configured default. Capped at the
    /// configured maximum.
    pub timeout_ms: Option<f64>,
    /// A trusted caller's foreground stdout budget (never taken from a model).
    pub stdout_max_bytes: Option<f64>,
    /// Bytes written to the command's stdin, which is then closed; `None`: stdin is `/dev/null`.
    pub stdin: Option<Vec<u8>>,
    /// How the command takes input after its start (issue 22): closed (the default), an open
    /// stdin pipe, or a terminal. A foreground run with input open also returns when the command
    /// waits for it ([`RunEnding::MovedToBackground`](crate::RunEnding::MovedToBackground)). A
    /// terminal's size is the executor's ([`BashConfig::tty_size`](crate::BashConfig::tty_size)).
    pub input: dsh_process::InputMode,
    /// Ordinary variables set over the scrubbed ambient environment; `DSH_*` names are refused.
    pub env: Option<BTreeMap<String, String>>,
    /// Managed `DSH_*` variables; other names are refused.
    pub dsh_env: Option<BTreeMap<String, String>>,
    /// Cancels a foreground run (reported as `aborted`) or kills a background one.
    pub abort: Option<AbortSignal>,
    /// Filled with the foreground run's output once it is spawned, for progress reports.
    pub peek: Option<OutputPeek>,
    /// The agent session the command runs for: supervisor policies see it, and admission is fair
    /// across sessions.
    pub session: Option<String>,
    /// The sandbox policy for this call (mode and workspace root); `None` takes a sandboxing
    /// executor's standing default. Ignored by the local executor.
    pub sandbox_policy: Option<crate::SandboxPolicy>,
}

impl BashExecRequest {
    /// A request to run `command` with every other field left to the executor's defaults.
    pub fn new(command: impl Into<String>) -> Self {
        Self {
            command: command.into(),
            ..Self::default()
        }
    }
}

/// A resolved request: every budget explicit.
#[derive(Clone, Debug)]
pub struct BashExecSpec {
    /// The shell command, run as `bash -c <command>`.
    pub command: String,
    /// The working directory, always given.
    pub workdir: PathBuf,
    /// Effective foreground timeout: `min(requested or default, max)`.
    pub timeout_ms: u64,
    /// The in-memory stdout budget in bytes: the request's, else the configured output maximum.
    pub stdout_max_bytes: usize,
    /// As [`BashExecRequest::stdin`].
    pub stdin: Option<Vec<u8>>,
    /// As [`BashExecRequest::input`].
    pub input: dsh_process::InputMode,
    /// As [`BashExecRequest::env`].
    pub env: Option<BTreeMap<String, String>>,
    /// As [`BashExecRequest::dsh_env`].
    pub dsh_env: Option<BTreeMap<String, String>>,
    /// As [`BashExecRequest::abort`].
    pub abort: Option<AbortSignal>,
    /// As [`BashExecRequest::peek`].
    pub peek: Option<OutputPeek>,
    /// As [`BashExecRequest::session`].
    pub session: Option<String>,
    /// As [`BashExecRequest::sandbox_policy`]; a sandboxing executor's resolver always fills it.
    pub sandbox_policy: Option<crate::SandboxPolicy>,
}
