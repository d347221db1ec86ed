//! The Landlock backend, applied in the spawn: no launcher process. A ruleset is built here, in the
//! unconfined parent, once per policy and agent session (cached), and the `clone3` child restricts
//! itself with it right before exec (`dsh_contain::landlock`). Grants: read and execute below `/`, write to
//! the writable set of `writable.rs` (`/dev/null` and `/dev/tty`; `workspace-write` adds the runtime's
//! private temp (`LocalSandboxConfig::private_temp`, else the host's `/tmp`), the workspace root and
//! the extra roots). Where dsh may make one, the child first enters a read-only mount namespace built
//! from the same writable set (`dsh_contain::mountns`, one per policy and session, cached with the
//! ruleset): it
//! refuses the metadata changes Landlock does not mediate, shows the private temp as `/tmp` and
//! `/var/tmp` and the spill directory read-only, and has terminals of its own — the session's, so no
//! session opens another's — which the ruleset (built after it) grants by handle
//! (`dsh_contain::devpts`); without it, enforcement is `partial`. `--network deny` adds TCP bind/connect rules (ABI ≥ 4); under
//! `--network loopback` the child joins the runtime's network namespace first (`local.rs`); the scopes (ABI ≥ 6) stop a command from signalling dsh or its
//! agent and from connecting to an abstract UNIX socket bound outside its sandbox. Every capability
//! is dropped first and the seccomp filter installed last (`dsh_contain::confine`) — once, by the
//! entry's confined spawning thread (`ConfinedThread`, cached with the ruleset), which spawns the
//! entry's commands.
//! Enforcement `full` from ABI 3 (truncate is controlled), else `partial`.
//!
//! Its denial signatures are `permission denied` and `read-only file system` (the namespace), and it has no runner-failure signature: a refused
//! restriction fails the spawn itself (docs/CONTRACT.md, where dsh differs, item 16).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use dsh_contain::confine::Confinement;
use dsh_contain::confined_thread::ConfinedThread;
use dsh_contain::landlock::{Coverage, Ruleset, RulesetSpec};
use dsh_contain::mountns::{MountNamespace, MountSpec};
use dsh_contain::seccomp::Filter;
use dsh_process::lock_unpoisoned;
use dsh_tasks::{Enforcement, SandboxMode};

use dsh_contain::sockgate::GatePolicy;

use crate::sandbox::config::{LocalSandboxConfig, NetworkPolicy};
use crate::sandbox::gate::{GateBackend, gate_policy};
use crate::sandbox::policy::SandboxPolicy;
use crate::sandbox::provider::{Wrap, WrapFacts};
use crate::sandbox::root_check::RootId;
use crate::sandbox::session_temp;
use crate::sandbox::writable::writable_paths;

/// How many Landlock rulesets the provider keeps, one per (policy, session) (each holds
/// descriptors of its granted directories, and its mount namespace a terminal instance). Past this
/// many the least recently used goes; live spawns keep their own references.
const MAX_CACHED_RULESETS: usize = 64;

/// The Landlock grants for a policy (also what a launcher applies to itself).
pub fn landlock_spec(config: &LocalSandboxConfig, policy: &SandboxPolicy) -> RulesetSpec {
    RulesetSpec {
        read_only: vec![PathBuf::from("/")],
        writable: writable_paths(config, policy),
        // Under `loopback` the runtime's network namespace confines TCP (`local.rs`), not rules.
        deny_tcp: config.network == NetworkPolicy::Deny,
        scope_signals: config.scope_signals,
        scope_abstract_sockets: true,
    }
}

/// The mount namespace for a policy: the ruleset's writable set read-write, the workspace visible
/// (read-only unless writable) and the spill directory visible read-only, the private temp on `/tmp`
/// and `/var/tmp`.
pub fn mount_spec(
    config: &LocalSandboxConfig,
    policy: &SandboxPolicy,
    spec: &RulesetSpec,
) -> MountSpec {
    let mut visible = vec![policy.workspace_root.clone()];
    visible.extend(config.spill_dir.iter().cloned());
    MountSpec {
        writable: spec.writable.clone(),
        visible,
        temp: config.private_temp.clone(),
        shm: config.private_shm.clone(),
    }
}

/// Landlock is usable when the kernel has it and a read-only ruleset for this config can be built;
/// the answer is the kernel's ABI version.
pub(crate) fn probe(config: &LocalSandboxConfig) -> Result<u32, String> {
    let policy = SandboxPolicy {
        mode: SandboxMode::ReadOnly,
        workspace_root: PathBuf::from("/"),
    };
    let ruleset =
        Ruleset::create(&landlock_spec(config, &policy)).map_err(|err| err.to_string())?;
    Ok(ruleset.abi())
}

