//! The host's sandbox backends and their selection (seed §1.6.4, adapted to dsh):
//!
//! - **Landlock, in the spawn** — no launcher process: a ruleset is built here, in the unconfined
//!   parent, once per policy (cached), and the `clone3` child restricts itself with it right
//!   before exec (`dsh_contain::landlock`). Grants: read and execute below `/`, write to
//!   `/dev/null`; `workspace-write` adds `/tmp` and the workspace root. `--network deny` adds TCP
//!   bind/connect rules (ABI ≥ 4); signal scoping (ABI ≥ 6) stops a command from signalling dsh or
//!   its agent. Enforcement `full` from ABI 3 (truncate is controlled), else `partial`.
//! - **bubblewrap** with the seeds' profile: `--ro-bind / / --dev /dev --proc /proc
//!   --die-with-parent`, `workspace-write` adds `--tmpfs /tmp --bind <root> <root>`, `--network
//!   deny` adds `--unshare-net`. Enforcement `full`.
//! - **runnerCommand** — an operator's bwrap-shaped runner, used as given (no probe), with the
//!   operator's runner-failure signatures.
//!
//! Selection, once, at construction, with the verdict cached for the provider's life: a configured
//! runner wins; otherwise Landlock first (no extra process, keeps signal and network scoping), then
//! bubblewrap, each functionally probed (bubblewrap runs `true` under its read-only profile within
//! `probe_timeout_ms`). No usable backend: every confined call fails closed.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::str::FromStr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use dsh_contain::landlock::{Coverage, Ruleset, RulesetSpec};
use dsh_process::lock_unpoisoned;
use dsh_tasks::{Enforcement, Named, SandboxMode, UnknownValue};

use crate::errors::ExecError;
use crate::sandbox::policy::SandboxPolicy;
use crate::sandbox::provider::{SandboxProvider, Wrap, WrapFacts, sandbox_unavailable_text};

/// Whether confined commands may use TCP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NetworkPolicy {
    /// As the seeds: the network is not restricted.
    #[default]
    Allow,
    /// No TCP connect or bind, loopback included (Landlock ABI ≥ 4, else bubblewrap's own network
    /// namespace, else fail closed).
    Deny,
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

impl Named for NetworkPolicy {
    const VALUES: &'static [NetworkPolicy] = &[NetworkPolicy::Allow, NetworkPolicy::Deny];
    const WHAT: &'static str = "a network policy";

    /// `allow` or `deny`.
    fn name(self) -> &'static str {
        match self {
            NetworkPolicy::Allow => "allow",
            NetworkPolicy::Deny => "deny",
        }
    }
}

impl Named for BackendChoice {
    const VALUES: &'static [BackendChoice] = &[
        BackendChoice::Auto,
        BackendChoice::Landlock,
        BackendChoice::Bwrap,
    ];
    const WHAT: &'static str = "a sandbox backend";

    /// `auto`, `landlock` or `bwrap`.
    fn name(self) -> &'static str {
        match self {
            BackendChoice::Auto => "auto",
            BackendChoice::Landlock => "landlock",
            BackendChoice::Bwrap => "bwrap",
        }
    }
}

impl fmt::Display for NetworkPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for BackendChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for NetworkPolicy {
    type Err = UnknownValue;

    fn from_str(text: &str) -> Result<Self, UnknownValue> {
        NetworkPolicy::from_name(text)
    }
}

impl FromStr for BackendChoice {
    type Err = UnknownValue;

    fn from_str(text: &str) -> Result<Self, UnknownValue> {
        BackendChoice::from_name(text)
    }
}

/// The backend in use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Landlock applied in the spawn, at this ABI.
    Landlock {
        /// The kernel's Landlock ABI version.
        abi: u32,
    },
    /// bubblewrap at this path.
    Bwrap(PathBuf),
    /// The operator's runner command.
    Runner(Vec<String>),
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backend::Landlock { abi } => write!(f, "landlock (ABI {abi}, in the spawn)"),
            Backend::Bwrap(path) => write!(f, "bubblewrap ({})", path.display()),
            Backend::Runner(argv) => write!(f, "runner command ({})", argv.join(" ")),
        }
    }
}

