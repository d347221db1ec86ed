//! `dsh run`: exact output and exit status for a result, a non-zero exit, a timeout, a bad workdir
//! and bad usage.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dsh"))
        .args(args)
        .output()
        .expect("run dsh")
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

#[test]
fn success_prints_the_model_text_and_exits_0() {
    let out = run(&["run", "--", "echo", "hello"]);
    assert_eq!(
        (stdout(&out).as_str(), out.status.code()),
        ("hello\n", Some(0))
    );
}

#[test]
fn a_non_zero_exit_is_a_result_with_its_marker() {
    let out = run(&["run", "--", "echo out; echo oops >&2; exit 3"]);
    assert_eq!(
        (stdout(&out).as_str(), out.status.code()),
        ("out\n[stderr]\noops\n[exit code: 3]", Some(0))
    );
}

#[test]
fn a_timeout_is_a_result_with_both_markers() {
    let out = run(&[
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
    let out = run(&["run", "--workdir", "/nonexistent-dsh", "--", "true"]);
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
    assert_eq!(run(&["run"]).status.code(), Some(2), "no command");
    assert_eq!(
        run(&["run", "--timeout-ms", "soon", "--", "true"])
            .status
            .code(),
        Some(2)
    );
    let out = run(&["run", "--timeout-ms", "0", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("bash-local: timeout_ms must be a positive finite number")
    );
    assert_eq!(
        run(&["run", "--cwd", "/nonexistent-dsh", "--", "true"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(run(&["frobnicate"]).status.code(), Some(2));
}

#[test]
fn help_states_the_defaults() {
    let help = stdout(&run(&["run", "--help"]));
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
