//! The one owner of what a confined command may write: [`writable_paths`] gives the writable set
//! for a config and a policy, and both backends grant exactly it (Landlock as its writable rules,
//! bubblewrap as its binds). Also the everyday roots a front end adds under `workspace-write`
//! ([`everyday_roots`]: the package managers' caches, `/dev/shm`, `$DSH_HOME`, made ready at
//! startup), and the check an operator's `--writable-root` passes ([`check_root`]).
//! Why these roots and what each costs: docs/ARCHITECTURE.md, "Sandbox".

use std::path::{Path, PathBuf};

use dsh_contain::mountns::SHM;
use dsh_tasks::SandboxMode;

use crate::sandbox::config::LocalSandboxConfig;
use crate::sandbox::policy::SandboxPolicy;

/// Every path a command confined under `policy` may write, canonical: `/dev/null` and `/dev/tty`
/// always; under `workspace-write` also the temp (the runtime's private one, else `/tmp`), the workspace root, and the config's extra roots
/// that exist (a root removed since startup is not granted, rather than failing every call).
pub fn writable_paths(config: &LocalSandboxConfig, policy: &SandboxPolicy) -> Vec<PathBuf> {
    // `/dev/tty` is the process's own controlling terminal: a `tty: true` command's pty (programs
    // such as `ssh-keygen` and `less` open it by name); without a terminal it opens nothing (ENXIO).
    let mut writable = vec![PathBuf::from("/dev/null"), PathBuf::from("/dev/tty")];
    if policy.mode == SandboxMode::WorkspaceWrite {
        // The runtime's private temp (`LocalSandboxConfig::private_temp`), else the host's `/tmp`,
        // canonical, as every writable path must be (a host whose /tmp is a link to /var/tmp).
        writable.push(config.private_temp.clone().unwrap_or_else(|| {
            std::fs::canonicalize("/tmp").unwrap_or_else(|_| PathBuf::from("/tmp"))
        }));
        writable.push(policy.workspace_root.clone());
        for root in &config.writable_roots {
            // The host's shared memory, where a session has its own in its place.
            let root = match &config.private_shm {
                Some(own) if root == Path::new(SHM) => own,
                _ => root,
            };
            if root.exists() && !writable.contains(root) {
                writable.push(root.clone());
            }
        }
    }
    writable
}

/// The directories below the home that everyday work writes outside its workspace: npm's cache,
/// the XDG cache (pip, pre-commit, …), cargo's registry and git checkouts (never `~/.cargo/bin`).
const HOME_DIRS: [&str; 4] = [".npm", ".cache", ".cargo/registry", ".cargo/git"];

/// The files cargo locks and records last use in, beside its registry: granted only once cargo
/// made them (dsh never creates them).
const CARGO_FILES: [&str; 3] = [
    ".cargo/.package-cache",
    ".cargo/.package-cache-mutate",
    ".cargo/.global-cache",
];

/// The roots everyday work writes outside its workspace, made ready at startup, for a user whose
/// home is `home`: `HOME_DIRS` (created if missing when `create`), `CARGO_FILES` (if they
/// exist), POSIX shared memory (`/dev/shm`, Python's `multiprocessing`) and `dsh_home` (created
/// likewise). Each is made canonical; one that is missing or cannot be resolved (a read-only home)
/// is left out, as is `/`.
pub fn everyday_roots(home: Option<&Path>, dsh_home: &Path, create: bool) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = home
        .map(|home| HOME_DIRS.iter().map(|name| home.join(name)).collect())
        .unwrap_or_default();
    dirs.push(dsh_home.to_path_buf());
    for dir in &dirs {
        if create && !dir.exists() {
            let _ = std::fs::create_dir_all(dir);
        }
    }
    let files: Vec<PathBuf> = home
        .map(|home| CARGO_FILES.iter().map(|name| home.join(name)).collect())
        .unwrap_or_default();
    let mut ready = Vec::new();
    for root in dirs.into_iter().chain(files).chain([PathBuf::from(SHM)]) {
        match std::fs::canonicalize(&root) {
            Ok(path) if path != Path::new("/") && !ready.contains(&path) => ready.push(path),
            _ => {}
        }
    }
    ready
}

