//! The BS-* and BL-* cases: the executor seam and the local executor.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::common;
use actix::prelude::*;
use dsh_bash::*;
use dsh_process::signal::pid_is_live;
use dsh_process::{ProcessManager, Shutdown};

use dsh_test_support::SOON;

/// The catalogue's "executor setup(cfg)": a manager with a test spill dir and an executor with
/// grace 200 ms plus `cfg`.
type Setup = common::Harness<LocalBashExecutor>;

impl Setup {
    fn new(edit: impl FnOnce(&mut BashConfig)) -> Self {
        let manager = common::manager();
        let mut config = common::config();
        edit(&mut config);
        let resolver = config.resolver();
        let executor = LocalBashExecutor::new(config, manager.0.clone())
            .unwrap()
            .start();
        Self::assemble(manager, executor, resolver)
    }

    async fn resolve(&self, request: BashExecRequest) -> Result<BashExecSpec, ExecError> {
        (self.resolver)(request)
    }

    async fn start(&self, request: BashExecRequest) -> BashProcess {
        self.try_start(request).await.unwrap()
    }
}

/// The status of a task killed by `signal`.
fn killed_by(signal: &str) -> TaskStatus {
    TaskStatus::Killed {
        signal: Some(signal.into()),
    }
}

fn req(command: &str) -> BashExecRequest {
    BashExecRequest::new(command)
}

/// A request for `command` that an abort signal (returned with it) can cancel.
fn abortable(command: &str) -> (BashExecRequest, AbortSignal) {
    let abort = AbortSignal::new();
    let mut r = req(command);
    r.abort = Some(abort.clone());
    (r, abort)
}

/// A request for `true` in a directory that does not exist: its spawn fails.
fn in_a_missing_dir() -> BashExecRequest {
    let mut r = req("true");
    r.workdir = Some("/nonexistent-dsh".into());
    r
}

/// A request for `command` with `stdin` piped in, the ordinary variable `env` and the managed
/// variable `dsh_env` set.
fn with_stdin_and_env(
    command: &str,
    stdin: &[u8],
    env: (&str, &str),
    dsh_env: (&str, &str),
) -> BashExecRequest {
    let variables =
        |(name, value): (&str, &str)| Some(BTreeMap::from([(name.into(), value.into())]));
    let mut r = req(command);
    r.stdin = Some(stdin.to_vec());
    r.env = variables(env);
    r.dsh_env = variables(dsh_env);
    r
}

async fn done(handle: &BashProcess) -> TaskStatus {
    tokio::time::timeout(SOON, handle.done())
        .await
        .expect("background command never ended")
}

