//! Run-time validation of model-made arguments. The schema is only advice to a model; what arrives is
//! whatever JSON it produced, so every field is checked before anything runs.
//!
//! Two layers, as in the seeds: schema violations, all collected and joined
//! (`invalid arguments: missing required property "command"; "timeoutMs" must be a number`), then value
//! checks, first failure wins. Unknown keys are ignored and never forwarded.

use serde_json::{Map, Value};

use crate::until::UntilPattern;

/// Validated `bash` arguments. `description` is display-only and not kept.
#[derive(Clone, Debug, PartialEq)]
pub struct BashArgs {
    /// The shell command; not blank.
    pub command: String,
    /// The requested timeout in milliseconds, if given (a positive finite number).
    pub timeout_ms: Option<f64>,
    /// The requested working directory, as the model wrote it.
    pub workdir: Option<String>,
    /// Start the command as a background task instead of waiting for it.
    pub run_in_background: bool,
    /// A one-shot escalation: the wider mode asked for and the model's one-sentence justification
    /// (both present, the justification not blank).
    pub escalation: Option<Escalation>,
}

/// `sandbox_permissions` + `justification`, paired and checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Escalation {
    /// The requested mode, as the model wrote it (one of the enum when the schema advertises it).
    pub mode: String,
    /// Why this exact command needs wider access.
    pub justification: String,
}

/// The modes `sandbox_permissions` may name.
pub const ESCALATION_MODES: [&str; 2] = ["workspace-write", "danger-full-access"];

#[derive(Clone, Copy)]
enum Kind {
    String,
    Number,
    Boolean,
    /// A string from a fixed list.
    OneOf(&'static [&'static str]),
}

impl Kind {
    fn matches(self, value: &Value) -> bool {
        match self {
            Kind::String => value.is_string(),
            Kind::Number => value.is_number(),
            Kind::Boolean => value.is_boolean(),
            Kind::OneOf(list) => value.as_str().is_some_and(|v| list.contains(&v)),
        }
    }

    fn noun(self) -> String {
        match self {
            Kind::String => "a string".into(),
            Kind::Number => "a number".into(),
            Kind::Boolean => "a boolean".into(),
            Kind::OneOf(list) => format!(
                "one of [{}]",
                list.iter()
                    .map(|v| format!("\"{v}\""))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        }
    }
}

/// Checks presence and JSON types of `fields` (name, kind, required), collecting every violation.
fn check_schema<'a>(
    arguments: &'a Value,
    fields: &[(&str, Kind, bool)],
) -> Result<&'a Map<String, Value>, String> {
    let Some(object) = arguments.as_object() else {
        return Err("invalid arguments: expected an object".to_owned());
    };
    let mut violations = Vec::new();
    for (name, kind, required) in fields {
        match object.get(*name) {
            None if *required => violations.push(format!("missing required property \"{name}\"")),
            Some(value) if !kind.matches(value) => {
                violations.push(format!("\"{name}\" must be {}", kind.noun()))
            }
            _ => {}
        }
    }
    if violations.is_empty() {
        Ok(object)
    } else {
        Err(format!("invalid arguments: {}", violations.join("; ")))
    }
}

/// Validates `bash` arguments against the schema without the sandbox fields.
pub fn parse_bash_args(arguments: &Value) -> Result<BashArgs, String> {
    parse_bash_args_with(arguments, false)
}