/// Why an operator's `--writable-root` was refused (the Display is the startup error,
/// docs/CONTRACT.md, "Sandbox").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WritableRootError {
    /// A relative path.
    #[error("--writable-root {0}: not an absolute path; give the directory's full path")]
    NotAbsolute(PathBuf),
    /// Nothing there.
    #[error("--writable-root {0}: no such file or directory; create it first")]
    Missing(PathBuf),
    /// A path with a symbolic link or `..` in it.
    #[error("--writable-root {0}: not canonical (it resolves to {1}); pass {1}")]
    NotCanonical(PathBuf, PathBuf),
    /// The whole file system.
    #[error(
        "--writable-root /: would let commands write everywhere; use --sandbox danger-full-access for that"
    )]
    Everything,
}

/// Accepts an operator's writable root only as an absolute, existing, canonical path other than `/`.
pub fn check_root(root: &Path) -> Result<PathBuf, WritableRootError> {
    if !root.is_absolute() {
        return Err(WritableRootError::NotAbsolute(root.to_path_buf()));
    }
    let resolved =
        std::fs::canonicalize(root).map_err(|_| WritableRootError::Missing(root.to_path_buf()))?;
    if resolved == Path::new("/") {
        return Err(WritableRootError::Everything);
    }
    if resolved != root {
        return Err(WritableRootError::NotCanonical(
            root.to_path_buf(),
            resolved,
        ));
    }
    Ok(resolved)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A config with `roots` as its extra roots, and a `mode` policy whose workspace is `/ws`.
    pub(crate) fn config_and_policy(
        roots: &[&str],
        mode: SandboxMode,
    ) -> (LocalSandboxConfig, SandboxPolicy) {
        let config = LocalSandboxConfig {
            writable_roots: roots.iter().map(PathBuf::from).collect(),
            ..LocalSandboxConfig::default()
        };
        let policy = SandboxPolicy {
            mode,
            workspace_root: PathBuf::from("/ws"),
        };
        (config, policy)
    }

    #[test]
    fn read_only_writes_only_the_null_device_and_the_terminal() {
        let (config, policy) = config_and_policy(&["/dev/shm"], SandboxMode::ReadOnly);
        assert_eq!(
            writable_paths(&config, &policy),
            [PathBuf::from("/dev/null"), PathBuf::from("/dev/tty")]
        );
    }

    #[test]
    fn workspace_write_adds_tmp_the_root_and_the_extra_roots_that_exist() {
        let (config, policy) =
            config_and_policy(&["/dev/shm", "/no/such/root"], SandboxMode::WorkspaceWrite);
        let tmp = std::fs::canonicalize("/tmp").unwrap();
        assert_eq!(
            writable_paths(&config, &policy),
            [
                PathBuf::from("/dev/null"),
                PathBuf::from("/dev/tty"),
                tmp,
                PathBuf::from("/ws"),
                PathBuf::from("/dev/shm"),
            ]
        );
    }

    #[test]
    fn a_sessions_own_shared_memory_is_granted_in_place_of_the_hosts() {
        let (mut config, policy) = config_and_policy(&["/dev/shm"], SandboxMode::WorkspaceWrite);
        let own = tempfile::tempdir().unwrap();
        config.private_shm = Some(own.path().to_path_buf());
        let writable = writable_paths(&config, &policy);
        assert!(writable.contains(&own.path().to_path_buf()), "{writable:?}");
        assert!(
            !writable.contains(&PathBuf::from("/dev/shm")),
            "{writable:?}"
        );
    }

    #[test]
    fn operator_roots_must_be_absolute_existing_and_canonical() {
        let rel = Path::new("rel");
        assert_eq!(
            check_root(rel),
            Err(WritableRootError::NotAbsolute(rel.into()))
        );
        let missing = Path::new("/no/such/dsh-root");
        assert_eq!(
            check_root(missing),
            Err(WritableRootError::Missing(missing.into()))
        );
        let dotted = Path::new("/usr/../usr");
        assert_eq!(
            check_root(dotted),
            Err(WritableRootError::NotCanonical(
                dotted.into(),
                "/usr".into()
            ))
        );
        assert_eq!(
            check_root(Path::new("/")),
            Err(WritableRootError::Everything)
        );
        assert_eq!(check_root(Path::new("/usr")), Ok(PathBuf::from("/usr")));
    }
}
