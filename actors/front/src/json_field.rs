//! Decoding one field of an input line whose fields were first split as raw JSON text.
//!
//! Both front ends check a line's syntax as a whole (`RawValue`) and keep each field's raw text, so
//! an id of any size comes back byte for byte. Syntax is not all: a lone surrogate (`"\ud800"`), a
//! number beyond `f64` (`1e400`) or nesting deeper than serde_json's recursion limit (128) are well
//! formed but cannot be decoded into a value. Such a field is answered with what is wrong and where
//! — `invalid JSON in "arguments": lone leading surrogate in hex escape at line 1 column 43` —
//! instead of being mistaken for a value of the wrong type (`"arguments" must be a JSON object`).

use serde_json::Value;
use serde_json::value::RawValue;

/// A field whose JSON text is well formed but cannot be decoded. Its Display is the contract text:
/// `invalid JSON in "<field>": <serde's reason> at line 1 column <N>`, the column counted in the
/// whole line.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid JSON in \"{field}\": {reason}")]
pub struct Undecodable {
    /// The field's name.
    pub field: String,
    /// serde_json's reason, with its position moved from the field's text to the line.
    pub reason: String,
}

/// Decodes field `name`, whose raw text `raw` was split from `line`.
pub fn decode(line: &str, name: &str, raw: &RawValue) -> Result<Value, Undecodable> {
    serde_json::from_str(raw.get()).map_err(|err| Undecodable {
        field: name.to_owned(),
        reason: reason_in_line(line, raw.get(), &err),
    })
}

/// serde's message for `err`, which it found in `text`, with the position counted in `line` when
/// `text` is part of it (it is when it was borrowed from the line, as the front ends do).
fn reason_in_line(line: &str, text: &str, err: &serde_json::Error) -> String {
    let message = err.to_string();
    let position = format!(" at line {} column {}", err.line(), err.column());
    let Some(bare) = message.strip_suffix(&position) else {
        return message;
    };
    let (start, end) = (line.as_ptr() as usize, line.as_ptr() as usize + line.len());
    let at = text.as_ptr() as usize;
    if err.line() != 1 || at < start || at > end {
        return message;
    }
    format!("{bare} at line 1 column {}", at - start + err.column())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn field_error(line: &str, name: &str) -> String {
        let fields: HashMap<String, &RawValue> = serde_json::from_str(line).unwrap();
        decode(line, name, fields[name]).unwrap_err().to_string()
    }

    #[test]
    fn undecodable_fields_say_why_and_where_in_the_line() {
        // The position is where serde finds the fault when it decodes the whole line.
        for line in [
            r#"{"id":1,"arguments":{"command":"\ud800"}}"#,
            r#"{"id":1,"arguments":{"command":"\ud800 x"}}"#,
            r#"{"id":1, "arguments": {"timeoutMs": 1e400}}"#,
        ] {
            let whole = serde_json::from_str::<Value>(line).unwrap_err().to_string();
            assert_eq!(
                field_error(line, "arguments"),
                format!("invalid JSON in \"arguments\": {whole}"),
            );
        }
        assert!(
            field_error(r#"{"arguments":{"t":1e400}}"#, "arguments")
                .starts_with("invalid JSON in \"arguments\": number out of range at line 1 column")
        );
        let deep = format!(
            r#"{{"arguments":{{"d":{}{}}}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        assert!(
            field_error(&deep, "arguments")
                .starts_with("invalid JSON in \"arguments\": recursion limit exceeded at line 1")
        );
        let ok = r#"{"session":"s"}"#;
        let fields: HashMap<String, &RawValue> = serde_json::from_str(ok).unwrap();
        assert_eq!(
            decode(ok, "session", fields["session"]),
            Ok(Value::from("s"))
        );
    }
}
