//! Run-time validation of model-made arguments. The schema is only advice to a model; what arrives is
//! whatever JSON it produced, so every field is checked before anything runs.
//!
//! Two layers: schema violations, all collected and joined
//! (`invalid arguments: missing required property "command"; "timeoutMs" must be a number`), then value
//! checks, first failure wins. Unknown keys are ignored and never forwarded. Times arrive as model
//! JSON numbers of milliseconds; they are checked here, once, and are [`Duration`]s from then on.

use std::time::Duration;

use serde_json::{Map, Value};

use crate::error::ToolError;
use crate::task_id::TaskId;
use crate::until::UntilPattern;

fn invalid(message: impl Into<String>) -> ToolError {
    ToolError::InvalidArguments(message.into())
}

/// A positive finite number of milliseconds from model JSON as a [`Duration`], rounded up to the
/// nanosecond (so it stays positive) and saturating.
fn positive_ms(value: &Value, key: &str) -> Result<Duration, ToolError> {
    value
        .as_f64()
        .filter(|n| n.is_finite() && *n > 0.0)
        .map(|ms| Duration::from_nanos((ms * 1e6).ceil().min(u64::MAX as f64) as u64))
        .ok_or_else(|| {
            invalid(format!(
                "invalid {key}: expected a positive number, got {value}"
            ))
        })
}

/// A [`Duration`] as the milliseconds an executor request takes: the model's own number back
/// (whole numbers and sub-millisecond fractions exactly).
pub(crate) fn duration_ms(duration: Duration) -> f64 {
    duration.as_nanos() as f64 / 1e6
}

/// Validated `bash` arguments. `description` is display-only and not kept.
#[derive(Clone, Debug, PartialEq)]
pub struct BashArgs {
    /// The shell command; not blank.
    pub command: String,
    /// The requested timeout, if given (the model's positive finite `timeoutMs`).
    pub timeout: Option<Duration>,
    /// The requested working directory, as the model wrote it.
    pub workdir: Option<String>,
    /// Start the command as a background task instead of waiting for it.
    pub run_in_background: bool,
    /// A one-shot escalation: the wider mode asked for and the model's one-sentence justification
    /// (both present, the justification not blank).
    pub escalation: Option<Escalation>,
    /// How the command takes input after its start (`tty`, `stdin`; issue 22).
    pub input: CommandInput,
}

/// `tty` and `stdin` together: a terminal always has its input open.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CommandInput {
    /// `stdin: "closed"` (the default): `/dev/null`.
    #[default]
    Closed,
    /// `stdin: "open"`: a pipe kept open for `bash_write`.
    Open,
    /// `tty: true`: a pseudo-terminal on stdin, stdout and stderr.
    Terminal,
}

/// The values `stdin` may take.
pub const STDIN_MODES: [&str; 2] = ["closed", "open"];

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
    /// An array of strings.
    Strings,
}

impl Kind {
    fn matches(self, value: &Value) -> bool {
        match self {
            Kind::String => value.is_string(),
            Kind::Number => value.is_number(),
            Kind::Boolean => value.is_boolean(),
            Kind::OneOf(list) => value.as_str().is_some_and(|v| list.contains(&v)),
            Kind::Strings => value
                .as_array()
                .is_some_and(|items| items.iter().all(Value::is_string)),
        }
    }

