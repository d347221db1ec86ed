//! The PL-* cases: spawning, capture, kill escalation, settlement, stdin and env, through the
//! ProcessManager's messages.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use crate::common::*;
use dsh_process::*;

/// A harness of its own and the spec of `command`, changed by `edit`.
fn harness_and_spec(
    command: &str,
    edit: impl FnOnce(&mut ProcessSpawnSpec),
) -> (Harness, ProcessSpawnSpec) {
    let h = Harness::new();
    let mut spec = h.spec(command);
    edit(&mut spec);
    (h, spec)
}

/// Runs `sleep 60` with an abort signal that a task of its own fires after `after` (with `reason`):
/// its outcome.
async fn run_aborted(h: &Harness, after: Duration, reason: &'static str) -> ProcessOutcome {
    let abort = AbortSignal::new();
    let mut spec = h.spec("sleep 60");
    spec.abort = Some(abort.clone());
    let spawned = h.spawn(spec).await.unwrap();
    actix_rt::spawn(async move {
        tokio::time::sleep(after).await;
        abort.abort(reason);
    });
    h.wait(spawned.id).await
}

/// Runs `command`, its spec changed by `edit`, on a harness of its own, which it then shuts down.
pub async fn run_once(command: &str, edit: impl FnOnce(&mut ProcessSpawnSpec)) -> ProcessOutcome {
    let (h, spec) = harness_and_spec(command, edit);
    let out = h.run(spec).await;
    h.shutdown().await;
    out
}

/// The spawn error of `command`, its spec changed by `edit`, on a harness of its own, which it
/// then shuts down.
pub async fn spawn_error_once(command: &str, edit: impl FnOnce(&mut ProcessSpawnSpec)) -> String {
    let (h, spec) = harness_and_spec(command, edit);
    let err = h.spawn_error(spec).await;
    h.shutdown().await;
    err
}

/// How a case changes the default spec.
type Edit = fn(&mut ProcessSpawnSpec);

/// What a command is expected to end with: exit code, signal, stdout, stderr.
type Ended = (
    Option<i32>,
    Option<&'static str>,
    &'static str,
    &'static str,
);

/// Catalogue: PL-01, PL-02, PL-03, PL-04, PL-05, PL-15, PL-16, PL-18, PL-19, PL-20, PL-35, PL-37.
///
/// A command, with its spec changed as each case says, ends as expected: both streams captured
/// apart and whole, the exit code or the signal it raised itself (none sent by the manager).
#[actix_rt::test]
async fn commands_end_with_their_exit_status_and_both_streams() {
    let cases: [(&str, Edit, Ended); 12] = [
        // PL-01: stdout on success.
        ("echo hello", |_| {}, (Some(0), None, "hello\n", "")),
        // PL-02: stderr apart from stdout.
        ("echo oops >&2", |_| {}, (Some(0), None, "", "oops\n")),
        // PL-03: both streams.
        (
            "echo out; echo err >&2",
            |_| {},
            (Some(0), None, "out\n", "err\n"),
        ),
        // PL-04: a non-zero exit.
        ("exit 42", |_| {}, (Some(42), None, "", "")),
        // PL-05: the caller's TERM is honoured, no terminal policy added.
        (
            "echo \"${TERM:-unset}\"",
            |spec| {
                spec.env.insert("TERM".into(), "callers-choice".into());
            },
            (Some(0), None, "callers-choice\n", ""),
        ),
        // PL-15: stdin is written and closed.
        (
            "cat",
            |spec| spec.stdin = Some(b"hello from stdin\n".to_vec()),
            (Some(0), None, "hello from stdin\n", ""),
        ),
        // PL-16: no stdin reads end of file.
        ("cat", |_| {}, (Some(0), None, "", "")),
        // PL-18: the ordinary env is merged.
        (
            "echo \"$EXTRA_ONE/$EXTRA_TWO\"",
            |spec| {
                spec.env = BTreeMap::from([
                    ("EXTRA_ONE".into(), "alpha".into()),
                    ("EXTRA_TWO".into(), "beta".into()),
                ]);
            },
            (Some(0), None, "alpha/beta\n", ""),
        ),
        // PL-19: an explicit entry beats the scrub.
        (
            "echo \"$EXPLICIT_OVERRIDE_KEY\"",
            |spec| {
                spec.env
                    .insert("EXPLICIT_OVERRIDE_KEY".into(), "explicit-wins".into());
            },
            (Some(0), None, "explicit-wins\n", ""),
        ),
        // PL-20: EPIPE on stdin is tolerated.
        (
            "exit 7",
            |spec| spec.stdin = Some(vec![b'x'; 1 << 20]),
            (Some(7), None, "", ""),
        ),
        // PL-35: argv verbatim, no shell.
        (
            "x",
            |spec| spec.argv = vec!["printf".into(), "%s".into(), "$HOME".into()],
            (Some(0), None, "$HOME", ""),
        ),
        // PL-37: a signal the command raised itself is reported raw.
        ("kill -TERM $$", |_| {}, (None, Some("SIGTERM"), "", "")),
    ];
    let h = Harness::new();
    for (command, edit, expected) in cases {
        let mut spec = h.spec(command);
        edit(&mut spec);
        let out = h.run(spec).await;
        let ended = (
            out.exit_code,
            out.signal.as_deref(),
            out.stdout.text.as_str(),
            out.stderr.text.as_str(),
        );
        assert_eq!(ended, expected, "{command}");
        assert!(out.signals_sent.is_empty(), "{command}");
        assert!(!out.stdout.truncated && out.stdout.spill_path.is_none());
    }
    h.shutdown().await;
}

