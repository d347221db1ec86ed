//! `dsh jsonl`: newline-delimited JSON on stdin/stdout, for scripts and load tests.
//!
//! Request `{"id": …, "session": "…"?, "tool": "bash", "arguments": {…}}` → reply
//! `{"id": …, "text": "…", "is_error": …, "structured": {…}}`; notices `{"session": "…", "notice": "…"}`;
//! `{"cancel": id}` aborts a running call (a cancel line with its own `id` is answered
//! `{"id": …, "cancelled": true|false}`). Requests run concurrently; `id` is any JSON value, echoed as
//! the exact text the client sent. Every line that carries an id and is not a valid call or cancel is
//! answered `{"id": <id>, "error": "…"}` (a bad `tool`, `session` or `arguments`, both a cancel and a
//! call, an id already in flight); lines without an id get `"id": null`. Blank lines are skipped. A
//! line longer than `--max-line-bytes` is skipped as it streams by and answered with an error.
//!
//! A session's state (its agent stand-in) lives only while a call of it runs or a task it owns is
//! kept (`jsonl_sessions.rs`).
//!
//! Escalation approvals (`jsonl_approvals.rs`): the server asks `{"approval": n, "id": …, "session": …,
//! "reason": …}` and the client answers `{"approve": n, "outcome": "allowed-once"|"rejected"|"cancelled"}`.
//!
//! End of input: open approval questions are answered `cancelled`; calls already running finish and are answered, then every process is killed and joined
//! and the server exits 0. SIGINT/SIGTERM, or the client closing our stdout: everything is killed and
//! joined at once (running calls are answered with what they got, where anyone can still read them); a
//! second signal SIGKILLs every group immediately.

use dsh::lock_unpoisoned;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use dsh::{AbortSignal, AgentRef, Runtime, ToolCall};
use serde_json::json;
use serde_json::value::RawValue;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::flags::RuntimeFlags;
use crate::jsonl_approvals::{JsonlApprover, Pending};
use crate::jsonl_line::{Id, Line, error_reply, parse_line};
use crate::jsonl_sessions::Sessions;
use crate::notices::session_agent;
use crate::signals::{self, Interrupts};
use crate::stdio::{self, InputLine};
use actix::{Actor, Addr};

/// Output lines go through one writer thread so concurrent replies never interleave.
type Out = mpsc::UnboundedSender<String>;

/// Calls in flight by the JSON text of their id, so `{"cancel": id}` can find them.
type Running = Arc<Mutex<HashMap<String, AbortSignal>>>;

struct Server {
    runtime: Runtime,
    tools: Vec<&'static str>,
    out: Out,
    running: Running,
    sessions: Sessions,
    /// Running calls; each ends with its session's name, if it had one.
    calls: JoinSet<Option<String>>,
    approver: Addr<JsonlApprover>,
    approvals: Pending,
}

/// The reply to a finished call, `id` first.
#[derive(serde::Serialize)]
struct Reply<'a> {
    /// The line's id, verbatim; `None` (a line without one) is written as `null`.
    id: Option<&'a RawValue>,
    text: &'a str,
    is_error: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    structured: Option<&'a serde_json::Value>,
}

impl Server {
    fn handle_input(&mut self, line: InputLine) {
        match line {
            InputLine::Text(text) => self.handle_line(&text),
            InputLine::NotUtf8 => self.reply_error(None, "the line is not valid UTF-8"),
            InputLine::TooLong { limit } => self.reply_error(
                None,
                &format!("the line is longer than --max-line-bytes ({limit} bytes); skipped"),
            ),
        }
    }

    fn reply_error(&self, id: Option<&RawValue>, error: &str) {
        let _ = self.out.send(error_reply(id, error));
    }

