//! The PL-* cases: spawning, capture, kill escalation, settlement, stdin and env, through the
//! ProcessManager's messages.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use crate::common::*;
use dsh_process::*;

/// Catalogue: PL-01.
#[actix_rt::test]
async fn stdout_on_success() {
    let h = Harness::new();
    let out = h.run(h.spec("echo hello")).await;
    assert_eq!((out.exit_code, out.signal.as_deref()), (Some(0), None));
    assert_eq!(
        out.stdout,
        CollectedOutput {
            text: "hello\n".into(),
            truncated: false,
            spill_path: None
        }
    );
    assert_eq!(out.stderr.text, "");
    h.shutdown().await;
}

/// Catalogue: PL-02.
#[actix_rt::test]
async fn stderr_is_captured_apart_from_stdout() {
    let h = Harness::new();
    let out = h.run(h.spec("echo oops >&2")).await;
    assert_eq!(out.exit_code, Some(0));
    assert_eq!(
        (out.stdout.text.as_str(), out.stderr.text.as_str()),
        ("", "oops\n")
    );
    h.shutdown().await;
}

/// Catalogue: PL-03.
#[actix_rt::test]
async fn both_streams_are_captured() {
    let h = Harness::new();
    let out = h.run(h.spec("echo out; echo err >&2")).await;
    assert_eq!(
        (out.stdout.text.as_str(), out.stderr.text.as_str()),
        ("out\n", "err\n")
    );
    h.shutdown().await;
}

/// Catalogue: PL-04.
#[actix_rt::test]
async fn a_non_zero_exit_is_reported_as_such() {
    let h = Harness::new();
    let out = h.run(h.spec("exit 42")).await;
    assert_eq!((out.exit_code, out.signal), (Some(42), None));
    h.shutdown().await;
}

/// Catalogue: PL-05.
#[actix_rt::test]
async fn caller_term_honoured_and_no_terminal_policy_added() {
    let h = Harness::new();
    let mut spec = h.spec("echo \"${TERM:-unset}\"");
    spec.env.insert("TERM".into(), "callers-choice".into());
    assert_eq!(h.run(spec).await.stdout.text, "callers-choice\n");
    h.shutdown().await;
}

/// Catalogue: PL-06.
#[actix_rt::test]
async fn runs_in_cwd() {
    let h = Harness::new();
    let mut spec = h.spec("pwd");
    spec.cwd = "/tmp".into();
    assert!(h.run(spec).await.stdout.text.trim().ends_with("/tmp"));
    h.shutdown().await;
}

/// Catalogue: PL-07.
#[actix_rt::test]
async fn abort_sends_sigterm_to_the_group() {
    let h = Harness::new();
    let abort = AbortSignal::new();
    let mut spec = h.spec("sleep 60");
    spec.abort = Some(abort.clone());
    let started = Instant::now();
    let spawned = h.spawn(spec).await.unwrap();
    actix_rt::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        abort.abort("deadline");
    });
    let out = h.wait(spawned.id).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(
        (out.exit_code, out.signal.as_deref()),
        (None, Some("SIGTERM"))
    );
    h.shutdown().await;
}

/// Catalogue: PL-08.
#[actix_rt::test]
async fn sigkill_escalation_when_term_is_trapped() {
    let h = Harness::new();
    let mut spec = h.spec("trap '' TERM; echo ready; while :; do sleep 60 & wait $!; done");
    spec.grace = Duration::from_millis(200);
    let spawned = h.spawn(spec).await.unwrap();
    h.wait_for_stdout(spawned.id, "ready\n").await;
    assert_eq!(h.kill(spawned.id).await, KillOutcome::Requested);
    let out = h.wait(spawned.id).await;
    assert_eq!(out.signal.as_deref(), Some("SIGKILL"));
    assert_eq!(
        out.signals_sent,
        vec![signal::Signal::SIGTERM, signal::Signal::SIGKILL]
    );
    assert_gone(spawned.pid).await;
    h.shutdown().await;
}

/// Catalogue: PL-09.
#[actix_rt::test]
async fn whole_group_dies() {
    let h = Harness::new();
    let dir = tempfile::tempdir().unwrap();
    let pidfile = pid_file(&dir, "grandchild");
    let spawned = h
        .spawn(h.spec(&format!("sleep 60 & echo $! > {}; wait", pidfile.display())))
        .await
        .unwrap();
    let grandchild = read_pid_file(&pidfile).await;
    h.kill(spawned.id).await;
    let out = h.wait(spawned.id).await;
    assert_eq!(out.signal.as_deref(), Some("SIGTERM"));
    assert_gone(grandchild).await;
    h.shutdown().await;
}

