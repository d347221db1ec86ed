//! [`RuntimeBuilder`]: every setting of a runtime. Starting one (on a thread of its own, or in the
//! caller's actix system) and the wiring are `compose.rs`.

use std::path::PathBuf;
use std::sync::Arc;

use dsh_bash::sandbox::LocalSandboxConfig;
use dsh_bash::{BashConfig, OnTimeout, ProcessPolicy, SandboxMode, SandboxProvider};
use dsh_process::{
    ContainmentConfig, ContainmentMode, MaxConcurrent, MaxPerSession, PolicyStack, TaskLimits,
    WatchdogCommand,
};
use dsh_tasks::{RegistryConfig, RetentionPolicy};

/// Where confinement comes from.
pub(crate) enum SandboxSource {
    /// The host's backends, chosen by probing with this config.
    Local(LocalSandboxConfig),
    /// A provider the host built (already probed, or a custom one).
    Provider(Arc<dyn SandboxProvider>),
}

/// Every setting of a runtime. Each default is its owner's (`BashConfig`, `RegistryConfig`, …):
/// timeout 120 s, max 600 s, 64 000 bytes per stream in memory, 64 MiB per spill file, grace 3 s.
pub struct RuntimeBuilder {
    pub(crate) bash: BashConfig,
    pub(crate) dsh_home: Option<PathBuf>,
    pub(crate) background: bool,
    pub(crate) spill_dir: Option<PathBuf>,
    pub(crate) keep_spill: bool,
    max_concurrent: Option<usize>,
    per_session: Option<MaxPerSession>,
    /// The host's own policies, in the order added.
    policies: Vec<Box<dyn ProcessPolicy>>,
    /// The host's own retention policies, in the order added.
    pub(crate) retention_policies: Vec<Box<dyn RetentionPolicy>>,
    pub(crate) registry: RegistryConfig,
    pub(crate) containment: ContainmentConfig,
    pub(crate) max_terminals: usize,
    pub(crate) sandbox: Option<(SandboxMode, SandboxSource)>,
}

impl Default for RuntimeBuilder {
    fn default() -> Self {
        Self {
            bash: BashConfig::default(),
            dsh_home: None,
            background: true,
            spill_dir: None,
            keep_spill: false,
            max_concurrent: None,
            per_session: None,
            policies: Vec::new(),
            retention_policies: Vec::new(),
            registry: RegistryConfig::default(),
            containment: ContainmentConfig::default(),
            max_terminals: dsh_process::DEFAULT_MAX_TERMINALS,
            sandbox: None,
        }
    }
}

