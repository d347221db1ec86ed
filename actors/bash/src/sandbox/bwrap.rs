//! The bubblewrap backend: `bwrap <profile> -- bash -c <command>`. The profile is
//! `--ro-bind / / --dev /dev --unshare-pid --proc /proc --cap-drop ALL --die-with-parent
//! --tmpfs /tmp --tmpfs /var/tmp`; `read-only` remounts both temps read-only
//! (`--remount-ro`), `workspace-write` adds a `--bind <path> <path>` for the rest of the writable
//! set of `writable.rs` (the workspace root, then the extra roots), `--network deny` adds
//! `--unshare-net`; under `--network loopback` bubblewrap itself starts in the runtime's network
//! namespace (the spawn joins it, `local.rs`), so no flag. The temps are the command's own, empty and gone when it ends, so the host's
//! `/tmp` (and the spill directory in it) is not visible; `TMPDIR` is `/tmp`. Enforcement `full`; a denial reads `read-only file system`, and bubblewrap's own
//! failures start with `bwrap: `.
//!
//! `--unshare-pid` with a `/proc` of its own: the command sees only its sandbox's processes, so it
//! cannot read another process's `environ`, `mem` or `fd`, nor signal or renice one (their pids do
//! not exist in its namespace); what it leaves running dies with it (the namespace's first process
//! is bubblewrap's, which ends the namespace when the command exits). `--cap-drop ALL`: run as root,
//! bubblewrap otherwise hands the command every capability; with it the effective, permitted,
//! inheritable and ambient sets are empty and `no_new_privs` (always set by bubblewrap) keeps an exec
//! from gaining any back, although the bounding set itself stays full.

use std::os::fd::RawFd;
use std::path::Path;

use dsh_contain::confine::Confinement;
use dsh_contain::seccomp::Filter;
use dsh_tasks::SandboxMode;

use crate::sandbox::config::{LocalSandboxConfig, NetworkPolicy};
use crate::sandbox::gate::{GateBackend, gate_policy};
use crate::sandbox::policy::SandboxPolicy;
use crate::sandbox::provider::Wrap;
use crate::sandbox::writable::writable_paths;

/// The bubblewrap profile (without the program), `--` included; with `--seccomp <fd>` when a filter
/// descriptor is given (the probe runs without one). An operator's runner gets it too.
pub(crate) fn profile(
    config: &LocalSandboxConfig,
    policy: &SandboxPolicy,
    filter_fd: Option<RawFd>,
) -> Vec<String> {
    let mut args: Vec<String> = [
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--unshare-pid",
        "--proc",
        "/proc",
        "--cap-drop",
        "ALL",
        "--die-with-parent",
    ]
    .map(String::from)
    .to_vec();
    if let Some(fd) = filter_fd {
        args.extend(["--seccomp".to_owned(), fd.to_string()]);
    }
    if config.network == NetworkPolicy::Deny {
        args.push("--unshare-net".into());
    }
    let temps: Vec<&str> = ["/tmp", "/var/tmp"]
        .into_iter()
        .filter(|temp| *temp == "/tmp" || Path::new(temp).is_dir())
        .collect();
    for temp in &temps {
        args.extend(["--tmpfs".into(), (*temp).into()]);
    }
    // The spill directory, covered by a tmpfs above when it lies in a temp: shown again,
    // read-only, so a command can read the full output a result names. Its mount point is made
    // in the tmpfs, so before a read-only temp is remounted.
    if let Some(spill) = &config.spill_dir {
        let spill = spill.display().to_string();
        args.extend(["--ro-bind".into(), spill.clone(), spill]);
    }
    if policy.mode == SandboxMode::ReadOnly {
        for temp in &temps {
            args.extend(["--remount-ro".into(), (*temp).into()]);
        }
    }
    if policy.mode == SandboxMode::WorkspaceWrite {
        // The rest of the writable set, bound writable over the read-only `/`: `/dev`'s entries
        // come from `--dev` (its own `/dev/shm` included, private to the sandbox), and the temps
        // (the host's `/tmp`, or the runtime's private temp the Landlock backend grants) are the
        // tmpfs above.
        let tmp = std::fs::canonicalize("/tmp").unwrap_or_else(|_| "/tmp".into());
        for path in writable_paths(config, policy) {
            if path.starts_with("/dev")
                || path == tmp
                || Some(&path) == config.private_temp.as_ref()
            {
                continue;
            }
            let path = path.display().to_string();
            args.extend(["--bind".into(), path.clone(), path]);
        }
    }
    args.push("--".into());
    args
}

