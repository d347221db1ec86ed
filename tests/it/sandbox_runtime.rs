//! The sandbox through the library facade: `RuntimeBuilder::sandbox`, per-session standing modes set by
//! a message to the runtime, an embedding agent approving an escalation as an actor, and the
//! unsandboxed runtime refusing to set a mode.

use std::path::Path;

use crate::common::{TestAgent, runtime, runtime_with, sandbox_usable};
use actix::prelude::*;
use dsh::{ApprovalOutcome, ApprovalRequest, LocalSandboxConfig, SandboxMode, ToolCall};
use dsh_test_support::actors::Answerer;
use dsh_test_support::procfs::{live_with_cmdline, threads_named};
use dsh_test_support::scratch::outside_tmp;
use dsh_test_support::wait::poll_until;
use serde_json::json;

fn workspace() -> tempfile::TempDir {
    outside_tmp("dsh-sandbox-rt-", Path::new(env!("CARGO_TARGET_TMPDIR")))
}

/// Grants every escalation, as an embedding agent would after asking its user.
fn grants() -> Recipient<ApprovalRequest> {
    Answerer::new(ApprovalOutcome::AllowedOnce)
        .start()
        .0
        .recipient()
}

#[actix_rt::test]
async fn session_modes_and_approved_escalations_through_the_runtime() {
    if !sandbox_usable() {
        return;
    }
    let ws = workspace();
    let (rt, _spill) = runtime_with(|b| {
        b.cwd(ws.path())
            .sandbox(SandboxMode::ReadOnly, LocalSandboxConfig::default())
    });
    assert_eq!(rt.sandbox_mode(), Some(SandboxMode::ReadOnly));
    let writer = TestAgent::new("writer");
    let reader = TestAgent::new("reader");
    rt.set_session_sandbox_mode("writer", Some(SandboxMode::WorkspaceWrite))
        .await
        .unwrap();
    let touch = |file: &str| json!({"command": format!("touch {file}"), "description": "t"});
    let written = rt
        .call(ToolCall::new("bash", touch("by-writer")).with_caller(writer.agent.clone()))
        .await;
    assert_eq!(written.text, "(no output)");
    let denied = rt
        .call(ToolCall::new("bash", touch("by-reader")).with_caller(reader.agent.clone()))
        .await;
    assert!(
        denied
            .text
            .contains("[sandbox: file access denied under read-only mode]"),
        "{}",
        denied.text
    );
    assert_eq!(
        denied.structured.as_ref().unwrap()["sandbox"]["denied"],
        true
    );
    let mut escalated = touch("by-reader");
    escalated["sandbox_permissions"] = json!("workspace-write");
    escalated["justification"] = json!("the test writes one file");
    let granted = rt
        .call(
            ToolCall::new("bash", escalated)
                .with_caller(reader.agent.clone())
                .with_approver(grants()),
        )
        .await;
    assert_eq!(granted.text, "(no output)");
    assert!(ws.path().join("by-writer").exists());
    assert!(ws.path().join("by-reader").exists());
    // Clearing the override returns the session to the default.
    rt.set_session_sandbox_mode("writer", None).await.unwrap();
    let again = rt
        .call(ToolCall::new("bash", touch("again")).with_caller(writer.agent.clone()))
        .await;
    assert!(
        again.text.contains("denied under read-only mode"),
        "{}",
        again.text
    );
    rt.shutdown().await;
}

/// A runtime confined read-only in a workspace of its own, where session `name` (its agent here)
/// stands at workspace-write in a workspace of its own, `root`.
struct WritingSession {
    rt: dsh::Runtime,
    agent: TestAgent,
    root: tempfile::TempDir,
    _runtime_ws: tempfile::TempDir,
    _spill: tempfile::TempDir,
}

impl WritingSession {
    /// Sets it up, or `None` (said why) where no sandbox backend works.
    async fn start(name: &str) -> Option<Self> {
        if !sandbox_usable() {
            return None;
        }
        let (runtime_ws, root) = (workspace(), workspace());
        let (rt, spill) = runtime_with(|b| {
            b.cwd(runtime_ws.path())
                .sandbox(SandboxMode::ReadOnly, LocalSandboxConfig::default())
        });
        rt.set_session_sandbox_mode(name, Some(SandboxMode::WorkspaceWrite))
            .await
            .unwrap();
        rt.set_session_workspace(name, Some(root.path().to_path_buf()))
            .await
            .unwrap();
        Some(Self {
            rt,
            agent: TestAgent::new(name),
            root,
            _runtime_ws: runtime_ws,
            _spill: spill,
        })
    }
}

