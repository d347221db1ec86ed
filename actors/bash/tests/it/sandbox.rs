//! The SB-* cases (seed §2.6): the sandbox executor with a recording fake provider. Real backends
//! are in `sandbox_landlock.rs` and `sandbox_bwrap.rs`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::common;
use actix::prelude::*;
use dsh_bash::Enforcement::{Full, Partial};
use dsh_bash::SandboxMode::{DangerFullAccess, ReadOnly, WorkspaceWrite};
use dsh_bash::sandbox::{Wrap, WrapFacts, canonical_root};
use dsh_bash::*;
use dsh_test_support::SOON;
use dsh_test_support::wait::poll_until;

/// What the fake wraps with: an argv prefix, an enforcement and signatures.
#[derive(Clone)]
struct FakeWrap {
    prefix: Vec<String>,
    enforcement: Enforcement,
    denial: Vec<String>,
    runner: Vec<String>,
}

impl Default for FakeWrap {
    fn default() -> Self {
        Self {
            prefix: Vec::new(),
            enforcement: Full,
            denial: vec!["read-only file system".into(), "permission denied".into()],
            runner: vec!["fake-runner: ".into()],
        }
    }
}

/// Records every call; wraps with the next queued wrap (else the default); fails when told to.
#[derive(Default)]
struct FakeProvider {
    calls: Mutex<Vec<(Vec<String>, SandboxPolicy)>>,
    queued: Mutex<Vec<FakeWrap>>,
    unavailable: bool,
}

impl SandboxProvider for FakeProvider {
    fn confine(
        &self,
        argv: &[String],
        policy: &SandboxPolicy,
        _session: Option<&str>,
    ) -> Result<Wrap, ExecError> {
        self.calls
            .lock()
            .unwrap()
            .push((argv.to_vec(), policy.clone()));
        if self.unavailable {
            return Err(ExecError::SandboxUnavailable(sandbox_unavailable_text(
                policy.mode,
                None,
            )));
        }
        let wrap = {
            let mut queued = self.queued.lock().unwrap();
            if queued.is_empty() {
                FakeWrap::default()
            } else {
                queued.remove(0)
            }
        };
        let mut wrapped = wrap.prefix.clone();
        wrapped.extend(argv.iter().cloned());
        Ok(Wrap {
            argv: wrapped,
            env: Vec::new(),
            confinement: None,
            facts: WrapFacts {
                mode: policy.mode,
                enforcement: wrap.enforcement,
                denial_signatures: wrap.denial,
                runner_failure_signatures: wrap.runner,
            },
        })
    }
}

impl FakeProvider {
    fn calls(&self) -> Vec<(Vec<String>, SandboxPolicy)> {
        self.calls.lock().unwrap().clone()
    }
}

/// The read-only policy with the test's directory as the workspace.
fn read_only_here() -> SandboxPolicy {
    SandboxPolicy {
        mode: ReadOnly,
        workspace_root: cwd(),
    }
}

fn cwd() -> PathBuf {
    canonical_root(&std::env::current_dir().unwrap())
}

/// A sandboxing executor under test, with the provider it confines through.
struct Setup {
    harness: common::Harness<SandboxBashExecutor>,
    provider: Arc<FakeProvider>,
}

impl std::ops::Deref for Setup {
    type Target = common::Harness<SandboxBashExecutor>;

    fn deref(&self) -> &Self::Target {
        &self.harness
    }
}

impl Setup {
    fn new(mode: SandboxMode, root: Option<&Path>, provider: FakeProvider) -> Self {
        let manager = common::manager();
        let config = common::config();
        let policy = SandboxPolicy {
            mode,
            workspace_root: root.map_or_else(cwd, Path::to_path_buf),
        };
        let provider = Arc::new(provider);
        let resolver = SandboxBashExecutor::resolver(&config, policy.clone());
        let executor =
            SandboxBashExecutor::new(config, manager.0.clone(), provider.clone(), policy)
                .unwrap()
                .start();
        Self {
            harness: common::Harness::assemble(manager, executor, resolver),
            provider,
        }
    }

    fn read_only() -> Self {
        Self::new(ReadOnly, None, FakeProvider::default())
    }

