//! The JSON-RPC errors rmcp does not send on its own, decided per input line before rmcp sees it.
//!
//! rmcp (3.11) ignores input that is not JSON (no reply at all), answers `tools/call` without params
//! with -32601, and answers other malformed messages with -32600 but `id: null`. JSON-RPC 2.0 wants
//! -32700 for unparseable input, -32600 (with the id when there is one) for an invalid request object,
//! and MCP wants -32602 for invalid `tools/call` params. [`screen`] answers exactly those lines and
//! lets every other line through untouched; unknown tool names are refused by the server itself.
//! Params that are not an object, and a `logging/setLevel` with no known level, are -32602 with
//! the request's id (rmcp would answer -32600 or -32601).
//!
//! A request whose params are well formed but cannot be decoded (a lone surrogate, `1e400`, nesting
//! past serde_json's recursion limit) would reach rmcp as unparsable input and get no answer at
//! all; it is answered -32602 with what is wrong (`Invalid params: invalid JSON in "params": …`,
//! `json_field.rs`) and its id.

use std::collections::HashMap;

use serde_json::Value;
use serde_json::value::RawValue;

use rmcp::model::ClientJsonRpcMessage;

use crate::json_field::decode;
use crate::mcp::in_flight::RequestKey;

pub const PARSE_ERROR: i32 = -32700;
pub const INVALID_REQUEST: i32 = -32600;
pub const INVALID_PARAMS: i32 = -32602;

/// A JSON-RPC error response; `id` is the request id's JSON text (`null` when there is none).
pub fn error_response(id: Option<&str>, code: i32, message: &str) -> String {
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{},\"error\":{{\"code\":{code},\"message\":{}}}}}",
        id.unwrap_or("null"),
        Value::String(message.to_owned())
    )
}

/// What to do with one input line.
#[derive(Debug, PartialEq, Eq)]
pub enum Screened {
    /// Answer it with this error response; rmcp never sees it.
    Answer(String),
    /// A `tools/call` request that rmcp parses, with its id: what `--max-in-flight` counts.
    ToolCall(RequestKey),
    /// A `notifications/cancelled` of the request with this id, for rmcp.
    Cancel(RequestKey),
    /// Anything else, for rmcp as it is.
    Pass,
}

/// Decides one line: answered here when rmcp would mishandle it, else passed on, with what the
/// backpressure needs to know about it (`flow.rs`).
pub fn screen(line: &str) -> Screened {
    if line.trim().is_empty() {
        return Screened::Pass;
    }
    if let Err(err) = serde_json::from_str::<&RawValue>(line) {
        return Screened::Answer(error_response(
            None,
            PARSE_ERROR,
            &format!("Parse error: {err}"),
        ));
    }
    let Ok(fields) = serde_json::from_str::<HashMap<String, &RawValue>>(line) else {
        let what = if line.trim_start().starts_with('[') {
            "Invalid Request: batches are not supported"
        } else {
            "Invalid Request: expected a JSON object"
        };
        return Screened::Answer(error_response(None, INVALID_REQUEST, what));
    };
    let value = |key: &str| {
        fields
            .get(key)
            .map(|raw| decode(line, key, raw))
            .transpose()
    };
    // An id MCP can answer: a string or an integer. Anything else cannot be echoed.
    let id = fields.get("id").map(|raw| raw.get());
    let id_value = value("id").ok().flatten();
    let usable_id = match &id_value {
        Some(Value::String(_)) => id,
        Some(Value::Number(_)) if !id.is_some_and(|t| t.contains(['.', 'e', 'E'])) => id,
        _ => None,
    };
    let answer =
        |code: i32, message: String| Screened::Answer(error_response(usable_id, code, &message));
    let invalid = |message: &str| answer(INVALID_REQUEST, format!("Invalid Request: {message}"));
    if fields.contains_key("id") && usable_id.is_none() {
        return invalid("\"id\" must be a string or an integer");
    }
    match value("jsonrpc") {
        Ok(Some(Value::String(version))) if version == "2.0" => {}
        Err(err) => return invalid(&err.to_string()),
        Ok(_) => return invalid("\"jsonrpc\" must be \"2.0\""),
    }
    let method = match value("method") {
        Ok(Some(Value::String(method))) => method,
        Err(err) => return invalid(&err.to_string()),
        Ok(Some(_)) => return invalid("\"method\" must be a string"),
        Ok(None)
            if usable_id.is_some()
                && (fields.contains_key("result") || fields.contains_key("error")) =>
        {
            return Screened::Pass;
        }
        Ok(None) => return invalid("missing \"method\""),
    };
    let Some(id_value) = id_value.filter(|_| usable_id.is_some()) else {
        // A notification: nothing to answer.
        return match (method.as_str(), value("params")) {
            ("notifications/cancelled", Ok(Some(params))) => params
                .get("requestId")
                .and_then(RequestKey::from_json)
                .map_or(Screened::Pass, Screened::Cancel),
            _ => Screened::Pass,
        };
    };
    let invalid_params =
        |problem: &str| answer(INVALID_PARAMS, format!("Invalid params: {problem}"));
    match value("params") {
        Err(err) => return invalid_params(&err.to_string()),
        Ok(Some(params)) if !params.is_object() => {
            return invalid_params("\"params\" must be an object");
        }
        Ok(params) if method == "tools/call" => {
            if let Some(problem) = tool_call_params_problem(params) {
                return invalid_params(problem);
            }
        }
        Ok(Some(params)) if method == "logging/setLevel" => {
            if let Some(problem) = set_level_params_problem(&params) {
                return invalid_params(&problem);
            }
        }
        Ok(_) => {}
    }
    // What rmcp cannot parse it drops, or answers without the id; a `tools/call` it dropped would
    // also stay counted in flight for ever.
    if let Err(err) = serde_json::from_str::<ClientJsonRpcMessage>(line) {
        return invalid(&err.to_string());
    }
    match RequestKey::from_json(&id_value) {
        Some(key) if method == "tools/call" => Screened::ToolCall(key),
        _ => Screened::Pass,
    }
}