/// Catalogue: PL-10.
#[actix_rt::test]
async fn abort_mid_run() {
    let h = Harness::new();
    let abort = AbortSignal::new();
    let mut spec = h.spec("sleep 60");
    spec.abort = Some(abort.clone());
    let spawned = h.spawn(spec).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    abort.abort("user cancelled");
    assert_eq!(h.wait(spawned.id).await.signal.as_deref(), Some("SIGTERM"));
    h.shutdown().await;
}

/// Catalogue: PL-11.
#[actix_rt::test]
async fn pre_aborted_signal_fails_the_spawn() {
    let h = Harness::new();
    let abort = AbortSignal::new();
    abort.abort("too late");
    let mut spec = h.spec("echo never");
    spec.abort = Some(abort);
    let err = h.spawn_error(spec).await;
    assert_eq!(err, "aborted before spawn: too late");
    h.shutdown().await;
}

/// Catalogue: PL-12.
#[actix_rt::test]
async fn nonexistent_cwd_is_an_error_naming_path_and_os_error() {
    let h = Harness::new();
    let mut spec = h.spec("true");
    spec.cwd = "/nonexistent-dir-dsh-test".into();
    let err = h.spawn_error(spec).await;
    assert!(err.contains("ENOENT"), "{err}");
    assert!(err.contains("/nonexistent-dir-dsh-test"), "{err}");
    h.shutdown().await;
}

/// Catalogue: PL-13.
#[actix_rt::test]
async fn kill_is_idempotent() {
    let h = Harness::new();
    let spawned = h.spawn(h.spec("sleep 60")).await.unwrap();
    h.kill(spawned.id).await;
    h.kill(spawned.id).await;
    let out = h.wait(spawned.id).await;
    assert_eq!(out.signal.as_deref(), Some("SIGTERM"));
    assert_eq!(
        out.signals_sent,
        vec![signal::Signal::SIGTERM],
        "the second kill did not restart the escalation"
    );
    h.shutdown().await;
}

