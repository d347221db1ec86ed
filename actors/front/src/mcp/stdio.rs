//! The MCP server's stdio: dsh's own line reader and writer threads (bounded lines, hang-up detection)
//! with [`crate::mcp::jsonrpc_errors::screen`] in front of rmcp.
//!
//! rmcp reads and writes an in-memory duplex pipe; two small tasks move whole lines between it and
//! the threads, so an error answered here and a response written by rmcp never interleave.
//!
//! Backpressure (`flow.rs`) is applied here, in front of rmcp, which starts a handler for every
//! request it reads: at most `--max-in-flight` `tools/call` requests are forwarded and not yet ended
//! (`mcp/in_flight.rs`); a later one is held, in order, and forwarded when one ends. Every other
//! message — a cancel, the client's answer to an elicitation or `roots/list`, any other request — is
//! forwarded as soon as it is read. No input is read while as many calls are held, or while 1 MiB of
//! output waits for the client to read it. A held call that the client cancels is dropped unread by
//! rmcp (MCP sends no response to a cancelled request).

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::flow::may_read;
use crate::mcp::in_flight::{InFlight, RequestKey};
use crate::mcp::jsonrpc_errors::{INVALID_REQUEST, PARSE_ERROR, Screened, error_response, screen};
use crate::outbox::Outbox;
use crate::stdio::{self, InputLine};

/// Room in each in-memory pipe; a full pipe makes the writer wait.
const PIPE_BYTES: usize = 256 * 1024;

/// What rmcp is served on, and how to tell the client went away.
pub struct McpStdio {
    /// rmcp reads requests from here…
    pub read: DuplexStream,
    /// …and writes responses and notifications here.
    pub write: DuplexStream,
    /// Cancelled when the client closed our stdout.
    pub disconnected: CancellationToken,
    /// Cancelled when the client closed our stdin: MCP's stdio shutdown, so the server kills
    /// every command at once instead of letting rmcp wait for the running calls.
    pub input_closed: CancellationToken,
    /// The `tools/call` requests forwarded and not yet handled; rmcp's service removes each
    /// (`mcp_in_flight::Counted`).
    pub in_flight: Arc<InFlight>,
    /// Left behind for [`Flush::flush`] once rmcp is done.
    pub flush: Flush,
}

/// Waits for what rmcp wrote last to reach stdout.
pub struct Flush {
    inbound: JoinHandle<()>,
    outbound: JoinHandle<()>,
    written: oneshot::Receiver<()>,
}

impl Flush {
    /// Call after the service has ended (and dropped its ends of the pipes): every line it wrote is
    /// on stdout when this returns, or stdout is stuck and we give up after a few seconds.
    pub async fn flush(self) {
        self.inbound.abort();
        let _ = self.inbound.await;
        let written = async {
            let _ = self.outbound.await;
            let _ = self.written.await;
        };
        if tokio::time::timeout(stdio::FLUSH_WAIT, written)
            .await
            .is_err()
        {
            tracing::warn!("stdout did not drain; exiting anyway");
        }
    }
}