    fn lock_running(&self) -> std::sync::MutexGuard<'_, HashMap<String, AbortSignal>> {
        lock_unpoisoned(&self.running)
    }

    fn handle_line(&mut self, line: &str) {
        match parse_line(line, &self.tools) {
            Line::Blank => {}
            Line::Malformed { id, error } => self.reply_error(id.as_deref(), &error),
            Line::Cancel { id, target } => {
                self.approvals.withdraw(target.get());
                let signal = self.lock_running().get(target.get()).cloned();
                if let Some(signal) = &signal {
                    signal.abort("cancelled by the client");
                }
                if let Some(id) = id {
                    let reply =
                        format!("{{\"id\":{},\"cancelled\":{}}}", id.get(), signal.is_some());
                    let _ = self.out.send(reply);
                }
            }
            Line::Approve {
                id,
                number,
                outcome,
            } => {
                if !self.approvals.answer(number, &outcome) {
                    self.reply_error(
                        id.as_deref(),
                        &format!("no approval {number} is waiting for an answer"),
                    );
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

    /// The agent of `session`, holding the session alive for the call it is given to.
    fn agent(&mut self, session: &str) -> AgentRef {
        let out = self.out.clone();
        self.sessions.agent(session, || {
            let name = session.to_owned();
            session_agent(name.clone(), move |notice| {
                let _ = out.send(json!({"session": name, "notice": notice}).to_string());
            })
        })
    }

    fn start_call(
        &mut self,
        id: Option<Id>,
        session: Option<String>,
        tool: String,
        arguments: serde_json::Value,
    ) {
        let cancel = AbortSignal::new();
        // Calls without an id cannot be cancelled, so they never clash.
        let key = id
            .as_deref()
            .map(RawValue::get)
            .filter(|text| *text != "null")
            .map(str::to_owned);
        if let Some(key) = &key {
            let mut running = self.lock_running();
            if running.contains_key(key) {
                drop(running);
                self.reply_error(
                    id.as_deref(),
                    &format!("id {key} is already in flight; this line was not run"),
                );
                return;
            }
            running.insert(key.clone(), cancel.clone());
        }
        let mut call = ToolCall::new(tool, arguments)
            .with_cancel(cancel)
            .with_approver(self.approver.clone().recipient());
        if let Some(id) = &id {
            call = call.with_id(id.get());
        }
        if let Some(session) = &session {
            call = call.with_caller(self.agent(session));
        }
        let (runtime, out, running) =
            (self.runtime.clone(), self.out.clone(), self.running.clone());
        self.calls.spawn(async move {
            let result = runtime.call(call).await;
            if let Some(key) = &key {
                lock_unpoisoned(&running).remove(key);
            }
            let reply = Reply {
                id: id.as_deref(),
                text: &result.text,
                is_error: result.is_error,
                structured: result.structured.as_ref(),
            };
            match serde_json::to_string(&reply) {
                Ok(line) => {
                    let _ = out.send(line);
                }
                Err(err) => {
                    let _ = out.send(error_reply(id.as_deref(), &err.to_string()));
                }
            }
            session
        });
    }

    /// A call ended: its session is forgotten if nothing else holds it.
    fn call_ended(&mut self, session: Option<String>) {
        if let Some(session) = session {
            self.sessions.forget_if_idle(&session);
        }
    }
}

/// Why the input loop stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    EndOfInput,
    Interrupted,
    Disconnected,
}

pub async fn main(flags: RuntimeFlags, max_line_bytes: usize) -> Result<i32, String> {
    let mut interrupts = Interrupts::install(flags.shutdown_grace());
    let runtime = flags.start()?;
    let output = stdio::spawn_writer();
    let disconnected = output.disconnected.clone();
    let approvals = Pending::default();
    let approver = JsonlApprover {
        out: output.lines.clone(),
        pending: approvals.clone(),
    }
    .start();
    let mut server = Server {
        approver,
        approvals: approvals.clone(),
        tools: runtime.tool_definitions().iter().map(|d| d.name).collect(),
        runtime: runtime.clone(),
        out: output.lines,
        running: Arc::default(),
        sessions: Sessions::default(),
        calls: JoinSet::new(),
    };
    let mut input = stdio::spawn_reader(max_line_bytes);
    let mut stop = loop {
        tokio::select! {
            line = input.recv() => match line {
                Some(line) => server.handle_input(line),
                None => break Stop::EndOfInput,
            },
            Some(ended) = server.calls.join_next(), if !server.calls.is_empty() => {
                server.call_ended(ended.ok().flatten());
            }
            () = interrupts.next() => break Stop::Interrupted,
            () = disconnected.cancelled() => break Stop::Disconnected,
        }
    };
    // Nobody is left to answer an approval question.
    approvals.close();
    if stop == Stop::EndOfInput {
        // Running calls finish and are answered, unless a signal or a hang-up cuts the wait short.
        stop = loop {
            tokio::select! {
                next = server.calls.join_next() => if next.is_none() { break Stop::EndOfInput },
                () = interrupts.next() => break Stop::Interrupted,
                () = disconnected.cancelled() => break Stop::Disconnected,
            }
        };
    }
    if stop != Stop::EndOfInput {
        tracing::info!(?stop, "killing and joining everything");
        signals::shutdown(&runtime, &mut interrupts).await;
    }
    while server.calls.join_next().await.is_some() {}
    runtime.shutdown().await;
    drop(server);
    // Every reply and notice queued so far is on stdout once the writer has seen the channel close.
    let _ = output.written.await;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonl_line::id_text;

    #[test]
    fn replies_echo_the_raw_id_first() {
        let id = RawValue::from_string("18446744073709551617".into()).unwrap();
        let reply = Reply {
            id: Some(&id),
            text: "hi\n",
            is_error: false,
            structured: None,
        };
        assert_eq!(
            serde_json::to_string(&reply).unwrap(),
            r#"{"id":18446744073709551617,"text":"hi\n","is_error":false}"#
        );
        assert_eq!(id_text(None), "null");
    }
}
