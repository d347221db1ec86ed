//! Model-visible text: foreground results, background reads, status lines, kill replies and
//! completion notices in the `bash_output`/`bash_kill` dialect. `docs/CONTRACT.md` lists every string.

use dsh_bash::{
    BashRunResult, CollectedOutput, SandboxFacts, TaskOutput, TaskStatus, merge_streams,
};

/// The hint after a denial when the composition offers escalation (docs/CONTRACT.md, `bash`).
pub const ESCALATION_HINT: &str = "[sandbox: escalation available — retry this exact command once with sandbox_permissions (the narrowest wider mode that suffices) + justification; the approval prompt asks the user]";

/// `[sandbox: file access denied under <mode> mode]`.
pub fn denial_marker(facts: &SandboxFacts) -> String {
    format!("[sandbox: file access denied under {} mode]", facts.mode)
}

/// `[sandbox: the sandbox runner itself failed under <mode> mode — …]`.
pub fn runner_failure_marker(facts: &SandboxFacts) -> String {
    format!(
        "[sandbox: the sandbox runner itself failed under {} mode — the command did not run; this is a sandbox problem, not a command failure]",
        facts.mode
    )
}

/// The sandbox markers of settled facts: the runner-failure marker, or the denial marker and (when
/// `escalation` is offered and a wider mode exists) the escalation hint; none otherwise.
pub fn sandbox_markers(facts: Option<&SandboxFacts>, escalation: bool) -> Vec<String> {
    let Some(facts) = facts else {
        return Vec::new();
    };
    if facts.runner_failed {
        return vec![runner_failure_marker(facts)];
    }
    if !facts.denied {
        return Vec::new();
    }
    let mut markers = vec![denial_marker(facts)];
    if escalation && !facts.mode.wider().is_empty() {
        markers.push(ESCALATION_HINT.to_owned());
    }
    markers
}

/// A stream's text, with the truncation marker and spill path when its head was dropped.
fn stream_text(output: &CollectedOutput) -> String {
    if !output.truncated {
        return output.text.clone();
    }
    let path = output.spill_path.as_ref().map(|p| p.display().to_string());
    format!(
        "{}\n[output truncated; full output: {}]",
        output.text,
        path.as_deref().unwrap_or("(unavailable)")
    )
}

/// stdout, then a `[stderr]` section, then the markers; the exit marker is always last. No
/// escalation hint (see [`render_result_with`]).
pub fn render_result(result: &BashRunResult) -> String {
    render_result_with(result, false)
}

/// [`render_result`], with the escalation hint after a denial when `escalation` is offered.
pub fn render_result_with(result: &BashRunResult, escalation: bool) -> String {
    let mut body = merge_streams(stream_text(&result.stdout), &stream_text(&result.stderr));
    if body.is_empty() {
        body.push_str("(no output)");
    }
    let mut markers = sandbox_markers(result.sandbox.as_ref(), escalation);
    // Reported however the process ended: a command can trap SIGTERM and exit 0 after our timer fired.
    if result.ending.timed_out() {
        markers.push(format!("[timed out after {}ms]", result.timeout_ms));
    }
    match (&result.signal, result.exit_code) {
        _ if result.oom_killed => markers.push("[killed: out of memory]".to_owned()),
        (Some(signal), _) => markers.push(format!("[killed by signal: {signal}]")),
        (None, Some(0)) => {}
        (None, Some(code)) => markers.push(format!("[exit code: {code}]")),
        (None, None) => markers.push("[exit code: unknown]".to_owned()),
    }
    if markers.is_empty() {
        return body;
    }
    if !body.ends_with('\n') {
        body.push('\n');
    }
    body + &markers.join("\n")
}

/// `[status: queued]`, `[status: running]`, `[status: completed, exit code: N]`, `[status: killed by SIGTERM]`, `[status: killed]`,
/// `[status: killed: out of memory]`.
pub fn status_line(status: &TaskStatus) -> String {
    match status {
        TaskStatus::Queued => "[status: queued]".to_owned(),
        TaskStatus::Running => "[status: running]".to_owned(),
        TaskStatus::Completed { exit_code } => {
            format!("[status: completed, exit code: {exit_code}]")
        }
        TaskStatus::Killed {
            signal: Some(signal),
        } => format!("[status: killed by {signal}]"),
        TaskStatus::Killed { signal: None } => "[status: killed]".to_owned(),
        TaskStatus::OutOfMemory => "[status: killed: out of memory]".to_owned(),
    }
}

