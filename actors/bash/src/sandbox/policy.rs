//! The standing sandbox policy (docs/ARCHITECTURE.md#sandbox): a default mode, a workspace root
//! stored canonical, and per-session overrides (of the mode, and of the root where a front end learns
//! a session's own workspace, as MCP does from the client's roots). The tool layer resolves it for
//! every call (an explicit approved mode wins, then the session's override, then the default); the
//! executor's resolver fills it in for callers that gave none. Overrides are set by messages to the
//! tool actor (`SetSessionSandboxMode`, `SetSessionWorkspace`, which the runtime sends for a host)
//! and are never shown to the model.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use dsh_tasks::SandboxMode;

/// The policy one command runs under.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SandboxPolicy {
    /// The mode.
    pub mode: SandboxMode,
    /// The workspace root (writable under `workspace-write`), canonical: one whose path does not
    /// resolve to itself when a command is confined fails closed (see `LocalSandboxProvider`).
    pub workspace_root: PathBuf,
}

/// `realpath` (symlinks resolved); the spelling itself when the path does not exist; then made
/// absolute against the current directory.
pub fn canonical_root(path: &Path) -> PathBuf {
    let resolved = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    if resolved.is_absolute() {
        return resolved;
    }
    std::env::current_dir()
        .map(|cwd| cwd.join(&resolved))
        .unwrap_or(resolved)
}

/// Default mode, canonical root, and the per-session overrides.
#[derive(Clone, Debug)]
pub struct SandboxPolicyResolver {
    default_mode: SandboxMode,
    workspace_root: PathBuf,
    overrides: HashMap<String, SandboxMode>,
    roots: HashMap<String, PathBuf>,
}

impl SandboxPolicyResolver {
    /// A resolver with `default_mode` and `workspace_root` (stored canonical).
    pub fn new(default_mode: SandboxMode, workspace_root: &Path) -> Self {
        Self {
            default_mode,
            workspace_root: canonical_root(workspace_root),
            overrides: HashMap::new(),
            roots: HashMap::new(),
        }
    }

    /// The configured default mode.
    pub fn default_mode(&self) -> SandboxMode {
        self.default_mode
    }

    /// The canonical workspace root.
    pub fn workspace_root(&self) -> &Path {
        &self.workspace_root
    }

    /// Sets (`Some`) or clears (`None`) a session's standing mode; the last one set wins.
    pub fn set_session_mode(&mut self, session: &str, mode: Option<SandboxMode>) {
        match mode {
            Some(mode) => {
                self.overrides.insert(session.to_owned(), mode);
            }
            None => {
                self.overrides.remove(session);
            }
        }
    }

    /// Sets (`Some`, stored canonical) or clears (`None`) a session's own workspace root: the
    /// directory its commands run in and, under `workspace-write`, may write.
    pub fn set_session_root(&mut self, session: &str, root: Option<&Path>) {
        match root {
            Some(root) => {
                self.roots.insert(session.to_owned(), canonical_root(root));
            }
            None => {
                self.roots.remove(session);
            }
        }
    }

    /// `{mode, workspace_root}` for a call: `explicit` ?? the session's override ?? the default, and
    /// the session's own root ?? the configured one.
    pub fn resolve(&self, session: Option<&str>, explicit: Option<SandboxMode>) -> SandboxPolicy {
        let mode = explicit
            .or_else(|| session.and_then(|s| self.overrides.get(s).copied()))
            .unwrap_or(self.default_mode);
        let workspace_root = session
            .and_then(|s| self.roots.get(s))
            .unwrap_or(&self.workspace_root)
            .clone();
        SandboxPolicy {
            mode,
            workspace_root,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_is_stored_canonical_and_overrides_win_per_session() {
        let dir = std::env::temp_dir();
        let mut resolver = SandboxPolicyResolver::new(SandboxMode::ReadOnly, &dir);
        assert_eq!(
            resolver.workspace_root(),
            std::fs::canonicalize(&dir).unwrap()
        );
        assert_eq!(
            resolver.resolve(Some("a"), None).mode,
            SandboxMode::ReadOnly
        );
        resolver.set_session_mode("a", Some(SandboxMode::WorkspaceWrite));
        assert_eq!(
            resolver.resolve(Some("a"), None).mode,
            SandboxMode::WorkspaceWrite
        );
        assert_eq!(
            resolver.resolve(Some("b"), None).mode,
            SandboxMode::ReadOnly
        );
        assert_eq!(
            resolver
                .resolve(Some("a"), Some(SandboxMode::DangerFullAccess))
                .mode,
            SandboxMode::DangerFullAccess
        );
        let other = std::env::temp_dir().join(".");
        resolver.set_session_root("a", Some(&other));
        assert_eq!(
            resolver.resolve(Some("a"), None).workspace_root,
            std::fs::canonicalize(&other).unwrap()
        );
        resolver.set_session_root("a", None);
        resolver.set_session_mode("a", None);
        assert_eq!(
            resolver.resolve(Some("a"), None).mode,
            SandboxMode::ReadOnly
        );
        let missing = Path::new("/no/such/dsh-root");
        assert_eq!(canonical_root(missing), missing);
    }
}
