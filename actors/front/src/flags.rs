//! The runtime's settings as command-line flags (every config value; defaults shown in `--help`).

use std::path::PathBuf;

use clap::Args;
use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};

use crate::bytes::{ByteCount, byte_count};
use crate::limits::{parse_task_memory, parse_task_pids};
use crate::signals::{DEFAULT_SHUTDOWN_GRACE_MS, Interrupts};
use dsh::actors::bash::{
    DEFAULT_GRACE_MS, DEFAULT_MAX_OUTPUT_BYTES, DEFAULT_MAX_SPILL_BYTES, DEFAULT_MAX_TIMEOUT_MS,
    DEFAULT_TIMEOUT_MS,
};
use dsh::actors::process::{ContainmentMode, TaskLimits};
use dsh::actors::tasks::{DEFAULT_MAX_FINISHED, DEFAULT_MAX_RETAINED_BYTES, Named};
use dsh::{
    BackendChoice, LocalSandboxConfig, LocalSandboxProvider, NetworkPolicy, OnTimeout, Runtime,
    RuntimeBuilder, SandboxMode,
};

/// `--sandbox`: each mode's line in `--help`.
const SANDBOX: &[(SandboxMode, &str)] = &[
    (SandboxMode::ReadOnly, "No writes anywhere (only /dev/null)"),
    (
        SandboxMode::WorkspaceWrite,
        "Writes only below the workspace (--cwd), /tmp and the writable roots (dsh doctor)",
    ),
    (SandboxMode::DangerFullAccess, "No confinement"),
];

/// `--network`: what confined commands reach.
const NETWORK: &[(NetworkPolicy, &str)] = &[
    (NetworkPolicy::Allow, "Not restricted"),
    (
        NetworkPolicy::Deny,
        "No TCP connect or bind, loopback included",
    ),
    (
        NetworkPolicy::Loopback,
        "Loopback only, shared by the runtime's commands (needs CAP_SYS_ADMIN)",
    ),
];

/// `--sandbox-backend`: which confinement backend to use.
const SANDBOX_BACKEND: &[(BackendChoice, &str)] = &[
    (
        BackendChoice::Auto,
        "Landlock (applied in the spawn), else bubblewrap",
    ),
    (BackendChoice::Landlock, "Landlock only"),
    (BackendChoice::Bwrap, "bubblewrap only"),
];

/// `--on-timeout`: what a foreground call that reaches its timeout becomes.
const ON_TIMEOUT: &[(OnTimeout, &str)] = &[
    (
        OnTimeout::Kill,
        "Killed (SIGTERM, then SIGKILL after the grace)",
    ),
    (
        OnTimeout::Background,
        "Left running as a background task of the caller, keeping everything it printed",
    ),
];

/// `--containment`'s word for "no mode given": the runtime picks the strongest the host gives.
const AUTO: &str = "auto";

/// `--containment`: how each command is kept together with all its descendants.
const CONTAINMENT: &[(Option<ContainmentMode>, &str)] = &[
    (
        None,
        "The strongest the host gives: cgroup, else subreaper, else group",
    ),
    (
        Some(ContainmentMode::Cgroup),
        "One cgroup v2 leaf per command (exact kill, exact \"all gone\", limits)",
    ),
    (
        Some(ContainmentMode::Subreaper),
        "dsh adopts escaped descendants and finds them by an inherited marker",
    ),
    (Some(ContainmentMode::Group), "The process group only"),
];

/// A flag whose values are a library setting's words: clap checks the word against `values` (so
/// usage errors and `--help` list them, each with its line), and the setting's own `FromStr` makes
/// the value.
/// `ROWSxCOLS` (`40x120`), each between 1 and 1000.
fn tty_size(text: &str) -> Result<dsh::TerminalSize, String> {
    let number = |part: &str| {
        part.trim()
            .parse::<u16>()
            .ok()
            .filter(|n| (1..=1000).contains(n))
    };
    match text.split_once(['x', 'X']) {
        Some((rows, cols)) => match (number(rows), number(cols)) {
            (Some(rows), Some(cols)) => Ok(dsh::TerminalSize { rows, cols }),
            _ => Err(format!(
                "expected ROWSxCOLS with each 1 to 1000, got {text:?}"
            )),
        },
        None => Err(format!("expected ROWSxCOLS (e.g. 40x120), got {text:?}")),
    }
}

fn words<T>(values: &'static [(T, &'static str)]) -> impl TypedValueParser<Value = T>
where
    T: Named + std::str::FromStr<Err = dsh::actors::tasks::UnknownValue> + Send + Sync,
{
    PossibleValuesParser::new(
        values
            .iter()
            .map(|(value, help)| PossibleValue::new(value.name()).help(*help)),
    )
    .try_map(|text| text.parse::<T>())
}

