//! Executor configuration: the budgets every command runs with, and their defaults.

use std::path::PathBuf;

use crate::errors::ExecError;

/// The default foreground timeout ([`BashConfig::timeout_ms`]): two minutes.
pub const DEFAULT_TIMEOUT_MS: u64 = 120_000;
/// The default cap for a call's own timeout ([`BashConfig::max_timeout_ms`]): ten minutes.
pub const DEFAULT_MAX_TIMEOUT_MS: u64 = 600_000;
/// The default per-stream in-memory cap ([`BashConfig::max_output_bytes`]).
pub const DEFAULT_MAX_OUTPUT_BYTES: u64 = 64_000;
/// The default per-stream spill-file cap ([`BashConfig::max_spill_bytes`]): 64 MiB.
pub const DEFAULT_MAX_SPILL_BYTES: u64 = 64 << 20;
/// The default kill and pipe-drain grace ([`BashConfig::grace_ms`]).
pub const DEFAULT_GRACE_MS: u64 = 3_000;

/// What a foreground call that reaches its timeout becomes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnTimeout {
    /// Killed (SIGTERM, then SIGKILL after the grace): the default.
    #[default]
    Kill,
    /// Left running as a background task of the caller, keeping everything it printed.
    Background,
}

dsh_tasks::named_setting!(OnTimeout, "an on-timeout behaviour", Kill => "kill", Background => "background");

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
    /// The size of a `tty: true` command's terminal (issue 22; `--tty-size`, default 40x120).
    pub tty_size: dsh_process::TerminalSize,
}

impl Default for BashConfig {
    fn default() -> Self {
        Self {
            cwd: None,
            timeout_ms: DEFAULT_TIMEOUT_MS,
            max_timeout_ms: DEFAULT_MAX_TIMEOUT_MS,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            max_spill_bytes: DEFAULT_MAX_SPILL_BYTES,
            grace_ms: DEFAULT_GRACE_MS,
            on_timeout: OnTimeout::default(),
            tty_size: dsh_process::TerminalSize::DEFAULT,
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
            ("tty_size rows", u64::from(self.tty_size.rows)),
            ("tty_size cols", u64::from(self.tty_size.cols)),
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
