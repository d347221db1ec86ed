//! Line-oriented stdin and stdout for `dsh jsonl`, each on a plain thread of its own.
//!
//! tokio's `stdin()`/`stdout()` hand every read and every write to the blocking pool: one task and one
//! thread wake-up per request line and two per reply, all paid on the runtime thread that also spawns
//! and supervises the children. Here one reader thread blocks in `read` and one writer thread writes
//! whatever replies have queued up, flushing once per batch, so the runtime thread only moves strings
//! through channels. Both work for any kind of stdin/stdout: pipe, file, terminal or socket.

use std::io::{BufRead, BufWriter, Write};

use tokio::sync::{mpsc, oneshot};

/// Lines queued between the reader thread and the server; a full queue makes the reader wait.
const READ_AHEAD: usize = 1024;

/// One line of input.
#[derive(Debug, PartialEq)]
pub enum InputLine {
    /// The line, without its line terminator (`\n` or `\r\n`).
    Text(String),
    /// The line's bytes are not UTF-8; it is answered as malformed and the server goes on.
    NotUtf8,
}

/// Reads stdin line by line on a thread of its own. The channel closes at end of input or at the
/// first read error (logged). The thread may stay blocked in `read` after the server is done with it;
/// the binary exits with `std::process::exit`, which does not wait for it.
pub fn spawn_reader() -> mpsc::Receiver<InputLine> {
    let (tx, rx) = mpsc::channel(READ_AHEAD);
    let spawned = std::thread::Builder::new()
        .name("dsh-stdin".into())
        .spawn(move || read_lines(std::io::stdin().lock(), &tx));
    if let Err(err) = spawned {
        // The dropped sender reads as end of input: the server answers nothing and exits cleanly.
        tracing::error!(%err, "cannot start the stdin reader thread");
    }
    rx
}

fn read_lines(mut input: impl BufRead, tx: &mpsc::Sender<InputLine>) {
    let mut bytes = Vec::new();
    loop {
        bytes.clear();
        match input.read_until(b'\n', &mut bytes) {
            Ok(0) => return,
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(%err, "stdin read failed; treating as end of input");
                return;
            }
        }
        if tx.blocking_send(to_line(&bytes)).is_err() {
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

/// Writes each queued line to stdout followed by `\n`, on a thread of its own, flushing whenever the
/// queue runs empty. The returned receiver resolves once every line sent before the last sender was
/// dropped has been written (or stdout failed, e.g. the reader went away).
pub fn spawn_writer() -> (mpsc::UnboundedSender<String>, oneshot::Receiver<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let (done_tx, done_rx) = oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name("dsh-stdout".into())
        .spawn(move || {
            write_lines(std::io::stdout().lock(), rx);
            let _ = done_tx.send(());
        });
    if let Err(err) = spawned {
        // Without a writer nothing can be answered; the closed channel makes every send a no-op.
        tracing::error!(%err, "cannot start the stdout writer thread");
    }
    (tx, done_rx)
}

fn write_lines(output: impl Write, mut rx: mpsc::UnboundedReceiver<String>) {
    let mut output = BufWriter::new(output);
    while let Some(line) = rx.blocking_recv() {
        let mut next = Some(line);
        while let Some(line) = next {
            if writeln!(output, "{line}").is_err() {
                return;
            }
            next = rx.try_recv().ok();
        }
        if output.flush().is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_lose_their_terminators_and_bad_utf8_is_flagged() {
        let (tx, mut rx) = mpsc::channel(16);
        let input: &[u8] = b"one\ntwo\r\n\xff\xfe\n\nlast without newline";
        read_lines(input, &tx);
        drop(tx);
        let mut got = Vec::new();
        while let Some(line) = rx.blocking_recv() {
            got.push(line);
        }
        assert_eq!(
            got,
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
    fn every_queued_line_is_written_in_order() {
        let (tx, rx) = mpsc::unbounded_channel();
        for i in 0..1000 {
            tx.send(format!("line {i}")).unwrap();
        }
        drop(tx);
        let mut written = Vec::new();
        write_lines(&mut written, rx);
        let expected: String = (0..1000).map(|i| format!("line {i}\n")).collect();
        assert_eq!(String::from_utf8(written).unwrap(), expected);
    }
}