/// Polls consuming reads until the accumulated output contains `needle`; returns the accumulation.
async fn read_until(handle: &BashProcess, needle: &str) -> String {
    let deadline = Instant::now() + SOON;
    let mut seen = String::new();
    while !seen.contains(needle) {
        assert!(
            Instant::now() < deadline,
            "never saw {needle:?}; saw {seen:?}"
        );
        seen.push_str(&handle.read_output().delta);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    seen
}

// ---- BS: the seam ----

/// A stand-in executor: the seam is only its resolver and its messages.
struct StubExecutor;
impl Actor for StubExecutor {
    type Context = Context<Self>;
}
fn stub_resolver() -> Resolver {
    std::sync::Arc::new(|r: BashExecRequest| {
        Ok(BashExecSpec {
            command: r.command,
            workdir: "/stub".into(),
            timeout_ms: 1000,
            stdout_max_bytes: 64_000,
            stdin: r.stdin,
            input: r.input,
            env: r.env,
            dsh_env: r.dsh_env,
            abort: r.abort,
            peek: r.peek,
            session: r.session,
            sandbox_policy: r.sandbox_policy,
        })
    })
}
impl Handler<Run> for StubExecutor {
    type Result = Result<BashRunResult, ExecError>;
    fn handle(&mut self, Run(spec): Run, _: &mut Self::Context) -> Self::Result {
        Ok(BashRunResult {
            ending: RunEnding::Exited,
            exit_code: Some(0),
            signal: None,
            timeout_ms: spec.timeout_ms,
            stdout: CollectedOutput {
                text: "ok".into(),
                ..Default::default()
            },
            stderr: CollectedOutput::default(),
            oom_killed: false,
            sandbox: None,
            left_running: None,
        })
    }
}

/// Catalogue: BS-01.
#[actix_rt::test]
async fn any_actor_handling_the_messages_serves_the_seam() {
    let stub = StubExecutor.start();
    let resolve = stub_resolver();
    let run: Recipient<Run> = stub.recipient();
    let spec = resolve(req("echo hi")).unwrap();
    assert_eq!(
        (
            spec.command.as_str(),
            spec.workdir.to_str(),
            spec.timeout_ms,
            spec.stdout_max_bytes
        ),
        ("echo hi", Some("/stub"), 1000, 64_000)
    );
    let result = run.send(Run(spec)).await.unwrap().unwrap();
    assert_eq!(
        (result.exit_code, result.stdout.text.as_str()),
        (Some(0), "ok")
    );
}

// ---- BL: foreground ----

/// Catalogue: BL-01.
#[actix_rt::test]
async fn output_and_effective_timeout() {
    let s = Setup::new(|c| c.timeout_ms = 5000);
    let r = s.run(req("echo hi")).await.unwrap();
    assert_eq!(
        (r.exit_code, r.stdout.text.as_str(), r.timeout_ms),
        (Some(0), "hi\n", 5000)
    );
    s.shutdown().await;
}

/// Catalogue: BL-02.
#[actix_rt::test]
async fn config_cwd_and_per_call_override() {
    let s = Setup::new(|c| c.cwd = Some("/tmp".into()));
    assert!(
        s.run(req("pwd"))
            .await
            .unwrap()
            .stdout
            .text
            .trim()
            .ends_with("/tmp")
    );
    let mut r = req("pwd");
    r.workdir = Some("/".into());
    assert_eq!(s.run(r).await.unwrap().stdout.text, "/\n");
    s.shutdown().await;
}

/// Catalogue: BL-03.
#[actix_rt::test]
async fn default_cwd_is_the_runtime_cwd() {
    let s = Setup::new(|_| {});
    let cwd = std::env::current_dir().unwrap();
    assert_eq!(
        s.run(req("pwd")).await.unwrap().stdout.text.trim(),
        cwd.to_str().unwrap()
    );
    s.shutdown().await;
}

/// Catalogue: BL-04.
#[actix_rt::test]
async fn timeout_capped_at_max() {
    let s = Setup::new(|c| {
        c.timeout_ms = 1000;
        c.max_timeout_ms = 2000;
    });
    let mut r = req("true");
    r.timeout_ms = Some(99999.0);
    assert_eq!(s.run(r).await.unwrap().timeout_ms, 2000);
    s.shutdown().await;
}

/// Catalogue: BL-05.
#[actix_rt::test]
async fn invalid_numeric_config_and_overrides() {
    let manager = ProcessManager::new(ManagerConfig::default()).start();
    type Edit = fn(&mut BashConfig);
    let edits: [(&str, Edit); 5] = [
        ("timeout_ms", |c| c.timeout_ms = 0),
        ("max_timeout_ms", |c| c.max_timeout_ms = 0),
        ("max_output_bytes", |c| c.max_output_bytes = 0),
        ("max_spill_bytes", |c| c.max_spill_bytes = 0),
        ("grace_ms", |c| c.grace_ms = 0),
    ];
    for (key, edit) in edits {
        let mut config = BashConfig::default();
        edit(&mut config);
        let err = LocalBashExecutor::new(config, manager.clone())
            .err()
            .expect("rejected")
            .to_string();
        assert_eq!(
            err,
            format!("bash-local: {key} must be a positive finite number")
        );
    }
    let config = BashConfig::default();
    for bad in [f64::NAN, -1.0, 0.0, f64::INFINITY] {
        let mut r = req("true");
        r.timeout_ms = Some(bad);
        assert_eq!(
            config.resolve(r).unwrap_err().to_string(),
            "bash-local: request.timeoutMs must be a positive finite number"
        );
        let mut r = req("true");
        r.stdout_max_bytes = Some(bad);
        assert_eq!(
            config.resolve(r).unwrap_err().to_string(),
            "bash-local: request.stdoutMaxBytes must be a positive finite number"
        );
    }
}

/// Catalogue: BL-06.
#[actix_rt::test]
async fn stdout_budget_default_and_foreground_raise() {
    let s = Setup::new(|c| c.max_output_bytes = 100);
    assert_eq!(s.resolve(req("true")).await.unwrap().stdout_max_bytes, 100);
    let mut r = req("printf \"%.0sx\" $(seq 1 500); printf \"%.0se\" $(seq 1 500) >&2");
    r.stdout_max_bytes = Some(500.0);
    let result = s.run(r).await.unwrap();
    assert!(!result.stdout.truncated);
    assert_eq!(result.stdout.text, "x".repeat(500));
    assert!(result.stderr.truncated && result.stderr.text.len() <= 100);
    s.shutdown().await;
}

/// Catalogue: BL-07.
#[actix_rt::test]
async fn per_call_timeout_kills() {
    let s = Setup::new(|c| c.timeout_ms = 60_000);
    let mut r = req("sleep 60");
    r.timeout_ms = Some(100.0);
    let result = s.run(r).await.unwrap();
    assert_eq!(result.ending, RunEnding::TimedOut);
    assert_eq!(result.timeout_ms, 100);
    assert_eq!(result.signal.as_deref(), Some("SIGTERM"));
    s.shutdown().await;
}

/// Catalogue: BL-08.
#[actix_rt::test]
async fn abort_classified_as_aborted() {
    let s = Setup::new(|_| {});
    let (r, abort) = abortable("sleep 60");
    actix_rt::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        abort.abort("user cancelled");
    });
    let result = s.run(r).await.unwrap();
    assert_eq!(result.ending, RunEnding::Aborted);
    s.shutdown().await;
}

