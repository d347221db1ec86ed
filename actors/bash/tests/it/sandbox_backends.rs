//! The E2E-x-* cases (seed §2.7) against the real backends — Landlock applied in the spawn, and
//! bubblewrap, each case once per backend (`landlock::…`, `bwrap::…`) — plus what the seeds do not
//! have: network deny, signal scope, and containment of a confined command's escaped grandchild.
//! Each backend's tests skip, saying why, where the backend is unusable on the host.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::common;
use actix::prelude::*;
use dsh_bash::sandbox::{
    Backend, BackendChoice, LocalSandboxConfig, LocalSandboxProvider, NetworkPolicy,
};
use dsh_bash::*;
use dsh_process::{ProcessManager, Shutdown};
use dsh_test_support::SOON;
use dsh_test_support::procfs::live_with_cmdline;
use dsh_test_support::wait::poll_until;

struct Setup {
    manager: Addr<ProcessManager>,
    executor: Addr<SandboxBashExecutor>,
    resolver: Resolver,
    enforcement: Enforcement,
    workspace: tempfile::TempDir,
    _spill: tempfile::TempDir,
}

/// A temp dir outside `/tmp` (which `workspace-write` may write): under `$HOME`, else the build's
/// target directory.
fn outside_tmp() -> tempfile::TempDir {
    dsh_test_support::scratch::outside_tmp("dsh-sandbox-", Path::new(env!("CARGO_TARGET_TMPDIR")))
}

impl Setup {
    /// `None` (after printing why) when the backend is unusable here.
    fn new(backend: BackendChoice, mode: SandboxMode, network: NetworkPolicy) -> Option<Self> {
        let provider = LocalSandboxProvider::new(LocalSandboxConfig {
            backend,
            network,
            ..LocalSandboxConfig::default()
        })
        .unwrap();
        let enforcement = match provider.verdict() {
            Ok(_) => provider.enforcement().unwrap(),
            Err(reason) => {
                eprintln!("skipped: {backend:?} backend unusable here: {reason}");
                return None;
            }
        };
        let (manager, spill) = common::manager();
        let workspace = outside_tmp();
        let config = BashConfig {
            cwd: Some(workspace.path().into()),
            timeout_ms: 30_000,
            ..common::config()
        };
        let policy = SandboxPolicy {
            mode,
            workspace_root: canonical(workspace.path()),
        };
        let resolver = SandboxBashExecutor::resolver(&config, policy.clone());
        let executor =
            SandboxBashExecutor::new(config, manager.clone(), Arc::new(provider), policy)
                .unwrap()
                .start();
        Some(Self {
            manager,
            executor,
            resolver,
            enforcement,
            workspace,
            _spill: spill,
        })
    }

    /// Under Landlock with the network allowed; `None` as [`Setup::new`].
    fn landlock(mode: SandboxMode) -> Option<Self> {
        Self::new(BackendChoice::Landlock, mode, NetworkPolicy::Allow)
    }

    fn w(&self) -> PathBuf {
        canonical(self.workspace.path())
    }

    async fn run(&self, request: BashExecRequest) -> BashRunResult {
        let spec = (self.resolver)(request).unwrap();
        common::run(&self.executor, spec).await.unwrap()
    }

    async fn start(&self, request: BashExecRequest) -> BashProcess {
        let spec = (self.resolver)(request).unwrap();
        self.executor.send(Start(spec)).await.unwrap().unwrap()
    }

    fn facts(&self, mode: SandboxMode, denied: bool) -> Option<SandboxFacts> {
        Some(SandboxFacts {
            mode,
            denied,
            enforcement: Some(self.enforcement),
            runner_failed: false,
        })
    }

    async fn shutdown(&self) {
        common::shutdown(&self.manager).await;
    }
}

fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap()
}

/// A request to write `hi` to `path`.
fn echo_into(path: &Path) -> BashExecRequest {
    BashExecRequest::new(format!("echo hi > {}", path.display()))
}

