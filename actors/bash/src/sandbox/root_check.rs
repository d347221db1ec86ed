//! The check every `workspace-write` call's root passes before a backend grants writes below it.

use std::path::Path;

/// The device and inode of a workspace root.
pub(crate) type RootId = (u64, u64);

/// Refuses a `workspace-write` root that would not confine: `/` (which would let commands write
/// everywhere while results still say `workspace-write`: a server started in `/` with no better
/// workspace), a root that does not exist, and one whose path no longer leads to itself. Roots are
/// stored canonical, and every backend resolves the path again (a Landlock ruleset when it is built,
/// bubblewrap at every spawn), so a confined command that can write the root's parent (`/tmp` under
/// `workspace-write`) could otherwise swap the root for a symbolic link to any directory and be
/// granted writes there. Returns the root's identity, which the ruleset cache is checked against.
pub(crate) fn check_workspace_root(root: &Path) -> Result<RootId, String> {
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
