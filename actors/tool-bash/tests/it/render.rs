//! Rendering units (cases TB-46…TB-67) and the legacy status lines (LG-21, LG-22), in the
//! `bash_output` dialect.

use std::path::PathBuf;

use dsh_bash::{BashRunResult, CollectedOutput, RunEnding, TaskOutput, TaskStatus};
use dsh_tool_bash::*;

fn base() -> BashRunResult {
    BashRunResult {
        exit_code: Some(0),
        signal: None,
        ending: RunEnding::Exited,
        timeout_ms: 1000,
        stdout: CollectedOutput::default(),
        stderr: CollectedOutput::default(),
        oom_killed: false,
        sandbox: None,
        left_running: None,
    }
}

fn text(s: &str) -> CollectedOutput {
    CollectedOutput {
        text: s.into(),
        ..Default::default()
    }
}

fn read(delta: &str, lossy: bool, paths: &[&str]) -> TaskOutput {
    TaskOutput {
        delta: delta.into(),
        lossy,
        spill_paths: paths.iter().map(PathBuf::from).collect(),
        sandbox: None,
    }
}

const RUNNING: TaskStatus = TaskStatus::Running;

/// Catalogue: TB-46, TB-47, TB-48, LG-04, TB-49, TB-50.
///
/// A read renders its delta verbatim (TB-46), `(no new output)` when empty (TB-46, TB-49), and after
/// output was dropped from memory a loss notice naming the spill files (TB-47, TB-49) or
/// `(unavailable)` (TB-48, LG-04), on a line of its own whether or not the delta ends one (TB-50).
#[test]
fn a_read_renders_its_delta_and_any_loss_notice() {
    let unavailable = "tail\n[some output was dropped from memory; full output: (unavailable)]\n[status: running]";
    let cases: [(&str, bool, &[&str], &str); 8] = [
        // TB-46: lossless, verbatim or empty.
        ("out\n", false, &[], "out\n[status: running]"),
        ("", false, &[], "(no new output)\n[status: running]"),
        // TB-47: the loss notice names the spill files.
        (
            "out\n",
            true,
            &["/spill/out.log"],
            "out\n[some output was dropped from memory; full output: /spill/out.log]\n[status: running]",
        ),
        (
            "out\n",
            true,
            &["/spill/out.log", "/spill/err.log"],
            "out\n[some output was dropped from memory; full output: /spill/out.log, /spill/err.log]\n[status: running]",
        ),
        // TB-48, LG-04: without a spill file the output is unavailable.
        ("tail", true, &[], unavailable),
        // TB-49: an empty lossy delta.
        (
            "",
            true,
            &["/spill/err.log"],
            "(no new output)\n[some output was dropped from memory; full output: /spill/err.log]\n[status: running]",
        ),
        // TB-50: the separator only when the delta does not end its line.
        ("tail", true, &[], unavailable),
        ("tail\n", true, &[], unavailable),
    ];
    for (delta, lossy, paths, expected) in cases {
        assert_eq!(
            render_read(&read(delta, lossy, paths), &RUNNING),
            expected,
            "{delta:?}, lossy {lossy}, {paths:?}"
        );
    }
}

/// Catalogue: TB-52 to TB-55, LG-21, LG-22.
#[test]
fn status_lines_name_the_ending() {
    assert_eq!(
        status_line(&TaskStatus::Killed {
            signal: Some("SIGTERM".into())
        }),
        "[status: killed by SIGTERM]"
    );
    assert_eq!(
        status_line(&TaskStatus::Killed { signal: None }),
        "[status: killed]"
    );
    assert_eq!(
        status_line(&TaskStatus::Completed { exit_code: 3 }),
        "[status: completed, exit code: 3]"
    );
    assert_eq!(
        status_line(&TaskStatus::Completed { exit_code: 0 }),
        "[status: completed, exit code: 0]"
    );
    assert_eq!(status_line(&RUNNING), "[status: running]");
}

