//! The Landlock backend, applied in the spawn: no launcher process. A ruleset is built here, in the
//! unconfined parent, once per policy (cached), and the `clone3` child restricts itself with it
//! right before exec (`dsh_contain::landlock`). Grants: read and execute below `/`, write to
//! `/dev/null` and `/dev/tty` (the command's own terminal, if it has one); `workspace-write` adds
//! `/tmp` and the workspace root. `--network deny` adds TCP bind/connect rules (ABI ≥ 4); under
//! `--network loopback` the child joins the runtime's network namespace first (`local.rs`); the scopes (ABI ≥ 6) stop a command from signalling dsh or its
//! agent and from connecting to an abstract UNIX socket bound outside its sandbox. The child also
//! drops every capability first and installs the seccomp filter last (`dsh_contain::confine`).
//! Enforcement `full` from ABI 3 (truncate is controlled), else `partial`.
//!
//! Its denial signature is `permission denied`, and it has no runner-failure signature: a refused
//! restriction fails the spawn itself (docs/CONTRACT.md, where dsh differs, item 16).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

use dsh_contain::confine::Confinement;
use dsh_contain::landlock::{Coverage, Ruleset, RulesetSpec};
use dsh_contain::seccomp::Filter;
use dsh_process::lock_unpoisoned;
use dsh_tasks::{Enforcement, SandboxMode};

use crate::sandbox::config::{LocalSandboxConfig, NetworkPolicy};
use crate::sandbox::policy::SandboxPolicy;
use crate::sandbox::provider::{Wrap, WrapFacts};
use crate::sandbox::root_check::RootId;

/// How many Landlock rulesets the provider keeps (each holds descriptors of its granted
/// directories). Per-session workspaces make one per distinct root; past this many the cache starts
/// again, and live spawns keep their own references.
const MAX_CACHED_RULESETS: usize = 64;

/// The Landlock grants for a policy (also what a launcher applies to itself).
pub fn landlock_spec(config: &LocalSandboxConfig, policy: &SandboxPolicy) -> RulesetSpec {
    // `/dev/tty` is the process's own controlling terminal: a `tty: true` command's pty (programs
    // such as `ssh-keygen` and `less` open it by name); without a terminal it opens nothing (ENXIO).
    let mut writable = vec![PathBuf::from("/dev/null"), PathBuf::from("/dev/tty")];
    if policy.mode == SandboxMode::WorkspaceWrite {
        // Canonical, as every writable path must be (a host whose /tmp is a link to /var/tmp).
        writable.push(std::fs::canonicalize("/tmp").unwrap_or_else(|_| PathBuf::from("/tmp")));
        writable.push(policy.workspace_root.clone());
    }
    RulesetSpec {
        read_only: vec![PathBuf::from("/")],
        writable,
        // Under `loopback` the runtime's network namespace confines TCP (`local.rs`), not rules.
        deny_tcp: config.network == NetworkPolicy::Deny,
        scope_signals: config.scope_signals,
        scope_abstract_sockets: true,
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

/// A cached ruleset and the identity of the workspace root it grants: a root deleted and made
/// again at the same path is another directory, which the old ruleset does not grant.
struct CachedRuleset {
    ruleset: Ruleset,
    root: Option<RootId>,
}

/// The rulesets built so far, one per policy.
#[derive(Default)]
pub(crate) struct RulesetCache {
    rulesets: Mutex<HashMap<SandboxPolicy, CachedRuleset>>,
}

impl RulesetCache {
    /// The ruleset for `policy`, whose writable root (if any) is the directory `root` identifies.
    pub(crate) fn get(
        &self,
        config: &LocalSandboxConfig,
        policy: &SandboxPolicy,
        root: Option<RootId>,
    ) -> Result<Ruleset, String> {
        let mut cache = lock_unpoisoned(&self.rulesets);
        if let Some(cached) = cache.get(policy)
            && cached.root == root
        {
            return Ok(cached.ruleset.clone());
        }
        let ruleset = Ruleset::create(&landlock_spec(config, policy))
            .map_err(|err| format!("landlock: {err}"))?;
        if cache.len() >= MAX_CACHED_RULESETS {
            cache.clear();
        }
        cache.insert(
            policy.clone(),
            CachedRuleset {
                ruleset: ruleset.clone(),
                root,
            },
        );
        Ok(ruleset)
    }
}

/// `argv` as it is, started with `ruleset` and `filter`, every capability dropped.
pub(crate) fn wrap(
    argv: &[String],
    policy: &SandboxPolicy,
    ruleset: Ruleset,
    filter: Filter,
) -> Wrap {
    let enforcement = match ruleset.coverage() {
        Coverage::Full => Enforcement::Full,
        Coverage::Partial => Enforcement::Partial,
    };
    Wrap {
        argv: argv.to_vec(),
        confinement: Some(Confinement::InSpawn {
            landlock: ruleset,
            filter,
            netns: None,
        }),
        facts: WrapFacts {
            mode: policy.mode,
            enforcement,
            denial_signatures: vec!["permission denied".to_owned()],
            // No launcher prints anything: a refused restriction fails the spawn.
            runner_failure_signatures: Vec::new(),
        },
    }
}