/// The levels of `logging/setLevel` (RFC 5424's, as MCP names them).
const LOG_LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

fn set_level_params_problem(params: &Value) -> Option<String> {
    match params.get("level") {
        Some(Value::String(level)) if LOG_LEVELS.contains(&level.as_str()) => None,
        Some(Value::String(level)) => Some(format!(
            "unknown logging level {}; known levels: {}",
            Value::String(level.clone()),
            LOG_LEVELS.join(", ")
        )),
        Some(_) => Some("\"level\" must be a string".to_owned()),
        None => Some("missing \"level\"".to_owned()),
    }
}

fn tool_call_params_problem(params: Option<Value>) -> Option<&'static str> {
    let Some(Value::Object(params)) = params else {
        return Some("tools/call needs a params object");
    };
    match params.get("name") {
        Some(Value::String(_)) => {}
        Some(_) => return Some("\"name\" must be a string"),
        None => return Some("missing \"name\""),
    }
    match params.get("arguments") {
        None | Some(Value::Object(_)) => None,
        Some(_) => Some("\"arguments\" must be an object"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(line: &str) -> Option<String> {
        match screen(line) {
            Screened::Answer(reply) => Some(reply),
            _ => None,
        }
    }

    fn code_and_id(line: &str) -> Option<(i64, Value)> {
        let reply: Value = serde_json::from_str(&answered(line)?).unwrap();
        Some((
            reply["error"]["code"].as_i64().unwrap(),
            reply["id"].clone(),
        ))
    }

    #[test]
    fn each_kind_of_bad_line_gets_its_code_and_good_lines_pass() {
        assert_eq!(code_and_id("{oops"), Some((-32700, Value::Null)));
        assert_eq!(code_and_id("[1]"), Some((-32600, Value::Null)));
        assert_eq!(
            code_and_id(r#"{"jsonrpc":"2.0","id":3}"#),
            Some((-32600, 3.into()))
        );
        assert_eq!(
            code_and_id(r#"{"jsonrpc":"1.0","id":"a","method":"ping"}"#),
            Some((-32600, "a".into()))
        );
        assert_eq!(
            code_and_id(r#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#),
            Some((-32600, Value::Null))
        );
        assert_eq!(
            code_and_id(r#"{"jsonrpc":"2.0","id":4,"method":"tools/call"}"#),
            Some((-32602, 4.into()))
        );
        assert_eq!(
            code_and_id(
                r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"bash","arguments":[]}}"#
            ),
            Some((-32602, 5.into()))
        );
        let undecodable = answered(
            r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"bash","arguments":{"t":1e400}}}"#,
        )
        .unwrap();
        let reply: Value = serde_json::from_str(&undecodable).unwrap();
        assert_eq!(
            (reply["id"].clone(), reply["error"]["code"].clone()),
            (8.into(), (-32602).into())
        );
        assert!(
            reply["error"]["message"].as_str().unwrap().starts_with(
                "Invalid params: invalid JSON in \"params\": number out of range at line 1"
            ),
            "{reply}"
        );
        assert_eq!(
            code_and_id(r#"{"jsonrpc":"2.0","id":9,"method":"ping","params":{"x":"\udc00"}}"#),
            Some((-32602, 9.into()))
        );
        // rmcp could not parse it (an id beyond i64): answered here, with the id, not dropped.
        assert_eq!(
            code_and_id(
                r#"{"jsonrpc":"2.0","id":9223372036854775808,"method":"tools/call","params":{"name":"bash"}}"#
            )
            .map(|(code, _)| code),
            Some(-32600)
        );
        assert_eq!(
            screen(r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"bash"}}"#),
            Screened::ToolCall(RequestKey::Number(6))
        );
        assert_eq!(
            screen(
                r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"r"}}"#
            ),
            Screened::Cancel(RequestKey::Text("r".into()))
        );
        assert_eq!(
            screen(r#"{"jsonrpc":"2.0","id":"p","method":"ping"}"#),
            Screened::Pass
        );
        // Params that are not an object are invalid params, answered with the request's id.
        assert_eq!(
            code_and_id(r#"{"jsonrpc":"2.0","id":2,"method":"ping","params":[]}"#),
            Some((-32602, 2.into()))
        );
        assert_eq!(
            code_and_id(
                r#"{"jsonrpc":"2.0","id":3,"method":"logging/setLevel","params":{"level":"loud"}}"#
            ),
            Some((-32602, 3.into()))
        );
        assert_eq!(
            code_and_id(r#"{"jsonrpc":"2.0","id":3,"method":"logging/setLevel","params":{}}"#),
            Some((-32602, 3.into()))
        );
        assert_eq!(
            screen(
                r#"{"jsonrpc":"2.0","id":4,"method":"logging/setLevel","params":{"level":"info"}}"#
            ),
            Screened::Pass
        );
        for good in [
            "",
            r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"bash"}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{}}"#,
        ] {
            assert_eq!(answered(good), None, "{good}");
        }
    }
}