impl RuntimeBuilder {
    /// The workspace: default working directory, and the base of relative `workdir`s.
    pub fn cwd(mut self, cwd: impl Into<PathBuf>) -> Self {
        self.bash.cwd = Some(cwd.into());
        self
    }
    /// The default foreground timeout, in milliseconds.
    pub fn timeout_ms(mut self, ms: u64) -> Self {
        self.bash.timeout_ms = ms;
        self
    }
    /// The cap on a call's own timeout, in milliseconds.
    pub fn max_timeout_ms(mut self, ms: u64) -> Self {
        self.bash.max_timeout_ms = ms;
        self
    }
    /// The in-memory cap per stream, in bytes; beyond it the tail is kept and the whole stream spills.
    pub fn max_output_bytes(mut self, bytes: u64) -> Self {
        self.bash.max_output_bytes = bytes;
        self
    }
    /// The cap per spill file, in bytes; a larger stream keeps only its tail and no file.
    pub fn max_spill_bytes(mut self, bytes: u64) -> Self {
        self.bash.max_spill_bytes = bytes;
        self
    }
    /// The delay from SIGTERM to SIGKILL, and the pipe-drain grace after the leader exits.
    pub fn grace_ms(mut self, ms: u64) -> Self {
        self.bash.grace_ms = ms;
        self
    }
    /// `DSH_HOME` for commands (else `$DSH_HOME`, else `~/.dsh`).
    pub fn dsh_home(mut self, path: impl Into<PathBuf>) -> Self {
        self.dsh_home = Some(path.into());
        self
    }
    /// What a foreground call that reaches its timeout becomes: killed (the default), or
    /// a background task of its caller (needs background work enabled; otherwise it is killed).
    pub fn on_timeout(mut self, on_timeout: OnTimeout) -> Self {
        self.bash.on_timeout = on_timeout;
        self
    }
    /// The most `tty: true` commands running at once (default 64); a terminal start beyond it is
    /// the error `too many terminals: …`.
    pub fn max_ttys(mut self, n: usize) -> Self {
        self.max_terminals = n;
        self
    }
    /// The terminal size of `tty: true` commands (default 40 rows x 120 columns).
    pub fn tty_size(mut self, size: dsh_bash::TerminalSize) -> Self {
        self.bash.tty_size = size;
        self
    }
    /// Offer background tasks (`run_in_background`, `bash_output`, `bash_write`, `bash_kill`).
    /// Default on.
    pub fn background(mut self, enabled: bool) -> Self {
        self.background = enabled;
        self
    }
    /// Spill files go here instead of a private temp directory.
    pub fn spill_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.spill_dir = Some(dir.into());
        self
    }
    /// Keep the private spill directory after shutdown.
    pub fn keep_spill(mut self, keep: bool) -> Self {
        self.keep_spill = keep;
        self
    }
    /// At most `n` commands run at once; more wait, admitted round-robin between sessions and in
    /// order within one. `0` refuses every command (the binary refuses the flag instead).
    pub fn max_concurrent(mut self, n: usize) -> Self {
        self.max_concurrent = Some(n);
        self
    }
    /// At most `running` background tasks of one session run at once; up to `queued` more wait
    /// (`[status: queued]`); beyond that a start is an error.
    pub fn max_per_session(mut self, running: usize, queued: usize) -> Self {
        self.per_session = Some(MaxPerSession { running, queued });
        self
    }
    /// Adds a host policy to the stack (after the built-in ones, in the order added). Every policy
    /// of the stack is asked; the most restrictive answer wins (see `PolicyStack`).
    pub fn policy(mut self, policy: Box<dyn ProcessPolicy>) -> Self {
        self.policies.push(policy);
        self
    }

    /// The policy stack: per-session limits, the concurrency limit, then the host's policies.
    pub(crate) fn policy_stack(&mut self) -> PolicyStack {
        let mut stack = PolicyStack::new();
        if let Some(per_session) = self.per_session {
            stack.push(Box::new(per_session));
        }
        if let Some(n) = self.max_concurrent {
            stack.push(Box::new(MaxConcurrent(n)));
        }
        for policy in self.policies.drain(..) {
            stack.push(policy);
        }
        stack
    }
    /// Finished background tasks kept (default 1000); beyond it they are discarded, those whose end
    /// their owner already read first, then the oldest.
    pub fn max_finished_tasks(mut self, n: usize) -> Self {
        self.registry.max_finished = n;
        self
    }
    /// Bytes of memory finished background tasks keep (default 64 MiB): their output in memory and
    /// their records, counted as allocated (`Runtime::retention_load`); beyond it they are discarded
    /// as by [`RuntimeBuilder::max_finished_tasks`].
    pub fn retained_output_bytes(mut self, bytes: usize) -> Self {
        self.registry.max_retained_bytes = bytes;
        self
    }
    /// Bytes of spill files finished background tasks keep on disk (default 1 GiB,
    /// `dsh_tasks::DEFAULT_MAX_SPILL_BYTES`); beyond it they are discarded as by
    /// [`RuntimeBuilder::max_finished_tasks`] and their files removed. A task read to its end still
    /// keeps its files (its output's full text) until it is discarded.
    pub fn retained_spill_bytes(mut self, bytes: u64) -> Self {
        self.registry.max_spill_bytes = bytes;
        self
    }
    /// Adds a host's retention policy to the registry's stack, after the built-in limits: after
    /// every settlement each policy in order may name a finished task to discard.
    pub fn retention_policy(mut self, policy: Box<dyn RetentionPolicy>) -> Self {
        self.retention_policies.push(policy);
        self
    }

    /// How each command is kept together with all its descendants: `None` (the default) is `auto`,
    /// the strongest the host gives (cgroup, else subreaper, else the process group). An explicit
    /// mode the host cannot give makes `start` fail with the reason.
    pub fn containment(mut self, mode: Option<ContainmentMode>) -> Self {
        self.containment.mode = mode;
        self
    }
    /// Per-command kernel limits (`max_pids`, `max_memory`), enforced by the command's cgroup; they
    /// need cgroup containment, and a limit the host cannot give makes `start` fail with the reason.
    pub fn task_limits(mut self, limits: TaskLimits) -> Self {
        self.containment.limits = limits;
        self
    }
    /// A program that runs `dsh_contain::watchdog::watchdog_main` on its stdin (the `dsh` binary
    /// with `__watchdog` does): one such process per runtime kills every command and removes the
    /// spill directory if the host process dies without shutting the runtime down. Off by default
    /// for libraries, which may have no such program; the `dsh` binary turns it on.
    pub fn watchdog(
        mut self,
        program: impl Into<PathBuf>,
        args: impl IntoIterator<Item = impl Into<std::ffi::OsString>>,
    ) -> Self {
        self.containment.watchdog = Some(WatchdogCommand {
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
        });
        self
    }

    /// Confines every command to `mode` by default with the host's sandbox backends (Landlock in the
    /// spawn, else bubblewrap; see `dsh_bash::sandbox::local`) configured by `config`. A confined
    /// mode the host cannot give makes `start` fail with the fail-closed text (docs/CONTRACT.md,
    /// "bash"). Libraries run
    /// unconfined unless they ask; the `dsh` binary asks (`--sandbox`).
    pub fn sandbox(mut self, mode: SandboxMode, config: LocalSandboxConfig) -> Self {
        self.sandbox = Some((mode, SandboxSource::Local(config)));
        self
    }
    /// As [`RuntimeBuilder::sandbox`], with a provider the host built (a probed
    /// [`LocalSandboxProvider`](dsh_bash::sandbox::LocalSandboxProvider) or its own backend). Such
    /// a provider is used as it is: the runtime's spill directory is not added to what it shows its
    /// commands (with [`RuntimeBuilder::sandbox`] it is), so a truncated result's spill path may be
    /// out of their reach.
    pub fn sandbox_provider(
        mut self,
        mode: SandboxMode,
        provider: Arc<dyn SandboxProvider>,
    ) -> Self {
        self.sandbox = Some((mode, SandboxSource::Provider(provider)));
        self
    }
}