/// A cached confinement, and the identity of the workspace root it grants: a root deleted and made
/// again at the same path is another directory, which the old one does not grant.
struct CachedRuleset {
    confined: Confined,
    root: Option<RootId>,
    /// When it was last handed out (the cache's own clock), for eviction.
    used: u64,
}

/// What one policy's commands of one session are confined with.
#[derive(Clone)]
pub(crate) struct Confined {
    ruleset: Ruleset,
    mount_ns: Option<MountNamespace>,
    gate: Arc<GatePolicy>,
    /// `TMPDIR` for its commands: `/tmp` in the namespace, else the session's temp itself.
    tmpdir: Option<String>,
    /// The thread that spawns its commands already confined, started by the first of them.
    spawner: ConfinedThread,
}

/// A policy as one agent session's commands get it. Sessions differ only in their mount
/// namespace's terminal instance (`dsh_contain::devpts`): a command could read what is typed into
/// any terminal of its own instance (it runs as the owner of them all), so each session has its own,
/// and the ruleset that grants it.
type Key = (SandboxPolicy, Option<String>);

/// The rulesets built so far, one per policy and session.
#[derive(Default)]
pub(crate) struct RulesetCache {
    entries: Mutex<Entries>,
}

#[derive(Default)]
struct Entries {
    map: HashMap<Key, CachedRuleset>,
    /// Counts hand-outs: the `used` stamp of the latest.
    clock: u64,
}

impl RulesetCache {
    /// The ruleset for `policy` and `session`, whose writable root (if any) is the directory
    /// `root` identifies, and its mount namespace when `namespaces` (the host lets dsh make them).
    /// `config` is the runtime's: the session's own temp in it is derived and made here, when its
    /// entry is built (`session_temp.rs`).
    pub(crate) fn get(
        &self,
        config: &LocalSandboxConfig,
        policy: &SandboxPolicy,
        session: Option<&str>,
        root: Option<RootId>,
        namespaces: bool,
    ) -> Result<Confined, String> {
        let mut entries = lock_unpoisoned(&self.entries);
        entries.clock += 1;
        let now = entries.clock;
        let key: Key = (policy.clone(), session.map(str::to_owned));
        if let Some(cached) = entries.map.get_mut(&key)
            && cached.root == root
        {
            cached.used = now;
            return Ok(cached.confined.clone());
        }
        let config = &session_temp::session_config(config, session, namespaces);
        session_temp::make(config)?;
        let spec = landlock_spec(config, policy);
        let mount_ns = if namespaces {
            let ns = MountNamespace::build(&mount_spec(config, policy, &spec))
                .map_err(|err| format!("mount namespace: {err}"))?;
            Some(ns)
        } else {
            None
        };
        // The namespace's own terminals (`dsh_contain::devpts`), in both modes: making a
        // pseudo-terminal there writes no file, and it reaches no terminal outside.
        let terminals: Vec<_> = mount_ns
            .as_ref()
            .and_then(MountNamespace::devpts)
            .map(|devpts| vec![devpts.root(), devpts.ptmx()])
            .unwrap_or_default();
        let ruleset = Ruleset::create_with_handles(&spec, &terminals)
            .map_err(|err| format!("landlock: {err}"))?;
        let gate = gate_policy(
            config,
            policy,
            GateBackend::Landlock {
                namespace: mount_ns.is_some(),
            },
        );
        if !entries.map.contains_key(&key)
            && entries.map.len() >= MAX_CACHED_RULESETS
            && let Some(oldest) = entries
                .map
                .iter()
                .min_by_key(|(_, cached)| cached.used)
                .map(|(key, _)| key.clone())
        {
            entries.map.remove(&oldest);
        }
        let tmpdir = match (&mount_ns, &config.private_temp) {
            (None, Some(temp)) => Some(temp.display().to_string()),
            (Some(_), Some(_)) => Some("/tmp".to_owned()),
            (_, None) => None,
        };
        let confined = Confined {
            ruleset,
            mount_ns,
            gate,
            tmpdir,
            spawner: ConfinedThread::new(),
        };
        entries.map.insert(
            key,
            CachedRuleset {
                confined: confined.clone(),
                root,
                used: now,
            },
        );
        Ok(confined)
    }