/// Asserts that `result` was denied under `mode`, classified as a denial, and wrote no `target`.
fn assert_denied(s: &Setup, result: &BashRunResult, mode: SandboxMode, target: &Path) {
    assert_ne!(result.exit_code, Some(0));
    assert_eq!(result.sandbox, s.facts(mode, true));
    assert!(!target.exists());
}

fn in_mode(command: String, mode: SandboxMode, root: &Path) -> BashExecRequest {
    BashExecRequest {
        sandbox_policy: Some(SandboxPolicy {
            mode,
            workspace_root: root.to_path_buf(),
        }),
        ..BashExecRequest::new(command)
    }
}

/// Catalogue: E2E-x-1.
async fn read_only_denies_a_write(backend: BackendChoice) {
    let Some(s) = Setup::new(backend, SandboxMode::ReadOnly, NetworkPolicy::Allow) else {
        return;
    };
    let target = s.w().join("denied.txt");
    let result = s.run(echo_into(&target)).await;
    assert_denied(&s, &result, SandboxMode::ReadOnly, &target);
    s.shutdown().await;
}

/// Catalogue: E2E-x-2.
async fn workspace_write_inside_vs_beside_root(backend: BackendChoice) {
    let Some(s) = Setup::new(backend, SandboxMode::WorkspaceWrite, NetworkPolicy::Allow) else {
        return;
    };
    let name = format!("{backend:?}").to_lowercase();
    let allowed = s.w().join("allowed.txt");
    let result = s
        .run(BashExecRequest::new(format!(
            "printf {name}-ok > {}",
            allowed.display()
        )))
        .await;
    assert_eq!(result.exit_code, Some(0), "{:?}", result.stderr.text);
    assert_eq!(result.sandbox, s.facts(SandboxMode::WorkspaceWrite, false));
    assert_eq!(
        std::fs::read_to_string(&allowed).unwrap(),
        format!("{name}-ok")
    );
    let out = outside_tmp();
    let denied = canonical(out.path()).join("denied.txt");
    let result = s.run(echo_into(&denied)).await;
    assert_denied(&s, &result, SandboxMode::WorkspaceWrite, &denied);
    // /tmp is a temp area under workspace-write (bubblewrap's is a private tmpfs).
    let result = s
        .run(BashExecRequest::new(
            "f=$(mktemp /tmp/dsh-ws-XXXXXX) && echo x > \"$f\" && rm \"$f\"".to_owned(),
        ))
        .await;
    assert_eq!(result.exit_code, Some(0), "{:?}", result.stderr.text);
    s.shutdown().await;
}

/// Catalogue: E2E-x-3.
async fn background_denial_classified_at_settlement(backend: BackendChoice) {
    let Some(s) = Setup::new(backend, SandboxMode::ReadOnly, NetworkPolicy::Allow) else {
        return;
    };
    let target = s.w().join("bg-denied.txt");
    let handle = s.start(echo_into(&target)).await;
    tokio::time::timeout(SOON, handle.done()).await.unwrap();
    assert_eq!(handle.sandbox(), s.facts(SandboxMode::ReadOnly, true));
    assert!(!target.exists(), "the denied write left a file");
    s.shutdown().await;
}

/// Catalogue: E2E-x-4.
async fn approved_escalated_retry(backend: BackendChoice) {
    let Some(s) = Setup::new(backend, SandboxMode::ReadOnly, NetworkPolicy::Allow) else {
        return;
    };
    let target = s.w().join("escalated.txt");
    let command = format!("printf escalated > {}", target.display());
    let result = s.run(BashExecRequest::new(command.clone())).await;
    assert_denied(&s, &result, SandboxMode::ReadOnly, &target);
    let result = s
        .run(in_mode(command, SandboxMode::WorkspaceWrite, &s.w()))
        .await;
    assert_eq!(result.exit_code, Some(0));
    assert_eq!(result.sandbox, s.facts(SandboxMode::WorkspaceWrite, false));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "escalated");
    s.shutdown().await;
}