/// `--containment`: `auto` is no mode (`None`), any other word is the mode of that name.
fn containment() -> impl TypedValueParser<Value = Containment> {
    PossibleValuesParser::new(CONTAINMENT.iter().map(|(mode, help)| {
        PossibleValue::new(mode.map_or(AUTO, ContainmentMode::as_str)).help(*help)
    }))
    .try_map(|text| match text.as_str() {
        AUTO => Ok(None),
        mode => mode.parse().map(Some),
    })
}

/// The containment asked for: `None` is `auto`. A name of its own so that clap takes the whole
/// option as the flag's value (the flag always has one, `auto` by default) instead of making the flag
/// optional.
pub type Containment = Option<ContainmentMode>;

#[derive(Args, Debug, Clone)]
pub struct RuntimeFlags {
    /// What commands may write [default: workspace-write where a sandbox backend is usable, else
    /// unconfined with a warning; see `dsh doctor`]. An explicit confined mode the host cannot give
    /// is a startup error.
    #[arg(long, value_parser = words(SANDBOX))]
    pub sandbox: Option<SandboxMode>,
    /// What network confined commands reach; `deny` needs Landlock ABI 4 or bubblewrap, `loopback`
    /// needs CAP_SYS_ADMIN (dsh as root), else startup fails.
    #[arg(long, value_parser = words(NETWORK), default_value_t = NetworkPolicy::default())]
    pub network: NetworkPolicy,
    /// Which sandbox backend confines commands.
    #[arg(long, value_parser = words(SANDBOX_BACKEND), default_value_t = BackendChoice::default())]
    pub sandbox_backend: BackendChoice,
    /// Let confined commands signal processes outside their sandbox (by default Landlock ABI 6
    /// refuses it, so a command cannot kill dsh or its agent).
    #[arg(long)]
    pub no_signal_scope: bool,
    /// An operator's bwrap-shaped sandbox runner, one argv word per use (`--sandbox-runner
    /// /opt/bin/bwrap`); skips backend selection. dsh's bubblewrap profile and the command follow it.
    #[arg(long, value_name = "WORD")]
    pub sandbox_runner: Vec<String>,
    /// Also writable under workspace-write (repeatable): an absolute, existing, canonical path.
    #[arg(long, value_name = "PATH", value_parser = crate::writable::parse_root)]
    pub writable_root: Vec<PathBuf>,
    /// A Unix socket confined commands may connect to wherever it is (repeatable; e.g.
    /// "$SSH_AUTH_SOCK" for git over ssh). Others outside the writable roots are refused.
    #[arg(long, value_name = "PATH", value_parser = crate::writable::parse_socket)]
    pub allow_unix_socket: Vec<PathBuf>,
    /// Text the runner prints when it itself fails (required with --sandbox-runner; repeatable).
    #[arg(long, value_name = "TEXT")]
    pub sandbox_runner_failure_signature: Vec<String>,
    /// Default foreground timeout in milliseconds.
    #[arg(long, default_value_t = DEFAULT_TIMEOUT_MS, value_name = "MS")]
    pub timeout_ms: u64,
    /// Cap for a call's own `timeoutMs`.
    #[arg(long, default_value_t = DEFAULT_MAX_TIMEOUT_MS, value_name = "MS")]
    pub max_timeout_ms: u64,
    /// Per-stream bytes kept in memory; beyond it the tail is kept and the full output spilled to a file.
    #[arg(long, default_value_t = DEFAULT_MAX_OUTPUT_BYTES, value_name = "BYTES")]
    pub max_output_bytes: u64,
    /// Per-stream cap of a spill file (64 MiB); a larger stream keeps only its tail.
    #[arg(long, default_value_t = DEFAULT_MAX_SPILL_BYTES, value_name = "BYTES")]
    pub max_spill_bytes: u64,
    /// Grace between SIGTERM and SIGKILL, and after exit for descendants holding the pipes.
    #[arg(long, default_value_t = DEFAULT_GRACE_MS, value_name = "MS")]
    pub grace_ms: u64,
    /// Workspace directory: default working directory and base of relative workdirs [default: current dir].
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// Run at most N commands at once (N ≥ 1); further ones wait, admitted round-robin between
    /// sessions and in order within one [default: no limit].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_concurrent: Option<u64>,
    /// Run at most N background tasks of one session at once; more wait (see
    /// --max-queued-per-session) or are refused [default: no limit].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_running_per_session: Option<u64>,
    /// With --max-running-per-session: how many more background tasks of one session may wait to
    /// start (`[status: queued]`); beyond that a start is an error.
    #[arg(
        long,
        value_name = "M",
        default_value_t = 0,
        requires = "max_running_per_session"
    )]
    pub max_queued_per_session: u64,
    /// What a foreground call that reaches its timeout becomes.
    #[arg(long, value_parser = words(ON_TIMEOUT), default_value_t = OnTimeout::default())]
    pub on_timeout: OnTimeout,
    /// The most `tty: true` commands running at once; beyond it a start is an error.
    #[arg(long, value_name = "N", default_value_t = dsh::actors::process::DEFAULT_MAX_TERMINALS)]
    pub max_ttys: usize,
    /// The terminal size of `tty: true` commands, ROWSxCOLS (each 1 to 1000).
    #[arg(long, value_name = "ROWSxCOLS", value_parser = tty_size, default_value = "40x120")]
    pub tty_size: dsh::TerminalSize,
    /// Finished background tasks kept; beyond it they are discarded (read ones first, then the
    /// oldest) and reading one is an error.
    #[arg(long, default_value_t = DEFAULT_MAX_FINISHED, value_name = "N")]
    pub max_finished_tasks: usize,
    /// Output bytes finished background tasks keep in memory (e.g. 64MiB); beyond it they are
    /// discarded likewise.
    #[arg(long, value_name = "BYTES", value_parser = byte_count,
          default_value_t = ByteCount(DEFAULT_MAX_RETAINED_BYTES as u64))]
    pub retained_output_bytes: ByteCount,
    /// Bytes of spill files (full outputs) finished background tasks keep on disk; beyond it they
    /// are discarded likewise, with their files.
    #[arg(long, value_name = "BYTES", value_parser = byte_count,
          default_value_t = ByteCount(dsh::actors::tasks::DEFAULT_MAX_SPILL_BYTES))]
    pub retained_spill_bytes: ByteCount,
    /// Keep the spill directory (full outputs) after exit.
    #[arg(long)]
    pub keep_spill: bool,
    /// DSH_HOME given to commands [default: $DSH_HOME, else ~/.dsh].
    #[arg(long, value_name = "DIR")]
    pub dsh_home: Option<PathBuf>,
    /// How each command is kept together with all its descendants; an explicit mode the host
    /// cannot give is a startup error (see `dsh doctor`).
    #[arg(long, value_parser = containment(), default_value = AUTO)]
    pub containment: Containment,
    /// Most processes (and threads) one command may have at once (at least 4); needs cgroup
    /// containment.
    #[arg(long, value_name = "N", value_parser = parse_task_pids)]
    pub task_max_pids: Option<u64>,
    /// Most memory one command may use (e.g. 64MiB, 1G; at least 4MiB); the kernel kills it past
    /// that. Needs cgroup containment.
    #[arg(long, value_name = "BYTES", value_parser = parse_task_memory)]
    pub task_max_memory: Option<u64>,
    /// On SIGTERM or SIGINT, everything is killed within this time (SIGKILL to what is left).
    #[arg(long, default_value_t = DEFAULT_SHUTDOWN_GRACE_MS, value_name = "MS")]
    pub shutdown_grace_ms: u64,
}

