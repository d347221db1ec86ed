//! Requests and specs, and `resolve`, which turns the first into the second: defaults filled in, the
//! timeout clamped to the cap, invalid numbers refused, the working directory defaulted (here and only
//! here). Optional fields the caller left out stay absent.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use dsh_process::AbortSignal;

use crate::config::BashConfig;
use crate::errors::ExecError;
use crate::messages::Resolver;
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

fn positive(value: f64) -> bool {
    value.is_finite() && value > 0.0
}

impl BashConfig {
    /// [`BashConfig::resolve`] as a [`Resolver`], for the tool layer.
    pub fn resolver(&self) -> Resolver {
        let config = self.clone();
        Arc::new(move |request| config.resolve(request))
    }

    /// Applies defaults and caps to a request.
    pub fn resolve(&self, request: BashExecRequest) -> Result<BashExecSpec, ExecError> {
        if request.timeout_ms.is_some_and(|t| !positive(t)) {
            return Err(ExecError::Invalid(
                "bash-local: request.timeoutMs must be a positive finite number".into(),
            ));
        }
        let timeout_ms = request
            .timeout_ms
            .map(|t| t.ceil().min(u64::MAX as f64) as u64)
            .unwrap_or(self.timeout_ms)
            .min(self.max_timeout_ms);
        let stdout_max_bytes = match request.stdout_max_bytes {
            Some(bytes) if !positive(bytes) => {
                return Err(ExecError::Invalid(
                    "bash-local: request.stdoutMaxBytes must be a positive finite number".into(),
                ));
            }
            Some(bytes) => bytes.ceil().min(usize::MAX as f64) as usize,
            None => self.max_output_bytes as usize,
        };
        let workdir = match request.workdir.or_else(|| self.cwd.clone()) {
            Some(dir) => dir,
            None => std::env::current_dir().map_err(|err| {
                ExecError::Invalid(format!("cannot read the current directory: {err}"))
            })?,
        };
        Ok(BashExecSpec {
            command: request.command,
            workdir,
            timeout_ms,
            stdout_max_bytes,
            stdin: request.stdin,
            env: request.env,
            dsh_env: request.dsh_env,
            abort: request.abort,
            peek: request.peek,
            session: request.session,
            sandbox_policy: request.sandbox_policy,
        })
    }
}
