//! The runtime's settings as command-line flags (every config value; defaults shown in `--help`).

use std::path::PathBuf;

use clap::Args;
use dsh::{Runtime, RuntimeBuilder};

#[derive(Args, Debug, Clone)]
pub struct RuntimeFlags {
    /// Default foreground timeout in milliseconds.
    #[arg(long, default_value_t = 120_000, value_name = "MS")]
    pub timeout_ms: u64,
    /// Cap for a call's own `timeoutMs`.
    #[arg(long, default_value_t = 600_000, value_name = "MS")]
    pub max_timeout_ms: u64,
    /// Per-stream bytes kept in memory; beyond it the tail is kept and the full output spilled to a file.
    #[arg(long, default_value_t = 64_000, value_name = "BYTES")]
    pub max_output_bytes: u64,
    /// Per-stream cap of a spill file (64 MiB); a larger stream keeps only its tail.
    #[arg(long, default_value_t = 64 << 20, value_name = "BYTES")]
    pub max_spill_bytes: u64,
    /// Grace between SIGTERM and SIGKILL, and after exit for descendants holding the pipes.
    #[arg(long, default_value_t = 3_000, value_name = "MS")]
    pub grace_ms: u64,
    /// Workspace directory: default working directory and base of relative workdirs [default: current dir].
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// Run at most N commands at once; further ones wait in order [default: no limit].
    #[arg(long, value_name = "N")]
    pub max_concurrent: Option<usize>,
    /// Keep the spill directory (full outputs) after exit.
    #[arg(long)]
    pub keep_spill: bool,
    /// DSH_HOME given to commands [default: $DSH_HOME, else ~/.dsh].
    #[arg(long, value_name = "DIR")]
    pub dsh_home: Option<PathBuf>,
}

impl RuntimeFlags {
    pub fn builder(&self) -> RuntimeBuilder {
        let mut builder = Runtime::builder()
            .timeout_ms(self.timeout_ms)
            .max_timeout_ms(self.max_timeout_ms)
            .max_output_bytes(self.max_output_bytes)
            .max_spill_bytes(self.max_spill_bytes)
            .grace_ms(self.grace_ms)
            .keep_spill(self.keep_spill);
        if let Some(cwd) = &self.cwd {
            builder = builder.cwd(cwd);
        }
        if let Some(n) = self.max_concurrent {
            builder = builder.max_concurrent(n);
        }
        if let Some(home) = &self.dsh_home {
            builder = builder.dsh_home(home);
        }
        builder
    }

    /// Starts the runtime on the current actix system.
    pub fn start(&self) -> Result<Runtime, String> {
        if let Some(cwd) = &self.cwd
            && !cwd.is_dir()
        {
            return Err(format!("--cwd {}: not a directory", cwd.display()));
        }
        self.builder()
            .start_in_current_system()
            .map_err(|e| e.to_string())
    }
}