/// A `bash_output` reply: the delta or `(no new output)`, the loss notice, then the status line. No
/// escalation hint (see [`render_read_with`]).
pub fn render_read(output: &TaskOutput, status: &TaskStatus) -> String {
    render_read_with(output, status, false)
}

/// [`render_read`], then — once the task has ended — its sandbox markers (runner failure, or denial
/// and the escalation hint when `escalation` is offered), each on its own line, on every read.
pub fn render_read_with(output: &TaskOutput, status: &TaskStatus, escalation: bool) -> String {
    render_read_input(output, status, dsh_tasks::TaskInput::None, escalation)
}

/// The reply of a foreground call whose command waits for input (issue 22): the output so far (or
/// `(no output)`), the loss notice, then
/// `[waiting for input; moved to background task <id>; answer with bash_write]` (`hidden input`
/// at a password prompt).
pub fn render_waiting(output: &TaskOutput, task_id: &str, hidden: bool) -> String {
    let kind = if hidden { "hidden input" } else { "input" };
    with_loss_notice(output, "(no output)")
        + &format!(
            "[waiting for {kind}; moved to background task {task_id}; answer with bash_write]"
        )
}

/// A read's status line, saying `[status: waiting for input]` (or `… hidden input`) for a
/// running task that waits for input.
pub fn status_line_with_input(status: &TaskStatus, input: dsh_tasks::TaskInput) -> String {
    match input {
        dsh_tasks::TaskInput::Waiting if status.is_running() => {
            "[status: waiting for input]".to_owned()
        }
        dsh_tasks::TaskInput::WaitingHidden if status.is_running() => {
            "[status: waiting for hidden input]".to_owned()
        }
        _ => status_line(status),
    }
}

/// [`render_read_with`], with the status line saying whether the task waits for input.
pub fn render_read_input(
    output: &TaskOutput,
    status: &TaskStatus,
    input: dsh_tasks::TaskInput,
    escalation: bool,
) -> String {
    let mut text = with_loss_notice(output, "(no new output)");
    text.push_str(&status_line_with_input(status, input));
    if !status.is_running() {
        for marker in sandbox_markers(output.sandbox.as_ref(), escalation) {
            text.push('\n');
            text.push_str(&marker);
        }
    }
    text
}

/// The reply of a foreground call that reached its timeout under `on_timeout: background`: the
/// output so far (or `(no output)`), the loss notice, then
/// `[still running after <N>ms; moved to background task <id>; read it with bash_output]`.
pub fn render_moved(output: &TaskOutput, timeout_ms: u64, task_id: &str) -> String {
    with_loss_notice(output, "(no output)")
        + &format!(
            "[still running after {timeout_ms}ms; moved to background task {task_id}; read it with \
             bash_output]"
        )
}

/// The delta (or `empty` when there is none), the loss notice, and a final newline.
fn with_loss_notice(output: &TaskOutput, empty: &str) -> String {
    let mut text = if output.delta.is_empty() {
        empty.to_owned()
    } else {
        output.delta.clone()
    };
    if output.lossy {
        let paths: Vec<String> = output
            .spill_paths
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        let paths = if paths.is_empty() {
            "(unavailable)".to_owned()
        } else {
            paths.join(", ")
        };
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!(
            "[some output was dropped from memory; full output: {paths}]"
        ));
    }
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text
}

/// The completion notice injected into the owner's session, naming what the task left running.
pub fn render_notice(
    task_id: &str,
    status: &TaskStatus,
    left: Option<&dsh_tasks::LeftRunning>,
) -> String {
    let mut text = format!(
        "background bash task {task_id} finished {}. Read its output with bash_output.",
        status_line(status)
    );
    if let Some(left) = left {
        text.push(' ');
        text.push_str(&left_running_line(left));
    }
    text
}

/// `[left running: pid 4242 (node server.js); stop it with bash_kill bash-3]` (`them` for several).
pub fn left_running_line(left: &dsh_tasks::LeftRunning) -> String {
    let them = if left.pids.len() == 1 { "it" } else { "them" };
    format!(
        "[left running: {}; stop {them} with bash_kill {}]",
        left.description, left.task_id
    )
}

/// The `bash` reply for a background start.
pub fn render_started(task_id: &str) -> String {
    format!("started background task {task_id}")
}

/// The `bash_kill` reply.
pub fn render_kill(task_id: &str, killed: bool) -> String {
    if killed {
        format!("killed background task {task_id}")
    } else {
        format!("task {task_id} had already finished")
    }
}
