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
//! kept (`jsonl/sessions.rs`).
//!
//! Backpressure (`flow.rs`): at most `--max-in-flight` calls run; a call read beyond that is held in
//! order, and once as many are held, or while 1 MiB of replies wait for the client to read them, no
//! input is read. Cancels and approval answers are handled as soon as they are read.
//!
//! Escalation approvals (`jsonl/approvals.rs`): the server asks `{"approval": n, "id": …, "session": …,
//! "reason": …}` and the client answers `{"approve": n, "outcome": "allowed-once"|"rejected"|"cancelled"}`.
//!
//! End of input: open approval questions are answered `cancelled`; calls already running finish and are answered, then every process is killed and joined
//! and the server exits 0. SIGINT/SIGTERM, or the client closing our stdout: everything is killed and
//! joined at once (running calls are answered with what they got, where anyone can still read them); a
//! second signal SIGKILLs every group immediately.

mod approvals;
mod line;
mod sessions;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use actix::{Actor, Addr};
use dsh::actors::process::lock_unpoisoned;
use dsh::{AbortSignal, AgentRef, Runtime, Session, ToolCall};
use serde_json::json;
use serde_json::value::RawValue;
use tokio::task::JoinSet;

use crate::flags::RuntimeFlags;
use crate::flow::may_read;
use crate::jsonl::approvals::{JsonlApprover, Pending};
use crate::jsonl::line::{Id, Line, error_reply, parse_line};
use crate::jsonl::sessions::Sessions;
use crate::notices::forwarder;
use crate::outbox::Outbox;
use crate::signals;
use crate::stdio::{self, InputLine};

/// Calls read and not yet answered (running or held) by the JSON text of their id, so
/// `{"cancel": id}` can find them and an id cannot be in flight twice.
type Running = Arc<Mutex<HashMap<String, AbortSignal>>>;

/// A call that was read and admitted (its id is in flight), not yet started.
struct Admitted {
    id: Option<Id>,
    /// The id's JSON text, for calls that have one (`null` is none).
    key: Option<String>,
    session: Option<String>,
    tool: String,
    arguments: serde_json::Value,
    cancel: AbortSignal,
}

struct Server {
    runtime: Runtime,
    tools: Vec<&'static str>,
    out: Outbox,
    running: Running,
    sessions: Sessions,
    /// Running calls; each ends with its session's name, if it had one.
    calls: JoinSet<Option<String>>,
    /// Calls read while `max_in_flight` were running, in the order read.
    held: VecDeque<Admitted>,
    max_in_flight: usize,
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

    /// Whether the next input line may be read (`flow.rs`).
    fn may_read(&self) -> bool {
        may_read(&self.out, self.held.len(), self.max_in_flight)
    }

