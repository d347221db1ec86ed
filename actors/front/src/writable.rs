//! The writable roots the binary gives the sandbox beside the workspace and `/tmp`: the everyday
//! roots (package caches, `/dev/shm`, `$DSH_HOME`; `dsh_bash::sandbox::writable`) and each
//! `--writable-root`, checked when the flag is parsed; and the one startup warning for a server
//! whose workspace is `/`. docs/ARCHITECTURE.md, "Sandbox", says why these roots.

use std::path::{Path, PathBuf};

use dsh::actors::bash::sandbox::writable::{check_root, everyday_roots};
use dsh::actors::tool_bash::resolve_dsh_home;

/// `--writable-root`'s parser: an absolute, existing, canonical path other than `/`.
pub fn parse_root(text: &str) -> Result<PathBuf, String> {
    check_root(Path::new(text)).map_err(|err| err.to_string())
}

/// `--allow-unix-socket`'s parser: an absolute path (the socket may appear later: an agent
/// restarted after dsh). Compared by device and inode at each connect, so it need not exist now.
pub fn parse_socket(text: &str) -> Result<PathBuf, String> {
    let path = Path::new(text);
    if !path.is_absolute() {
        return Err(format!("{text}: give the socket's absolute path"));
    }
    Ok(path.to_path_buf())
}

/// The extra writable roots: the everyday ones for this user (`dsh_home` as `--dsh-home` gives it,
/// resolved as the runtime resolves it; missing directories created when `create`), then `extra`.
pub fn roots(
    dsh_home: Option<&Path>,
    cwd: Option<&Path>,
    extra: &[PathBuf],
    create: bool,
) -> Vec<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let here = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let dsh_home = resolve_dsh_home(
        dsh_home,
        std::env::var("DSH_HOME").ok(),
        home.clone(),
        cwd.unwrap_or(&here),
    );
    let mut roots = everyday_roots(home.as_deref(), &dsh_home, create);
    for root in extra {
        if !roots.contains(root) {
            roots.push(root.clone());
        }
    }
    roots
}

/// The startup warning of a `workspace-write` runtime whose workspace is `/` (a server a GUI host
/// started in `/`): every call is refused with the same text until a client offers a root.
pub fn warn_if_workspace_is_everything(cwd: Option<&Path>) {
    let workspace = cwd
        .map(Path::to_path_buf)
        .or_else(|| std::env::current_dir().ok());
    if workspace.and_then(|dir| std::fs::canonicalize(dir).ok()) == Some(PathBuf::from("/")) {
        tracing::warn!(
            "no usable workspace: the server runs in /; pass --cwd DIR or let the client offer a \
             root (until then every workspace-write call is refused)"
        );
    }
}