/// A confined command's grandchild that left the group and the session still dies with the task.
/// Found by a unique `sleep` argument in `/proc/*/cmdline`: under bubblewrap `$!` is a pid of the
/// sandbox's own pid namespace, not the host's.
async fn escaped_grandchild_dies_with_the_task(backend: BackendChoice) {
    let Some(s) = Setup::new(backend, SandboxMode::ReadOnly, NetworkPolicy::Allow) else {
        return;
    };
    let marker = format!("300.{}{}", std::process::id(), backend as u8);
    let request = BashExecRequest {
        timeout_ms: Some(1_000.0),
        ..BashExecRequest::new(format!(
            "setsid sleep {marker} </dev/null >/dev/null 2>&1 & echo started; sleep 300"
        ))
    };
    let result = s.run(request).await;
    assert_eq!(result.ending, RunEnding::TimedOut);
    assert_eq!(result.stdout.text, "started\n");
    assert!(
        poll_until(SOON, || live_with_cmdline(&marker).is_empty()).await,
        "the escaped grandchild {marker} outlived its confined task"
    );
    s.shutdown().await;
}

/// A workspace deleted and made again at the same path is a new directory: the cached ruleset of
/// the old one would deny every write in it (a recreated worktree, a client's roots A → B → A).
#[actix_rt::test]
async fn landlock_a_recreated_workspace_is_writable_again() {
    let Some(s) = Setup::landlock(SandboxMode::WorkspaceWrite) else {
        return;
    };
    let root = s.w().join("worktree");
    std::fs::create_dir(&root).unwrap();
    let write = |name: &str| {
        in_mode(
            format!("echo x > {}", root.join(name).display()),
            SandboxMode::WorkspaceWrite,
            &root,
        )
    };
    let first = s.run(write("before")).await;
    assert_eq!(first.exit_code, Some(0), "{:?}", first.stderr.text);
    std::fs::remove_dir_all(&root).unwrap();
    std::fs::create_dir(&root).unwrap();
    let again = s.run(write("after")).await;
    assert_eq!(again.exit_code, Some(0), "{:?}", again.stderr.text);
    assert_eq!(again.sandbox, s.facts(SandboxMode::WorkspaceWrite, false));
    assert!(root.join("after").exists());
    s.shutdown().await;
}