    /// Forgets every entry of `session` (released): its namespace and terminals go once no command
    /// of it runs.
    pub(crate) fn forget(&self, session: &str) {
        let mut entries = lock_unpoisoned(&self.entries);
        entries
            .map
            .retain(|(_, owner), _| owner.as_deref() != Some(session));
    }

    /// Forgets every entry (the runtime shut down).
    pub(crate) fn clear(&self) {
        lock_unpoisoned(&self.entries).map.clear();
    }

    /// How many are cached (tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        lock_unpoisoned(&self.entries).map.len()
    }
}

/// `argv` as it is, started in `mount_ns` with `ruleset` and `filter`, every capability dropped;
/// `TMPDIR` is `/tmp` in the namespace, else the private temp's own path. Enforcement is `full`
/// only with the namespace (metadata) and ABI 3 (truncate).
pub(crate) fn wrap(
    argv: &[String],
    policy: &SandboxPolicy,
    Confined {
        ruleset,
        mount_ns,
        gate,
        tmpdir,
        spawner,
    }: Confined,
    filter: Filter,
) -> Wrap {
    let enforcement = match (ruleset.coverage(), &mount_ns) {
        (Coverage::Full, Some(_)) => Enforcement::Full,
        _ => Enforcement::Partial,
    };
    Wrap {
        argv: argv.to_vec(),
        env: tmpdir
            .map(|t| ("TMPDIR".to_owned(), t))
            .into_iter()
            .collect(),
        confinement: Some(Confinement::InSpawn {
            landlock: ruleset,
            filter,
            mount_ns,
            netns: None,
            gate: Some(gate),
            spawner,
        }),
        facts: WrapFacts {
            mode: policy.mode,
            enforcement,
            // Landlock refuses with EACCES; the mount namespace, which a create or metadata change
            // meets first, with EROFS.
            denial_signatures: vec![
                "permission denied".to_owned(),
                "read-only file system".to_owned(),
            ],
            // No launcher prints anything: a refused restriction fails the spawn.
            runner_failure_signatures: Vec::new(),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::BorrowedFd;
    use std::os::unix::fs::MetadataExt;

    use super::*;

    /// The identity of the namespace's terminal instance: the device of its root.
    fn terminals(confined: &Confined) -> u64 {
        let devpts = confined
            .mount_ns
            .as_ref()
            .and_then(MountNamespace::devpts)
            .unwrap();
        let root: BorrowedFd<'_> = devpts.root();
        let file = std::fs::File::from(root.try_clone_to_owned().unwrap());
        file.metadata().unwrap().dev()
    }

    #[test]
    fn each_session_has_terminals_of_its_own_and_the_least_recently_used_goes_first() {
        let config = LocalSandboxConfig::default();
        let probe = MountNamespace::build(&MountSpec::default());
        if probe.ok().and_then(|ns| ns.devpts().map(|_| ())).is_none() || probe_abi().is_none() {
            eprintln!("skipped: no mount namespace with terminals here");
            return;
        }
        let policy = SandboxPolicy {
            mode: SandboxMode::ReadOnly,
            workspace_root: PathBuf::from("/"),
        };
        let cache = RulesetCache::default();
        let get = |session: Option<&str>| cache.get(&config, &policy, session, None, true).unwrap();
        let alice = get(Some("alice"));
        let bob = get(Some("bob"));
        let nobody = get(None);
        assert_ne!(
            terminals(&alice),
            terminals(&bob),
            "two sessions share terminals"
        );
        assert_ne!(terminals(&alice), terminals(&nobody));
        assert_eq!(
            terminals(&alice),
            terminals(&get(Some("alice"))),
            "one session's commands share its terminals"
        );
        // Filling the cache evicts the least recently used (bob), not alice, used just now.
        for n in 0..MAX_CACHED_RULESETS {
            get(Some("alice"));
            get(Some(&format!("s{n}")));
        }
        assert_eq!(cache.len(), MAX_CACHED_RULESETS);
        assert_eq!(terminals(&alice), terminals(&get(Some("alice"))));
        assert_ne!(
            terminals(&bob),
            terminals(&get(Some("bob"))),
            "bob was evicted"
        );
        // A released session's entries go at once.
        cache.forget("alice");
        assert_eq!(cache.len(), MAX_CACHED_RULESETS - 1);
        assert_ne!(terminals(&alice), terminals(&get(Some("alice"))));
    }

    fn probe_abi() -> Option<u32> {
        probe(&LocalSandboxConfig::default()).ok()
    }
}