impl RuntimeFlags {
    pub fn builder(&self) -> RuntimeBuilder {
        let mut builder = Runtime::builder()
            .timeout_ms(self.timeout_ms)
            .max_timeout_ms(self.max_timeout_ms)
            .max_output_bytes(self.max_output_bytes)
            .max_spill_bytes(self.max_spill_bytes)
            .grace_ms(self.grace_ms)
            .keep_spill(self.keep_spill)
            .on_timeout(self.on_timeout)
            .tty_size(self.tty_size)
            .max_ttys(self.max_ttys)
            .max_finished_tasks(self.max_finished_tasks)
            .retained_output_bytes(
                usize::try_from(self.retained_output_bytes.0).unwrap_or(usize::MAX),
            )
            .retained_spill_bytes(self.retained_spill_bytes.0)
            .containment(self.containment)
            .task_limits(TaskLimits {
                max_pids: self.task_max_pids,
                max_memory: self.task_max_memory,
            });
        // One watchdog per runtime: this binary re-executed in its hidden watchdog mode. Through
        // /proc/self/exe, the very file this process runs, even if the path now names an upgraded
        // binary or nothing (a `cargo install` over the running server).
        builder = builder.watchdog("/proc/self/exe", ["__watchdog"]);
        if let Some(cwd) = &self.cwd {
            builder = builder.cwd(cwd);
        }
        if let Some(n) = self.max_concurrent {
            builder = builder.max_concurrent(n as usize);
        }
        if let Some(n) = self.max_running_per_session {
            builder = builder.max_per_session(n as usize, self.max_queued_per_session as usize);
        }
        if let Some(home) = &self.dsh_home {
            builder = builder.dsh_home(home);
        }
        builder
    }