/// The local provider's settings (seed keys, snake_case).
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
    /// TCP for confined commands.
    pub network: NetworkPolicy,
    /// Refuse signals from confined commands to processes outside their sandbox (Landlock ABI ≥ 6).
    pub scope_signals: bool,
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
        }
    }
}

impl LocalSandboxConfig {
    /// The seeds' config errors.
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

/// How many Landlock rulesets the provider keeps (each holds descriptors of its granted
/// directories). Per-session workspaces make one per distinct root; past this many the cache starts
/// again, and live spawns keep their own references.
const MAX_CACHED_RULESETS: usize = 64;

/// A cached ruleset and the identity of the workspace root it grants: a root deleted and made
/// again at the same path is another directory, which the old ruleset does not grant.
struct CachedRuleset {
    ruleset: Ruleset,
    root: Option<RootId>,
}

/// The device and inode of a workspace root.
type RootId = (u64, u64);

/// The host's provider: a backend chosen once, and Landlock rulesets cached per policy.
pub struct LocalSandboxProvider {
    config: LocalSandboxConfig,
    verdict: Result<Backend, String>,
    rulesets: Mutex<HashMap<SandboxPolicy, CachedRuleset>>,
}

impl std::fmt::Debug for LocalSandboxProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalSandboxProvider")
            .field("verdict", &self.verdict)
            .finish()
    }
}

impl LocalSandboxProvider {
    /// Validates the config, then selects (and probes) the backend. A host with no usable backend
    /// still gives a provider: its verdict says why, and every confined call fails closed.
    pub fn new(config: LocalSandboxConfig) -> Result<Self, String> {
        config.validate()?;
        let verdict = select(&config);
        match &verdict {
            Ok(backend) => tracing::debug!(%backend, "sandbox backend selected"),
            Err(reason) => tracing::debug!(%reason, "no sandbox backend is usable"),
        }
        Ok(Self {
            config,
            verdict,
            rulesets: Mutex::new(HashMap::new()),
        })
    }

    /// The backend in use, or why there is none.
    pub fn verdict(&self) -> Result<&Backend, &str> {
        self.verdict.as_ref().map_err(String::as_str)
    }

    /// The enforcement confined commands get (`None` without a backend).
    pub fn enforcement(&self) -> Option<Enforcement> {
        match self.verdict.as_ref().ok()? {
            Backend::Landlock { abi } if *abi < 3 => Some(Enforcement::Partial),
            _ => Some(Enforcement::Full),
        }
    }

    /// Whether confined commands cannot signal processes outside their sandbox.
    pub fn signals_scoped(&self) -> bool {
        self.config.scope_signals
            && matches!(self.verdict, Ok(Backend::Landlock { abi }) if abi >= 6)
    }

    /// The network policy for confined commands.
    pub fn network(&self) -> NetworkPolicy {
        self.config.network
    }

    /// The ruleset for `policy`, whose writable root (if any) is the directory `root` identifies.
    fn ruleset(&self, policy: &SandboxPolicy, root: Option<RootId>) -> Result<Ruleset, String> {
        let mut cache = lock_unpoisoned(&self.rulesets);
        if let Some(cached) = cache.get(policy)
            && cached.root == root
        {
            return Ok(cached.ruleset.clone());
        }
        let ruleset = Ruleset::create(&landlock_spec(&self.config, policy))
            .map_err(|err| format!("landlock: {err}"))?;
        if cache.len() >= MAX_CACHED_RULESETS {
            cache.clear();
        }
        cache.insert(
            policy.clone(),
            CachedRuleset {
                ruleset: ruleset.clone(),
                root,
            },
        );
        Ok(ruleset)
    }
}