/// `argv` run by the bubblewrap at `path` under the profile for `policy`.
pub(crate) fn wrap(
    path: &Path,
    config: &LocalSandboxConfig,
    policy: &SandboxPolicy,
    argv: &[String],
    filter: Filter,
) -> Result<Wrap, String> {
    let program = [path.display().to_string()];
    let signatures = Signatures {
        denial: vec!["read-only file system".to_owned()],
        runner_failure: vec!["bwrap: ".to_owned()],
    };
    wrap_in(&program, config, policy, argv, signatures, filter)
}

/// What a bwrap-shaped program's failures read like.
pub(crate) struct Signatures {
    /// A file operation the sandbox refused.
    pub denial: Vec<String>,
    /// The program itself failed.
    pub runner_failure: Vec<String>,
}

/// `argv` run by `program` (bubblewrap, or a runner shaped like it) under the profile for
/// `policy`, handed `filter` for its `--seccomp`; enforcement `full`. Fails when the filter's
/// descriptor cannot be made.
pub(crate) fn wrap_in(
    program: &[String],
    config: &LocalSandboxConfig,
    policy: &SandboxPolicy,
    argv: &[String],
    signatures: Signatures,
    filter: Filter,
) -> Result<Wrap, String> {
    let fd = filter.launcher_fd().map_err(|err| err.to_string())?;
    let mut runner = program.to_vec();
    runner.extend(profile(config, policy, Some(fd)));
    let mut wrap = Wrap::through_runner(
        runner,
        argv,
        policy,
        signatures.denial,
        signatures.runner_failure,
    );
    wrap.confinement = Some(Confinement::Launcher {
        filter,
        netns: None,
        gate: Some(gate_policy(config, policy, GateBackend::Launcher)),
    });
    wrap.env = vec![("TMPDIR".to_owned(), "/tmp".to_owned())];
    Ok(wrap)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn the_profile_binds_the_writable_set_but_dev_and_tmp() {
        let (config, policy) = crate::sandbox::writable::tests::config_and_policy(
            &["/dev/shm", "/usr"],
            SandboxMode::WorkspaceWrite,
        );
        assert!(
            profile(&config, &policy, None)
                .join(" ")
                .ends_with("--tmpfs /var/tmp --bind /ws /ws --bind /usr /usr --")
        );
    }

    #[test]
    fn the_profile_reads_everything_and_writes_its_own_temps_and_the_workspace() {
        let config = LocalSandboxConfig::default();
        let policy = SandboxPolicy {
            mode: SandboxMode::WorkspaceWrite,
            workspace_root: PathBuf::from("/ws"),
        };
        assert_eq!(
            profile(&config, &policy, Some(7)).join(" "),
            "--ro-bind / / --dev /dev --unshare-pid --proc /proc --cap-drop ALL --die-with-parent \
             --seccomp 7 --tmpfs /tmp --tmpfs /var/tmp --bind /ws /ws --"
        );
        let read_only = SandboxPolicy {
            mode: SandboxMode::ReadOnly,
            ..policy
        };
        assert!(
            profile(&config, &read_only, None).join(" ").ends_with(
                "--tmpfs /tmp --tmpfs /var/tmp --remount-ro /tmp --remount-ro /var/tmp --"
            ),
        );
    }

    #[test]
    fn the_spill_directory_is_bound_read_only_after_the_temps_and_before_their_remount() {
        let spill = tempfile::tempdir().unwrap();
        let config = LocalSandboxConfig {
            spill_dir: Some(spill.path().to_path_buf()),
            ..LocalSandboxConfig::default()
        };
        let policy = SandboxPolicy {
            mode: SandboxMode::ReadOnly,
            workspace_root: PathBuf::from("/ws"),
        };
        let spill = spill.path().display();
        assert!(
            profile(&config, &policy, None)
                .join(" ")
                .ends_with(&format!(
                    "--tmpfs /tmp --tmpfs /var/tmp --ro-bind {spill} {spill} \
                 --remount-ro /tmp --remount-ro /var/tmp --"
                )),
        );
    }
}