/// Catalogue: BL-09.
#[actix_rt::test]
async fn self_kill_is_neither_timeout_nor_abort() {
    let s = Setup::new(|c| c.timeout_ms = 60_000);
    let result = s.run(req("kill -TERM $$")).await.unwrap();
    assert_eq!(result.signal.as_deref(), Some("SIGTERM"));
    assert_eq!(result.ending, RunEnding::Exited);
    s.shutdown().await;
}

/// Catalogue: BL-10.
#[actix_rt::test]
async fn a_spawn_failure_is_an_error() {
    let s = Setup::new(|_| {});
    let err = s.run(in_a_missing_dir()).await.unwrap_err().to_string();
    assert!(err.contains("ENOENT"), "{err}");
    s.shutdown().await;
}

/// Catalogue: BL-11.
#[actix_rt::test]
async fn stdin_env_and_dsh_env_threaded() {
    let s = Setup::new(|_| {});
    let r = with_stdin_and_env(
        "cat; echo \"[$SEAM_VAR][$DSH_SEAM_VAR]\"",
        b"piped\n",
        ("SEAM_VAR", "env-ok"),
        ("DSH_SEAM_VAR", "dsh-ok"),
    );
    let spec = s.resolve(r.clone()).await.unwrap();
    assert_eq!(spec.stdin.as_deref(), Some(&b"piped\n"[..]));
    assert_eq!(spec.env, r.env);
    assert_eq!(spec.dsh_env, r.dsh_env);
    assert_eq!(
        s.run(r).await.unwrap().stdout.text,
        "piped\n[env-ok][dsh-ok]\n"
    );
    s.shutdown().await;
}

/// Catalogue: BL-12.
#[actix_rt::test]
async fn absent_optionals_stay_absent() {
    let s = Setup::new(|_| {});
    let spec = s.resolve(req("true")).await.unwrap();
    assert!(
        spec.stdin.is_none()
            && spec.env.is_none()
            && spec.dsh_env.is_none()
            && spec.abort.is_none()
    );
    s.shutdown().await;
}

#[actix_rt::test]
async fn terminal_env_is_set_and_a_caller_entry_wins() {
    let s = Setup::new(|_| {});
    let out = s
        .run(req("echo \"$NO_COLOR $TERM $PAGER $GIT_PAGER\""))
        .await
        .unwrap();
    assert_eq!(out.stdout.text, "1 dumb cat cat\n");
    let mut r = req("echo \"$TERM\"");
    r.env = Some(BTreeMap::from([("TERM".into(), "xterm".into())]));
    assert_eq!(s.run(r).await.unwrap().stdout.text, "xterm\n");
    s.shutdown().await;
}

