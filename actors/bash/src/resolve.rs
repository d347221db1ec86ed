//! Resolving a request: [`BashConfig::resolve`] turns a [`BashExecRequest`] into a [`BashExecSpec`]
//! (defaults filled in, the timeout clamped to the cap, invalid numbers refused, the working
//! directory defaulted — here and only here; optional fields the caller left out stay absent), and
//! a [`Resolver`] carries an executor's resolve to the tool layer.

use std::sync::Arc;

use dsh_process::InputMode;

use crate::config::BashConfig;
use crate::errors::ExecError;
use crate::request::{BashExecRequest, BashExecSpec};

/// Applies an executor's defaults and caps to a request. A plain function, called wherever the spec
/// is needed (the tool layer calls it before [`Run`](crate::Run) or [`Start`](crate::Start)), never a
/// round trip through a mailbox. [`BashConfig::resolver`] is the local executor's.
pub type Resolver = Arc<dyn Fn(BashExecRequest) -> Result<BashExecSpec, ExecError> + Send + Sync>;

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
            // A terminal has the executor's size, whatever the request's says.
            input: match request.input {
                InputMode::Terminal(_) => InputMode::Terminal(self.tty_size),
                input => input,
            },
            env: request.env,
            dsh_env: request.dsh_env,
            abort: request.abort,
            peek: request.peek,
            session: request.session,
            sandbox_policy: request.sandbox_policy,
        })
    }
}
