//! `dsh jsonl`: newline-delimited JSON on stdin/stdout, for scripts and load tests.
//!
//! Request `{"id": …, "session": "…"?, "tool": "bash", "arguments": {…}}` → reply
//! `{"id": …, "text": "…", "is_error": …}`; notices `{"session": "…", "notice": "…"}`; `{"cancel": id}`
//! aborts a running call (ignored when no call with that id runs). Requests run concurrently; `id` is any
//! JSON value, echoed verbatim. A line that is not a JSON object with a string `tool` (or not UTF-8)
//! gets `{"id": null, "error": "…"}` and the server goes on; blank lines are skipped.
//!
//! End of input: calls already running finish and are answered, then every process is killed and joined
//! and the server exits 0. SIGINT/SIGTERM: everything is killed and joined at once (running calls are
//! answered with what they got); a second signal SIGKILLs every group immediately.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use dsh::{AbortSignal, AgentRef, Runtime, ToolCall, lock_unpoisoned};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::flags::RuntimeFlags;
use crate::notices::session_agent;
use crate::signals::{self, Interrupts};
use crate::stdio::{self, InputLine};

/// Output lines go through one writer task so concurrent replies never interleave.
type Out = mpsc::UnboundedSender<String>;

/// One parsed input line.
#[derive(Debug, PartialEq)]
enum Line {
    Call {
        id: Value,
        session: Option<String>,
        tool: String,
        arguments: Value,
    },
    Cancel(Value),
    Blank,
    Malformed(String),
}

fn parse_line(line: &str) -> Line {
    if line.trim().is_empty() {
        return Line::Blank;
    }
    let value: Value = match serde_json::from_str(line) {
        Ok(value) => value,
        Err(err) => return Line::Malformed(format!("invalid JSON: {err}")),
    };
    let Value::Object(mut object) = value else {
        return Line::Malformed("expected a JSON object".into());
    };
    if let Some(id) = object.remove("cancel") {
        return Line::Cancel(id);
    }
    let tool = match object.remove("tool") {
        Some(Value::String(tool)) => tool,
        Some(_) => return Line::Malformed("\"tool\" must be a string".into()),
        None => return Line::Malformed("missing \"tool\"".into()),
    };
    let session = match object.remove("session") {
        None | Some(Value::Null) => None,
        Some(Value::String(session)) => Some(session),
        Some(_) => return Line::Malformed("\"session\" must be a string".into()),
    };
    Line::Call {
        id: object.remove("id").unwrap_or(Value::Null),
        session,
        tool,
        arguments: object.remove("arguments").unwrap_or_else(|| json!({})),
    }
}

/// Calls in flight by the text of their id, so `{"cancel": id}` can find them.
type Running = Arc<Mutex<HashMap<String, AbortSignal>>>;

struct Server {
    runtime: Runtime,
    out: Out,
    running: Running,
    sessions: HashMap<String, AgentRef>,
    calls: JoinSet<()>,
}

impl Server {
    fn handle_input(&mut self, line: InputLine) {
        match line {
            InputLine::Text(text) => self.handle_line(&text),
            InputLine::NotUtf8 => self.reply_malformed("the line is not valid UTF-8"),
        }
    }

    fn reply_malformed(&self, error: &str) {
        let _ = self
            .out
            .send(json!({"id": null, "error": error}).to_string());
    }

    fn handle_line(&mut self, line: &str) {
        match parse_line(line) {
            Line::Blank => {}
            Line::Malformed(error) => self.reply_malformed(&error),
            Line::Cancel(id) => {
                if let Some(signal) = lock_unpoisoned(&self.running).get(&id.to_string()) {
                    signal.abort("cancelled by the client");
                }
            }
            Line::Call {
                id,
                session,
                tool,
                arguments,
            } => self.start_call(id, session, tool, arguments),
        }
    }

    fn agent(&mut self, session: String) -> AgentRef {
        let out = self.out.clone();
        self.sessions
            .entry(session.clone())
            .or_insert_with(|| {
                session_agent(session.clone(), move |notice| {
                    let _ = out.send(json!({"session": session, "notice": notice}).to_string());
                })
            })
            .clone()
    }

    fn start_call(&mut self, id: Value, session: Option<String>, tool: String, arguments: Value) {
        let cancel = AbortSignal::new();
        let key = id.to_string();
        lock_unpoisoned(&self.running).insert(key.clone(), cancel.clone());
        let mut call = ToolCall::new(tool, arguments).with_cancel(cancel);
        if let Some(session) = session {
            call = call.with_caller(self.agent(session));
        }
        let (runtime, out, running) =
            (self.runtime.clone(), self.out.clone(), self.running.clone());
        self.calls.spawn(async move {
            let result = runtime.call(call).await;
            lock_unpoisoned(&running).remove(&key);
            let _ = out.send(
                json!({"id": id, "text": result.text, "is_error": result.is_error}).to_string(),
            );
        });
    }
}

pub async fn main(flags: RuntimeFlags) -> Result<i32, String> {
    let mut interrupts = Interrupts::install();
    let runtime = flags.start()?;
    let (out, written) = stdio::spawn_writer();
    let mut server = Server {
        runtime: runtime.clone(),
        out,
        running: Arc::default(),
        sessions: HashMap::new(),
        calls: JoinSet::new(),
    };
    let mut input = stdio::spawn_reader();
    let interrupted = loop {
        tokio::select! {
            line = input.recv() => match line {
                Some(line) => server.handle_input(line),
                None => break false,
            },
            Some(_) = server.calls.join_next(), if !server.calls.is_empty() => {}
            () = interrupts.next() => break true,
        }
    };
    if interrupted {
        // Kill everything now; the running calls are answered with what they got.
        signals::shutdown(&runtime, &mut interrupts).await;
    }
    while server.calls.join_next().await.is_some() {}
    runtime.shutdown().await;
    drop(server);
    // Every reply and notice queued so far is on stdout once the writer has seen the channel close.
    let _ = written.await;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_into_calls_cancels_and_errors() {
        assert_eq!(
            parse_line(r#"{"id":[1,"a"],"session":"s","tool":"bash","arguments":{"command":"x"}}"#),
            Line::Call {
                id: json!([1, "a"]),
                session: Some("s".into()),
                tool: "bash".into(),
                arguments: json!({"command":"x"})
            }
        );
        assert_eq!(parse_line(r#"{"cancel": 7}"#), Line::Cancel(json!(7)));
        assert_eq!(parse_line("   "), Line::Blank);
        assert_eq!(
            parse_line("[1]"),
            Line::Malformed("expected a JSON object".into())
        );
        assert_eq!(
            parse_line(r#"{"id":1}"#),
            Line::Malformed("missing \"tool\"".into())
        );
        assert_eq!(
            parse_line(r#"{"id":1,"tool":3}"#),
            Line::Malformed("\"tool\" must be a string".into())
        );
        assert!(
            matches!(parse_line("{nope"), Line::Malformed(m) if m.starts_with("invalid JSON: "))
        );
    }
}