    /// Starts `command` in the background under a per-call `mode` rooted at the cwd.
    async fn begin_under(&self, command: &str, mode: SandboxMode) -> BashProcess {
        self.start(with_policy(command, mode, &cwd()))
            .await
            .unwrap()
    }

    /// Runs `command` under a per-call `mode` rooted at the cwd.
    async fn run_under(&self, command: &str, mode: SandboxMode) -> BashRunResult {
        self.run(with_policy(command, mode, &cwd())).await.unwrap()
    }

    /// Starts `command` under the default policy in the background.
    async fn begin(&self, command: &str) -> BashProcess {
        self.start(BashExecRequest::new(command)).await.unwrap()
    }

    async fn start(&self, request: BashExecRequest) -> Result<BashProcess, ExecError> {
        self.try_start(request).await
    }
}

fn facts(mode: SandboxMode, denied: bool, enforcement: Option<Enforcement>) -> SandboxFacts {
    SandboxFacts {
        mode,
        denied,
        enforcement,
        runner_failed: false,
    }
}

fn with_policy(command: &str, mode: SandboxMode, root: &Path) -> BashExecRequest {
    BashExecRequest {
        sandbox_policy: Some(SandboxPolicy {
            mode,
            workspace_root: root.to_path_buf(),
        }),
        ..BashExecRequest::new(command)
    }
}

async fn settled(handle: &BashProcess) -> Option<SandboxFacts> {
    tokio::time::timeout(SOON, handle.done()).await.unwrap();
    handle.sandbox()
}

/// Asserts that `handle` settles with `facts`.
async fn assert_settled(handle: &BashProcess, facts: SandboxFacts) {
    assert_eq!(settled(handle).await, Some(facts));
}

/// Asserts that `result`, of `echo free`, ran unconfined without asking the provider.
fn assert_ran_unwrapped(s: &Setup, result: &BashRunResult) {
    assert_eq!(result.stdout.text, "free\n");
    assert_eq!(result.sandbox, Some(facts(DangerFullAccess, false, None)));
    assert!(s.provider.calls().is_empty());
}

/// Asserts that `handle`, a background `echo <printed>`, ran unconfined without asking the provider:
/// it settles with no facts, and its output reads through.
async fn assert_started_unwrapped(s: &Setup, handle: &BashProcess, printed: &str) {
    assert_eq!(settled(handle).await, None);
    assert!(read_all(handle).contains(printed));
    assert!(s.provider.calls().is_empty());
}

fn read_all(handle: &BashProcess) -> String {
    handle.read_output().delta
}

/// Catalogue: SB-01.
#[actix_rt::test]
async fn exact_argv_and_per_call_policy() {
    let s = Setup::read_only();
    let command = r#"echo 'a b' "c'd""#;
    let result = s.run(BashExecRequest::new(command)).await.unwrap();
    assert_eq!(result.stdout.text, "a b c'd\n");
    assert_eq!(result.sandbox, Some(facts(ReadOnly, false, Some(Full))));
    let calls = s.provider.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].0, vec!["bash", "-c", command]);
    assert_eq!(calls[0].1, read_only_here());
    s.shutdown().await;
}

