//! The local provider's settings: which backend to select, an operator's runner command, the
//! probe bound, the network and signal scope of confined commands, and the extra writable roots. The binary sets them from
//! its `--sandbox-*` and `--network` flags (README, "The binary: `dsh`").

/// What network confined commands reach.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NetworkPolicy {
    /// The default: the network is not restricted.
    #[default]
    Allow,
    /// No TCP connect or bind, loopback included (Landlock ABI ≥ 4, else bubblewrap's own network
    /// namespace, else fail closed).
    Deny,
    /// Loopback only: confined commands join the runtime's own network namespace, which holds
    /// nothing but `lo` (`dsh_contain::netns`), so the commands of one runtime reach each other's
    /// servers there and nothing else; needs `CAP_SYS_ADMIN`, else the runtime refuses to start.
    Loopback,
}

/// Which backend to use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BackendChoice {
    /// Landlock, else bubblewrap.
    #[default]
    Auto,
    /// Landlock only.
    Landlock,
    /// bubblewrap only.
    Bwrap,
}

dsh_tasks::named_setting!(
    NetworkPolicy,
    "a network policy",
    Allow => "allow",
    Deny => "deny",
    Loopback => "loopback",
);

dsh_tasks::named_setting!(
    BackendChoice,
    "a sandbox backend",
    Auto => "auto",
    Landlock => "landlock",
    Bwrap => "bwrap",
);

/// The local provider's settings.
#[derive(Clone, Debug)]
pub struct LocalSandboxConfig {
    /// Which backend to select.
    pub backend: BackendChoice,
    /// An operator-asserted bwrap-shaped runner; skips selection.
    pub runner_command: Vec<String>,
    /// What the runner prints when it itself fails (required with `runner_command`).
    pub runner_failure_signatures: Vec<String>,
    /// Bound on each functional probe.
    pub probe_timeout_ms: u64,
    /// What network confined commands reach.
    pub network: NetworkPolicy,
    /// Refuse signals from confined commands to processes outside their sandbox (Landlock ABI ≥ 6).
    pub scope_signals: bool,
    /// Writable under `workspace-write` besides `/tmp` and the workspace, canonical (the binary
    /// gives `writable::everyday_roots` and each `--writable-root`); see `writable::writable_paths`.
    pub writable_roots: Vec<std::path::PathBuf>,
    /// The runtime's private temp directory (canonical), granted instead of the host's `/tmp`; the
    /// local provider sets it when it creates the directory.
    pub private_temp: Option<std::path::PathBuf>,
    /// A session's own directory shown as `/dev/shm` in its Landlock mount namespace and granted in
    /// place of the host's `/dev/shm` (a writable root), so confined commands share no shared-memory
    /// names with unconfined programs or other sessions; the local provider sets it per session.
    pub private_shm: Option<std::path::PathBuf>,
    /// Unix sockets a confined command may connect to wherever they are (`--allow-unix-socket`,
    /// absolute): the socket gate (`dsh_contain::sockgate`) compares each by device and inode.
    pub allow_unix_sockets: Vec<std::path::PathBuf>,
    /// The process manager's spill directory, shown read-only at its own path although the sandbox
    /// covers the temp it lies in, so a command can read the full output a truncated result names
    /// (the runtime sets it through [`LocalSandboxConfig::showing_spill_dir`]; the directory's mode
    /// keeps it unlistable, `dsh_contain::private_dir`).
    pub spill_dir: Option<std::path::PathBuf>,
}

impl Default for LocalSandboxConfig {
    fn default() -> Self {
        Self {
            backend: BackendChoice::Auto,
            runner_command: Vec::new(),
            runner_failure_signatures: Vec::new(),
            probe_timeout_ms: 5_000,
            network: NetworkPolicy::Allow,
            scope_signals: true,
            writable_roots: Vec::new(),
            private_temp: None,
            private_shm: None,
            allow_unix_sockets: Vec::new(),
            spill_dir: None,
        }
    }
}

impl LocalSandboxConfig {
    /// The config showing `dir` as its spill directory, checked once here: canonical, and only a
    /// directory of its own (not `/`, a temp or anything holding one, which would cover the
    /// sandbox's temp); anything else is not shown.
    pub fn showing_spill_dir(self, dir: Option<std::path::PathBuf>) -> Self {
        let shown = dir
            .and_then(|dir| std::fs::canonicalize(dir).ok())
            .filter(|dir| {
                let covers = ["/tmp", "/var/tmp"]
                    .iter()
                    .filter_map(|temp| std::fs::canonicalize(temp).ok())
                    .any(|temp| temp.starts_with(dir));
                dir.is_dir() && !covers
            });
        Self {
            spill_dir: shown,
            ..self
        }
    }

    /// Checks the settings: a runner command and its failure signatures come together, neither has
    /// an empty entry, and the probe bound is positive. The errors name the keys in camelCase
    /// (`sandbox-local: runnerCommand requires …`).
    pub fn validate(&self) -> Result<(), String> {
        if !self.runner_failure_signatures.is_empty() && self.runner_command.is_empty() {
            return Err("sandbox-local: runnerFailureSignatures requires runnerCommand".into());
        }
        if !self.runner_command.is_empty() && self.runner_failure_signatures.is_empty() {
            return Err(
                "sandbox-local: runnerCommand requires at least one runnerFailureSignatures entry"
                    .into(),
            );
        }
        if self.runner_command.iter().any(|w| w.is_empty()) {
            // An empty program word would make every command a "runner failure", and its derived
            // signatures (": No such file or directory") would match ordinary command errors.
            return Err("sandbox-local: runnerCommand entries must be non-empty".into());
        }
        if self.runner_failure_signatures.iter().any(|s| s.is_empty()) {
            return Err("sandbox-local: runnerFailureSignatures entries must be non-empty".into());
        }
        if self.probe_timeout_ms == 0 {
            return Err("sandbox-local: probeTimeoutMs must be a positive finite number".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runner_config_errors_name_the_key_at_fault() {
        let mut config = LocalSandboxConfig {
            runner_failure_signatures: vec!["x: ".into()],
            ..LocalSandboxConfig::default()
        };
        assert_eq!(
            config.validate().unwrap_err(),
            "sandbox-local: runnerFailureSignatures requires runnerCommand"
        );
        config.runner_command = vec!["/opt/runner".into()];
        config.runner_failure_signatures = vec![];
        assert_eq!(
            config.validate().unwrap_err(),
            "sandbox-local: runnerCommand requires at least one runnerFailureSignatures entry"
        );
        config.runner_failure_signatures = vec![String::new()];
        assert_eq!(
            config.validate().unwrap_err(),
            "sandbox-local: runnerFailureSignatures entries must be non-empty"
        );
        config.runner_failure_signatures = vec!["x: ".into()];
        config.probe_timeout_ms = 0;
        assert_eq!(
            config.validate().unwrap_err(),
            "sandbox-local: probeTimeoutMs must be a positive finite number"
        );
    }

    #[test]
    fn only_a_spill_directory_of_its_own_is_shown() {
        let shown = |dir: &str| {
            LocalSandboxConfig::default()
                .showing_spill_dir(Some(dir.into()))
                .spill_dir
        };
        // A temp, or what holds one, would cover the sandbox's own temp; a missing one is nothing.
        for covering in ["/", "/tmp", "/var", "/nonexistent-dsh-spill"] {
            assert_eq!(shown(covering), None, "{covering}");
        }
        let own = tempfile::tempdir().unwrap();
        let canonical = std::fs::canonicalize(own.path()).unwrap();
        assert_eq!(shown(own.path().to_str().unwrap()), Some(canonical));
    }
}