pub fn spawn(max_line_bytes: usize, max_in_flight: usize) -> McpStdio {
    let (read, feed) = tokio::io::duplex(PIPE_BYTES);
    let (drain, write) = tokio::io::duplex(PIPE_BYTES);
    let output = stdio::spawn_writer();
    let input = stdio::spawn_reader(max_line_bytes);
    let in_flight = Arc::new(InFlight::default());
    let input_closed = CancellationToken::new();
    let inbound = tokio::spawn(
        Inbound {
            feed,
            input_closed: input_closed.clone(),
            replies: output.lines.clone(),
            in_flight: in_flight.clone(),
            held: VecDeque::new(),
            max_in_flight,
        }
        .run(input),
    );
    let lines = output.lines;
    let closed = input_closed.clone();
    let outbound = tokio::spawn(async move {
        let mut from_rmcp = BufReader::new(drain).lines();
        loop {
            // What rmcp wrote before the end of input goes out; nothing it writes after does (the
            // calls the shutdown aborts are not answered).
            let line = tokio::select! {
                biased;
                line = from_rmcp.next_line() => line,
                () = closed.cancelled() => break,
            };
            let Ok(Some(line)) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    McpStdio {
        read,
        write,
        disconnected: output.disconnected,
        input_closed,
        in_flight,
        flush: Flush {
            inbound,
            outbound,
            written: output.written,
        },
    }
}

/// The input side: reads lines while `flow.rs` allows, answers what rmcp would mishandle, and
/// forwards the rest, holding `tools/call` requests past `--max-in-flight`.
struct Inbound {
    /// rmcp's input; dropping it is end of input for rmcp.
    feed: DuplexStream,
    /// Cancelled at the end of our stdin.
    input_closed: CancellationToken,
    replies: Outbox,
    in_flight: Arc<InFlight>,
    /// `tools/call` lines read while `max_in_flight` were in flight, in order.
    held: VecDeque<(RequestKey, String)>,
    max_in_flight: usize,
}

/// rmcp has stopped reading: the service is ending.
struct RmcpGone;

impl Inbound {
    async fn run(mut self, mut input: stdio::Input) {
        loop {
            if self.forward_held().await.is_err() {
                return;
            }
            let reading = may_read(&self.replies, self.held.len(), self.max_in_flight);
            let full = !self.replies.has_room();
            let line = tokio::select! {
                line = input.recv(), if reading => line,
                () = self.in_flight.ended(), if !self.held.is_empty() => continue,
                () = self.replies.room(), if full => continue,
            };
            // End of input: dropping `feed` is end of input for rmcp, and the server shuts down.
            let Some(line) = line else {
                self.input_closed.cancel();
                return;
            };
            if self.handle(line).await.is_err() {
                return;
            }
        }
    }

    /// Forwards held calls while fewer than `max_in_flight` are in flight.
    async fn forward_held(&mut self) -> Result<(), RmcpGone> {
        while self.in_flight.len() < self.max_in_flight {
            let Some((key, text)) = self.held.pop_front() else {
                break;
            };
            self.in_flight.begin(key);
            self.forward(&text).await?;
        }
        Ok(())
    }

    async fn handle(&mut self, line: InputLine) -> Result<(), RmcpGone> {
        let text = match line {
            InputLine::Text(text) => text,
            InputLine::NotUtf8 => {
                let error = "Parse error: the line is not valid UTF-8";
                let _ = self.replies.send(error_response(None, PARSE_ERROR, error));
                return Ok(());
            }
            InputLine::TooLong { limit } => {
                let error =
                    format!("Invalid Request: the message is longer than {limit} bytes; skipped");
                let _ = self
                    .replies
                    .send(error_response(None, INVALID_REQUEST, &error));
                return Ok(());
            }
        };
        match screen(&text) {
            Screened::Answer(reply) => {
                let _ = self.replies.send(reply);
                Ok(())
            }
            Screened::Pass => self.forward(&text).await,
            Screened::Cancel(key) => {
                // A held call cancelled before it was forwarded is never run.
                self.held.retain(|(held, _)| *held != key);
                self.forward(&text).await
            }
            Screened::ToolCall(key) => {
                if self.in_flight.contains(&key) || self.held.iter().any(|(held, _)| *held == key) {
                    let id = key.to_json();
                    let error = format!(
                        "Invalid Request: id {id} is already in flight; this request was not run"
                    );
                    let _ = self
                        .replies
                        .send(error_response(Some(&id), INVALID_REQUEST, &error));
                    return Ok(());
                }
                if self.held.is_empty() && self.in_flight.len() < self.max_in_flight {
                    self.in_flight.begin(key);
                    self.forward(&text).await
                } else {
                    self.held.push_back((key, text));
                    Ok(())
                }
            }
        }
    }

    async fn forward(&mut self, text: &str) -> Result<(), RmcpGone> {
        let forwarded = async {
            self.feed.write_all(text.as_bytes()).await?;
            self.feed.write_all(b"\n").await
        };
        forwarded.await.map_err(|_| RmcpGone)
    }
}