    fn noun(self) -> String {
        match self {
            Kind::String => "a string".into(),
            Kind::Number => "a number".into(),
            Kind::Boolean => "a boolean".into(),
            Kind::Strings => "an array of strings".into(),
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
) -> Result<&'a Map<String, Value>, ToolError> {
    let Some(object) = arguments.as_object() else {
        return Err(invalid("invalid arguments: expected an object"));
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
        Err(invalid(format!(
            "invalid arguments: {}",
            violations.join("; ")
        )))
    }
}

/// Validates `bash` arguments against the schema without the sandbox fields.
pub fn parse_bash_args(arguments: &Value) -> Result<BashArgs, ToolError> {
    parse_bash_args_with(arguments, false)
}

/// Validates `bash` arguments; `sandboxed` adds the advertised `sandbox_permissions` (enum) and
/// `justification` (string) to the schema check. The escalation pairing is checked either way.
pub fn parse_bash_args_with(arguments: &Value, sandboxed: bool) -> Result<BashArgs, ToolError> {
    let mut fields = vec![
        ("command", Kind::String, true),
        ("description", Kind::String, true),
        ("timeoutMs", Kind::Number, false),
        ("workdir", Kind::String, false),
        ("run_in_background", Kind::Boolean, false),
        ("tty", Kind::Boolean, false),
        ("stdin", Kind::OneOf(&STDIN_MODES), false),
    ];
    if sandboxed {
        fields.push(("sandbox_permissions", Kind::OneOf(&ESCALATION_MODES), false));
        fields.push(("justification", Kind::String, false));
    }
    let object = check_schema(arguments, &fields)?;
    let text = |key: &str| object.get(key).and_then(Value::as_str);
    let command = text("command").unwrap_or_default();
    if command.trim().is_empty() {
        return Err(invalid("invalid command: expected a non-empty string"));
    }
    if text("description").unwrap_or_default().trim().is_empty() {
        return Err(invalid("invalid description: expected a non-empty string"));
    }
    let timeout = match object.get("timeoutMs") {
        Some(value) => Some(positive_ms(value, "timeoutMs")?),
        None => None,
    };
    let escalation = match (
        object.get("sandbox_permissions"),
        object.get("justification"),
    ) {
        (None, None) => None,
        (Some(_), None) => {
            return Err(invalid(
                "invalid escalation: sandbox_permissions requires a justification",
            ));
        }
        (None, Some(_)) => {
            return Err(invalid(
                "invalid escalation: justification is only valid together with sandbox_permissions",
            ));
        }
        (Some(mode), Some(justification)) => {
            let justification = justification.as_str().unwrap_or_default();
            if justification.trim().is_empty() {
                return Err(invalid(
                    "invalid justification: expected a non-empty sentence",
                ));
            }
            Some(Escalation {
                mode: mode
                    .as_str()
                    .map_or_else(|| mode.to_string(), str::to_owned),
                justification: justification.to_owned(),
            })
        }
    };
    let tty = object.get("tty").and_then(Value::as_bool).unwrap_or(false);
    let input = match (tty, text("stdin")) {
        (true, _) => CommandInput::Terminal,
        (false, Some("open")) => CommandInput::Open,
        (false, _) => CommandInput::Closed,
    };
    Ok(BashArgs {
        command: command.to_owned(),
        timeout,
        escalation,
        input,
        workdir: text("workdir").map(str::to_owned),
        run_in_background: object
            .get("run_in_background")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    })
}

/// The default wait of `bash_output` with `wait` or `until`.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(30);
/// The longest wait of `bash_output`, whatever `timeout_ms` asks for.
pub const MAX_WAIT: Duration = Duration::from_secs(600);
/// The most memory a compiled `until` pattern may take: a pattern is model-made.
const UNTIL_SIZE_LIMIT: usize = 1 << 20;

/// Validated `bash_output` arguments.
#[derive(Clone, Debug)]
pub struct ReadArgs {
    /// The task to read.
    pub task_id: TaskId,
    /// Wait this long at most before reading (`wait: true` or `until`); `None` reads at once.
    pub wait: Option<Duration>,
    /// Stop waiting once the output produced since the previous read matches.
    pub until: Option<UntilPattern>,
}

/// Validates `bash_output` arguments: `task_id`, and optionally `wait`, `timeout_ms`, `until`.
pub fn parse_read_args(arguments: &Value) -> Result<ReadArgs, ToolError> {
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
    let (timeout, until) = wait_args(object)?;
    let wait = object.get("wait").and_then(Value::as_bool).unwrap_or(false) || until.is_some();
    let wait = wait.then(|| wait_bound(timeout, DEFAULT_WAIT));
    Ok(ReadArgs {
        task_id,
        wait,
        until,
    })
}

/// The default wait of `bash_write` after its input.
pub const DEFAULT_WRITE_WAIT: Duration = Duration::from_secs(10);

/// Validated `bash_write` arguments.
#[derive(Clone, Debug)]
pub struct WriteArgs {
    /// The task to write to.
    pub task_id: TaskId,
    /// Text written as given (UTF-8), before the keys.
    pub input: String,
    /// Named keys written after `input`, in order.
    pub keys: Vec<crate::keys::Key>,
    /// The wait after the write: at most `min(timeout_ms ?? 10000, 600000)` ms.
    pub wait: Duration,
    /// Also stop waiting once the output produced since the previous read matches.
    pub until: Option<UntilPattern>,
}

/// Validates `bash_write` arguments: `task_id`, and optionally `input`, `keys`, `until`,
/// `timeout_ms`. Neither `input` nor `keys` is a pure wait.
pub fn parse_write_args(arguments: &Value) -> Result<WriteArgs, ToolError> {
    let object = check_schema(
        arguments,
        &[
            ("task_id", Kind::String, true),
            ("input", Kind::String, false),
            ("keys", Kind::Strings, false),
            ("timeout_ms", Kind::Number, false),
            ("until", Kind::String, false),
        ],
    )?;
    let task_id = parse_task_id(arguments)?;
    let names: Vec<&str> = object
        .get("keys")
        .and_then(Value::as_array)
        .map(|items| items.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let keys = crate::keys::parse_keys(&names)?;
    let (timeout, until) = wait_args(object)?;
    let wait = wait_bound(timeout, DEFAULT_WRITE_WAIT);
    Ok(WriteArgs {
        task_id,
        input: object
            .get("input")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        keys,
        wait,
        until,
    })
}

/// The optional `timeout_ms` and `until` that `bash_output` and `bash_write` share.
fn wait_args(
    object: &serde_json::Map<String, Value>,
) -> Result<(Option<Duration>, Option<UntilPattern>), ToolError> {
    let timeout = match object.get("timeout_ms") {
        Some(value) => Some(positive_ms(value, "timeout_ms")?),
        None => None,
    };
    let until = match object.get("until").and_then(Value::as_str) {
        Some(pattern) => Some(
            UntilPattern::new(pattern, UNTIL_SIZE_LIMIT)
                .map_err(|err| invalid(format!("invalid until: {err}")))?,
        ),
        None => None,
    };
    Ok((timeout, until))
}

/// A wait of `timeout` (whole milliseconds, rounded up), else `default`, at most [`MAX_WAIT`].
fn wait_bound(timeout: Option<Duration>, default: Duration) -> Duration {
    timeout
        .map(|t| Duration::from_millis(duration_ms(t).ceil() as u64))
        .unwrap_or(default)
        .min(MAX_WAIT)
}

/// Validates the `task_id` argument of `bash_output` and `bash_kill`.
pub fn parse_task_id(arguments: &Value) -> Result<TaskId, ToolError> {
    let object = check_schema(arguments, &[("task_id", Kind::String, true)])?;
    match object.get("task_id").and_then(Value::as_str) {
        Some(id) if !id.is_empty() => Ok(TaskId::from(id)),
        _ => Err(invalid("invalid task_id: expected a string, got \"\"")),
    }
}