/// Catalogue: TB-61 to TB-67.
///
/// A foreground result renders stderr under its marker (TB-61, TB-62), a non-zero exit (TB-63), a
/// signal death (TB-64), a timeout with or without the signal (TB-65, TB-66), and a truncation
/// without a spill file (TB-67).
#[test]
fn a_result_renders_its_streams_and_how_it_ended() {
    let cases = [
        // TB-61: stderr alone is rendered under its marker.
        (
            BashRunResult {
                stderr: text("err\n"),
                ..base()
            },
            "[stderr]\nerr\n",
        ),
        // TB-62: stdout and stderr without newlines.
        (
            BashRunResult {
                stdout: text("out"),
                stderr: text("err"),
                ..base()
            },
            "out\n[stderr]\nerr",
        ),
        // TB-63: a non-zero exit is marked with its code.
        (
            BashRunResult {
                exit_code: Some(7),
                stdout: text("x"),
                ..base()
            },
            "x\n[exit code: 7]",
        ),
        // TB-64: a signal death is marked with its signal.
        (
            BashRunResult {
                exit_code: None,
                signal: Some("SIGKILL".into()),
                ..base()
            },
            "(no output)\n[killed by signal: SIGKILL]",
        ),
        // TB-65: timed out, exit 0.
        (
            BashRunResult {
                ending: RunEnding::TimedOut,
                ..base()
            },
            "(no output)\n[timed out after 1000ms]",
        ),
        // TB-66: timed out and killed by SIGTERM.
        (
            BashRunResult {
                ending: RunEnding::TimedOut,
                exit_code: None,
                signal: Some("SIGTERM".into()),
                ..base()
            },
            "(no output)\n[timed out after 1000ms]\n[killed by signal: SIGTERM]",
        ),
        // TB-67: truncated without a spill path.
        (
            BashRunResult {
                stdout: CollectedOutput {
                    text: "tail".into(),
                    truncated: true,
                    spill_path: None,
                },
                ..base()
            },
            "tail\n[output truncated; full output: (unavailable)]",
        ),
    ];
    for (result, expected) in cases {
        assert_eq!(render_result(&result), expected);
    }
}

#[test]
fn notice_kill_and_start_texts() {
    assert_eq!(
        render_notice("bash-2", &TaskStatus::Completed { exit_code: 0 }, None),
        "background bash task bash-2 finished [status: completed, exit code: 0]. Read its output with bash_output."
    );
    let left = dsh_tasks::LeftRunning {
        task_id: "bash-3".into(),
        description: "pid 4242 (node server.js)".into(),
        pids: vec![4242],
    };
    assert_eq!(
        render_notice(
            "bash-2",
            &TaskStatus::Completed { exit_code: 0 },
            Some(&left)
        ),
        "background bash task bash-2 finished [status: completed, exit code: 0]. Read its output with bash_output. \
         [left running: pid 4242 (node server.js); stop it with bash_kill bash-3]"
    );
    assert_eq!(render_kill("bash-1", true), "killed background task bash-1");
    assert_eq!(
        render_kill("bash-1", false),
        "task bash-1 had already finished"
    );
    assert_eq!(render_started("bash-9"), "started background task bash-9");
}

#[test]
fn dsh_home_precedence_and_expansion() {
    let home = Some(PathBuf::from("/home/u"));
    let cwd = PathBuf::from("/work");
    // TE-01/TE-02 analogues: config, then non-blank ambient, then ~/.dsh; relative made absolute.
    assert_eq!(
        resolve_dsh_home(
            Some("./cfg".as_ref()),
            Some("/amb".into()),
            home.clone(),
            &cwd
        ),
        PathBuf::from("/work/./cfg")
    );
    assert_eq!(
        resolve_dsh_home(None, Some("./ambient-dsh-home".into()), home.clone(), &cwd),
        PathBuf::from("/work/./ambient-dsh-home")
    );
    assert_eq!(
        resolve_dsh_home(None, Some("  ".into()), home.clone(), &cwd),
        PathBuf::from("/home/u/.dsh")
    );
    assert_eq!(
        resolve_dsh_home(Some("~/x".as_ref()), None, home.clone(), &cwd),
        PathBuf::from("/home/u/x")
    );
    assert_eq!(
        resolve_dsh_home(Some("~".as_ref()), None, home, &cwd),
        PathBuf::from("/home/u")
    );
}

#[test]
fn argument_parsing_ignores_extra_keys() {
    // `stdin` is a named argument since issue 22 ("closed" | "open"); bytes for stdin are not.
    let args = serde_json::json!({"command": "ls", "description": "d", "stdin": "closed", "env": {}, "timeoutMs": 5});
    assert_eq!(
        parse_bash_args(&args).unwrap(),
        BashArgs {
            command: "ls".into(),
            timeout: Some(std::time::Duration::from_millis(5)),
            workdir: None,
            run_in_background: false,
            escalation: None,
            input: dsh_tool_bash::CommandInput::Closed,
        }
    );
    assert_eq!(
        parse_task_id(&serde_json::json!({"task_id": ""}))
            .unwrap_err()
            .to_string(),
        "invalid task_id: expected a string, got \"\""
    );
}
