//! One `dsh jsonl` input line, parsed without losing the exact text of its id.
//!
//! Ids are kept as raw JSON (`RawValue`), so any id comes back byte for byte: `18446744073709551617`
//! is not squeezed through an `f64`, `1.0` stays `1.0`. Two ids are the same id when their JSON text
//! is the same. Every line that carries an id and is not a valid call is an error for that id; a
//! field that is well formed but cannot be decoded says so (`json_field.rs`).

use std::collections::HashMap;

use serde_json::Value;
use serde_json::value::RawValue;

use crate::json_field::decode;

/// An id exactly as the client wrote it.
pub type Id = Box<RawValue>;

#[derive(Debug)]
pub enum Line {
    Call {
        id: Option<Id>,
        session: Option<String>,
        tool: String,
        arguments: Value,
    },
    Cancel {
        id: Option<Id>,
        target: Id,
    },
    /// The client's answer to an escalation approval.
    Approve {
        id: Option<Id>,
        number: u64,
        outcome: String,
    },
    Blank,
    Malformed {
        id: Option<Id>,
        error: String,
    },
}

/// Parses a line; `tools` are the tool names a call may name.
pub fn parse_line(line: &str, tools: &[&str]) -> Line {
    if line.trim().is_empty() {
        return Line::Blank;
    }
    if let Err(err) = serde_json::from_str::<&RawValue>(line) {
        return malformed(None, format!("invalid JSON: {err}"));
    }
    let Ok(mut fields) = serde_json::from_str::<HashMap<String, &RawValue>>(line) else {
        return malformed(None, "expected a JSON object".into());
    };
    let id = fields.remove("id").map(RawValue::to_owned);
    let is_call = fields.contains_key("tool");
    if let Some(number) = fields.remove("approve") {
        if is_call {
            return malformed(
                id,
                "a line cannot be both an approval answer and a call".into(),
            );
        }
        let Ok(number) = serde_json::from_str::<u64>(number.get()) else {
            return malformed(id, "\"approve\" must be the approval's number".into());
        };
        let outcome = match take(line, &mut fields, "outcome") {
            Ok(Some(Value::String(outcome))) => outcome,
            Ok(_) => return malformed(id, "\"outcome\" must be a string".into()),
            Err(error) => return malformed(id, error),
        };
        return Line::Approve {
            id,
            number,
            outcome,
        };
    }
    if let Some(target) = fields.remove("cancel") {
        if is_call {
            return malformed(id, "a line cannot be both a cancel and a call".into());
        }
        return Line::Cancel {
            id,
            target: target.to_owned(),
        };
    }
    let tool = match take(line, &mut fields, "tool") {
        Ok(None) => return malformed(id, "missing \"tool\"".into()),
        Ok(Some(Value::String(tool))) => tool,
        Ok(Some(_)) => return malformed(id, "\"tool\" must be a string".into()),
        Err(error) => return malformed(id, error),
    };
    if !tools.contains(&tool.as_str()) {
        let error = format!(
            "unknown tool \"{tool}\"; available tools: {}",
            tools.join(", ")
        );
        return malformed(id, error);
    }
    let session = match take(line, &mut fields, "session") {
        Ok(None | Some(Value::Null)) => None,
        // A session names the agent to its commands (`DSH_SESSION_ID`), which no NUL can be part of.
        Ok(Some(Value::String(session))) if session.contains('\0') => {
            return malformed(id, "\"session\" must not contain a NUL byte".into());
        }
        Ok(Some(Value::String(session))) => Some(session),
        Ok(Some(_)) => return malformed(id, "\"session\" must be a string".into()),
        Err(error) => return malformed(id, error),
    };
    let arguments = match take(line, &mut fields, "arguments") {
        Ok(None) => Value::Object(Default::default()),
        Ok(Some(arguments @ Value::Object(_))) => arguments,
        Ok(Some(_)) => return malformed(id, "\"arguments\" must be a JSON object".into()),
        Err(error) => return malformed(id, error),
    };
    Line::Call {
        id,
        session,
        tool,
        arguments,
    }
}

/// Removes field `name` and decodes it; `Err` is the line's error text when it cannot be decoded.
fn take(
    line: &str,
    fields: &mut HashMap<String, &RawValue>,
    name: &str,
) -> Result<Option<Value>, String> {
    fields
        .remove(name)
        .map(|raw| decode(line, name, raw).map_err(|err| err.to_string()))
        .transpose()
}