/// Catalogue: SB-02.
#[actix_rt::test]
async fn the_wrapped_argv_is_what_spawns() {
    let provider = FakeProvider::default();
    provider.queued.lock().unwrap().push(FakeWrap {
        prefix: vec!["env".into(), "DSH_WRAP_X=1".into()],
        ..FakeWrap::default()
    });
    let s = Setup::new(ReadOnly, None, provider);
    let result = s
        .run(BashExecRequest::new(r#"printf "%s" "$DSH_WRAP_X""#))
        .await
        .unwrap();
    assert_eq!(result.stdout.text, "1");
    assert_eq!(result.sandbox, Some(facts(ReadOnly, false, Some(Full))));
    s.shutdown().await;
}

/// Catalogue: SB-03.
#[actix_rt::test]
async fn workspace_write_root_defaults_to_cwd() {
    let s = Setup::new(WorkspaceWrite, None, FakeProvider::default());
    let result = s.run(BashExecRequest::new("true")).await.unwrap();
    assert_eq!(
        result.sandbox,
        Some(facts(WorkspaceWrite, false, Some(Full)))
    );
    assert_eq!(s.provider.calls()[0].1.workspace_root, cwd());
    s.shutdown().await;
}

/// Catalogue: SB-04.
#[actix_rt::test]
async fn configured_workspace_root_wins() {
    let s = Setup::new(
        WorkspaceWrite,
        Some(Path::new("/ws")),
        FakeProvider::default(),
    );
    let request = BashExecRequest {
        workdir: Some(std::env::temp_dir()),
        ..BashExecRequest::new("true")
    };
    s.run(request).await.unwrap();
    assert_eq!(s.provider.calls()[0].1.workspace_root, Path::new("/ws"));
    s.shutdown().await;
}

/// Catalogue: SB-05.
#[actix_rt::test]
async fn provider_is_consulted_per_wrap() {
    let s = Setup::read_only();
    s.run(BashExecRequest::new("true")).await.unwrap();
    let handle = s.begin("true").await;
    settled(&handle).await;
    assert_eq!(s.provider.calls().len(), 2);
    s.shutdown().await;
}

/// Catalogue: SB-07.
#[actix_rt::test]
async fn sandbox_unavailable_propagates() {
    let s = Setup::new(
        ReadOnly,
        None,
        FakeProvider {
            unavailable: true,
            ..FakeProvider::default()
        },
    );
    let err = s.run(BashExecRequest::new("true")).await.unwrap_err();
    assert_eq!(err.code(), Some("SANDBOX_UNAVAILABLE"));
    assert!(matches!(err, ExecError::SandboxUnavailable(_)));
    assert_eq!(
        err.to_string(),
        "sandbox mode \"read-only\" is requested but no sandbox backend is usable on this host; \
         refusing to run the command unconfined. Install bubblewrap or run a Landlock-enforcing \
         kernel (Linux), ensure sandbox-exec is usable (macOS) — Windows has no confinement backend \
         yet — or switch the consumer to danger-full-access."
    );
    let err = s.start(BashExecRequest::new("true")).await.unwrap_err();
    assert_eq!(err.code(), Some("SANDBOX_UNAVAILABLE"));
    s.shutdown().await;
}

/// Catalogue: SB-08.
#[actix_rt::test]
async fn danger_full_access_runs_unwrapped() {
    let s = Setup::new(DangerFullAccess, None, FakeProvider::default());
    let result = s.run(BashExecRequest::new("echo free")).await.unwrap();
    assert_ran_unwrapped(&s, &result);
    s.shutdown().await;
}

/// Catalogue: SB-09.
#[actix_rt::test]
async fn danger_full_access_starts_unwrapped_without_facts() {
    let s = Setup::new(DangerFullAccess, None, FakeProvider::default());
    let handle = s.begin("echo free-bg").await;
    assert_started_unwrapped(&s, &handle, "free-bg").await;
    s.shutdown().await;
}

/// Catalogue: SB-10.
#[actix_rt::test]
async fn capability_fact_and_resolve_stamp() {
    let s = Setup::read_only();
    let policy = read_only_here();
    let executor = SandboxBashExecutor::new(
        BashConfig::default(),
        s.manager.clone(),
        s.provider.clone(),
        policy.clone(),
    )
    .unwrap();
    assert_eq!(executor.sandbox_mode(), ReadOnly);
    let spec = (s.resolver)(BashExecRequest::new("true")).unwrap();
    assert_eq!(spec.sandbox_policy, Some(policy));
    s.shutdown().await;
}

/// Catalogue: SB-11.
#[actix_rt::test]
async fn explicit_policy_outranks_the_default() {
    let s = Setup::read_only();
    let project = Path::new("/session/project");
    let explicit = with_policy("true", WorkspaceWrite, project);
    let spec = (s.resolver)(explicit.clone()).unwrap();
    assert_eq!(
        spec.sandbox_policy.as_ref().unwrap().workspace_root,
        project
    );
    s.run(explicit).await.unwrap();
    s.run(BashExecRequest::new("true")).await.unwrap();
    let policies: Vec<SandboxPolicy> = s.provider.calls().into_iter().map(|c| c.1).collect();
    assert_eq!(
        policies,
        vec![
            SandboxPolicy {
                mode: WorkspaceWrite,
                workspace_root: project.into()
            },
            read_only_here(),
        ]
    );
    s.shutdown().await;
}

/// Catalogue: SB-12.
#[actix_rt::test]
async fn an_escalated_run_reports_its_actual_mode() {
    let s = Setup::read_only();
    let result = s.run_under("true", WorkspaceWrite).await;
    assert_eq!(
        result.sandbox,
        Some(facts(WorkspaceWrite, false, Some(Full)))
    );
    s.shutdown().await;
}

/// Catalogue: SB-13.
#[actix_rt::test]
async fn escalation_to_danger_bypasses_the_provider() {
    let s = Setup::read_only();
    let result = s.run_under("echo free", DangerFullAccess).await;
    assert_ran_unwrapped(&s, &result);
    s.shutdown().await;
}

/// Catalogue: SB-14.
#[actix_rt::test]
async fn overlapping_tasks_keep_their_own_modes() {
    let s = Setup::read_only();
    let escalated = s
        .begin_under(
            r#"sleep 0.3; echo "x: Permission denied" >&2; exit 1"#,
            WorkspaceWrite,
        )
        .await;
    let plain = s.begin("true").await;
    assert_settled(&plain, facts(ReadOnly, false, Some(Full))).await;
    assert_settled(&escalated, facts(WorkspaceWrite, true, Some(Full))).await;
    s.shutdown().await;
}

/// Catalogue: SB-15.
#[actix_rt::test]
async fn escalated_danger_background_has_no_facts() {
    let s = Setup::read_only();
    let handle = s.begin_under("echo bg-free", DangerFullAccess).await;
    assert_started_unwrapped(&s, &handle, "bg-free").await;
    s.shutdown().await;
}

/// Catalogue: SB-20.
#[actix_rt::test]
async fn a_real_permission_failure_is_reported_as_a_denial() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o555)).unwrap();
    let write = format!("echo x > {}/f", dir.path().display());
    // Root ignores directory modes: there the write is made as `nobody` (util-linux's setpriv, in
    // every Debian), so the kernel's own EACCES is what the command reports.
    let command = if std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
    {
        if std::process::Command::new("setpriv")
            .arg("--version")
            .output()
            .is_err()
        {
            eprintln!(
                "sb_20 skipped: running as root without util-linux's setpriv to drop to nobody"
            );
            return;
        }
        format!("setpriv --reuid=65534 --regid=65534 --clear-groups bash -c '{write}'")
    } else {
        write
    };
    let s = Setup::read_only();
    let result = s.run(BashExecRequest::new(command)).await.unwrap();
    assert!(
        result.stderr.text.contains("Permission denied"),
        "{result:?}"
    );
    assert_ne!(result.exit_code, Some(0));
    assert_eq!(result.sandbox, Some(facts(ReadOnly, true, Some(Full))));
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    s.shutdown().await;
}

