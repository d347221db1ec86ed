//! What the socket gate (`dsh_contain::sockgate`) lets a confined command reach, per backend: the
//! one place that turns the writable set, the operator's allowed sockets and the network policy
//! into the gate's rules.
//!
//! The writable roots are given as the command's mount namespace shows them: the writable set of
//! `writable.rs`, plus the temps the command sees as its own under `workspace-write` — Landlock's
//! namespace shows the runtime's private temp at `/tmp` and `/var/tmp`, bubblewrap mounts a tmpfs
//! of the command's own on each. Without a namespace (Landlock `partial`), `/tmp` is the host's and
//! is not added: only the private temp's own path is.

use std::path::PathBuf;
use std::sync::Arc;

use dsh_contain::sockgate::{GatePolicy, Inet, Reach};
use dsh_tasks::SandboxMode;

use crate::sandbox::config::{LocalSandboxConfig, NetworkPolicy};
use crate::sandbox::policy::SandboxPolicy;
use crate::sandbox::writable::writable_paths;

/// Which backend the command runs under, as far as the gate cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GateBackend {
    /// Landlock in the spawn; `namespace`: it enters the read-only mount namespace.
    Landlock { namespace: bool },
    /// bubblewrap, or an operator's runner shaped like it.
    Launcher,
}

/// The gate's rules for commands under `policy`.
pub(crate) fn gate_policy(
    config: &LocalSandboxConfig,
    policy: &SandboxPolicy,
    backend: GateBackend,
) -> Arc<GatePolicy> {
    let mut writable = writable_paths(config, policy);
    let own_temps = match backend {
        GateBackend::Landlock { namespace } => namespace && config.private_temp.is_some(),
        GateBackend::Launcher => true,
    };
    if policy.mode == SandboxMode::WorkspaceWrite && own_temps {
        writable.extend([PathBuf::from("/tmp"), PathBuf::from("/var/tmp")]);
        // The session's own shared memory, which its namespace shows there.
        if config.private_shm.is_some() {
            writable.push(PathBuf::from(dsh_contain::mountns::SHM));
        }
    }
    let inet = match (backend, config.network) {
        // Landlock's TCP rules bind the command, not dsh, which makes the connect.
        (GateBackend::Landlock { .. }, NetworkPolicy::Deny) => Inet::Refuse,
        _ => Inet::Connect,
    };
    Arc::new(GatePolicy {
        reach: Reach {
            writable,
            allowed: config.allow_unix_sockets.clone(),
        },
        inet,
        launcher: backend == GateBackend::Launcher,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_backend_reaches_its_own_temps_and_landlock_deny_refuses_inet() {
        let (mut config, policy) =
            crate::sandbox::writable::tests::config_and_policy(&[], SandboxMode::WorkspaceWrite);
        config.private_temp = Some(PathBuf::from("/tmp/dsh-tmp-1"));
        config.network = NetworkPolicy::Deny;
        let landlock = gate_policy(&config, &policy, GateBackend::Landlock { namespace: true });
        assert!(landlock.reach.writable.contains(&PathBuf::from("/tmp")));
        assert_eq!(landlock.inet, Inet::Refuse);
        assert!(!landlock.launcher);
        let partial = gate_policy(&config, &policy, GateBackend::Landlock { namespace: false });
        assert!(
            !partial.reach.writable.contains(&PathBuf::from("/tmp")),
            "without the namespace /tmp is the host's"
        );
        assert!(
            partial
                .reach
                .writable
                .contains(&PathBuf::from("/tmp/dsh-tmp-1"))
        );
        let bwrap = gate_policy(&config, &policy, GateBackend::Launcher);
        assert!(bwrap.reach.writable.contains(&PathBuf::from("/var/tmp")));
        assert_eq!(
            bwrap.inet,
            Inet::Connect,
            "its own network namespace confines it"
        );
        let read_only = SandboxPolicy {
            mode: SandboxMode::ReadOnly,
            ..policy
        };
        let ro = gate_policy(&config, &read_only, GateBackend::Launcher);
        assert!(!ro.reach.writable.contains(&PathBuf::from("/tmp")));
    }
}