/// Refuses a `workspace-write` root that would not confine: `/` (which would let commands write
/// everywhere while results still say `workspace-write`: a server started in `/` with no better
/// workspace), a root that does not exist, and one whose path no longer leads to itself. Roots are
/// stored canonical, and every backend resolves the path again (a Landlock ruleset when it is built,
/// bubblewrap at every spawn), so a confined command that can write the root's parent (`/tmp` under
/// `workspace-write`) could otherwise swap the root for a symbolic link to any directory and be
/// granted writes there. Returns the root's identity, which the ruleset cache is checked against.
fn check_workspace_root(root: &Path) -> Result<RootId, String> {
    use std::os::unix::fs::MetadataExt;
    let unusable = |err: std::io::Error| {
        format!(
            "the workspace root {} cannot be used: {err}",
            root.display()
        )
    };
    match std::fs::canonicalize(root) {
        Ok(resolved) if resolved != root => Err(format!(
            "the workspace root {} now resolves to {} (a symbolic link is in its path); \
             refusing to grant writes through it",
            root.display(),
            resolved.display()
        )),
        Ok(resolved) if resolved == Path::new("/") => Err(
            "the workspace root is / (the whole file system), so workspace-write would confine \
             nothing; give a narrower workspace (--cwd, or the client's root) or ask for \
             danger-full-access"
                .to_owned(),
        ),
        Ok(resolved) => std::fs::metadata(resolved)
            .map(|meta| (meta.dev(), meta.ino()))
            .map_err(unusable),
        Err(err) => Err(unusable(err)),
    }
}

/// The Landlock grants for a policy (also what a launcher applies to itself).
pub fn landlock_spec(config: &LocalSandboxConfig, policy: &SandboxPolicy) -> RulesetSpec {
    let mut writable = vec![PathBuf::from("/dev/null")];
    if policy.mode == SandboxMode::WorkspaceWrite {
        // Canonical, as every writable path must be (a host whose /tmp is a link to /var/tmp).
        writable.push(std::fs::canonicalize("/tmp").unwrap_or_else(|_| PathBuf::from("/tmp")));
        writable.push(policy.workspace_root.clone());
    }
    RulesetSpec {
        read_only: vec![PathBuf::from("/")],
        writable,
        deny_tcp: config.network == NetworkPolicy::Deny,
        scope_signals: config.scope_signals,
    }
}

/// The seeds' bubblewrap profile (without the program), `--` included.
fn bwrap_profile(config: &LocalSandboxConfig, policy: &SandboxPolicy) -> Vec<String> {
    let mut args: Vec<String> = [
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--die-with-parent",
    ]
    .map(String::from)
    .to_vec();
    if config.network == NetworkPolicy::Deny {
        args.push("--unshare-net".into());
    }
    if policy.mode == SandboxMode::WorkspaceWrite {
        let root = policy.workspace_root.display().to_string();
        args.extend([
            "--tmpfs".into(),
            "/tmp".into(),
            "--bind".into(),
            root.clone(),
            root,
        ]);
    }
    args.push("--".into());
    args
}

impl SandboxProvider for LocalSandboxProvider {
    fn confine(&self, argv: &[String], policy: &SandboxPolicy) -> Result<Wrap, ExecError> {
        let backend = self.verdict.as_ref().map_err(|_| {
            ExecError::SandboxUnavailable(sandbox_unavailable_text(policy.mode, None))
        })?;
        let root = if policy.mode == SandboxMode::WorkspaceWrite {
            let id = check_workspace_root(&policy.workspace_root).map_err(|detail| {
                ExecError::SandboxUnavailable(sandbox_unavailable_text(policy.mode, Some(&detail)))
            })?;
            Some(id)
        } else {
            None
        };
        let strings = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        match backend {
            Backend::Landlock { .. } => {
                let ruleset = self.ruleset(policy, root).map_err(|detail| {
                    ExecError::SandboxUnavailable(sandbox_unavailable_text(
                        policy.mode,
                        Some(&detail),
                    ))
                })?;
                let enforcement = match ruleset.coverage() {
                    Coverage::Full => Enforcement::Full,
                    Coverage::Partial => Enforcement::Partial,
                };
                Ok(Wrap {
                    argv: argv.to_vec(),
                    landlock: Some(ruleset),
                    facts: WrapFacts {
                        mode: policy.mode,
                        enforcement,
                        denial_signatures: strings(&["permission denied"]),
                        // No launcher prints anything: a refused restriction fails the spawn.
                        runner_failure_signatures: Vec::new(),
                    },
                })
            }
            Backend::Bwrap(path) => {
                let mut wrapped = vec![path.display().to_string()];
                wrapped.extend(bwrap_profile(&self.config, policy));
                wrapped.extend(argv.iter().cloned());
                Ok(Wrap {
                    argv: wrapped,
                    landlock: None,
                    facts: WrapFacts {
                        mode: policy.mode,
                        enforcement: Enforcement::Full,
                        denial_signatures: strings(&["read-only file system"]),
                        runner_failure_signatures: strings(&["bwrap: "]),
                    },
                })
            }
            Backend::Runner(runner) => {
                let mut wrapped = runner.clone();
                wrapped.extend(bwrap_profile(&self.config, policy));
                wrapped.extend(argv.iter().cloned());
                let argv0 = runner.first().cloned().unwrap_or_default();
                let mut runner_signatures = self.config.runner_failure_signatures.clone();
                runner_signatures.extend([
                    format!("exec: {argv0}: not found"),
                    format!("{argv0}: No such file or directory"),
                    format!("{argv0}: Permission denied"),
                ]);
                Ok(Wrap {
                    argv: wrapped,
                    landlock: None,
                    facts: WrapFacts {
                        mode: policy.mode,
                        enforcement: Enforcement::Full,
                        denial_signatures: strings(&["read-only file system", "permission denied"]),
                        runner_failure_signatures: runner_signatures,
                    },
                })
            }
        }
    }
}