#[actix_rt::test]
async fn trapped_term_after_timeout_is_still_timed_out() {
    let s = Setup::new(|_| {});
    let mut r = req("trap 'exit 0' TERM; sleep 60 & wait");
    r.timeout_ms = Some(100.0);
    let result = s.run(r).await.unwrap();
    assert_eq!(result.ending, RunEnding::TimedOut);
    assert_eq!((result.exit_code, result.signal), (Some(0), None));
    s.shutdown().await;
}

// ---- BL: background ----

/// Catalogue: BL-13.
#[actix_rt::test]
async fn start_returns_immediately_and_settles_completed() {
    let s = Setup::new(|_| {});
    let spec = s.resolve(req("sleep 0.2; echo done")).await.unwrap();
    let began = Instant::now();
    let handle = s.executor.send(Start(spec)).await.unwrap().unwrap();
    assert!(
        began.elapsed() < Duration::from_millis(150),
        "start took {:?}",
        began.elapsed()
    );
    assert_eq!(handle.status(), TaskStatus::Running);
    assert_eq!(done(&handle).await, TaskStatus::Completed { exit_code: 0 });
    s.shutdown().await;
}

/// Catalogue: BL-14.
#[actix_rt::test]
async fn stdin_and_env_reach_background_commands() {
    let s = Setup::new(|_| {});
    let command = "cat; echo \"[$BG_VAR][$DSH_BG_VAR]\"";
    let r = with_stdin_and_env(
        command,
        b"bg-stdin\n",
        ("BG_VAR", "bg-env"),
        ("DSH_BG_VAR", "bg-dsh-env"),
    );
    let handle = s.start(r).await;
    assert_eq!(done(&handle).await, TaskStatus::Completed { exit_code: 0 });
    let out = handle.read_output().delta;
    assert!(
        out.contains("[bg-env][bg-dsh-env]") && out.contains("bg-stdin"),
        "{out}"
    );
    s.shutdown().await;
}

/// Catalogue: BL-15.
#[actix_rt::test]
async fn consuming_reads_valid_after_exit() {
    let s = Setup::new(|_| {});
    let handle = s.start(req("echo first; sleep 1; echo second")).await;
    let seen = read_until(&handle, "first\n").await;
    assert_eq!(seen, "first\n");
    done(&handle).await;
    let read = handle.read_output();
    assert_eq!(read.delta, "second\n");
    assert!(!read.lossy);
    assert_eq!(handle.read_output().delta, "");
    s.shutdown().await;
}

/// Catalogue: BL-16, BL-17, BL-18.
///
/// A settled task's delta puts stderr after stdout under its marker (BL-16), the marker alone when
/// there is only stderr (BL-17), and a newline before it only where stdout lacks one (BL-18).
#[actix_rt::test]
async fn stderr_follows_stdout_under_its_marker_in_the_delta() {
    let s = Setup::new(|_| {});
    for (command, delta) in [
        ("echo out; echo err >&2", "out\n[stderr]\nerr\n"),
        ("echo err >&2", "[stderr]\nerr\n"),
        ("printf out; echo err >&2", "out\n[stderr]\nerr\n"),
    ] {
        let handle = s.start(req(command)).await;
        done(&handle).await;
        assert_eq!(handle.read_output().delta, delta, "{command}");
    }
    s.shutdown().await;
}

/// Catalogue: BL-19, BL-20.
///
/// A read past the memory cap is lossy and names the spill file of the stream that overflowed:
/// stdout's (BL-19) or stderr's, under its marker (BL-20).
#[actix_rt::test]
async fn a_lossy_read_names_the_overflowing_streams_spill_file() {
    let s = Setup::new(|c| c.max_output_bytes = 100);
    for (redirect, spill) in [("", "-stdout.log"), (" >&2", "-stderr.log")] {
        let command = format!("for i in $(seq 1 100); do printf 'line-%04d\\n' $i{redirect}; done");
        let handle = s.start(req(&command)).await;
        done(&handle).await;
        let read = handle.read_output();
        assert!(read.lossy, "{command}");
        assert_eq!(read.spill_paths.len(), 1, "{command}");
        assert!(read.spill_paths[0].to_str().unwrap().ends_with(spill));
        if !redirect.is_empty() {
            assert!(read.delta.contains("[stderr]"), "{}", read.delta);
        }
    }
    s.shutdown().await;
}