/// A released session's standing mode and workspace go with it: a new session that reuses the id
/// starts from the runtime's defaults, not from what the old one was granted.
#[actix_rt::test]
async fn a_released_session_forgets_its_mode_and_workspace() {
    let Some(WritingSession {
        rt,
        agent,
        root,
        _runtime_ws,
        _spill,
    }) = WritingSession::start("reused").await
    else {
        return;
    };
    let target = root.path().join("granted");
    let touch = json!({"command": format!("touch {}", target.display()), "description": "t"});
    let written = rt
        .call(ToolCall::new("bash", touch.clone()).with_caller(agent.agent.clone()))
        .await;
    assert_eq!(written.text, "(no output)");
    std::fs::remove_file(&target).unwrap();
    rt.release_session("reused").await;
    let again = rt
        .call(ToolCall::new("bash", touch).with_caller(agent.agent.clone()))
        .await;
    assert!(
        again.text.contains("denied under read-only mode"),
        "{}",
        again.text
    );
    assert!(!target.exists());
    rt.shutdown().await;
}

/// The fail-closed text a model reads as "this host cannot sandbox".
const UNAVAILABLE: &str = "no sandbox backend is usable on this host";

/// A confined runtime under `limits`, or `None` (said why) where the host cannot give them.
fn limited(
    limits: dsh::TaskLimits,
    config: LocalSandboxConfig,
) -> Option<(dsh::Runtime, tempfile::TempDir, tempfile::TempDir)> {
    let ws = workspace();
    let spill = tempfile::tempdir().unwrap();
    let started = dsh::Runtime::builder()
        .cwd(ws.path())
        .timeout_ms(30_000)
        .grace_ms(200)
        .spill_dir(spill.path())
        .task_limits(limits)
        .sandbox(SandboxMode::WorkspaceWrite, config)
        .start_in_current_system();
    match started {
        Ok(rt) => Some((rt, ws, spill)),
        Err(err) => {
            eprintln!("skipped: {err}");
            None
        }
    }
}

/// A limit too small for the command to start is the command failing to start, never the sandbox
/// being unusable: at 1 byte the Landlock restriction itself fails with `ENOMEM` (the child joined
/// its memory cgroup first), which read as `SANDBOX_UNAVAILABLE`.
#[actix_rt::test]
async fn a_memory_limit_too_small_for_bash_is_a_spawn_failure_not_a_sandbox_error() {
    if !sandbox_usable() {
        return;
    }
    let limits = dsh::TaskLimits {
        max_pids: None,
        max_memory: Some(1),
    };
    let config = LocalSandboxConfig {
        backend: dsh::BackendChoice::Landlock,
        ..LocalSandboxConfig::default()
    };
    let Some((rt, _ws, _spill)) = limited(limits, config) else {
        return;
    };
    for background in [false, true] {
        let result = rt
            .call(ToolCall::new(
                "bash",
                json!({"command": "echo hi", "description": "t", "run_in_background": background}),
            ))
            .await;
        assert!(!result.text.contains(UNAVAILABLE), "{}", result.text);
        assert!(result.is_error, "{}", result.text);
        assert!(
            result
                .text
                .starts_with("Error: spawn \"bash\" failed: ENOMEM"),
            "{}",
            result.text
        );
    }
    rt.shutdown().await;
}

/// bubblewrap that cannot create its sandbox because the command's process limit leaves it no
/// process is the command's limit showing, not the sandbox failing: the result is shown as is.
#[actix_rt::test]
async fn a_runner_out_of_processes_is_a_result_not_a_sandbox_error() {
    let config = LocalSandboxConfig {
        backend: dsh::BackendChoice::Bwrap,
        ..LocalSandboxConfig::default()
    };
    if let Err(reason) = dsh::LocalSandboxProvider::new(config.clone())
        .unwrap()
        .verdict()
    {
        eprintln!("skipped: bubblewrap is not usable here: {reason}");
        return;
    }
    let limits = dsh::TaskLimits {
        max_pids: Some(1),
        max_memory: None,
    };
    let Some((rt, _ws, _spill)) = limited(limits, config) else {
        return;
    };
    let result = rt
        .call(ToolCall::new(
            "bash",
            json!({"command": "echo hi", "description": "t"}),
        ))
        .await;
    assert!(!result.text.contains(UNAVAILABLE), "{}", result.text);
    assert!(
        result.text.contains("Resource temporarily unavailable"),
        "{}",
        result.text
    );
    let sandbox = &result.structured.as_ref().unwrap()["sandbox"];
    assert_eq!(sandbox["mode"], "workspace-write", "{sandbox}");
    assert_ne!(sandbox["runner_failed"], json!(true), "{sandbox}");
    rt.shutdown().await;
}