fn malformed(id: Option<Id>, error: String) -> Line {
    Line::Malformed { id, error }
}

/// The JSON text of an optional id (`null` when absent).
pub fn id_text(id: Option<&RawValue>) -> &str {
    id.map_or("null", RawValue::get)
}

/// `{"id": <id>, "error": "…"}`.
pub fn error_reply(id: Option<&RawValue>, error: &str) -> String {
    format!(
        "{{\"id\":{},\"error\":{}}}",
        id_text(id),
        Value::String(error.to_owned())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOOLS: &[&str] = &["bash", "bash_output"];

    fn error_of(line: &str) -> (String, String) {
        match parse_line(line, TOOLS) {
            Line::Malformed { id, error } => (id_text(id.as_deref()).to_owned(), error),
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn calls_keep_their_ids_verbatim() {
        let Line::Call {
            id,
            session,
            tool,
            arguments,
        } = parse_line(
            r#"{"id": 18446744073709551617, "session":"s","tool":"bash","arguments":{"command":"x"}}"#,
            TOOLS,
        )
        else {
            panic!()
        };
        assert_eq!(id.unwrap().get(), "18446744073709551617");
        assert_eq!((session.as_deref(), tool.as_str()), (Some("s"), "bash"));
        assert_eq!(arguments["command"], "x");
        let Line::Call { id, .. } = parse_line(r#"{"id":[1.0, "a"],"tool":"bash"}"#, TOOLS) else {
            panic!()
        };
        assert_eq!(id.unwrap().get(), r#"[1.0, "a"]"#);
    }

    #[test]
    fn bad_lines_are_errors_for_their_id() {
        assert_eq!(error_of("{nope").0, "null");
        assert_eq!(
            error_of("[1]"),
            ("null".into(), "expected a JSON object".into())
        );
        assert_eq!(
            error_of(r#"{"id":5}"#),
            ("5".into(), "missing \"tool\"".into())
        );
        assert_eq!(
            error_of(r#"{"id":6,"tool":7}"#).1,
            "\"tool\" must be a string"
        );
        assert_eq!(
            error_of(r#"{"id":"x","tool":"nope"}"#).1,
            "unknown tool \"nope\"; available tools: bash, bash_output"
        );
        assert_eq!(
            error_of(r#"{"id":1,"tool":"bash","session":3}"#).1,
            "\"session\" must be a string"
        );
        assert_eq!(
            error_of(r#"{"id":1,"tool":"bash","arguments":[]}"#).1,
            "\"arguments\" must be a JSON object"
        );
        assert_eq!(
            error_of(r#"{"id":8,"cancel":9,"tool":"bash"}"#),
            (
                "8".into(),
                "a line cannot be both a cancel and a call".into()
            )
        );
        assert!(
            matches!(parse_line(r#"{"cancel": 7}"#, TOOLS), Line::Cancel { id: None, target } if target.get() == "7")
        );
        assert!(matches!(parse_line("  ", TOOLS), Line::Blank));
        assert!(matches!(
            parse_line(r#"{"approve": 3, "outcome": "rejected"}"#, TOOLS),
            Line::Approve { number: 3, ref outcome, .. } if outcome == "rejected"
        ));
        assert_eq!(
            error_of(r#"{"approve": "x", "outcome": "rejected"}"#).1,
            "\"approve\" must be the approval's number"
        );
        assert_eq!(
            error_of(r#"{"approve": 1}"#).1,
            "\"outcome\" must be a string"
        );
        assert_eq!(
            error_of(r#"{"id":2,"tool":"bash","session":"a\u0000b"}"#),
            ("2".into(), "\"session\" must not contain a NUL byte".into())
        );
        let (id, error) = error_of(r#"{"id":3,"tool":"bash","arguments":{"t":1e400}}"#);
        assert_eq!(id, "3");
        assert!(
            error.starts_with("invalid JSON in \"arguments\": number out of range at line 1"),
            "{error}"
        );
        assert!(
            error_of(r#"{"id":4,"tool":"bash","session":"\udc00"}"#)
                .1
                .starts_with("invalid JSON in \"session\": ")
        );
        assert_eq!(
            error_reply(None, "bad \"x\""),
            r#"{"id":null,"error":"bad \"x\""}"#
        );
    }
}
