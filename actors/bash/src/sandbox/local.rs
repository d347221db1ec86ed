//! The host's provider, [`LocalSandboxProvider`]: it selects a backend once (`probe.rs`), checks
//! the workspace root of every `workspace-write` call (`root_check.rs`), and hands each call to its
//! backend — Landlock in the spawn (`landlock.rs`), bubblewrap (`bwrap.rs`) or an operator's runner
//! (`runner.rs`). docs/ARCHITECTURE.md#sandbox describes the chain.

use dsh_contain::netns::Netns;
use dsh_contain::seccomp::{Filter, Sockets};
use dsh_tasks::{Enforcement, SandboxMode};

use crate::errors::ExecError;
use crate::sandbox::config::{LocalSandboxConfig, NetworkPolicy};
use crate::sandbox::landlock::RulesetCache;
use crate::sandbox::policy::SandboxPolicy;
use crate::sandbox::probe::{Backend, select};
use crate::sandbox::provider::{SandboxProvider, Wrap, sandbox_unavailable_text};
use crate::sandbox::root_check::check_workspace_root;
use crate::sandbox::{bwrap, landlock, runner};

// The paths the binary (`doctor`, `__landlock-launch`) and the tests name these two by.
pub use crate::sandbox::landlock::landlock_spec;
pub use crate::sandbox::probe::find_on_path;

/// The host's provider: a backend chosen once, the seccomp filter built once, the network
/// namespace of `--network loopback` made once, and Landlock rulesets cached per policy.
pub struct LocalSandboxProvider {
    config: LocalSandboxConfig,
    verdict: Result<Backend, String>,
    /// Every confined command's seccomp filter (`dsh_contain::seccomp`), for either backend.
    filter: Option<Filter>,
    /// Under `--network loopback`, the namespace every confined command of this provider joins
    /// (`dsh_contain::netns`), whatever the backend.
    netns: Option<Netns>,
    rulesets: RulesetCache,
}

impl std::fmt::Debug for LocalSandboxProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalSandboxProvider")
            .field("verdict", &self.verdict)
            .finish()
    }
}

impl LocalSandboxProvider {
    /// Validates the config, makes the network namespace of `--network loopback`, then selects
    /// (and probes) the backend. A host with no usable backend still gives a provider: its verdict
    /// says why, and every confined call fails closed. A namespace that cannot be made is an error
    /// (`--network loopback: <cause and fix>`): nothing could give that policy.
    pub fn new(config: LocalSandboxConfig) -> Result<Self, String> {
        config.validate()?;
        let netns = match config.network {
            NetworkPolicy::Loopback => {
                Some(Netns::create().map_err(|err| format!("--network loopback: {err}"))?)
            }
            NetworkPolicy::Allow | NetworkPolicy::Deny => None,
        };
        let sockets = match config.network {
            // In the runtime's namespace every socket reaches loopback only.
            NetworkPolicy::Allow | NetworkPolicy::Loopback => Sockets::Any,
            NetworkPolicy::Deny => Sockets::TcpOnly,
        };
        // A filter that cannot be built leaves no backend: confined calls fail closed.
        let (verdict, filter) = match Filter::build(sockets) {
            Ok(filter) => (select(&config), Some(filter)),
            Err(err) => (Err(err.to_string()), None),
        };
        match &verdict {
            Ok(backend) => tracing::debug!(%backend, "sandbox backend selected"),
            Err(reason) => tracing::debug!(%reason, "no sandbox backend is usable"),
        }
        Ok(Self {
            config,
            verdict,
            filter,
            netns,
            rulesets: RulesetCache::default(),
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

    /// Whether confined commands cannot connect to abstract UNIX sockets bound outside their
    /// sandbox by Landlock's scope (bubblewrap isolates them only in its own network namespace,
    /// with `--network deny`).
    pub fn abstract_sockets_scoped(&self) -> bool {
        matches!(self.verdict, Ok(Backend::Landlock { abi }) if abi >= 6)
    }

    /// The network policy for confined commands.
    pub fn network(&self) -> NetworkPolicy {
        self.config.network
    }
}

impl SandboxProvider for LocalSandboxProvider {
    fn confine(&self, argv: &[String], policy: &SandboxPolicy) -> Result<Wrap, ExecError> {
        let unavailable = |detail: Option<&str>| {
            ExecError::SandboxUnavailable(sandbox_unavailable_text(policy.mode, detail))
        };
        let backend = self.verdict.as_ref().map_err(|_| unavailable(None))?;
        let filter = self.filter.clone().ok_or_else(|| unavailable(None))?;
        let root = if policy.mode == SandboxMode::WorkspaceWrite {
            let id = check_workspace_root(&policy.workspace_root)
                .map_err(|detail| unavailable(Some(&detail)))?;
            Some(id)
        } else {
            None
        };
        let mut wrap = match backend {
            Backend::Landlock { .. } => {
                let ruleset = self
                    .rulesets
                    .get(&self.config, policy, root)
                    .map_err(|detail| unavailable(Some(&detail)))?;
                landlock::wrap(argv, policy, ruleset, filter)
            }
            Backend::Bwrap(path) => bwrap::wrap(path, &self.config, policy, argv, filter)
                .map_err(|detail| unavailable(Some(&detail)))?,
            Backend::Runner(command) => runner::wrap(command, &self.config, policy, argv, filter)
                .map_err(|detail| unavailable(Some(&detail)))?,
        };
        if let Some(netns) = &self.netns {
            wrap.confinement = wrap
                .confinement
                .map(|confinement| confinement.with_netns(Some(netns.clone())));
        }
        Ok(wrap)
    }
}