#[actix_rt::test]
async fn an_unsandboxed_runtime_has_no_mode_to_set() {
    let (rt, _spill) = runtime();
    assert_eq!(rt.sandbox_mode(), None);
    assert!(
        rt.set_session_sandbox_mode("s", Some(SandboxMode::ReadOnly))
            .await
            .is_err()
    );
    let definitions = rt.tool_definitions();
    assert!(
        definitions[0].input_schema["properties"]
            .get("sandbox_permissions")
            .is_none()
    );
    rt.shutdown().await;
}

/// A task a host starts for a session (`start_supervised`) is confined as that session's own
/// commands are: its standing mode and its workspace root.
#[actix_rt::test]
async fn a_supervised_task_runs_under_its_owners_mode_and_workspace() {
    let Some(session) = WritingSession::start("owner").await else {
        return;
    };
    let (rt, owner) = (&session.rt, &session.agent);
    let target = session.root.path().join("by-supervised");
    let policy = dsh::RestartPolicy {
        restart: dsh::Restart::Never,
        ..dsh::RestartPolicy::default()
    };
    let id = rt
        .start_supervised(
            dsh::BashExecRequest::new(format!("touch '{}'", target.display())),
            policy,
            Some(owner.agent.clone()),
        )
        .await
        .unwrap();
    let read = rt
        .call(
            ToolCall::new(
                "bash_output",
                json!({"task_id": id, "wait": true, "timeout_ms": 30000}),
            )
            .with_caller(owner.agent.clone()),
        )
        .await;
    assert!(
        read.text.contains("[status: completed, exit code: 0]"),
        "{}",
        read.text
    );
    assert!(target.is_file());
    rt.shutdown().await;
}

/// A start that fails after the process manager was made (here a sandbox config the provider
/// refuses) leaves nothing behind: the manager's private spill directory is removed and the
/// runtime's thread ends. Before, the thread ran its actix system for as long as the process lived,
/// and the directory stayed in the temp directory.
#[test]
fn a_failed_start_leaves_no_spill_directory_and_no_thread() {
    // Sets TMPDIR and counts the process's threads: it needs its process to itself.
    dsh_test_support::own_process!(a_failed_start_leaves_no_spill_directory_and_no_thread);
    let temp = tempfile::tempdir().unwrap();
    // SAFETY: own_process! above: this test has its process to itself.
    unsafe { std::env::set_var("TMPDIR", temp.path()) };
    let refused = dsh::Runtime::builder()
        .sandbox(
            SandboxMode::WorkspaceWrite,
            LocalSandboxConfig {
                probe_timeout_ms: 0,
                ..LocalSandboxConfig::default()
            },
        )
        .start();
    let err = refused.err().expect("a config the provider refuses");
    assert!(err.to_string().contains("probeTimeoutMs"), "{err}");
    let runtime_threads = || threads_named("self", "dsh-runtime").len();
    let soon = std::time::Duration::from_secs(30);
    assert!(
        dsh_test_support::wait::wait_until(soon, || runtime_threads() == 0),
        "the runtime's thread still runs"
    );
    let left = || -> Vec<_> {
        std::fs::read_dir(temp.path())
            .unwrap()
            .flatten()
            .map(|entry| entry.file_name())
            .collect()
    };
    assert!(
        dsh_test_support::wait::wait_until(soon, || left().is_empty()),
        "left in the temp directory: {:?}",
        left()
    );
}

/// This process's confined spawning threads (`dsh-confined-spawn`; `comm` keeps 15 bytes).
fn confined_spawning_threads() -> usize {
    threads_named("self", "dsh-confined-sp").len()
}

