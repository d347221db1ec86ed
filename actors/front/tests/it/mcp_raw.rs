//! A raw JSON-RPC client of `dsh mcp` for the tests that speak the protocol line by line: it
//! starts the binary, sends lines, and waits for the messages it wants (keeping the others).

use std::io::Write;
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use dsh_test_support::wait::line_channel;

use crate::common::{exit_status, sandbox_usable, start_dsh};
use serde_json::{Value, json};

pub const SOON: Duration = Duration::from_secs(30);

pub struct Client {
    pub child: Child,
    pub stdin: Option<ChildStdin>,
    pub lines: mpsc::Receiver<Value>,
    /// Lines read while waiting for something else.
    pub seen: Vec<Value>,
}

impl Client {
    pub fn start(extra: &[&str]) -> Self {
        let mut child = start_dsh(
            &[
                &["mcp", "--grace-ms", "300", "--progress-interval-ms", "200"],
                extra,
            ]
            .concat(),
            Stdio::null(),
        );
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let lines = line_channel(stdout, |line| {
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line}: {e}"))
        });
        Self {
            child,
            stdin,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits for a log notification that a background task finished.
    pub fn wait_for_finished_log(&mut self) {
        let logged = self.wait_for(|m| m["method"] == "notifications/message");
        let data = logged["params"]["data"].as_str().unwrap_or_default();
        assert!(data.contains("finished"), "{logged}");
    }

    /// Starts and initializes a session with `version`, declaring `capabilities`.
    pub fn session(version: &str, capabilities: Value, extra: &[&str]) -> Self {
        let mut client = Self::start(extra);
        client.send(
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": capabilities,
            "clientInfo": {"name": "raw", "version": "1"}}}),
        );
        let init = client.response(0);
        assert_eq!(init["result"]["protocolVersion"], version);
        client.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        client
    }

    pub fn send_raw(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    pub fn send(&mut self, message: Value) {
        self.send_raw(&message.to_string());
    }

    pub fn next(&mut self) -> Value {
        self.lines
            .recv_timeout(SOON)
            .expect("no message from dsh mcp")
    }

    /// Waits for the first message (seen before or arriving) matching `want`.
    pub fn wait_for(&mut self, want: impl Fn(&Value) -> bool) -> Value {
        if let Some(i) = self.seen.iter().position(&want) {
            return self.seen.remove(i);
        }
        loop {
            let message = self.next();
            if want(&message) {
                return message;
            }
            self.seen.push(message);
        }
    }

    pub fn response(&mut self, id: impl Into<Value>) -> Value {
        let id = id.into();
        self.wait_for(|m| m["id"] == id && m.get("method").is_none())
    }

    /// Waits for the server's `roots/list` request and answers it with the roots at `uris`.
    pub fn answer_roots(&mut self, uris: &[&str]) {
        let ask = self.wait_for(|m| m["method"] == "roots/list");
        let roots: Vec<Value> = uris.iter().map(|uri| json!({"uri": uri})).collect();
        self.send(json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"roots": roots}}));
    }

    /// Sends a `tools/call` of `tool`, without waiting for its response.
    pub fn send_call(&mut self, id: i64, tool: &str, arguments: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}}));
    }

    pub fn call(&mut self, id: i64, tool: &str, arguments: Value) -> Value {
        self.send_call(id, tool, arguments);
        self.response(id)
    }

    /// Cancels request `id` with `notifications/cancelled`.
    pub fn cancel(&mut self, id: i64) {
        self.send(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": id, "reason": "test"}}),
        );
    }

    /// Closes stdin and waits for exit 0.
    pub fn finish(mut self) {
        drop(self.stdin.take());
        wait_exit(&mut self.child);
    }
}

pub fn wait_exit(child: &mut Child) {
    assert_eq!(exit_status(child, SOON, "dsh mcp").code(), Some(0));
}

pub fn bash(command: &str) -> Value {
    json!({"command": command, "description": "test"})
}

/// The first text block of a `tools/call` response.
pub fn text(reply: &Value) -> &str {
    reply["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text: {reply}"))
}

/// A fresh workspace under the target directory and its path, where a sandbox backend is usable;
/// `None` (said why) where none is.
pub fn sandboxed_workspace() -> Option<(tempfile::TempDir, String)> {
    if !sandbox_usable() {
        return None;
    }
    let ws = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let cwd = ws.path().to_str().unwrap().to_owned();
    Some((ws, cwd))
}

/// `bash` arguments running `command` with an escalation to `workspace-write`, justified.
pub fn escalation(command: &str) -> Value {
    json!({"command": command, "description": "test",
           "sandbox_permissions": "workspace-write", "justification": "it writes a file"})
}

/// The elicitation result a user gives for `action` (`accept` approves).
pub fn approval_answer(action: &str) -> Value {
    let mut answer = json!({"action": action});
    if action == "accept" {
        answer["content"] = json!({"approve": true});
    }
    answer
}

/// Asserts that an approval `question` shows `command` and the mode, then the justification
/// given by [`escalation`].
pub fn assert_asks_for_escalation(question: &str, command: &str, context: &Value) {
    let (command, mode, reason) = (
        question.find(command),
        question.find("workspace-write"),
        question.find("it writes a file"),
    );
    assert!(
        command.is_some() && mode.is_some() && reason > command && reason > mode,
        "the question shows the command and the mode, then the justification: {context}"
    );
}

/// The outcomes of an escalation answered with each action: the reply text expected.
pub const ESCALATION_ANSWERS: [(&str, &str); 3] = [
    ("accept", "(no output)"),
    (
        "decline",
        "Error: the user rejected escalating this command to \"workspace-write\"",
    ),
    (
        "cancel",
        "Error: approval for escalating to \"workspace-write\" was cancelled",
    ),
];

/// The reply to an escalation when the client offers no way to approve it.
pub const NO_APPROVAL_CHANNEL: &str = "Error: sandbox escalation to \"workspace-write\" requires approval, but no approval channel is available";

pub fn error_code(message: &Value) -> i64 {
    message["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error: {message}"))
}

/// The `_meta` of a 2026-07-28 request (no `initialize`): the protocol version and the client's
/// capabilities travel with each request.
pub fn inline_meta(capabilities: Value) -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"}})
}

impl Client {
    /// A 2026-07-28 `tools/call` declaring `capabilities`, with `extra` params (`inputResponses`,
    /// `requestState`) beside the name and arguments; returns its response.
    pub fn call_inline(
        &mut self,
        id: i64,
        arguments: Value,
        capabilities: Value,
        extra: Value,
    ) -> Value {
        let mut params = json!({"name": "bash", "arguments": arguments,
            "_meta": inline_meta(capabilities)});
        if let Value::Object(extra) = extra {
            params.as_object_mut().unwrap().extend(extra);
        }
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}));
        self.response(id)
    }
}
