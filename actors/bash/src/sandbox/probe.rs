//! Choosing the backend, once, when the provider is built: a configured runner wins; otherwise
//! Landlock first (no extra process, keeps signal and network scoping), then bubblewrap, each
//! functionally probed (bubblewrap runs `true` under its read-only profile within
//! `probe_timeout_ms`). The verdict — a [`Backend`] or why there is none — is kept for the
//! provider's life; with none, every confined call fails closed.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dsh_tasks::SandboxMode;

use crate::sandbox::config::{BackendChoice, LocalSandboxConfig};
use crate::sandbox::policy::SandboxPolicy;
use crate::sandbox::{bwrap, landlock};

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

/// Picks the backend: the runner if configured, else the first usable of the chain.
pub(crate) fn select(config: &LocalSandboxConfig) -> Result<Backend, String> {
    if !config.runner_command.is_empty() {
        return Ok(Backend::Runner(config.runner_command.clone()));
    }
    let mut reasons = Vec::new();
    if config.backend != BackendChoice::Bwrap {
        match landlock::probe(config) {
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

/// bubblewrap is usable when it is on `PATH` and runs `true` under the read-only profile.
fn probe_bwrap(config: &LocalSandboxConfig) -> Result<PathBuf, String> {
    let path = find_on_path("bwrap").ok_or("not found on PATH")?;
    let policy = SandboxPolicy {
        mode: SandboxMode::ReadOnly,
        workspace_root: PathBuf::from("/"),
    };
    let mut child = Command::new(&path)
        .args(bwrap::profile(config, &policy, None))
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
