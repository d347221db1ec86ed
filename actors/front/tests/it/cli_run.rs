//! `dsh run`: exact output and exit status for a result, a non-zero exit, a timeout, a bad workdir
//! and bad usage.

use std::process::{Command, Output};

use crate::common::run_dsh;

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

#[test]
fn success_prints_the_model_text_and_exits_0() {
    let out = run_dsh(&["run", "--", "echo", "hello"]);
    assert_eq!(
        (stdout(&out).as_str(), out.status.code()),
        ("hello\n", Some(0))
    );
}

#[test]
fn a_non_zero_exit_is_a_result_with_its_marker() {
    let out = run_dsh(&["run", "--", "echo out; echo oops >&2; exit 3"]);
    assert_eq!(
        (stdout(&out).as_str(), out.status.code()),
        ("out\n[stderr]\noops\n[exit code: 3]", Some(0))
    );
}

#[test]
fn a_timeout_is_a_result_with_both_markers() {
    let out = run_dsh(&[
        "run",
        "--timeout-ms",
        "200",
        "--grace-ms",
        "300",
        "--",
        "sleep 30",
    ]);
    assert_eq!(
        (stdout(&out).as_str(), out.status.code()),
        (
            "(no output)\n[timed out after 200ms]\n[killed by signal: SIGTERM]",
            Some(0)
        )
    );
}

#[test]
fn a_bad_workdir_is_an_error_result_exit_1() {
    let out = run_dsh(&["run", "--workdir", "/nonexistent-dsh", "--", "true"]);
    assert_eq!(
        (stdout(&out).as_str(), out.status.code()),
        (
            "Error: workdir \"/nonexistent-dsh\" is not usable: ENOENT: No such file or directory (os error 2)",
            Some(1)
        )
    );
}

