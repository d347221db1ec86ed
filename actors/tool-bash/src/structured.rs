//! The JSON Schema of each tool's structured result, so an MCP server can advertise
//! `outputSchema`; the object itself is [`crate::ToolOutcome`] serialized (`outcome.rs`), and the
//! tests below hold the two together.
//!
//! The text a model sees is rendered elsewhere (`render.rs`) and is not affected by anything here.

use dsh_bash::SandboxFacts;
use serde_json::{Value, json};

use crate::outcome::SandboxView;

/// `{mode, denied, enforcement?, runner_failed?}`: the optional facts only when they hold.
pub fn sandbox_structured(facts: &SandboxFacts) -> Value {
    serde_json::to_value(SandboxView(facts)).unwrap_or_default()
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
                "waiting_for_input": {"type": "boolean", "description": "The command waits for input and became the background task `task_id`; answer with bash_write."},
                "input_hidden": {"type": "boolean", "description": "The input it waits for is hidden (a password prompt: terminal echo off)."},
                "left_running": {
                    "type": "object",
                    "description": "Processes the command left running (they held its output open past the drain grace), now the caller's task: bash_kill task_id stops them.",
                    "properties": {
                        "task_id": {"type": "string"},
                        "pids": {"type": "array", "items": {"type": "integer"}},
                    },
                    "required": ["task_id", "pids"],
                },
            },
            "required": ["background"],
        }),
        "bash_output" | "bash_write" => json!({
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
                "waiting_for_input": {"type": "boolean", "description": "Present for a task that takes input (tty or open stdin): it waits for input now."},
                "input_hidden": {"type": "boolean", "description": "Present for a task that takes input: the input it waits for is hidden (a password prompt)."},
                "left_running": {
                    "type": "object",
                    "description": "Processes the task left running when it ended (a daemon that outlived it), now the caller's task: bash_kill task_id stops them.",
                    "properties": {
                        "task_id": {"type": "string"},
                        "pids": {"type": "array", "items": {"type": "integer"}},
                    },
                    "required": ["task_id", "pids"],
                },
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
    use std::path::PathBuf;
    use std::time::Duration;

    use dsh_bash::{SandboxMode, TaskStatus};
    use dsh_tasks::Enforcement;

    use super::*;
    use crate::outcome::{
        Ending, KillResult, LeftRunning, Ran, Read, Signal, StreamFacts, ToolOutcome,
    };

    /// Checks `value` against the subset of JSON Schema `output_schema` uses (`type`,
    /// `properties`, `required`, `enum`, `items`, `minimum`), and that every key of an object is a
    /// declared property: the type may say nothing the schema does not.
    fn check(value: &Value, schema: &Value, at: &str) {
        let types: Vec<&str> = match &schema["type"] {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        let kind = match value {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Number(n) if n.is_u64() || n.is_i64() => "integer",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        };
        assert!(
            types.is_empty() || types.contains(&kind),
            "{at}: {kind} where the schema says {types:?}"
        );
        if let Some(allowed) = schema["enum"].as_array() {
            assert!(allowed.contains(value), "{at}: {value} not in {allowed:?}");
        }
        if let Some(minimum) = schema["minimum"].as_i64() {
            assert!(
                value.as_i64().is_none_or(|v| v >= minimum),
                "{at}: below minimum"
            );
        }
        if let Value::Array(items) = value {
            for (i, item) in items.iter().enumerate() {
                check(item, &schema["items"], &format!("{at}[{i}]"));
            }
        }
        if let Value::Object(object) = value {
            let properties = schema["properties"].as_object().expect("properties");
            for required in schema["required"].as_array().into_iter().flatten() {
                let key = required.as_str().expect("a name");
                assert!(object.contains_key(key), "{at}: missing required {key}");
            }
            for (key, field) in object {
                let Some(field_schema) = properties.get(key) else {
                    panic!("{at}: {key} is not in the schema");
                };
                check(field, field_schema, &format!("{at}.{key}"));
            }
        }
    }

    fn stream(spill: Option<&str>) -> StreamFacts {
        StreamFacts {
            bytes: 12,
            truncated: spill.is_some(),
            spill_path: spill.map(PathBuf::from),
        }
    }

    fn ran(ending: Ending, signal: Option<&str>, sandbox: Option<SandboxFacts>) -> ToolOutcome {
        ToolOutcome::Ran(Ran {
            ending,
            exit_code: signal.is_none().then_some(3),
            signal: signal.map(|s| Signal::from(s.to_owned())),
            out_of_memory: false,
            timeout: Duration::from_millis(120_000),
            duration: Duration::from_millis(7),
            stdout: stream(Some("/tmp/spill/out")),
            stderr: stream(None),
            sandbox,
            left_running: None,
        })
    }

    fn read(status: TaskStatus, sandbox: Option<SandboxFacts>) -> ToolOutcome {
        ToolOutcome::Read(Read {
            input: dsh_tasks::TaskInput::None,
            task_id: "bash-1".into(),
            output: "tick\n".into(),
            output_dropped: true,
            spill_paths: vec![PathBuf::from("/tmp/spill/1")],
            status,
            sandbox,
            left_running: None,
        })
    }

    /// Every shape of every tool's outcome, serialized, matches that tool's schema.
    #[test]
    fn every_outcome_serializes_to_its_tools_schema() {
        let facts = SandboxFacts {
            mode: SandboxMode::ReadOnly,
            denied: true,
            enforcement: Some(Enforcement::Full),
            runner_failed: true,
        };
        let bash = [
            ran(Ending::Exited, None, None),
            ran(Ending::TimedOut, Some("SIGTERM"), None),
            ran(Ending::Aborted, Some("SIGTERM"), Some(facts.clone())),
            {
                let mut left = ran(Ending::Exited, None, None);
                if let ToolOutcome::Ran(ran) = &mut left {
                    ran.left_running = Some(Box::new(LeftRunning {
                        task_id: "bash-5".into(),
                        pids: vec![4242, 4243],
                    }));
                }
                left
            },
            ToolOutcome::Started {
                task_id: "bash-2".into(),
            },
            ToolOutcome::MovedToBackground {
                task_id: "bash-3".into(),
                timeout: Duration::from_millis(200),
            },
        ];
        let output = [
            read(TaskStatus::Queued, None),
            read(TaskStatus::Running, None),
            read(TaskStatus::Completed { exit_code: 1 }, Some(facts)),
            read(
                TaskStatus::Killed {
                    signal: Some("SIGTERM".into()),
                },
                None,
            ),
            read(TaskStatus::Killed { signal: None }, None),
            read(TaskStatus::OutOfMemory, None),
            {
                let mut left = read(TaskStatus::Completed { exit_code: 0 }, None);
                if let ToolOutcome::Read(read) = &mut left {
                    read.left_running = Some(Box::new(LeftRunning {
                        task_id: "bash-6".into(),
                        pids: vec![4244],
                    }));
                }
                left
            },
        ];
        let kill =
            [KillResult::Killed, KillResult::AlreadyFinished].map(|result| ToolOutcome::Kill {
                task_id: "bash-4".into(),
                result,
            });
        for (tool, outcomes) in [
            ("bash", &bash[..]),
            ("bash_output", &output[..]),
            ("bash_kill", &kill[..]),
        ] {
            let schema = output_schema(tool).expect("a schema");
            for outcome in outcomes {
                check(&outcome.structured(), &schema, tool);
            }
        }
        assert!(output_schema("nope").is_none());
    }

    /// The serialized fields keep the names, order and values the structured content has always had.
    #[test]
    fn outcomes_serialize_field_for_field() {
        assert_eq!(
            serde_json::to_string(&ran(Ending::TimedOut, Some("SIGTERM"), None)).unwrap(),
            r#"{"background":false,"exit_code":null,"signal":"SIGTERM","out_of_memory":false,"timed_out":true,"aborted":false,"timeout_ms":120000,"duration_ms":7,"stdout":{"bytes":12,"truncated":true,"spill_path":"/tmp/spill/out"},"stderr":{"bytes":12,"truncated":false,"spill_path":null}}"#
        );
        let moved = ToolOutcome::MovedToBackground {
            task_id: "bash-3".into(),
            timeout: Duration::from_millis(200),
        };
        assert_eq!(
            moved.structured().to_string(),
            r#"{"background":true,"task_id":"bash-3","timed_out":true,"timeout_ms":200}"#
        );
        assert_eq!(
            read(TaskStatus::OutOfMemory, None).structured().to_string(),
            r#"{"task_id":"bash-1","output":"tick\n","output_dropped":true,"spill_paths":["/tmp/spill/1"],"status":"killed","exit_code":null,"signal":"SIGKILL","out_of_memory":true}"#
        );
        let kill = ToolOutcome::Kill {
            task_id: "bash-4".into(),
            result: KillResult::AlreadyFinished,
        };
        assert_eq!(
            kill.structured().to_string(),
            r#"{"task_id":"bash-4","outcome":"already_finished"}"#
        );
    }
}