/// Catalogue: SB-21.
#[actix_rt::test]
async fn partial_enforcement_passes_through() {
    let provider = FakeProvider::default();
    provider.queued.lock().unwrap().push(FakeWrap {
        enforcement: Partial,
        ..FakeWrap::default()
    });
    let s = Setup::new(ReadOnly, None, provider);
    let result = s.run(BashExecRequest::new("true")).await.unwrap();
    assert_eq!(result.sandbox, Some(facts(ReadOnly, false, Some(Partial))));
    s.shutdown().await;
}

/// Catalogue: SB-22.
#[actix_rt::test]
async fn a_spawn_failure_stamps_facts() {
    let s = Setup::read_only();
    let request = BashExecRequest {
        workdir: Some("/nonexistent-dsh-sandbox".into()),
        ..BashExecRequest::new("true")
    };
    let handle = s.start(request).await.unwrap();
    assert_eq!(handle.status(), TaskStatus::Killed { signal: None });
    assert!(read_all(&handle).contains("spawn failed:"));
    // Facts live on the handle itself (there is no shared per-process map to leak).
    assert_eq!(handle.sandbox(), Some(facts(ReadOnly, false, Some(Full))));
    s.shutdown().await;
}

/// Catalogue: SB-23.
#[actix_rt::test]
async fn a_background_denial_is_stamped_at_settlement() {
    let s = Setup::read_only();
    let handle = s.begin(r#"echo "x: Permission denied" >&2; exit 1"#).await;
    assert_settled(&handle, facts(ReadOnly, true, Some(Full))).await;
    s.shutdown().await;
}

/// Catalogue: SB-24.
#[actix_rt::test]
async fn a_foreground_runner_failure_is_an_error() {
    let s = Setup::read_only();
    let err = s
        .run(BashExecRequest::new(
            r#"echo "fake-runner: ruleset rejected" >&2; exit 125"#,
        ))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("SANDBOX_UNAVAILABLE"));
    assert!(
        err.to_string()
            .ends_with(" Runner failure: fake-runner: ruleset rejected"),
        "{err}"
    );
    s.shutdown().await;
}