/// Catalogue: BL-21.
#[actix_rt::test]
async fn kill_true_once_false_after() {
    let s = Setup::new(|_| {});
    let handle = s.start(req("sleep 60")).await;
    assert!(handle.kill());
    assert_eq!(done(&handle).await, killed_by("SIGTERM"));
    assert!(!handle.kill(), "a second kill finds it settled");
    s.shutdown().await;
}

/// Catalogue: BL-22.
#[actix_rt::test]
async fn kill_false_after_natural_completion() {
    let s = Setup::new(|_| {});
    let handle = s.start(req("true")).await;
    assert_eq!(done(&handle).await, TaskStatus::Completed { exit_code: 0 });
    assert!(!handle.kill());
    s.shutdown().await;
}

/// Catalogue: BL-23.
#[actix_rt::test]
async fn configured_grace_escalates() {
    let s = Setup::new(|_| {});
    let handle = s.start(req("trap '' TERM; echo armed; sleep 60")).await;
    read_until(&handle, "armed").await;
    handle.kill();
    assert_eq!(done(&handle).await, killed_by("SIGKILL"));
    s.shutdown().await;
}

/// Catalogue: BL-24.
#[actix_rt::test]
async fn spec_abort_kills_a_background_command() {
    let s = Setup::new(|_| {});
    let (r, abort) = abortable("sleep 60");
    let handle = s.start(r).await;
    abort.abort("stop");
    assert_eq!(done(&handle).await, killed_by("SIGTERM"));
    s.shutdown().await;
}

/// Catalogue: BL-25.
#[actix_rt::test]
async fn self_signal_reported_killed() {
    let s = Setup::new(|_| {});
    let handle = s.start(req("kill -TERM $$")).await;
    assert_eq!(done(&handle).await, killed_by("SIGTERM"));
    s.shutdown().await;
}

/// Catalogue: BL-26.
#[actix_rt::test]
async fn background_spawn_failure_settles_killed_with_one_note() {
    let s = Setup::new(|_| {});
    let handle = s.start(in_a_missing_dir()).await;
    assert_eq!(done(&handle).await, TaskStatus::Killed { signal: None });
    let first = handle.read_output().delta;
    assert!(
        first.starts_with("[stderr]\nspawn failed: ") && first.contains("ENOENT"),
        "{first}"
    );
    assert_eq!(
        handle.read_output().delta,
        "",
        "the note is delivered exactly once"
    );
    let killed = handle.kill();
    assert!(!killed, "nothing is left to kill after a failed spawn");
    s.shutdown().await;
}

/// Catalogue: BL-27.
#[actix_rt::test]
async fn background_survives_the_executor_and_dies_with_the_manager() {
    let s = Setup::new(|_| {});
    let handle = s.start(req("echo $$; sleep 60")).await;
    let pid: i32 = read_until(&handle, "\n").await.trim().parse().unwrap();
    let Setup {
        manager,
        executor,
        spill: _spill,
        ..
    } = s;
    let weak = executor.downgrade();
    drop(executor);
    let deadline = Instant::now() + SOON;
    while weak.upgrade().is_some() {
        assert!(Instant::now() < deadline, "executor never stopped");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(handle.status(), TaskStatus::Running);
    assert!(pid_is_live(pid));
    manager.send(Shutdown).await.unwrap();
    assert!(
        !pid_is_live(pid),
        "gone as soon as the manager's shutdown resolved"
    );
    assert_eq!(done(&handle).await, killed_by("SIGTERM"));
}

/// Catalogue: BL-28.
#[actix_rt::test]
async fn manager_shutdown_escalates_term_trappers() {
    let s = Setup::new(|_| {});
    let finished = s.start(req("echo done")).await;
    assert_eq!(
        done(&finished).await,
        TaskStatus::Completed { exit_code: 0 }
    );
    let trapper = s.start(req("trap '' TERM; echo armed; sleep 60")).await;
    read_until(&trapper, "armed").await;
    s.shutdown().await;
    assert_eq!(finished.status(), TaskStatus::Completed { exit_code: 0 });
    assert_eq!(done(&trapper).await, killed_by("SIGKILL"));
}
