//! Machine-readable results beside the model-visible text: the facts a client would otherwise have to
//! parse out of the markers (exit code, signal, timeout, spill paths, task id), and the JSON Schema of
//! each tool's object, so an MCP server can advertise `outputSchema` and send `structuredContent`.
//!
//! The text a model sees is rendered elsewhere (`render.rs`) and is not affected by anything here.

use dsh_bash::{
    BashRunResult, CollectedOutput, PeekSnapshot, SandboxFacts, TaskOutput, TaskStatus,
};
use serde_json::{Value, json};

/// `{mode, denied, enforcement?, runner_failed?}`: the optional facts only when supplied (TB-44).
pub fn sandbox_structured(facts: &SandboxFacts) -> Value {
    let mut value = json!({"mode": facts.mode.as_str(), "denied": facts.denied});
    if let Some(enforcement) = facts.enforcement {
        value["enforcement"] = json!(enforcement.as_str());
    }
    if facts.runner_failed {
        value["runner_failed"] = json!(true);
    }
    value
}

fn stream(output: &CollectedOutput, bytes: Option<u64>) -> Value {
    json!({
        "bytes": bytes.unwrap_or(output.text.len() as u64),
        "truncated": output.truncated,
        "spill_path": output.spill_path.as_ref().map(|p| p.display().to_string()),
    })
}

/// A foreground `bash` result. `totals` are the whole-stream byte counts when known (else the bytes
/// kept in memory are reported).
pub fn bash_structured(
    result: &BashRunResult,
    duration_ms: u64,
    totals: Option<&PeekSnapshot>,
) -> Value {
    let mut value = json!({
        "background": false,
        "exit_code": result.exit_code,
        "signal": result.signal,
        "out_of_memory": result.oom_killed,
        "timed_out": result.timed_out,
        "aborted": result.aborted,
        "timeout_ms": result.timeout_ms,
        "duration_ms": duration_ms,
        "stdout": stream(&result.stdout, totals.map(|t| t.stdout_bytes)),
        "stderr": stream(&result.stderr, totals.map(|t| t.stderr_bytes)),
    });
    if let Some(facts) = &result.sandbox {
        value["sandbox"] = sandbox_structured(facts);
    }
    value
}

/// A foreground `bash` call that reached its timeout and became background task `task_id`.
pub fn moved_structured(task_id: &str, timeout_ms: u64) -> Value {
    json!({"background": true, "task_id": task_id, "timed_out": true, "timeout_ms": timeout_ms})
}

/// A `bash` call that started a background task.
pub fn started_structured(task_id: &str) -> Value {
    json!({"background": true, "task_id": task_id})
}

fn status_fields(status: &TaskStatus) -> (&'static str, Option<i32>, Option<&str>) {
    match status {
        TaskStatus::Queued => ("queued", None, None),
        TaskStatus::Running => ("running", None, None),
        TaskStatus::Completed { exit_code } => ("completed", Some(*exit_code), None),
        TaskStatus::Killed { signal } => ("killed", None, signal.as_deref()),
        TaskStatus::OutOfMemory => ("killed", None, Some("SIGKILL")),
    }
}

/// A `bash_output` read.
pub fn read_structured(task_id: &str, output: &TaskOutput, status: &TaskStatus) -> Value {
    let (status_name, exit_code, signal) = status_fields(status);
    let mut value = json!({
        "task_id": task_id,
        "output": output.delta,
        "output_dropped": output.lossy,
        "spill_paths": output.spill_paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        "status": status_name,
        "exit_code": exit_code,
        "signal": signal,
        "out_of_memory": matches!(status, TaskStatus::OutOfMemory),
    });
    if let Some(facts) = output.sandbox.as_ref().filter(|_| !status.is_running()) {
        value["sandbox"] = sandbox_structured(facts);
    }
    value
}