/// Validates `bash` arguments; `sandboxed` adds the advertised `sandbox_permissions` (enum) and
/// `justification` (string) to the schema check. The escalation pairing is checked either way.
pub fn parse_bash_args_with(arguments: &Value, sandboxed: bool) -> Result<BashArgs, String> {
    let mut fields = vec![
        ("command", Kind::String, true),
        ("description", Kind::String, true),
        ("timeoutMs", Kind::Number, false),
        ("workdir", Kind::String, false),
        ("run_in_background", Kind::Boolean, false),
    ];
    if sandboxed {
        fields.push(("sandbox_permissions", Kind::OneOf(&ESCALATION_MODES), false));
        fields.push(("justification", Kind::String, false));
    }
    let object = check_schema(arguments, &fields)?;
    let text = |key: &str| object.get(key).and_then(Value::as_str);
    let command = text("command").unwrap_or_default();
    if command.trim().is_empty() {
        return Err("invalid command: expected a non-empty string".to_owned());
    }
    if text("description").unwrap_or_default().trim().is_empty() {
        return Err("invalid description: expected a non-empty string".to_owned());
    }
    let timeout_ms = match object.get("timeoutMs") {
        Some(value) => {
            let number = value.as_f64().filter(|n| n.is_finite() && *n > 0.0);
            Some(number.ok_or_else(|| {
                format!("invalid timeoutMs: expected a positive number, got {value}")
            })?)
        }
        None => None,
    };
    let escalation = match (
        object.get("sandbox_permissions"),
        object.get("justification"),
    ) {
        (None, None) => None,
        (Some(_), None) => {
            return Err("invalid escalation: sandbox_permissions requires a justification".into());
        }
        (None, Some(_)) => {
            return Err(
                "invalid escalation: justification is only valid together with sandbox_permissions"
                    .into(),
            );
        }
        (Some(mode), Some(justification)) => {
            let justification = justification.as_str().unwrap_or_default();
            if justification.trim().is_empty() {
                return Err("invalid justification: expected a non-empty sentence".into());
            }
            Some(Escalation {
                mode: mode
                    .as_str()
                    .map_or_else(|| mode.to_string(), str::to_owned),
                justification: justification.to_owned(),
            })
        }
    };
    Ok(BashArgs {
        command: command.to_owned(),
        timeout_ms,
        escalation,
        workdir: text("workdir").map(str::to_owned),
        run_in_background: object
            .get("run_in_background")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    })
}

/// The default wait of `bash_output` with `wait` or `until`, in milliseconds (the seeds' `task_output`).
pub const DEFAULT_WAIT_MS: u64 = 30_000;
/// The longest wait of `bash_output`, whatever `timeout_ms` asks for.
pub const MAX_WAIT_MS: u64 = 600_000;
/// The most memory a compiled `until` pattern may take: a pattern is model-made.
const UNTIL_SIZE_LIMIT: usize = 1 << 20;

/// Validated `bash_output` arguments.
#[derive(Clone, Debug)]
pub struct ReadArgs {
    /// The task to read.
    pub task_id: String,
    /// Wait this long at most before reading (`wait: true` or `until`); `None` reads at once.
    pub wait_ms: Option<u64>,
    /// Stop waiting once the output produced since the previous read matches.
    pub until: Option<UntilPattern>,
}

/// Validates `bash_output` arguments: `task_id`, and optionally `wait`, `timeout_ms`, `until`.
pub fn parse_read_args(arguments: &Value) -> Result<ReadArgs, String> {
    let object = check_schema(
        arguments,
        &[
            ("task_id", Kind::String, true),
            ("wait", Kind::Boolean, false),
            ("timeout_ms", Kind::Number, false),
            ("until", Kind::String, false),
        ],
    )?;
    let task_id = parse_task_id(arguments)?;
    let timeout_ms = match object.get("timeout_ms") {
        Some(value) => Some(
            value
                .as_f64()
                .filter(|n| n.is_finite() && *n > 0.0)
                .ok_or_else(|| {
                    format!("invalid timeout_ms: expected a positive number, got {value}")
                })?,
        ),
        None => None,
    };
    let until = match object.get("until").and_then(Value::as_str) {
        Some(pattern) => Some(
            UntilPattern::new(pattern, UNTIL_SIZE_LIMIT)
                .map_err(|err| format!("invalid until: {err}"))?,
        ),
        None => None,
    };
    let wait = object.get("wait").and_then(Value::as_bool).unwrap_or(false) || until.is_some();
    let wait_ms = wait.then(|| {
        timeout_ms
            .map(|ms| ms.ceil().min(MAX_WAIT_MS as f64) as u64)
            .unwrap_or(DEFAULT_WAIT_MS)
            .min(MAX_WAIT_MS)
    });
    Ok(ReadArgs {
        task_id,
        wait_ms,
        until,
    })
}

/// Validates the `task_id` argument of `bash_output` and `bash_kill`.
pub fn parse_task_id(arguments: &Value) -> Result<String, String> {
    let object = check_schema(arguments, &[("task_id", Kind::String, true)])?;
    match object.get("task_id").and_then(Value::as_str) {
        Some(id) if !id.is_empty() => Ok(id.to_owned()),
        _ => Err("invalid task_id: expected a string, got \"\"".to_owned()),
    }
}