    /// The sandbox settings from the flags.
    pub fn sandbox_config(&self) -> LocalSandboxConfig {
        LocalSandboxConfig {
            backend: self.sandbox_backend,
            network: self.network,
            scope_signals: !self.no_signal_scope,
            runner_command: self.sandbox_runner.clone(),
            runner_failure_signatures: self.sandbox_runner_failure_signature.clone(),
            writable_roots: crate::writable::roots(
                self.dsh_home.as_deref(),
                self.cwd.as_deref(),
                &self.writable_root,
                true,
            ),
            allow_unix_sockets: self.allow_unix_socket.clone(),
            ..LocalSandboxConfig::default()
        }
    }

    /// Adds the sandbox to `builder`: an explicit `--sandbox` as given (the runtime fails closed if a
    /// confined mode is impossible); no flag: `workspace-write` where a backend is usable, else
    /// unconfined, said loudly.
    fn with_sandbox(&self, builder: RuntimeBuilder) -> Result<RuntimeBuilder, String> {
        let config = self.sandbox_config();
        let restricted = self.network != NetworkPolicy::Allow;
        if restricted && self.sandbox == Some(SandboxMode::DangerFullAccess) {
            return Err(format!(
                "--network {} needs a confined --sandbox mode (read-only or workspace-write)",
                self.network
            ));
        }
        if let Some(mode) = self.sandbox {
            return Ok(builder.sandbox(mode, config));
        }
        let provider = LocalSandboxProvider::new(config.clone())?;
        match provider.verdict() {
            Ok(backend) => {
                tracing::info!(%backend, "sandbox: workspace-write by default");
                // By its config, not this probe: the runtime adds what it learns when it starts
                // (the spill directory to show its commands).
                Ok(builder.sandbox(SandboxMode::WorkspaceWrite, config))
            }
            Err(reason) if restricted => Err(format!(
                "--network {}: no sandbox backend is usable on this host ({reason})",
                self.network
            )),
            Err(reason) => {
                tracing::warn!(
                    %reason,
                    "NO SANDBOX: no sandbox backend is usable on this host, so commands run UNCONFINED \
                     and can write anywhere this user can. See `dsh doctor`; pass --sandbox \
                     danger-full-access to accept this explicitly."
                );
                Ok(builder)
            }
        }
    }

    /// Starts the runtime on the current actix system.
    pub fn start(&self) -> Result<Runtime, String> {
        if let Some(cwd) = &self.cwd
            && !cwd.is_dir()
        {
            return Err(format!("--cwd {}: not a directory", cwd.display()));
        }
        let runtime = self
            .with_sandbox(self.builder())?
            .start_in_current_system()
            .map_err(|e| e.to_string())?;
        if runtime.sandbox_mode() == Some(SandboxMode::WorkspaceWrite) {
            crate::writable::warn_if_workspace_is_everything(self.cwd.as_deref());
        }
        tracing::info!(
            containment = %runtime.containment_mode(),
            sandbox = %runtime.sandbox_mode().map_or("none", SandboxMode::as_str),
            "dsh runtime started"
        );
        Ok(runtime)
    }

    /// Every front end's first step: SIGINT and SIGTERM handled (with `--shutdown-grace-ms`), then
    /// the runtime started, in that order so that an interrupt during the start is not lost.
    pub fn start_interruptible(&self) -> Result<(Interrupts, Runtime), String> {
        let interrupts = Interrupts::install(self.shutdown_grace());
        Ok((interrupts, self.start()?))
    }

    /// `--shutdown-grace-ms`.
    pub fn shutdown_grace(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.shutdown_grace_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tty_sizes_are_rows_by_columns() {
        assert_eq!(
            tty_size("40x120"),
            Ok(dsh::TerminalSize {
                rows: 40,
                cols: 120
            })
        );
        assert_eq!(
            tty_size("10X30"),
            Ok(dsh::TerminalSize { rows: 10, cols: 30 })
        );
        for bad in ["40", "0x80", "40x1001", "ax b", ""] {
            assert!(tty_size(bad).is_err(), "{bad}");
        }
    }

    /// Each flag lists exactly its setting's words, in the setting's order.
    #[test]
    fn every_setting_word_has_its_help_line() {
        fn names<T: Named>(table: &[(T, &str)]) -> Vec<&'static str> {
            table.iter().map(|(value, _)| value.name()).collect()
        }
        fn all<T: Named>() -> Vec<&'static str> {
            T::VALUES.iter().map(|value| value.name()).collect()
        }
        assert_eq!(names(SANDBOX), all::<SandboxMode>());
        assert_eq!(names(NETWORK), all::<NetworkPolicy>());
        assert_eq!(names(SANDBOX_BACKEND), all::<BackendChoice>());
        assert_eq!(names(ON_TIMEOUT), all::<OnTimeout>());
        let modes: Vec<_> = CONTAINMENT.iter().filter_map(|(mode, _)| *mode).collect();
        assert_eq!(modes, ContainmentMode::ALL);
    }
}