/// Each session's commands have a temp of their own, and a released session's goes with it: the
/// next session of the same id finds it empty, while another session's temp is untouched. So does
/// its confined spawning thread (one per session that ran a command): the released one ends, the
/// other stays, and the next session of the same id gets a new one.
#[actix_rt::test]
async fn a_released_sessions_temp_goes_and_another_sessions_stays() {
    // Counts the process's threads: it needs its process to itself.
    dsh_test_support::own_process!(a_released_sessions_temp_goes_and_another_sessions_stays);
    if !sandbox_usable() {
        return;
    }
    let ws = workspace();
    let (rt, _spill) = runtime_with(|b| {
        b.cwd(ws.path())
            .sandbox(SandboxMode::WorkspaceWrite, LocalSandboxConfig::default())
    });
    let run = |agent: &TestAgent, command: &str| {
        rt.call(
            ToolCall::new("bash", json!({"command": command, "description": "t"}))
                .with_caller(agent.agent.clone()),
        )
    };
    let (a, b) = (TestAgent::new("released"), TestAgent::new("kept"));
    let write = |text: &str| format!("echo {text} > \"$TMPDIR/note\" && cat \"$TMPDIR/note\"");
    assert_eq!(run(&a, &write("a")).await.text, "a\n");
    assert_eq!(run(&b, &write("b")).await.text, "b\n");
    assert_eq!(
        run(&a, "cat \"$TMPDIR/note\"").await.text,
        "a\n",
        "one session's temp is its own"
    );
    assert_eq!(confined_spawning_threads(), 2, "one per session");
    rt.release_session("released").await;
    let soon = std::time::Duration::from_secs(30);
    assert!(
        dsh_test_support::wait::wait_until(soon, || confined_spawning_threads() == 1
            && threads_named("self", "dsh-spawner-end").is_empty()),
        "the released session's spawning thread still runs ({})",
        confined_spawning_threads()
    );
    let again = TestAgent::new("released");
    let gone = run(&again, "cat \"$TMPDIR/note\"").await.text;
    assert!(gone.contains("No such file"), "{gone}");
    assert_eq!(run(&b, "cat \"$TMPDIR/note\"").await.text, "b\n");
    assert_eq!(confined_spawning_threads(), 2);
    rt.shutdown().await;
}

/// A command's parent is the thread that cloned it, and the kernel sends the command its parent-death
/// signal when that thread exits. So a confined spawning thread whose entry is evicted (past 64
/// sessions, the least recently used goes) stops spawning at once (and is renamed
/// `dsh-spawner-end`) but lives on until the commands it cloned have ended: a background task that
/// asked for `SIGKILL` at its parent's death (as `bwrap --die-with-parent` and `setpriv --pdeathsig`
/// do) survives the eviction, and the thread ends after it. Before, the thread ended at once, and
/// the task read `killed by SIGKILL`.
#[actix_rt::test]
async fn a_command_asking_for_a_parent_death_signal_outlives_its_threads_eviction() {
    // Counts the process's threads: it needs its process to itself.
    dsh_test_support::own_process!(
        a_command_asking_for_a_parent_death_signal_outlives_its_threads_eviction
    );
    if !sandbox_usable() {
        return;
    }
    let ws = workspace();
    let (rt, _spill) = runtime_with(|b| {
        b.cwd(ws.path())
            .sandbox(SandboxMode::WorkspaceWrite, LocalSandboxConfig::default())
    });
    let marker = format!("pdeathsig-{}", std::process::id());
    let armed = ws.path().join("armed");
    // `exec`: python is the spawned process itself, the spawning thread's child.
    let command = format!(
        "exec python3 -c 'import ctypes, time; ctypes.CDLL(None).prctl(1, 9); \
         open(\"armed\", \"w\").close(); time.sleep(600)' {marker}"
    );
    let call = |agent: &TestAgent, command: &str, background: bool| {
        rt.call(
            ToolCall::new(
                "bash",
                json!({"command": command, "description": "t", "run_in_background": background}),
            )
            .with_caller(agent.agent.clone()),
        )
    };
    // The owner lives through the test: an owner that goes takes its tasks with it.
    let owner = TestAgent::new("evicted");
    let started = call(&owner, &command, true).await.text;
    assert!(started.starts_with("started background task"), "{started}");
    let soon = std::time::Duration::from_secs(30);
    assert!(poll_until(soon, || armed.exists()).await, "never armed");
    let ended = || threads_named("self", "dsh-spawner-end").len();
    assert_eq!(confined_spawning_threads(), 1);
    // 64 more sessions: the first one's entry, the least recently used, is evicted.
    for n in 0..64 {
        let text = call(&TestAgent::new(&format!("s{n}")), "true", false)
            .await
            .text;
        assert_eq!(text, "(no output)");
    }
    assert!(
        poll_until(soon, || ended() == 1).await,
        "the evicted entry's thread did not stop spawning"
    );
    assert_eq!(confined_spawning_threads(), 64);
    // The thread waits for its child, which is not killed (a bounded wait for what must not
    // happen).
    let killed = poll_until(std::time::Duration::from_millis(500), || {
        live_with_cmdline(&marker).is_empty()
    })
    .await;
    assert!(!killed, "the task died with its spawning thread");
    for pid in live_with_cmdline(&marker) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(poll_until(soon, || live_with_cmdline(&marker).is_empty()).await);
    assert!(
        poll_until(soon, || ended() == 0).await,
        "the thread outlived its last child"
    );
    rt.shutdown().await;
    drop(rt);
    assert!(
        poll_until(soon, || confined_spawning_threads() == 0 && ended() == 0).await,
        "spawning threads outlived the runtime ({})",
        confined_spawning_threads()
    );
}
