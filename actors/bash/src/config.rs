//! Executor configuration: the budgets every command runs with, and their defaults.

use std::path::PathBuf;

use crate::errors::ExecError;

/// What a foreground call that reaches its timeout becomes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnTimeout {
    /// Killed (SIGTERM, then SIGKILL after the grace): the default.
    #[default]
    Kill,
    /// Left running as a background task of the caller, keeping everything it printed.
    Background,
}

/// The local executor's budgets. Every value must be positive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BashConfig {
    /// Default working directory; `None`: the runtime process's cwd at call time.
    pub cwd: Option<PathBuf>,
    /// Default foreground timeout.
    pub timeout_ms: u64,
    /// Cap for per-call timeout overrides.
    pub max_timeout_ms: u64,
    /// Per-stream in-memory cap (stdout default, always the stderr cap, and the background stdout cap).
    pub max_output_bytes: u64,
    /// Per-stream spill-file cap.
    pub max_spill_bytes: u64,
    /// Kill escalation grace and post-exit pipe-drain grace.
    pub grace_ms: u64,
    /// What a foreground call that reaches its timeout becomes.
    pub on_timeout: OnTimeout,
}

impl Default for BashConfig {
    fn default() -> Self {
        Self {
            cwd: None,
            timeout_ms: 120_000,
            max_timeout_ms: 600_000,
            max_output_bytes: 64_000,
            max_spill_bytes: 64 << 20,
            grace_ms: 3_000,
            on_timeout: OnTimeout::Kill,
        }
    }
}

impl BashConfig {
    /// Checks every numeric key: `bash-local: <key> must be a positive finite number`.
    pub fn validate(&self) -> Result<(), ExecError> {
        for (key, value) in [
            ("timeout_ms", self.timeout_ms),
            ("max_timeout_ms", self.max_timeout_ms),
            ("max_output_bytes", self.max_output_bytes),
            ("max_spill_bytes", self.max_spill_bytes),
            ("grace_ms", self.grace_ms),
        ] {
            if value == 0 {
                return Err(ExecError::Invalid(format!(
                    "bash-local: {key} must be a positive finite number"
                )));
            }
        }
        if usize::try_from(self.max_output_bytes).is_err() {
            return Err(ExecError::Invalid(
                "bash-local: max_output_bytes does not fit in memory".into(),
            ));
        }
        Ok(())
    }
}