#[test]
fn bad_usage_exits_2() {
    assert_eq!(run_dsh(&["run"]).status.code(), Some(2), "no command");
    assert_eq!(
        run_dsh(&["run", "--timeout-ms", "soon", "--", "true"])
            .status
            .code(),
        Some(2)
    );
    let out = run_dsh(&["run", "--timeout-ms", "0", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("bash-local: timeout_ms must be a positive finite number")
    );
    assert_eq!(
        run_dsh(&["run", "--cwd", "/nonexistent-dsh", "--", "true"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(run_dsh(&["frobnicate"]).status.code(), Some(2));
}

/// A per-command limit under which bash cannot start is refused at start, naming the minimum: the
/// model would otherwise get every call back as a failure (at `--task-max-memory 1`, as the
/// sandbox's `SANDBOX_UNAVAILABLE` text).
#[test]
fn task_limits_too_small_to_run_bash_are_usage_errors_naming_the_minimum() {
    let cases: [(&[&str], &str); 5] = [
        (&["--task-max-pids", "0"], "at least 4 processes are needed"),
        (&["--task-max-pids", "3"], "at least 4 processes are needed"),
        (&["--task-max-memory", "0"], "at least 4MiB is needed"),
        (&["--task-max-memory", "1"], "at least 4MiB is needed"),
        (&["--task-max-memory", "1MiB"], "at least 4MiB is needed"),
    ];
    for (mode, tail) in [("run", &["--", "echo hi"][..]), ("jsonl", &[][..])] {
        for (flags, said) in cases {
            let out = Command::new(env!("CARGO_BIN_EXE_dsh"))
                .arg(mode)
                .args(flags)
                .args(tail)
                .stdin(std::process::Stdio::null())
                .output()
                .expect("run dsh");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{mode} {flags:?}: {stderr}");
            assert!(stderr.contains(said), "{mode} {flags:?}: {stderr}");
            assert!(stdout(&out).is_empty(), "{mode} {flags:?}: nothing ran");
        }
    }
    // The minimums themselves run a pipeline, where the host can limit at all.
    let out = run_dsh(&[
        "run",
        "--task-max-pids",
        "4",
        "--task-max-memory",
        "4MiB",
        "--",
        "echo hi; ls / | wc -l >/dev/null",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("is not available on this host") {
        eprintln!("skipping the accepted minimums: {}", stderr.trim());
        return;
    }
    assert_eq!(
        (stdout(&out).as_str(), out.status.code()),
        ("hi\n", Some(0)),
        "{stderr}"
    );
}

#[test]
fn help_states_the_defaults() {
    let help = stdout(&run_dsh(&["run", "--help"]));
    for default in [
        "[default: 120000]",
        "[default: 600000]",
        "[default: 64000]",
        "[default: 67108864]",
        "[default: 3000]",
    ] {
        assert!(help.contains(default), "{default} missing from:\n{help}");
    }
}

/// Starts `dsh run` on a command that ignores SIGTERM, with a call grace of a minute, and waits
/// until the command runs. Returns the child, the needle in the command's name, and its temp dir.
fn start_term_ignoring_run(
    shutdown_grace_ms: &str,
) -> (std::process::Child, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    let needle = format!("dsh-run-grace-{}-{shutdown_grace_ms}", std::process::id());
    let script = format!(
        "trap '' TERM; touch '{}'; exec -a {needle} sleep 300",
        ready.display()
    );
    let child = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .args([
            "run",
            "--grace-ms",
            "60000",
            "--shutdown-grace-ms",
            shutdown_grace_ms,
            // The workspace holds the ready file: a confined command's `/tmp` is its own.
            "--cwd",
            dir.path().to_str().unwrap(),
            "--",
            &script,
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        dsh_test_support::wait::wait_until(dsh_test_support::wait::SOON, || ready.exists()),
        "the command never started"
    );
    (child, needle, dir)
}

/// Waits (at most `limit`) for `child` to exit; kills it and fails if it does not.
fn exit_within(
    child: &mut std::process::Child,
    limit: std::time::Duration,
) -> std::process::ExitStatus {
    let mut status = None;
    dsh_test_support::wait::wait_until(limit, || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    match status {
        Some(status) => status,
        None => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("dsh run did not exit within {limit:?} of the signal");
        }
    }
}

/// Whatever still runs under `needle` is killed (so the test leaves nothing behind) and reported.
fn leftovers(needle: &str) -> Vec<i32> {
    let live = dsh_test_support::procfs::live_with_cmdline(needle);
    for pid in &live {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    live
}

fn sigterm(child: &std::process::Child) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
}

/// Issue 11: SIGTERM ends `dsh run` and everything it started within `--shutdown-grace-ms`, not
/// after the call's own SIGTERM-to-SIGKILL grace (a minute here), and the run still prints its
/// aborted result.
#[test]
fn sigterm_ends_a_run_within_the_shutdown_grace() {
    let (mut child, needle, _dir) = start_term_ignoring_run("300");
    sigterm(&child);
    let status = exit_within(&mut child, std::time::Duration::from_secs(10));
    let left = leftovers(&needle);
    assert!(
        left.is_empty(),
        "still running after dsh run exited: {left:?}"
    );
    let mut text = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut text).unwrap();
    assert_eq!(
        (text.as_str(), status.code()),
        ("Error: command aborted", Some(1))
    );
}

/// A second SIGTERM during a long shutdown grace SIGKILLs everything at once.
#[test]
fn a_second_sigterm_ends_a_run_at_once() {
    let (mut child, needle, _dir) = start_term_ignoring_run("60000");
    // Signals that arrive together count as one, so SIGTERM is repeated until dsh exits: the
    // first starts the (minute-long) shutdown grace, a later one must end it at once.
    let mut status = None;
    dsh_test_support::wait::wait_until(std::time::Duration::from_secs(30), || {
        sigterm(&child);
        status = child.try_wait().unwrap();
        status.is_some()
    });
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let left = leftovers(&needle);
    assert!(
        left.is_empty(),
        "still running after dsh run exited: {left:?}"
    );
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(1),
        "dsh run did not end within 30 s"
    );
}

/// dsh run by an ordinary user (no capability reads a directory without its read bit): commands run,
/// and an output past the cap spills into the private directory (mode 0300), whose path the result
/// names; nothing is left in the temp directory afterwards. (Opening the spill directory for reading
/// failed for a non-root owner once it was made unlistable, and every spawn failed with it.)
#[test]
fn an_ordinary_user_runs_commands_and_spills_output() {
    use std::os::unix::process::CommandExt;
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { nix::libc::geteuid() } != 0 {
        eprintln!("skipped: only root can start dsh as another user here");
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let nobody = 65534;
    std::os::unix::fs::chown(home.path(), Some(nobody), Some(nobody)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .args([
            "run",
            "--cwd",
            home.path().to_str().unwrap(),
            "--",
            "seq 1 30000",
        ])
        .env("TMPDIR", home.path())
        .env("HOME", home.path())
        .uid(nobody)
        .gid(nobody)
        .output()
        .expect("run dsh as nobody");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let printed = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(printed.contains("\n30000\n"), "{stderr}");
    assert!(
        printed.contains("[output truncated; full output: "),
        "{stderr}"
    );
    let left: Vec<_> = std::fs::read_dir(home.path())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with("dsh-"))
        .collect();
    assert!(left.is_empty(), "left in the temp directory: {left:?}");
}
