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

/// Catalogue: TB-46.
#[test]
fn lossless_delta_verbatim() {
    assert_eq!(
        render_read(&read("out\n", false, &[]), &RUNNING),
        "out\n[status: running]"
    );
    assert_eq!(
        render_read(&read("", false, &[]), &RUNNING),
        "(no new output)\n[status: running]"
    );
}

/// Catalogue: TB-47.
#[test]
fn loss_notice_with_paths() {
    assert_eq!(
        render_read(&read("out\n", true, &["/spill/out.log"]), &RUNNING),
        "out\n[some output was dropped from memory; full output: /spill/out.log]\n[status: running]"
    );
    assert_eq!(
        render_read(
            &read("out\n", true, &["/spill/out.log", "/spill/err.log"]),
            &RUNNING
        ),
        "out\n[some output was dropped from memory; full output: /spill/out.log, /spill/err.log]\n[status: running]"
    );
}

/// Catalogue: TB-48, LG-04.
#[test]
fn loss_notice_unavailable() {
    assert_eq!(
        render_read(&read("tail", true, &[]), &RUNNING),
        "tail\n[some output was dropped from memory; full output: (unavailable)]\n[status: running]"
    );
}

/// Catalogue: TB-49.
#[test]
fn empty_lossy_delta() {
    assert_eq!(
        render_read(&read("", true, &["/spill/err.log"]), &RUNNING),
        "(no new output)\n[some output was dropped from memory; full output: /spill/err.log]\n[status: running]"
    );
}

/// Catalogue: TB-50.
#[test]
fn separator_only_when_missing() {
    let expected = "tail\n[some output was dropped from memory; full output: (unavailable)]\n[status: running]";
    assert_eq!(render_read(&read("tail", true, &[]), &RUNNING), expected);
    assert_eq!(render_read(&read("tail\n", true, &[]), &RUNNING), expected);
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

/// Catalogue: TB-61.
#[test]
fn stderr_alone_is_rendered_under_its_marker() {
    let r = BashRunResult {
        stderr: text("err\n"),
        ..base()
    };
    assert_eq!(render_result(&r), "[stderr]\nerr\n");
}

/// Catalogue: TB-62.
#[test]
fn stdout_and_stderr_without_newlines() {
    let r = BashRunResult {
        stdout: text("out"),
        stderr: text("err"),
        ..base()
    };
    assert_eq!(render_result(&r), "out\n[stderr]\nerr");
}

/// Catalogue: TB-63.
#[test]
fn a_non_zero_exit_is_marked_with_its_code() {
    let r = BashRunResult {
        exit_code: Some(7),
        stdout: text("x"),
        ..base()
    };
    assert_eq!(render_result(&r), "x\n[exit code: 7]");
}

/// Catalogue: TB-64.
#[test]
fn a_signal_death_is_marked_with_its_signal() {
    let r = BashRunResult {
        exit_code: None,
        signal: Some("SIGKILL".into()),
        ..base()
    };
    assert_eq!(
        render_result(&r),
        "(no output)\n[killed by signal: SIGKILL]"
    );
}

/// Catalogue: TB-65.
#[test]
fn timed_out_exit_0() {
    let r = BashRunResult {
        ending: RunEnding::TimedOut,
        ..base()
    };
    assert_eq!(render_result(&r), "(no output)\n[timed out after 1000ms]");
}

/// Catalogue: TB-66.
#[test]
fn timed_out_and_sigterm() {
    let r = BashRunResult {
        ending: RunEnding::TimedOut,
        exit_code: None,
        signal: Some("SIGTERM".into()),
        ..base()
    };
    assert_eq!(
        render_result(&r),
        "(no output)\n[timed out after 1000ms]\n[killed by signal: SIGTERM]"
    );
}

/// Catalogue: TB-67.
#[test]
fn truncated_without_path() {
    let r = BashRunResult {
        stdout: CollectedOutput {
            text: "tail".into(),
            truncated: true,
            spill_path: None,
        },
        ..base()
    };
    assert_eq!(
        render_result(&r),
        "tail\n[output truncated; full output: (unavailable)]"
    );
}

#[test]
fn notice_kill_and_start_texts() {
    assert_eq!(
        render_notice("bash-2", &TaskStatus::Completed { exit_code: 0 }),
        "background bash task bash-2 finished [status: completed, exit code: 0]. Read its output with bash_output."
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