/// A `bash_kill` reply.
pub fn kill_structured(task_id: &str, killed: bool) -> Value {
    let outcome = if killed { "killed" } else { "already_finished" };
    json!({"task_id": task_id, "outcome": outcome})
}

/// The JSON Schema of a tool's structured result (`None` for a tool this crate does not define).
pub fn output_schema(tool: &str) -> Option<Value> {
    let nullable_int = json!({"type": ["integer", "null"]});
    let nullable_str = json!({"type": ["string", "null"]});
    let stream = json!({
        "type": "object",
        "properties": {
            "bytes": {"type": "integer", "minimum": 0, "description": "Bytes the stream produced."},
            "truncated": {"type": "boolean", "description": "The head was dropped from the text; the spill file has it all."},
            "spill_path": {"type": ["string", "null"], "description": "File holding the full stream, when truncated."},
        },
        "required": ["bytes", "truncated", "spill_path"],
    });
    let sandbox = json!({
        "type": "object",
        "description": "The sandbox facts, when the executor sandboxes.",
        "properties": {
            "mode": {"type": "string", "enum": ["read-only", "workspace-write", "danger-full-access"]},
            "denied": {"type": "boolean", "description": "The command failed on a sandbox denial."},
            "enforcement": {"type": "string", "enum": ["full", "partial"]},
            "runner_failed": {"type": "boolean", "description": "The sandbox runner itself failed."},
        },
        "required": ["mode", "denied"],
    });
    let schema = match tool {
        "bash" => json!({
            "type": "object",
            "properties": {
                "background": {"type": "boolean", "description": "The call started a background task."},
                "task_id": {"type": "string", "description": "The background task's id."},
                "exit_code": nullable_int,
                "signal": {"type": ["string", "null"], "description": "The signal that ended the command."},
                "out_of_memory": {"type": "boolean", "description": "The kernel killed the command, or a process of it, for its memory limit (the text says `[killed: out of memory]`); `exit_code` is then the shell's own."},
                "timed_out": {"type": "boolean"},
                "aborted": {"type": "boolean"},
                "timeout_ms": {"type": "integer", "minimum": 0},
                "duration_ms": {"type": "integer", "minimum": 0},
                "stdout": stream,
                "stderr": stream,
                "sandbox": sandbox,
            },
            "required": ["background"],
        }),
        "bash_output" => json!({
            "type": "object",
            "properties": {
                "task_id": {"type": "string"},
                "output": {"type": "string", "description": "Output produced since the previous read."},
                "output_dropped": {"type": "boolean", "description": "Some output was dropped from memory."},
                "spill_paths": {"type": "array", "items": {"type": "string"}},
                "status": {"type": "string", "enum": ["queued", "running", "completed", "killed"]},
                "exit_code": nullable_int,
                "signal": nullable_str,
                "out_of_memory": {"type": "boolean", "description": "The kernel killed the task for its memory limit (`[status: killed: out of memory]`)."},
                "sandbox": sandbox,
            },
            "required": ["task_id", "output", "output_dropped", "status"],
        }),
        "bash_kill" => json!({
            "type": "object",
            "properties": {
                "task_id": {"type": "string"},
                "outcome": {"type": "string", "enum": ["killed", "already_finished"]},
            },
            "required": ["task_id", "outcome"],
        }),
        _ => return None,
    };
    Some(schema)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_has_a_schema_and_read_results_name_their_status() {
        for tool in ["bash", "bash_output", "bash_kill"] {
            assert_eq!(output_schema(tool).unwrap()["type"], "object");
        }
        assert!(output_schema("nope").is_none());
        let output = TaskOutput {
            delta: "hi\n".into(),
            lossy: false,
            spill_paths: vec![],
            sandbox: None,
        };
        let read = read_structured("bash-1", &output, &TaskStatus::Completed { exit_code: 3 });
        assert_eq!(read["status"], "completed");
        assert_eq!(read["exit_code"], 3);
        assert_eq!(
            kill_structured("bash-1", false)["outcome"],
            "already_finished"
        );
    }
}