    fn handle_line(&mut self, line: &str) {
        match parse_line(line, &self.tools) {
            Line::Blank => {}
            Line::Malformed { id, error } => self.reply_error(id.as_deref(), &error),
            Line::Cancel { id, target } => self.cancel(id, target.get()),
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
            } => {
                let Some(call) = self.admit(id, session, tool, arguments) else {
                    return;
                };
                if self.calls.len() < self.max_in_flight {
                    self.start(call);
                } else {
                    self.held.push_back(call);
                }
            }
        }
    }

    /// `{"cancel": target}`: aborts the call, running or held (a held one is answered at once,
    /// without running), and answers the cancel line if it has an id.
    fn cancel(&mut self, id: Option<Id>, target: &str) {
        self.approvals.withdraw(target);
        let signal = self.lock_running().get(target).cloned();
        if let Some(signal) = &signal {
            signal.abort("cancelled by the client");
        }
        if let Some(at) = self
            .held
            .iter()
            .position(|call| call.key.as_deref() == Some(target))
            && let Some(call) = self.held.remove(at)
        {
            // Its cancel has fired: it answers `tool call aborted before dispatch` and runs nothing.
            self.start(call);
        }
        if let Some(id) = id {
            let reply = format!("{{\"id\":{},\"cancelled\":{}}}", id.get(), signal.is_some());
            let _ = self.out.send(reply);
        }
    }

    /// The runtime's handle on `session`, holding the session alive for the call it is given to.
    fn session(&mut self, session: &str) -> Session {
        let out = self.out.clone();
        let agent = self.sessions.agent(session, || {
            let name = session.to_owned();
            let inbox = forwarder({
                let name = name.clone();
                move |notice| {
                    let _ = out.send(json!({"session": name, "notice": notice}).to_string());
                }
            });
            AgentRef::new(name, inbox)
        });
        self.runtime.session_of(agent)
    }

    /// Puts a call's id in flight; `None` (answered) when the id already is.
    fn admit(
        &mut self,
        id: Option<Id>,
        session: Option<String>,
        tool: String,
        arguments: serde_json::Value,
    ) -> Option<Admitted> {
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
                return None;
            }
            running.insert(key.clone(), cancel.clone());
        }
        Some(Admitted {
            id,
            key,
            session,
            tool,
            arguments,
            cancel,
        })
    }

    /// Runs an admitted call; its reply is queued when it ends.
    fn start(&mut self, admitted: Admitted) {
        let (id, key, session) = (admitted.id, admitted.key, admitted.session);
        let mut call = ToolCall::new(admitted.tool, admitted.arguments)
            .with_cancel(admitted.cancel)
            .with_approver(self.approver.clone().recipient());
        if let Some(id) = &id {
            call = call.with_id(id.get());
        }
        // The handle holds the session's lease until the call has ended.
        let handle = session.as_deref().map(|name| self.session(name));
        let (runtime, out, running) =
            (self.runtime.clone(), self.out.clone(), self.running.clone());
        self.calls.spawn(async move {
            let result = match handle {
                Some(handle) => handle.call(call).await,
                None => runtime.call(call).await,
            };
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

    /// A call ended: its session is forgotten if nothing else holds it, and the next held call
    /// takes its place.
    fn call_ended(&mut self, session: Option<String>) {
        if let Some(session) = session {
            self.sessions.forget_if_idle(&session);
        }
        while self.calls.len() < self.max_in_flight
            && let Some(call) = self.held.pop_front()
        {
            self.start(call);
        }
    }

    /// The server is stopping at once: every held call is answered without running.
    fn abort_held(&mut self) {
        while let Some(call) = self.held.pop_front() {
            call.cancel.abort("the server is shutting down");
            self.start(call);
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

pub async fn main(
    flags: RuntimeFlags,
    max_line_bytes: usize,
    max_in_flight: usize,
) -> Result<i32, String> {
    let (mut interrupts, runtime) = flags.start_interruptible()?;
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
        held: VecDeque::new(),
        max_in_flight,
    };
    let mut input = stdio::spawn_reader(max_line_bytes);
    let mut stop = loop {
        // Input is read only while replies can be written and fewer than --max-in-flight calls are
        // held (flow.rs); everything else is watched all the time.
        let reading = server.may_read();
        let full = !server.out.has_room();
        tokio::select! {
            line = input.recv(), if reading => match line {
                Some(line) => server.handle_input(line),
                None => break Stop::EndOfInput,
            },
            Some(ended) = server.calls.join_next(), if !server.calls.is_empty() => {
                server.call_ended(ended.ok().flatten());
            }
            () = server.out.room(), if full => {}
            () = interrupts.next() => break Stop::Interrupted,
            () = disconnected.cancelled() => break Stop::Disconnected,
        }
    };
    // Nobody is left to answer an approval question.
    approvals.close();
    if stop == Stop::EndOfInput {
        // Calls already read (running or held) finish and are answered, unless a signal or a
        // hang-up cuts the wait short.
        stop = loop {
            tokio::select! {
                next = server.calls.join_next() => match next {
                    Some(ended) => server.call_ended(ended.ok().flatten()),
                    None => break Stop::EndOfInput,
                },
                () = interrupts.next() => break Stop::Interrupted,
                () = disconnected.cancelled() => break Stop::Disconnected,
            }
        };
    }
    if stop != Stop::EndOfInput {
        tracing::info!(?stop, "killing and joining everything");
        server.abort_held();
        signals::shutdown(&runtime, &mut interrupts).await;
    }
    while server.calls.join_next().await.is_some() {}
    runtime.shutdown().await;
    drop(server);
    // Every reply and notice queued so far is on stdout once the writer has seen the channel close.
    // After end of input the client is there to read them, however long it takes (unless a signal
    // comes); a server stopping at once waits a little for a client that does not read.
    let mut written = output.written;
    if stop == Stop::EndOfInput {
        tokio::select! {
            _ = &mut written => return Ok(0),
            () = interrupts.next() => {}
        }
    }
    if tokio::time::timeout(stdio::FLUSH_WAIT, written)
        .await
        .is_err()
    {
        tracing::warn!("stdout did not drain; exiting anyway");
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonl::line::id_text;

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