/// Picks the backend: the runner if configured, else the first usable of the chain.
fn select(config: &LocalSandboxConfig) -> Result<Backend, String> {
    if !config.runner_command.is_empty() {
        return Ok(Backend::Runner(config.runner_command.clone()));
    }
    let mut reasons = Vec::new();
    if config.backend != BackendChoice::Bwrap {
        match probe_landlock(config) {
            Ok(abi) => return Ok(Backend::Landlock { abi }),
            Err(reason) => reasons.push(format!("landlock: {reason}")),
        }
    }
    if config.backend != BackendChoice::Landlock {
        match probe_bwrap(config) {
            Ok(path) => return Ok(Backend::Bwrap(path)),
            Err(reason) => reasons.push(format!("bubblewrap: {reason}")),
        }
    }
    Err(reasons.join("; "))
}

/// Landlock is usable when the kernel has it and a read-only ruleset for this config can be built.
fn probe_landlock(config: &LocalSandboxConfig) -> Result<u32, String> {
    let policy = SandboxPolicy {
        mode: SandboxMode::ReadOnly,
        workspace_root: PathBuf::from("/"),
    };
    let ruleset =
        Ruleset::create(&landlock_spec(config, &policy)).map_err(|err| err.to_string())?;
    Ok(ruleset.abi())
}

/// bubblewrap is usable when it is on `PATH` and runs `true` under the read-only profile.
fn probe_bwrap(config: &LocalSandboxConfig) -> Result<PathBuf, String> {
    let path = find_on_path("bwrap").ok_or("not found on PATH")?;
    let policy = SandboxPolicy {
        mode: SandboxMode::ReadOnly,
        workspace_root: PathBuf::from("/"),
    };
    let mut child = Command::new(&path)
        .args(bwrap_profile(config, &policy))
        .arg("true")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| format!("{}: {err}", path.display()))?;
    let deadline = Instant::now() + Duration::from_millis(config.probe_timeout_ms);
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(path),
            Ok(Some(status)) => {
                let mut stderr = String::new();
                if let Some(mut pipe) = child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
                }
                let first = stderr.lines().next().unwrap_or_default().to_owned();
                return Err(format!("probe failed ({status}): {first}"));
            }
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "probe timed out after {}ms",
                    config.probe_timeout_ms
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(err) => return Err(err.to_string()),
        }
    }
}

/// `name` on `PATH`, if it is an executable file there.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runner_config_errors_are_the_seeds() {
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
    fn the_bwrap_profile_is_the_seeds() {
        let config = LocalSandboxConfig::default();
        let policy = SandboxPolicy {
            mode: SandboxMode::WorkspaceWrite,
            workspace_root: PathBuf::from("/ws"),
        };
        assert_eq!(
            bwrap_profile(&config, &policy).join(" "),
            "--ro-bind / / --dev /dev --proc /proc --die-with-parent --tmpfs /tmp --bind /ws /ws --"
        );
    }
}
