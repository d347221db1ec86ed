//! Backpressure: when the front ends read input, so that no client can grow the server without
//! bound, and none can lock itself out of cancelling.
//!
//! A client that sends and never reads used to grow the server by about 13 KiB a queued call
//! (10,000 pipelined jsonl calls: 726 MB): every line was read, started and answered into an
//! unbounded queue. Now each front end reads input only while both hold:
//! - **replies can be written**: fewer than 1 MiB of lines wait for stdout (`outbox.rs`); a client
//!   that does not read its replies is not read from either (nothing it sends could be answered);
//! - **fewer than `--max-in-flight` calls are held**: calls (`tool` lines in jsonl, `tools/call`
//!   in MCP) run while fewer than `--max-in-flight` are running; a call read beyond that is held,
//!   in order, and starts when a running call ends. Only calls are held: every other line — a
//!   cancel, an approval answer, a JSON-RPC response or notification — is handled at once, so a
//!   client at the cap can still cancel a running call or answer the approval a running call waits
//!   for. Once `--max-in-flight` calls are held as well, reading stops until one starts.
//!
//! So a client that keeps at most `--max-in-flight` calls outstanding is never paused for calls,
//! and a client with fewer than `2 × --max-in-flight` outstanding always has its cancels and
//! answers read; one that pipelines more sees its later lines read as earlier calls end, and a
//! cancel or answer behind them waits until one does (each foreground call ends at its timeout at
//! the latest). Holding a bounded number of calls is the price of reading past the cap at all: any
//! bound on what is held means some line can be stuck behind it. A cancel of a held call answers it
//! at once without running it (`Error: tool call aborted before dispatch`; MCP sends no response to
//! a cancelled request).
//!
//! What the server holds for unanswered input is then bounded by the flags: the reader's read-ahead
//! (1 MiB, or one line), `--max-in-flight` held and as many running calls (each a line of at most
//! `--max-line-bytes`), and the queue for stdout (1 MiB plus the replies of the calls running when
//! it filled, and the notices of tasks already started). While input is paused the server still
//! answers signals, notices the client closing its stdout, and sees end of input once it reads again.

use crate::outbox::Outbox;

/// The default `--max-in-flight`: enough for any agent and for scripts that run a few hundred
/// commands at once (a test of the suite runs 100 that must all be running together), while
/// bounding what a client that never reads can make the server hold to a few MiB.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 256;

/// Whether a front end may read its next input line: replies can be written, and fewer than
/// `max_in_flight` calls are held.
pub fn may_read(outbox: &Outbox, held: usize, max_in_flight: usize) -> bool {
    outbox.has_room() && held < max_in_flight
}
