//! The host's provider, [`LocalSandboxProvider`]: it selects a backend once (`probe.rs`), checks
//! the workspace root of every `workspace-write` call (`root_check.rs`), and hands each call to its
//! backend — Landlock in the spawn (`landlock.rs`), bubblewrap (`bwrap.rs`) or an operator's runner
//! (`runner.rs`). It also owns what Landlock commands share: the private temp (`dsh-tmp-<pid>-…`,
//! mode 0700, made at the first Landlock call, removed at shutdown) and whether dsh may make their
//! read-only mount namespaces here. docs/ARCHITECTURE.md#sandbox describes the chain.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use dsh_contain::mountns::{MountNamespace, MountSpec};
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
use crate::sandbox::{bwrap, landlock, runner, session_temp};

// The paths the binary (`doctor`, `__landlock-launch`) and the tests name these two by.
pub use crate::sandbox::landlock::landlock_spec;
pub use crate::sandbox::probe::find_on_path;

/// The host's provider: a backend chosen once, the seccomp filter built once, the network
/// namespace of `--network loopback` made once, and Landlock rulesets cached per policy and session.
pub struct LocalSandboxProvider {
    config: LocalSandboxConfig,
    verdict: Result<Backend, String>,
    /// Every confined command's seccomp filter (`dsh_contain::seccomp`), for either backend.
    filter: Option<Filter>,
    /// Under `--network loopback`, the namespace every confined command of this provider joins
    /// (`dsh_contain::netns`), whatever the backend.
    netns: Option<Netns>,
    rulesets: RulesetCache,
    /// Whether dsh may make the Landlock backend's read-only mount namespaces here (root or
    /// `CAP_SYS_ADMIN`, Linux 5.12): checked once by building an empty one.
    namespaces: bool,
    /// `config` with the private temp it created at the first Landlock call (removed at shutdown).
    temp: OnceLock<Result<LocalSandboxConfig, String>>,
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
        let namespaces = matches!(verdict, Ok(Backend::Landlock { .. }))
            && MountNamespace::build(&MountSpec::default()).is_ok();
        Ok(Self {
            config,
            verdict,
            filter,
            netns,
            rulesets: RulesetCache::default(),
            namespaces,
            temp: OnceLock::new(),
        })
    }

    /// Whether metadata changes (`chmod`, `utimes`, xattrs, links, renames) outside the writable
    /// set are refused: bubblewrap's read-only bind of `/`, or Landlock with its mount namespace.
    pub fn metadata_enforced(&self) -> bool {
        match self.verdict.as_ref() {
            Ok(Backend::Landlock { .. }) => self.namespaces,
            Ok(_) => true,
            Err(_) => false,
        }
    }

    /// The private temp directory of this provider's commands, once a Landlock call created it.
    pub fn private_temp(&self) -> Option<&Path> {
        match self.temp.get()? {
            Ok(config) => config.private_temp.as_deref(),
            Err(_) => None,
        }
    }

    /// `config` with the private temp, created (mode 0700) at the first call.
    fn temp_config(&self) -> Result<&LocalSandboxConfig, String> {
        self.temp
            .get_or_init(|| {
                let temp = create_private_temp().map_err(|err| format!("private temp: {err}"))?;
                Ok(LocalSandboxConfig {
                    private_temp: Some(temp),
                    ..self.config.clone()
                })
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The backend in use, or why there is none.
    pub fn verdict(&self) -> Result<&Backend, &str> {
        self.verdict.as_ref().map_err(String::as_str)
    }

    /// The enforcement confined commands get (`None` without a backend): Landlock is `partial`
    /// below ABI 3 (truncate) or without its mount namespace (metadata).
    pub fn enforcement(&self) -> Option<Enforcement> {
        match self.verdict.as_ref().ok()? {
            Backend::Landlock { abi } if *abi < 3 || !self.namespaces => Some(Enforcement::Partial),
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
}

impl SandboxProvider for LocalSandboxProvider {
    /// The writable set of `writable.rs`.
    fn writable(&self, policy: &SandboxPolicy) -> Vec<std::path::PathBuf> {
        crate::sandbox::writable::writable_paths(&self.config, policy)
    }

    /// Landlock commands are confined per (policy, session): each session has its own mount
    /// namespace, so its terminals are its own (`landlock.rs`).
    fn confine(
        &self,
        argv: &[String],
        policy: &SandboxPolicy,
        session: Option<&str>,
    ) -> Result<Wrap, ExecError> {
        let unavailable = |detail: Option<&str>| {
            ExecError::SandboxUnavailable(sandbox_unavailable_text(policy.mode, detail))
        };
        let backend = self.verdict.as_ref().map_err(|_| unavailable(None))?;
        let filter = self.filter.clone().ok_or_else(|| unavailable(None))?;
        let root = if policy.mode == SandboxMode::WorkspaceWrite {
            let id = check_workspace_root(&policy.workspace_root)
                .map_err(|err| ExecError::SandboxUnavailable(err.to_string()))?;
            Some(id)
        } else {
            None
        };
        let mut wrap = match backend {
            Backend::Landlock { .. } => {
                let config = self
                    .temp_config()
                    .map_err(|detail| unavailable(Some(&detail)))?;
                let confined = self
                    .rulesets
                    .get(config, policy, session, root, self.namespaces)
                    .map_err(|detail| {
                        ExecError::SandboxUnavailable(format!(
                            "the sandbox's writable set cannot be granted ({detail}); make sure \
                             the workspace and every writable root (dsh doctor lists them) is a \
                             real directory, or rerun with --sandbox danger-full-access"
                        ))
                    })?;
                landlock::wrap(argv, policy, confined, filter)
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

    fn shutdown(&self) {
        // The runtime's tasks are gone: every session's namespace, terminals and confined spawning
        // thread may go too (a provider is not used again after its runtime's shutdown: its temp
        // is gone).
        self.rulesets.clear();
        if let Some(temp) = self.private_temp() {
            remove_private_temp(temp);
        }
    }

    fn release_session(&self, session: &str) {
        self.rulesets.forget(session);
        let Some(Ok(config)) = self.temp.get() else {
            return;
        };
        let own = session_temp::session_config(config, Some(session), self.namespaces);
        for dir in own.private_temp.iter().chain(&own.private_shm) {
            remove_private_temp(dir);
        }
    }
}

impl Drop for LocalSandboxProvider {
    fn drop(&mut self) {
        if let Some(temp) = self.private_temp() {
            remove_private_temp(temp);
        }
    }
}

/// A new `dsh-tmp-<pid>-<pid namespace>-<nonce>` directory (mode 0700; `mkdir` never follows a
/// planted link) under the host's temp directory, canonical.
fn create_private_temp() -> std::io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let parent = std::fs::canonicalize(std::env::temp_dir())?;
    let path = parent.join(format!(
        "dsh-tmp-{}-{}-{}",
        std::process::id(),
        pid_namespace().unwrap_or_default(),
        dsh_contain::nonce()
    ));
    std::fs::DirBuilder::new().mode(0o700).create(&path)?;
    sweep_stale_private_temps(&parent, &path);
    Ok(path)
}

/// Removes the private temps that dead runtimes left in `parent`: a runtime removes its own at
/// shutdown, but one killed outright (SIGKILL, a crash) cannot. A
/// `dsh-tmp-<pid>-<pid namespace>-<nonce>` directory of this user, made in this process's pid
/// namespace, whose `<pid>` no longer runs is removed with what is in it. Kept: one whose pid runs
/// (its runtime, or a stranger that reused the number), one made in another pid namespace (a
/// container sharing this temp directory: its pids mean nothing here), and anything else, links
/// included. "This user" is the owner of `own`, the directory just made.
fn sweep_stale_private_temps(parent: &Path, own: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(uid) = own.metadata().map(|m| m.uid()) else {
        return;
    };
    let Some(namespace) = pid_namespace() else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let mut parts = name
            .to_str()
            .and_then(|n| n.strip_prefix("dsh-tmp-"))
            .unwrap_or_default()
            .splitn(3, '-');
        let (Some(pid), Some(made_in), Some(_nonce)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        if made_in != namespace {
            continue;
        }
        let ours = entry
            .path()
            .symlink_metadata()
            .is_ok_and(|m| m.is_dir() && m.uid() == uid);
        if ours && !Path::new(&format!("/proc/{pid}")).exists() {
            remove_private_temp(&entry.path());
        }
    }
}

/// This process's pid namespace, as the number of `/proc/self/ns/pid` (`pid:[4026531836]`).
fn pid_namespace() -> Option<String> {
    let link = std::fs::read_link("/proc/self/ns/pid").ok()?;
    let text = link.to_str()?;
    Some(text.strip_prefix("pid:[")?.strip_suffix(']')?.to_owned())
}

/// Removes the private temp and whatever commands left in it (a second call finds nothing).
fn remove_private_temp(temp: &Path) {
    match std::fs::remove_dir_all(temp) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => tracing::warn!(path = %temp.display(), %err, "cannot remove the private temp"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_runtimes_private_temp_is_swept_and_a_live_ones_kept() {
        let parent = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let ns = pid_namespace().unwrap();
        let stale = parent.path().join(format!("dsh-tmp-{dead}-{ns}-1a2b"));
        let live = parent
            .path()
            .join(format!("dsh-tmp-{}-{ns}-3c4d", std::process::id()));
        let other = parent.path().join(format!("dsh-tmp-notapid-{ns}-5e6f"));
        let elsewhere = parent.path().join(format!("dsh-tmp-{dead}-1-7a8b"));
        for dir in [&stale, &live, &other, &elsewhere] {
            std::fs::create_dir(dir).unwrap();
        }
        std::fs::write(stale.join("left"), b"x").unwrap();
        sweep_stale_private_temps(parent.path(), &live);
        assert!(
            !stale.exists(),
            "a dead runtime's temp is removed with its contents"
        );
        assert!(live.exists(), "a live runtime's temp is kept");
        assert!(other.exists(), "a name that is not a runtime's is kept");
        assert!(elsewhere.exists(), "another pid namespace's temp is kept");
    }
}
