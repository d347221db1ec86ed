//! The check every `workspace-write` call's root passes before a backend grants writes below it,
//! and its refusals, each naming the cause first and the fix second (docs/CONTRACT.md, "Sandbox").

use std::path::{Path, PathBuf};

/// The device and inode of a workspace root.
pub(crate) type RootId = (u64, u64);

/// Why a workspace root cannot be granted (code `SANDBOX_UNAVAILABLE`; nothing runs).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkspaceError {
    /// The root is `/`: a server started in `/` (GUI hosts do that) with no `--cwd` and no client
    /// root; `workspace-write` there would confine nothing.
    #[error(
        "no usable workspace: the server runs in /; pass --cwd DIR or let the client offer a root \
         (workspace-write in / would let commands write the whole file system)"
    )]
    WholeFileSystem,
    /// The root was replaced by a symbolic link (or a link was put in its path) since it was set.
    #[error(
        "the workspace {root} was replaced by a symbolic link (it now resolves to {resolved}), so \
         writes through it are refused; restore the directory, or give a new workspace (--cwd DIR, \
         or the client's root)"
    )]
    Swapped {
        /// The root as it was set (canonical then).
        root: PathBuf,
        /// What its path leads to now.
        resolved: PathBuf,
    },
    /// The root cannot be resolved or read (deleted, unreadable).
    #[error(
        "the workspace {root} cannot be used ({reason}); create it again, or give another \
         workspace (--cwd DIR, or the client's root)"
    )]
    Unusable {
        /// The root.
        root: PathBuf,
        /// The system's word for why.
        reason: String,
    },
}

/// Refuses a `workspace-write` root that would not confine: `/` (which would let commands write
/// everywhere while results still say `workspace-write`: a server started in `/` with no better
/// workspace), a root that does not exist, and one whose path no longer leads to itself. Roots are
/// stored canonical, and every backend resolves the path again (a Landlock ruleset when it is built,
/// bubblewrap at every spawn), so a confined command that can write the root's parent (`/tmp` under
/// `workspace-write`) could otherwise swap the root for a symbolic link to any directory and be
/// granted writes there. Returns the root's identity, which the ruleset cache is checked against.
pub(crate) fn check_workspace_root(root: &Path) -> Result<RootId, WorkspaceError> {
    use std::os::unix::fs::MetadataExt;
    let unusable = |err: std::io::Error| WorkspaceError::Unusable {
        root: root.to_path_buf(),
        reason: err.to_string(),
    };
    match std::fs::canonicalize(root) {
        Ok(resolved) if resolved != root => Err(WorkspaceError::Swapped {
            root: root.to_path_buf(),
            resolved,
        }),
        Ok(resolved) if resolved == Path::new("/") => Err(WorkspaceError::WholeFileSystem),
        Ok(resolved) => std::fs::metadata(resolved)
            .map(|meta| (meta.dev(), meta.ino()))
            .map_err(unusable),
        Err(err) => Err(unusable(err)),
    }
}
