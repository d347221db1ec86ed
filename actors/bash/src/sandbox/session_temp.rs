//! Each agent session's own temp under the Landlock backend: its name in the runtime's private
//! temp, and making it. What a session's commands see as `/tmp` and `/var/tmp` (or get as `TMPDIR`
//! without a namespace), and, where dsh makes the namespace and `/dev/shm` is a writable root, its
//! own `/dev/shm` beside it, so sessions share no temp names, files or sockets (a tmux server's)
//! with each other or with unconfined programs. Derived when the session's ruleset is built
//! (`landlock.rs`, on a cache miss) and when the session is released (`local.rs`).

use std::path::Path;

use crate::sandbox::config::LocalSandboxConfig;

/// `config` with its private temp narrowed to `session`'s own directory in it, and `private_shm`
/// set beside it with `namespaces` when `/dev/shm` is among the writable roots. The name is `s-`
/// and the session id in hex (`h-` and a hash of a long one; `anonymous` for a caller with no
/// session), so one session cannot name its way into another's.
pub(crate) fn session_config(
    config: &LocalSandboxConfig,
    session: Option<&str>,
    namespaces: bool,
) -> LocalSandboxConfig {
    let name = match session {
        None => "anonymous".to_owned(),
        Some(id) if id.len() <= 100 => {
            let hex: String = id.bytes().map(|b| format!("{b:02x}")).collect();
            format!("s-{hex}")
        }
        // FNV-1a: stable across runs, so a session keeps its temp when its cache entry is rebuilt.
        Some(id) => {
            let hash = id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
            });
            format!("h-{hash:016x}-{}", id.len())
        }
    };
    let shm = namespaces
        && config
            .writable_roots
            .iter()
            .any(|root| root == Path::new(dsh_contain::mountns::SHM));
    LocalSandboxConfig {
        private_temp: config.private_temp.as_ref().map(|temp| temp.join(&name)),
        private_shm: (config.private_temp.as_ref())
            .filter(|_| shm)
            .map(|temp| temp.join(format!("{name}.shm"))),
        ..config.clone()
    }
}

/// Makes a session's temp and shared memory (mode 0700) in the runtime's private temp, unless they
/// are there; anything else at their names is refused. Only dsh writes the runtime's private temp
/// itself: each session's commands are granted their own directories in it.
pub(crate) fn make(session: &LocalSandboxConfig) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    for dir in session.private_temp.iter().chain(&session.private_shm) {
        match std::fs::DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
                if !std::fs::symlink_metadata(dir).is_ok_and(|meta| meta.is_dir()) {
                    return Err(format!(
                        "the session's temp {} is not a directory",
                        dir.display()
                    ));
                }
            }
            Err(err) => return Err(format!("the session's temp {}: {err}", dir.display())),
        }
    }
    Ok(())
}