/// Catalogue: PL-14.
#[actix_rt::test]
async fn bounded_pipe_drain_after_shell_exit() {
    let h = Harness::new();
    let dir = tempfile::tempdir().unwrap();
    let pidfile = pid_file(&dir, "holder");
    let mut spec = h.spec(&format!(
        "sleep 60 & echo $! > {}; echo shell-done",
        pidfile.display()
    ));
    spec.grace = Duration::from_millis(100);
    let started = Instant::now();
    let out = h.run(spec).await;
    assert!(
        started.elapsed() < Duration::from_millis(1000),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(out.exit_code, Some(0));
    assert_eq!(out.stdout.text, "shell-done\n");
    assert_eq!(out.settlement, Settlement::DrainGrace);
    let holder = read_pid_file(&pidfile).await;
    assert!(
        signal::pid_is_live(holder),
        "the pipe holder keeps running, as in the seeds"
    );
    cleanup_pid(holder).await;
    h.shutdown().await;
}

/// Catalogue: PL-15.
#[actix_rt::test]
async fn stdin_written_and_closed() {
    let h = Harness::new();
    let mut spec = h.spec("cat");
    spec.stdin = Some(b"hello from stdin\n".to_vec());
    let out = h.run(spec).await;
    assert_eq!(
        (out.exit_code, out.stdout.text.as_str()),
        (Some(0), "hello from stdin\n")
    );
    h.shutdown().await;
}

/// Catalogue: PL-16.
#[actix_rt::test]
async fn no_stdin_reads_eof() {
    let h = Harness::new();
    let out = h.run(h.spec("cat")).await;
    assert_eq!((out.exit_code, out.stdout.text.as_str()), (Some(0), ""));
    h.shutdown().await;
}

/// Catalogue: PL-17.
#[actix_rt::test]
async fn fd0_is_dev_null_or_a_pipe() {
    let h = Harness::new();
    let out = h
        .run(h.spec("test -c /dev/stdin && echo char || echo other"))
        .await;
    assert_eq!(out.stdout.text, "char\n");
    // Ours is a pipe, not the socket the Node seed used (see docs/CONTRACT.md).
    let mut spec = h.spec("test -p /dev/stdin && echo pipe || echo other");
    spec.stdin = Some(b"x".to_vec());
    assert_eq!(h.run(spec).await.stdout.text, "pipe\n");
    h.shutdown().await;
}

/// Catalogue: PL-18.
#[actix_rt::test]
async fn ordinary_env_merge() {
    let h = Harness::new();
    let mut spec = h.spec("echo \"$EXTRA_ONE/$EXTRA_TWO\"");
    spec.env = BTreeMap::from([
        ("EXTRA_ONE".into(), "alpha".into()),
        ("EXTRA_TWO".into(), "beta".into()),
    ]);
    assert_eq!(h.run(spec).await.stdout.text, "alpha/beta\n");
    h.shutdown().await;
}

/// Catalogue: PL-19.
#[actix_rt::test]
async fn explicit_entry_beats_scrub() {
    let h = Harness::new();
    let mut spec = h.spec("echo \"$EXPLICIT_OVERRIDE_KEY\"");
    spec.env
        .insert("EXPLICIT_OVERRIDE_KEY".into(), "explicit-wins".into());
    assert_eq!(h.run(spec).await.stdout.text, "explicit-wins\n");
    h.shutdown().await;
}

/// Catalogue: PL-20.
#[actix_rt::test]
async fn epipe_tolerated() {
    let h = Harness::new();
    let mut spec = h.spec("exit 7");
    spec.stdin = Some(vec![b'x'; 1 << 20]);
    assert_eq!(h.run(spec).await.exit_code, Some(7));
    h.shutdown().await;
}

/// Catalogue: PL-21.
#[actix_rt::test]
async fn each_stream_has_its_own_cap() {
    let h = Harness::new();
    let mut spec = h.spec("printf \"%.0sx\" $(seq 1 500); printf \"%.0se\" $(seq 1 500) >&2");
    spec.stdout_max_bytes = 500;
    spec.stderr_max_bytes = 100;
    let out = h.run(spec).await;
    assert!(!out.stdout.truncated);
    assert_eq!(out.stdout.text, "x".repeat(500));
    assert!(out.stderr.truncated);
    assert!(out.stderr.text.len() <= 100);
    h.shutdown().await;
}

/// Catalogue: PL-22.
#[actix_rt::test]
async fn tail_kept_full_stream_spilled() {
    let h = Harness::new();
    let mut spec = h.spec("for i in $(seq 1 200); do printf 'line-%04d\\n' $i; done");
    spec.stdout_max_bytes = 500;
    spec.stderr_max_bytes = 500;
    let out = h.run(spec).await;
    assert!(out.stdout.truncated);
    assert!(out.stdout.text.len() <= 500);
    assert!(out.stdout.text.contains("line-0200") && !out.stdout.text.contains("line-0001"));
    let spilled = std::fs::read_to_string(out.stdout.spill_path.expect("spill path")).unwrap();
    assert!(spilled.contains("line-0001") && spilled.contains("line-0200"));
    assert_eq!(spilled.len(), 2000);
    h.shutdown().await;
}

/// Catalogue: PL-23.
#[actix_rt::test]
async fn exactly_at_cap_not_truncated() {
    let h = Harness::new();
    let mut spec = h.spec("printf \"%.0sx\" $(seq 1 500)");
    spec.stdout_max_bytes = 500;
    let out = h.run(spec).await;
    assert!(!out.stdout.truncated);
    assert_eq!(out.stdout.text.len(), 500);
    assert_eq!(out.stdout.spill_path, None);
    h.shutdown().await;
}

/// Catalogue: PL-32.
#[actix_rt::test]
async fn vanished_group_tolerated() {
    let h = Harness::new();
    let spawned = h.spawn(h.spec("true")).await.unwrap();
    h.wait(spawned.id).await;
    assert!(!signal::signal_group(
        spawned.pid,
        nix::sys::signal::Signal::SIGTERM
    ));
    h.shutdown().await;
}

/// Catalogue: PL-33.
#[actix_rt::test]
async fn an_empty_argv_is_refused() {
    let h = Harness::new();
    let mut spec = h.spec("x");
    spec.argv.clear();
    let err = h.spawn_error(spec).await;
    assert_eq!(
        err,
        "invalid argv: expected a non-empty program name at argv[0]"
    );
    h.shutdown().await;
}

/// Catalogue: PL-34.
#[actix_rt::test]
async fn an_empty_program_name_is_refused() {
    let h = Harness::new();
    let mut spec = h.spec("x");
    spec.argv = vec![String::new()];
    assert!(h.spawn_error(spec).await.contains("non-empty program name"));
    h.shutdown().await;
}

/// Catalogue: PL-35.
#[actix_rt::test]
async fn argv_verbatim_no_shell() {
    let h = Harness::new();
    let mut spec = h.spec("x");
    spec.argv = vec!["printf".into(), "%s".into(), "$HOME".into()];
    assert_eq!(h.run(spec).await.stdout.text, "$HOME");
    h.shutdown().await;
}

/// Catalogue: PL-36.
#[actix_rt::test]
async fn reasonless_pre_aborted_signal() {
    let h = Harness::new();
    let abort = AbortSignal::new();
    abort.abort_without_reason();
    let mut spec = h.spec("true");
    spec.abort = Some(abort);
    assert_eq!(h.spawn_error(spec).await, "aborted before spawn: aborted");
    h.shutdown().await;
}

/// Catalogue: PL-37.
#[actix_rt::test]
async fn self_signal_reported_raw() {
    let h = Harness::new();
    let out = h.run(h.spec("kill -TERM $$")).await;
    assert_eq!(
        (out.exit_code, out.signal.as_deref()),
        (None, Some("SIGTERM"))
    );
    assert!(out.signals_sent.is_empty());
    h.shutdown().await;
}

/// Catalogue: PL-38.
#[actix_rt::test]
async fn scrub_credential_shaped_and_ambient_dsh_vars() {
    // Changes the process environment: only safe with no other test running beside it.
    dsh_test_support::own_process!(scrub_credential_shaped_and_ambient_dsh_vars);
    // SAFETY: own_process! above: this test has its process to itself, so no other thread reads the
    // environment.
    unsafe {
        std::env::set_var("DSH_TEST_API_KEY", "k");
        std::env::set_var("DSH_TEST_TOKEN", "t");
        std::env::set_var("DSH_TEST_PLAIN", "p");
        std::env::set_var("MY_SERVICE_SECRET", "s");
    }
    let h = Harness::new();
    let out = h.run(h.spec(
        "echo \"[${DSH_TEST_API_KEY:-absent}|${DSH_TEST_TOKEN:-absent}|${DSH_TEST_PLAIN:-absent}|${MY_SERVICE_SECRET:-absent}]\"",
    )).await;
    assert_eq!(out.stdout.text, "[absent|absent|absent|absent]\n");
    h.shutdown().await;
}

/// Catalogue: PL-39.
#[actix_rt::test]
async fn only_current_managed_env() {
    // Changes the process environment: only safe with no other test running beside it.
    dsh_test_support::own_process!(only_current_managed_env);
    // SAFETY: see pl_38.
    unsafe { std::env::set_var("DSH_STALE", "old-value") };
    let h = Harness::new();
    let mut spec =
        h.spec("echo \"[${DSH_STALE:-absent}|${DSH_SHELL:-absent}|${DSH_SESSION_ID:-absent}]\"");
    spec.dsh_env = BTreeMap::from([
        ("DSH_SHELL".into(), "1".into()),
        ("DSH_SESSION_ID".into(), "current-session".into()),
    ]);
    assert_eq!(
        h.run(spec).await.stdout.text,
        "[absent|1|current-session]\n"
    );
    h.shutdown().await;
}

/// Catalogue: PL-40.
#[actix_rt::test]
async fn dsh_name_on_ordinary_channel_rejected() {
    let h = Harness::new();
    let mut spec = h.spec("true");
    spec.env.insert("DSH_WRONG_CHANNEL".into(), "bad".into());
    let err = h.spawn_error(spec).await;
    assert!(
        err.contains("DSH_WRONG_CHANNEL") && err.contains("dshEnv"),
        "{err}"
    );
    h.shutdown().await;
}

/// Catalogue: PL-41.
#[actix_rt::test]
async fn ordinary_name_on_managed_channel_rejected() {
    let h = Harness::new();
    let mut spec = h.spec("true");
    spec.dsh_env.insert("PATH".into(), "/wrong-channel".into());
    let err = h.spawn_error(spec).await;
    assert_eq!(
        err,
        "managed child env cannot set ordinary variable \"PATH\"; use env"
    );
    h.shutdown().await;
}

fn assert_spill_name(path: &std::path::Path, label: &str) {
    let name = path.file_name().unwrap().to_str().unwrap();
    let rest = name.strip_prefix("dsh-proc-").expect("prefix");
    let rest = rest.strip_suffix(&format!("-{label}.log")).expect("suffix");
    let parts: Vec<&str> = rest.split('-').collect();
    assert_eq!(parts.len(), 3, "{name}");
    assert!(parts[0].chars().all(|c| c.is_ascii_digit()), "{name}");
    assert!(parts[1].chars().all(|c| c.is_ascii_digit()), "{name}");
    assert!(
        parts[2].len() == 12 && parts[2].chars().all(|c| matches!(c, '0'..='9' | 'a'..='f')),
        "{name}"
    );
}

/// Catalogue: PL-42.
#[actix_rt::test]
async fn spill_file_name_and_mode() {
    let h = Harness::new();
    let mut spec = h.spec("for i in $(seq 1 200); do printf 'line-%04d\\n' $i; done");
    spec.stdout_max_bytes = 500;
    let out = h.run(spec).await;
    let path = out.stdout.spill_path.expect("spill");
    assert_spill_name(&path, "stdout");
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    h.shutdown().await;
}

/// Catalogue: PL-43.
#[actix_rt::test]
async fn default_private_spill_dir_is_0700_and_removed_at_shutdown() {
    let manager = actix::Actor::start(ProcessManager::new(ManagerConfig::default()));
    let h = Harness {
        manager,
        spill: tempfile::tempdir().unwrap(),
    };
    let mut spec = h.spec("for i in $(seq 1 200); do printf 'line-%04d\\n' $i; done");
    spec.spill_dir = None;
    spec.stdout_max_bytes = 500;
    let path = h.run(spec).await.stdout.spill_path.expect("spill");
    let dir = path.parent().unwrap().to_path_buf();
    assert!(
        dir.file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("dsh-proc-")
    );
    assert_eq!(
        std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
    h.shutdown().await;
    assert!(
        !dir.exists(),
        "the private spill directory is removed at shutdown"
    );
}

#[actix_rt::test]
async fn keep_spill_keeps_the_private_directory() {
    let config = ManagerConfig {
        keep_spill: true,
        ..ManagerConfig::default()
    };
    let h = Harness {
        manager: actix::Actor::start(ProcessManager::new(config)),
        spill: tempfile::tempdir().unwrap(),
    };
    let mut spec = h.spec("seq 1 1000");
    spec.spill_dir = None;
    spec.stdout_max_bytes = 100;
    let path = h.run(spec).await.stdout.spill_path.expect("spill");
    h.shutdown().await;
    assert!(path.exists());
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

/// Catalogue: PL-45.
#[actix_rt::test]
async fn abort_honoured_without_any_timeout() {
    let h = Harness::new();
    let abort = AbortSignal::new();
    let mut spec = h.spec("sleep 60");
    spec.abort = Some(abort.clone());
    let spawned = h.spawn(spec).await.unwrap();
    actix_rt::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        abort.abort("stop");
    });
    assert_eq!(h.wait(spawned.id).await.signal.as_deref(), Some("SIGTERM"));
    h.shutdown().await;
}

#[actix_rt::test]
async fn pl_a1_kill_after_settlement_is_inert() {
    let h = Harness::new();
    let spawned = h.spawn(h.spec("true")).await.unwrap();
    let out = h.wait(spawned.id).await;
    assert_eq!(h.kill(spawned.id).await, KillOutcome::AlreadySettled);
    assert!(out.signals_sent.is_empty());
    // The record still reports no signal after the late kill.
    assert!(h.wait(spawned.id).await.signals_sent.is_empty());
    h.shutdown().await;
}

#[actix_rt::test]
async fn reads_are_non_consuming_and_valid_after_exit() {
    let h = Harness::new();
    let spawned = h.spawn(h.spec("echo one; echo two >&2")).await.unwrap();
    h.wait(spawned.id).await;
    for _ in 0..2 {
        let r = h.read(spawned.id, StreamKind::Stdout, 0).await;
        assert_eq!(
            (r.text.as_str(), r.next_offset, r.lossy),
            ("one\n", 4, false)
        );
    }
    assert_eq!(
        h.read(spawned.id, StreamKind::Stderr, 0).await.text,
        "two\n"
    );
    assert_eq!(h.read(spawned.id, StreamKind::Stdout, 4).await.text, "");
    h.shutdown().await;
}

#[actix_rt::test]
async fn a_flooding_command_can_still_be_killed() {
    let h = Harness::new();
    let spawned = h.spawn(h.spec("yes")).await.unwrap();
    h.wait_for_stdout(spawned.id, "y\n").await;
    h.kill(spawned.id).await;
    let out = h.wait(spawned.id).await;
    assert!(out.signal.is_some(), "{out:?}");
    assert!(out.stdout.truncated);
    h.shutdown().await;
}