/// What a refused spawn's error says: exactly, or at least each of some parts.
enum Says {
    Exactly(&'static str),
    Each(&'static [&'static str]),
}

/// Catalogue: PL-11, PL-12, PL-33, PL-34, PL-36, PL-40, PL-41.
///
/// A spec that cannot be spawned is refused with an error that says why.
#[actix_rt::test]
async fn bad_specs_are_refused_saying_why() {
    let cases: [(&str, Edit, Says); 7] = [
        // PL-11: a signal aborted before the spawn fails it.
        (
            "echo never",
            |spec| {
                let abort = AbortSignal::new();
                abort.abort("too late");
                spec.abort = Some(abort);
            },
            Says::Exactly("aborted before spawn: too late"),
        ),
        // PL-12: a missing cwd, named with the OS error.
        (
            "true",
            |spec| spec.cwd = "/nonexistent-dir-dsh-test".into(),
            Says::Each(&["ENOENT", "/nonexistent-dir-dsh-test"]),
        ),
        // PL-33: an empty argv.
        (
            "x",
            |spec| spec.argv.clear(),
            Says::Exactly("invalid argv: expected a non-empty program name at argv[0]"),
        ),
        // PL-34: an empty program name.
        (
            "x",
            |spec| spec.argv = vec![String::new()],
            Says::Each(&["non-empty program name"]),
        ),
        // PL-36: aborted before the spawn without a reason.
        (
            "true",
            |spec| {
                let abort = AbortSignal::new();
                abort.abort_without_reason();
                spec.abort = Some(abort);
            },
            Says::Exactly("aborted before spawn: aborted"),
        ),
        // PL-40: a DSH_ name on the ordinary channel.
        (
            "true",
            |spec| {
                spec.env.insert("DSH_WRONG_CHANNEL".into(), "bad".into());
            },
            Says::Each(&["DSH_WRONG_CHANNEL", "dshEnv"]),
        ),
        // PL-41: an ordinary name on the managed channel.
        (
            "true",
            |spec| {
                spec.dsh_env.insert("PATH".into(), "/wrong-channel".into());
            },
            Says::Exactly("managed child env cannot set ordinary variable \"PATH\"; use env"),
        ),
    ];
    let h = Harness::new();
    for (command, edit, says) in cases {
        let mut spec = h.spec(command);
        edit(&mut spec);
        let err = h.spawn_error(spec).await;
        match says {
            Says::Exactly(text) => assert_eq!(err, text),
            Says::Each(parts) => assert!(parts.iter().all(|part| err.contains(part)), "{err}"),
        }
    }
    h.shutdown().await;
}

/// Catalogue: PL-06.
#[actix_rt::test]
async fn runs_in_cwd() {
    let out = run_once("pwd", |spec| spec.cwd = "/tmp".into()).await;
    assert!(out.stdout.text.trim().ends_with("/tmp"));
}

/// Catalogue: PL-07.
#[actix_rt::test]
async fn abort_sends_sigterm_to_the_group() {
    let h = Harness::new();
    let started = Instant::now();
    let out = run_aborted(&h, Duration::from_millis(100), "deadline").await;
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
    let stubborn = "trap '' TERM; echo ready; while :; do sleep 60 & wait $!; done";
    let spawned = h
        .spawn_with_grace(stubborn, Duration::from_millis(200))
        .await;
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
    let out = run_aborted(&h, Duration::from_millis(50), "user cancelled").await;
    assert_eq!(out.signal.as_deref(), Some("SIGTERM"));
    h.shutdown().await;
}

/// Catalogue: PL-13.
#[actix_rt::test]
async fn kill_is_idempotent() {
    let h = Harness::new();
    let spawned = h.spawn(h.spec("sleep 60")).await.unwrap();
    for _ in 0..2 {
        h.kill(spawned.id).await;
    }
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
    let started = Instant::now();
    let (out, holder) = h.run_leaving_a_holder("").await;
    assert!(
        started.elapsed() < Duration::from_millis(1000),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(out.exit_code, Some(0));
    assert_eq!(out.stdout.text, "done\n");
    assert_eq!(out.settlement, Settlement::DrainGrace);
    assert!(
        signal::pid_is_live(holder),
        "the pipe holder keeps running, as in the seeds"
    );
    cleanup_pid(holder).await;
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

/// Catalogue: PL-21.
#[actix_rt::test]
async fn each_stream_has_its_own_cap() {
    let out = run_once(
        "printf \"%.0sx\" $(seq 1 500); printf \"%.0se\" $(seq 1 500) >&2",
        |spec| {
            spec.stdout_max_bytes = 500;
            spec.stderr_max_bytes = 100;
        },
    )
    .await;
    assert!(!out.stdout.truncated);
    assert_eq!(out.stdout.text, "x".repeat(500));
    assert!(out.stderr.truncated);
    assert!(out.stderr.text.len() <= 100);
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
    let out = run_once("printf \"%.0sx\" $(seq 1 500)", |spec| {
        spec.stdout_max_bytes = 500;
    })
    .await;
    assert!(!out.stdout.truncated);
    assert_eq!(out.stdout.text.len(), 500);
    assert_eq!(out.stdout.spill_path, None);
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

/// Catalogue: PL-43, with the mode dsh chose instead of the seeds' 0700 (docs/CONTRACT.md, "Where dsh
/// differs"): 0300, its files opened by name but not listed by a command of the same user.
#[actix_rt::test]
async fn default_private_spill_dir_is_0300_and_removed_at_shutdown() {
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
        0o300
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
    let signal = run_aborted(&h, Duration::from_millis(50), "stop")
        .await
        .signal;
    assert_eq!(signal.as_deref(), Some("SIGTERM"));
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