/// A workspace under `/tmp` has a parent a process of the user's (or, without a mount namespace, a
/// confined command) can change: it swaps the root for a symbolic link to a directory it may not
/// write. The next confined command is refused (fail closed) instead of being granted writes
/// through the link.
async fn a_root_swapped_for_a_link_fails_closed(backend: BackendChoice) {
    let Some(s) = Setup::new(backend, SandboxMode::WorkspaceWrite, NetworkPolicy::Allow) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let root = canonical(tmp.path()).join("ws");
    std::fs::create_dir(&root).unwrap();
    let target = s.w().join("pwned");
    let request = |command: String| in_mode(command, SandboxMode::WorkspaceWrite, &root);
    let swap = format!(
        "mv {root} {root}.away && ln -s {w} {root}",
        root = root.display(),
        w = s.w().display()
    );
    let swapped = s.run(request(swap)).await;
    // Under bubblewrap, and under Landlock in its mount namespace, the root is a mount point the
    // command cannot move; Landlock without a namespace grants the host's /tmp, so the command
    // itself can. Either way the swap happens (from outside when the command could not).
    if swapped.exit_code != Some(0) {
        std::fs::rename(&root, root.with_extension("away")).unwrap();
        std::os::unix::fs::symlink(s.w(), &root).unwrap();
    }
    assert!(root.is_symlink());
    let spec = (s.resolver)(request(format!("touch {}", target.display()))).unwrap();
    let refused = s.executor.send(Run(spec)).await.unwrap();
    match refused {
        Err(ExecError::SandboxUnavailable(text)) => {
            assert_eq!(
                text,
                format!(
                    "the workspace {root} was replaced by a symbolic link (it now resolves to {w}), \
                     so writes through it are refused; restore the directory, or give a new \
                     workspace (--cwd DIR, or the client's root)",
                    root = root.display(),
                    w = s.w().display()
                )
            )
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(!target.exists());
    s.shutdown().await;
}

/// A `workspace-write` root that would not confine anything — `/`, or a directory that is not there —
/// fails closed instead of running.
async fn a_root_that_cannot_confine_fails_closed(backend: BackendChoice) {
    let Some(s) = Setup::new(backend, SandboxMode::WorkspaceWrite, NetworkPolicy::Allow) else {
        return;
    };
    let target = s.w().join("written");
    let missing = s.w().join("missing");
    for (root, expected) in [
        (
            PathBuf::from("/"),
            "no usable workspace: the server runs in /; pass --cwd DIR or let the client offer a root"
                .to_owned(),
        ),
        (
            missing.clone(),
            format!(
                "the workspace {} cannot be used (No such file or directory",
                missing.display()
            ),
        ),
    ] {
        let request = in_mode(
            format!("touch {}", target.display()),
            SandboxMode::WorkspaceWrite,
            &root,
        );
        let spec = (s.resolver)(request).unwrap();
        match s.executor.send(Run(spec)).await.unwrap() {
            Err(ExecError::SandboxUnavailable(text)) => {
                assert!(text.starts_with(&expected), "{text}")
            }
            other => panic!("expected a refusal for {}, got {other:?}", root.display()),
        }
        assert!(!target.exists());
    }
    s.shutdown().await;
}

/// `--network deny`: no TCP connect, loopback included; with `allow` the same connect works.
async fn network_deny_blocks_loopback(backend: BackendChoice) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");
    let Some(s) = Setup::new(backend, SandboxMode::ReadOnly, NetworkPolicy::Deny) else {
        return;
    };
    let result = s.run(BashExecRequest::new(connect.clone())).await;
    assert_ne!(result.exit_code, Some(0), "{}", result.stdout.text);
    assert!(!result.stdout.text.contains("connected"));
    s.shutdown().await;
    let allowed = Setup::new(backend, SandboxMode::ReadOnly, NetworkPolicy::Allow).unwrap();
    let result = allowed.run(BashExecRequest::new(connect)).await;
    assert_eq!(result.stdout.text, "connected\n", "{}", result.stderr.text);
    allowed.shutdown().await;
}

#[actix_rt::test]
async fn landlock_signal_scope_refuses_signals_to_the_runtime() {
    let Some(s) = Setup::landlock(SandboxMode::ReadOnly) else {
        return;
    };
    let abi = dsh_contain_abi();
    if abi < 6 {
        eprintln!("skipped: Landlock ABI {abi} has no signal scoping (needs 6)");
        s.shutdown().await;
        return;
    }
    let me = std::process::id();
    let result = s
        .run(BashExecRequest::new(format!(
            "kill -0 {me} && echo reachable; kill -0 $$ && echo self-ok"
        )))
        .await;
    assert!(
        result.stderr.text.contains("Operation not permitted"),
        "{result:?}"
    );
    assert_eq!(result.stdout.text, "self-ok\n");
    s.shutdown().await;
}

fn dsh_contain_abi() -> u32 {
    match LocalSandboxProvider::new(LocalSandboxConfig::default())
        .unwrap()
        .verdict()
    {
        Ok(Backend::Landlock { abi }) => *abi,
        _ => 0,
    }
}

/// A sandbox executor over a provider built from `config` (no verdict check).
fn runner_setup(
    config: LocalSandboxConfig,
) -> (
    Addr<ProcessManager>,
    Addr<SandboxBashExecutor>,
    Resolver,
    tempfile::TempDir,
) {
    let (manager, spill) = common::manager();
    let config_bash = common::config();
    let policy = SandboxPolicy {
        mode: SandboxMode::ReadOnly,
        workspace_root: canonical(&std::env::current_dir().unwrap()),
    };
    let provider = LocalSandboxProvider::new(config).unwrap();
    let resolver = SandboxBashExecutor::resolver(&config_bash, policy.clone());
    let executor =
        SandboxBashExecutor::new(config_bash, manager.clone(), Arc::new(provider), policy)
            .unwrap()
            .start();
    (manager, executor, resolver, spill)
}

#[actix_rt::test]
async fn a_runner_command_is_used_as_given_and_its_failures_fail_closed() {
    // A missing runner: the outer shell's `exec` fails, which is a runner failure, not a denial.
    let (manager, executor, resolver, _spill) = runner_setup(LocalSandboxConfig {
        runner_command: vec!["/opt/dsh-test/missing-runner".into()],
        runner_failure_signatures: vec!["missing-runner: ".into()],
        ..LocalSandboxConfig::default()
    });
    let spec = resolver(BashExecRequest::new("echo never")).unwrap();
    let err = executor.send(Run(spec)).await.unwrap().unwrap_err();
    assert_eq!(err.code(), Some("SANDBOX_UNAVAILABLE"));
    let text = err.to_string();
    assert!(
        text.contains(" Runner failure: ") && text.contains("/opt/dsh-test/missing-runner"),
        "{text}"
    );
    let spec = resolver(BashExecRequest::new("echo never")).unwrap();
    let handle = executor.send(Start(spec)).await.unwrap().unwrap();
    tokio::time::timeout(SOON, handle.done()).await.unwrap();
    let facts = handle.sandbox().unwrap();
    assert!(facts.runner_failed && !facts.denied, "{facts:?}");
    manager.send(Shutdown).await.unwrap();

    // bubblewrap named as the operator's runner: the seeds' profile follows it.
    let Some(bwrap) = dsh_bash::sandbox::local::find_on_path("bwrap") else {
        eprintln!("skipped the working-runner half: bwrap is not on PATH");
        return;
    };
    let (manager, executor, resolver, _spill) = runner_setup(LocalSandboxConfig {
        runner_command: vec![bwrap.display().to_string()],
        runner_failure_signatures: vec!["bwrap: ".into()],
        ..LocalSandboxConfig::default()
    });
    let target = outside_tmp();
    let spec = resolver(BashExecRequest::new(format!(
        "echo hi > {}/denied.txt",
        target.path().display()
    )))
    .unwrap();
    let result = executor.send(Run(spec)).await.unwrap().unwrap();
    let facts = result.sandbox.unwrap();
    if !facts.denied {
        eprintln!(
            "bwrap as a runner did not confine here: {:?}",
            result.stderr.text
        );
    }
    assert!(facts.denied, "{:?}", result.stderr.text);
    assert!(!target.path().join("denied.txt").exists());
    manager.send(Shutdown).await.unwrap();
}

/// One test per backend for each case above: `sandbox_backends::landlock::<case>` and
/// `sandbox_backends::bwrap::<case>` (each skips, saying why, where its backend is unusable).
macro_rules! under_each_backend {
    ($($case:ident),* $(,)?) => {
        mod landlock {
            $(#[actix_rt::test]
            async fn $case() {
                super::$case(super::BackendChoice::Landlock).await;
            })*
        }
        mod bwrap {
            $(#[actix_rt::test]
            async fn $case() {
                super::$case(super::BackendChoice::Bwrap).await;
            })*
        }
    };
}

under_each_backend!(
    read_only_denies_a_write,
    workspace_write_inside_vs_beside_root,
    background_denial_classified_at_settlement,
    approved_escalated_retry,
    escaped_grandchild_dies_with_the_task,
    a_root_that_cannot_confine_fails_closed,
    a_root_swapped_for_a_link_fails_closed,
    network_deny_blocks_loopback,
);
