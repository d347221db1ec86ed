//! Line-oriented stdin and stdout for the front ends, each on a plain thread of its own.
//!
//! tokio's `stdin()`/`stdout()` hand every read and every write to the blocking pool: one task and one
//! thread wake-up per request line and two per reply, all paid on the runtime thread that also spawns
//! and supervises the children. Here one reader thread blocks in `read` and one writer thread writes
//! whatever replies have queued up, flushing once per batch, so the runtime thread only moves strings
//! through channels. Both work for any kind of stdin/stdout: pipe, file, terminal or socket.
//!
//! Three things no input may do: make the server hold an arbitrarily long line in memory (a line over
//! the limit is skipped as it streams by and reported as [`InputLine::TooLong`]), make it read ahead
//! without bound (the reader waits once [`READ_AHEAD_BYTES`] or [`READ_AHEAD`] lines are queued and
//! the server has not taken them: that is how a paused front end, `flow.rs`, stops reading), and
//! leave it running after the client closed the server's stdout (a failed write, or
//! `POLLERR`/`POLLHUP` on stdout while idle, cancels [`Output::disconnected`]).

use std::io::{BufRead, BufWriter, ErrorKind, Write};
use std::os::fd::AsFd;
use std::sync::{Arc, Condvar, Mutex};

use dsh::actors::process::lock_unpoisoned;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::outbox::{Outbox, OutboxReceiver};

/// Lines queued between the reader thread and the server; a full queue makes the reader wait.
const READ_AHEAD: usize = 1024;

/// Bytes of lines queued between the reader thread and the server; past them the reader waits
/// (a single longer line, up to `--max-line-bytes`, is still let through on its own).
pub const READ_AHEAD_BYTES: usize = 1 << 20;

/// How long a server that is stopping at once (a signal, the client gone) waits for its last lines
/// to reach a client that does not read them.
pub const FLUSH_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The default `--max-line-bytes`: 16 MiB.
pub const DEFAULT_MAX_LINE_BYTES: usize = 16 << 20;

/// One line of input.
#[derive(Debug, PartialEq)]
pub enum InputLine {
    /// The line, without its line terminator (`\n` or `\r\n`).
    Text(String),
    /// The line's bytes are not UTF-8; it is answered as malformed and the server goes on.
    NotUtf8,
    /// The line was longer than the limit; its bytes were discarded as they arrived.
    TooLong { limit: usize },
}

impl InputLine {
    /// The bytes this line holds.
    fn size(&self) -> usize {
        match self {
            InputLine::Text(text) => text.len(),
            InputLine::NotUtf8 | InputLine::TooLong { .. } => 0,
        }
    }
}

/// Bytes queued between the reader thread and the server.
#[derive(Default)]
struct ReadAhead {
    bytes: Mutex<usize>,
    taken: Condvar,
}

