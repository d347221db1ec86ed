//! The MCP server's stdio: dsh's own line reader and writer threads (bounded lines, hang-up detection)
//! with [`crate::jsonrpc_errors::screen`] in front of rmcp.
//!
//! rmcp reads and writes an in-memory duplex pipe; two small tasks move whole lines between it and
//! the threads, so an error answered here and a response written by rmcp never interleave.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::jsonrpc_errors::{INVALID_REQUEST, PARSE_ERROR, error_response, screen};
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
        if tokio::time::timeout(Duration::from_secs(5), written)
            .await
            .is_err()
        {
            tracing::warn!("stdout did not drain; exiting anyway");
        }
    }
}

pub fn spawn(max_line_bytes: usize) -> McpStdio {
    let (read, mut feed) = tokio::io::duplex(PIPE_BYTES);
    let (drain, write) = tokio::io::duplex(PIPE_BYTES);
    let output = stdio::spawn_writer();
    let mut input = stdio::spawn_reader(max_line_bytes);
    let replies = output.lines.clone();
    let inbound = tokio::spawn(async move {
        while let Some(line) = input.recv().await {
            let text = match line {
                InputLine::Text(text) => text,
                InputLine::NotUtf8 => {
                    let error = "Parse error: the line is not valid UTF-8";
                    let _ = replies.send(error_response(None, PARSE_ERROR, error));
                    continue;
                }
                InputLine::TooLong { limit } => {
                    let error = format!(
                        "Invalid Request: the message is longer than {limit} bytes; skipped"
                    );
                    let _ = replies.send(error_response(None, INVALID_REQUEST, &error));
                    continue;
                }
            };
            if let Some(reply) = screen(&text) {
                let _ = replies.send(reply);
                continue;
            }
            let forwarded = async {
                feed.write_all(text.as_bytes()).await?;
                feed.write_all(b"\n").await
            };
            if forwarded.await.is_err() {
                // rmcp has stopped reading: the service is ending.
                break;
            }
        }
        // Dropping `feed` is end of input for rmcp.
    });
    let lines = output.lines;
    let outbound = tokio::spawn(async move {
        let mut from_rmcp = BufReader::new(drain).lines();
        while let Ok(Some(line)) = from_rmcp.next_line().await {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    McpStdio {
        read,
        write,
        disconnected: output.disconnected,
        flush: Flush {
            inbound,
            outbound,
            written: output.written,
        },
    }
}