const RUNNER_AND_DENIAL: &str =
    r#"echo "fake-runner: cannot open rule path: /x: Permission denied" >&2; exit 125"#;

/// Catalogue: SB-25.
#[actix_rt::test]
async fn runner_failure_outranks_denial_in_the_foreground() {
    let s = Setup::read_only();
    let err = s
        .run(BashExecRequest::new(RUNNER_AND_DENIAL))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("SANDBOX_UNAVAILABLE"));
    s.shutdown().await;
}

/// Catalogue: SB-26.
#[actix_rt::test]
async fn a_background_runner_failure_stamps_runner_failed() {
    let s = Setup::read_only();
    let handle = s.begin(RUNNER_AND_DENIAL).await;
    assert_eq!(
        settled(&handle).await,
        Some(SandboxFacts {
            mode: ReadOnly,
            denied: false,
            enforcement: Some(Full),
            runner_failed: true,
        })
    );
    s.shutdown().await;
}

/// Catalogue: SB-27.
#[actix_rt::test]
async fn overlapping_tasks_keep_their_own_wrap_facts() {
    let provider = FakeProvider::default();
    provider.queued.lock().unwrap().extend([
        FakeWrap {
            enforcement: Partial,
            denial: vec!["permission denied".into()],
            ..FakeWrap::default()
        },
        FakeWrap {
            enforcement: Full,
            denial: vec!["read-only file system".into()],
            ..FakeWrap::default()
        },
    ]);
    let s = Setup::new(ReadOnly, None, provider);
    let slow = s
        .begin(r#"sleep 0.4; echo "x: Permission denied" >&2; exit 1"#)
        .await;
    // A quick command settles while the slow one still runs.
    let quick = facts(ReadOnly, false, Some(Full));
    assert_settled(&s.begin("true").await, quick).await;
    assert_settled(&slow, facts(ReadOnly, true, Some(Partial))).await;
    s.shutdown().await;
}

/// Catalogue: SB-28.
#[actix_rt::test]
async fn a_signal_death_is_never_a_denial() {
    let s = Setup::read_only();
    let handle = s.begin(r#"echo "Permission denied" >&2; sleep 30"#).await;
    let mut seen = String::new();
    assert!(
        poll_until(SOON, || {
            seen.push_str(&read_all(&handle));
            seen.contains("Permission denied")
        })
        .await
    );
    assert!(handle.kill());
    assert_settled(&handle, facts(ReadOnly, false, Some(Full))).await;
    s.shutdown().await;
}

/// Catalogue: SB-29.
#[actix_rt::test]
async fn disposal_kills_wrapped_tasks() {
    let s = Setup::read_only();
    let handle = s.begin("sleep 30").await;
    let pid = handle.pid().unwrap();
    s.shutdown().await;
    let status = tokio::time::timeout(SOON, handle.done()).await.unwrap();
    assert!(matches!(status, TaskStatus::Killed { .. }), "{status:?}");
    assert!(
        poll_until(SOON, || !dsh_process::signal::pid_is_live(pid)).await,
        "pid {pid} survived disposal"
    );
}