impl ReadAhead {
    /// Waits (on the reader thread) until `size` more bytes fit, or nothing is queued.
    fn reserve(&self, size: usize) {
        let mut bytes = lock_unpoisoned(&self.bytes);
        while *bytes > 0 && *bytes + size > READ_AHEAD_BYTES {
            bytes = self
                .taken
                .wait(bytes)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        *bytes += size;
    }

    /// The server took a line of `size` bytes.
    fn release(&self, size: usize) {
        let mut bytes = lock_unpoisoned(&self.bytes);
        *bytes = bytes.saturating_sub(size);
        self.taken.notify_one();
    }
}

/// The server's end of stdin: lines in order, then `None` at end of input.
pub struct Input {
    lines: mpsc::Receiver<InputLine>,
    ahead: Arc<ReadAhead>,
}

impl Input {
    /// The next line; `None` at end of input (or once the reader failed).
    pub async fn recv(&mut self) -> Option<InputLine> {
        let line = self.lines.recv().await?;
        self.ahead.release(line.size());
        Some(line)
    }
}

/// Reads stdin line by line on a thread of its own, never holding more than `max_line_bytes` of one
/// line nor reading further ahead than [`READ_AHEAD_BYTES`]. The channel closes at end of input or at
/// the first read error (logged). The thread may stay blocked in `read` (or waiting for the server
/// to take a line) after the server is done with it; the binary exits with `std::process::exit`,
/// which does not wait for it.
pub fn spawn_reader(max_line_bytes: usize) -> Input {
    let (tx, rx) = mpsc::channel(READ_AHEAD);
    let ahead = Arc::new(ReadAhead::default());
    let reserve = ahead.clone();
    let spawned = std::thread::Builder::new()
        .name("dsh-stdin".into())
        .spawn(move || {
            let send = |line: InputLine| {
                reserve.reserve(line.size());
                tx.blocking_send(line).is_ok()
            };
            read_lines(std::io::stdin().lock(), max_line_bytes, send);
        });
    if let Err(err) = spawned {
        // The dropped sender reads as end of input: the server answers nothing and exits cleanly.
        tracing::error!(%err, "cannot start the stdin reader thread");
    }
    Input { lines: rx, ahead }
}

/// Reads lines from `input` and hands each to `send`, until end of input or `send` says the server
/// is gone (`false`).
fn read_lines(
    mut input: impl BufRead,
    max_line_bytes: usize,
    mut send: impl FnMut(InputLine) -> bool,
) {
    let mut line = Vec::new();
    let mut discarding = false;
    loop {
        let buffer = match input.fill_buf() {
            Ok(buffer) => buffer,
            Err(err) if err.kind() == ErrorKind::Interrupted => continue,
            Err(err) => {
                tracing::warn!(%err, "stdin read failed; treating as end of input");
                return;
            }
        };
        if buffer.is_empty() {
            // End of input: a last line without a newline still counts.
            let last = if discarding {
                Some(InputLine::TooLong {
                    limit: max_line_bytes,
                })
            } else {
                (!line.is_empty()).then(|| to_line(&line))
            };
            if let Some(last) = last {
                send(last);
            }
            return;
        }
        let newline = buffer.iter().position(|&b| b == b'\n');
        let used = newline.map_or(buffer.len(), |i| i + 1);
        if !discarding {
            let content = newline.unwrap_or(buffer.len());
            if line.len() + content > max_line_bytes {
                discarding = true;
                line = Vec::new();
            } else {
                line.extend_from_slice(&buffer[..used]);
            }
        }
        input.consume(used);
        if newline.is_none() {
            continue;
        }
        let complete = if std::mem::take(&mut discarding) {
            InputLine::TooLong {
                limit: max_line_bytes,
            }
        } else {
            to_line(&line)
        };
        line.clear();
        if !send(complete) {
            return;
        }
    }
}

fn to_line(bytes: &[u8]) -> InputLine {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    match std::str::from_utf8(bytes) {
        Ok(text) => InputLine::Text(text.to_owned()),
        Err(_) => InputLine::NotUtf8,
    }
}

/// The server's side of stdout.
pub struct Output {
    /// Each line sent is written followed by `\n`; lines never interleave.
    pub lines: Outbox,
    /// Resolves once every line sent before the last sender was dropped has been written (or stdout
    /// failed).
    pub written: oneshot::Receiver<()>,
    /// Cancelled when the client closed our stdout: nothing we write can reach it any more.
    pub disconnected: CancellationToken,
}

/// Writes each queued line to stdout on a thread of its own, flushing whenever the queue runs empty,
/// and watches stdout for the client hanging up.
pub fn spawn_writer() -> Output {
    let (tx, rx) = Outbox::new();
    let (done_tx, done_rx) = oneshot::channel();
    let disconnected = CancellationToken::new();
    let token = disconnected.clone();
    let spawned = std::thread::Builder::new()
        .name("dsh-stdout".into())
        .spawn(move || {
            if let Err(err) = write_lines(std::io::stdout().lock(), rx) {
                tracing::info!(%err, "stdout is gone; the client disconnected");
                token.cancel();
            }
            let _ = done_tx.send(());
        });
    if let Err(err) = spawned {
        // Without a writer nothing can be answered; the closed channel makes every send a no-op.
        tracing::error!(%err, "cannot start the stdout writer thread");
    }
    watch_for_hangup(disconnected.clone());
    Output {
        lines: tx,
        written: done_rx,
        disconnected,
    }
}

/// A pipe whose reader closed reports `POLLERR` to its writer, a socket `POLLHUP`: noticed here even
/// when the server has nothing to write. Other kinds of stdout (files, `/dev/null`) never report
/// either and the thread just stays blocked.
fn watch_for_hangup(disconnected: CancellationToken) {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let spawned = std::thread::Builder::new()
        .name("dsh-stdout-watch".into())
        .spawn(move || {
            let stdout = std::io::stdout();
            loop {
                let mut fds = [PollFd::new(stdout.as_fd(), PollFlags::empty())];
                match poll(&mut fds, PollTimeout::NONE) {
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(err) => {
                        tracing::debug!(%err, "cannot watch stdout");
                        return;
                    }
                    Ok(_) => {}
                }
                let hung_up = fds[0]
                    .revents()
                    .is_some_and(|r| r.intersects(PollFlags::POLLERR | PollFlags::POLLHUP));
                if hung_up {
                    tracing::info!("stdout hung up; the client disconnected");
                    disconnected.cancel();
                }
                return;
            }
        });
    if let Err(err) = spawned {
        tracing::warn!(%err, "cannot start the stdout watcher thread");
    }
}

fn write_lines(output: impl Write, mut rx: OutboxReceiver) -> std::io::Result<()> {
    let mut output = BufWriter::new(output);
    while let Some(line) = rx.blocking_recv() {
        let mut next = Some(line);
        while let Some(line) = next {
            writeln!(output, "{line}")?;
            rx.written(&line);
            next = rx.try_recv();
        }
        output.flush()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(input: impl BufRead, max: usize) -> Vec<InputLine> {
        let mut got = Vec::new();
        read_lines(input, max, |line| {
            got.push(line);
            true
        });
        got
    }

    #[test]
    fn lines_lose_their_terminators_and_bad_utf8_is_flagged() {
        let input: &[u8] = b"one\ntwo\r\n\xff\xfe\n\nlast without newline";
        assert_eq!(
            read_all(input, 1 << 20),
            vec![
                InputLine::Text("one".into()),
                InputLine::Text("two".into()),
                InputLine::NotUtf8,
                InputLine::Text(String::new()),
                InputLine::Text("last without newline".into()),
            ]
        );
    }

    #[test]
    fn a_line_over_the_limit_is_skipped_and_reported_once() {
        // A small buffer makes the long line arrive in many pieces.
        let input = b"short\n0123456789abcdef\n12345678\nxxxxxxxxxxxxxxxxxxxxxx".to_vec();
        let reader = std::io::BufReader::with_capacity(3, &input[..]);
        let got = read_all(reader, 8);
        assert_eq!(
            got,
            vec![
                InputLine::Text("short".into()),
                InputLine::TooLong { limit: 8 },
                InputLine::Text("12345678".into()),
                InputLine::TooLong { limit: 8 },
            ]
        );
    }

    #[test]
    fn every_queued_line_is_written_in_order() {
        let (tx, rx) = Outbox::new();
        for i in 0..1000 {
            tx.send(format!("line {i}")).unwrap();
        }
        drop(tx);
        let mut written = Vec::new();
        write_lines(&mut written, rx).unwrap();
        let expected: String = (0..1000).map(|i| format!("line {i}\n")).collect();
        assert_eq!(String::from_utf8(written).unwrap(), expected);
    }

    #[test]
    fn the_reader_waits_while_a_mebibyte_is_queued_but_passes_one_long_line() {
        let ahead = Arc::new(ReadAhead::default());
        ahead.reserve(READ_AHEAD_BYTES - 10);
        let (tx, rx) = std::sync::mpsc::channel();
        let waiting = ahead.clone();
        let reader = std::thread::spawn(move || {
            waiting.reserve(100);
            tx.send(()).unwrap();
        });
        assert!(
            rx.recv_timeout(std::time::Duration::from_millis(200))
                .is_err(),
            "100 more bytes do not fit"
        );
        ahead.release(READ_AHEAD_BYTES - 10);
        rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
        reader.join().unwrap();
        ahead.release(100);
        // Alone, a line longer than the budget passes.
        ahead.reserve(READ_AHEAD_BYTES * 4);
    }
}
