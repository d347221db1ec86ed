//! Per-stream output collection: count every byte, keep the tail in memory, spill the whole stream.
//!
//! A tail cut never splits a UTF-8 code point, and an offset read of an open stream stops before an
//! incomplete sequence at its end, so the next read starts on a character boundary (docs/CONTRACT.md,
//! "What every command gets").
//!
//! Memory stays bounded however much a command prints: at most `max_bytes` are held, in one buffer
//! (`tail.rs`). The spill file receives everything up to `max_spill_bytes`; a larger stream loses its
//! spill (the file is deleted) and keeps only the tail. Small outputs never touch the disk.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;

use crate::outcome::{CollectedOutput, ReadResult, StreamKind};
use crate::scan::{CatchUp, Piece, Scans, StreamScan, StreamView};
use crate::spill::{SpillDir, create_spill_file};
use crate::tail::Tail;

/// The spill file's life: none yet, open while spilling, closed (complete), or given up.
#[derive(Debug)]
enum Spill {
    /// Nothing spilled yet; the target directory, or `None` when spilling is off for this stream.
    Idle(Option<SpillDir>),
    /// Every byte so far is in the file (a scan reads it back through `dir`).
    Open {
        file: File,
        path: PathBuf,
        dir: SpillDir,
    },
    /// Closed cleanly at finalisation: the file holds the whole stream.
    Closed { path: PathBuf, dir: SpillDir },
    /// Over the cap, failed, or never possible: no path is ever advertised again.
    Disabled,
}

/// Collects one stream. Not thread-safe by itself; its driver shares it behind a mutex.
#[derive(Debug)]
pub struct OutputCollector {
    stream: StreamKind,
    max_bytes: usize,
    max_spill_bytes: u64,
    /// Every byte ever received.
    total: u64,
    /// The retained tail: the last `max_bytes` bytes.
    tail: Tail,
    /// Some bytes were dropped from memory.
    dropped: bool,
    spill: Spill,
    /// Conditions matched against the stream as it is written (`scan.rs`).
    scans: Scans,
    /// No more bytes will arrive.
    finished: bool,
    #[cfg(test)]
    faults: tests::Faults,
}

impl OutputCollector {
    /// A collector keeping at most `max_bytes` in memory and spilling to `spill_dir` (none: never spill).
    pub fn new(
        stream: StreamKind,
        max_bytes: usize,
        max_spill_bytes: u64,
        spill_dir: Option<SpillDir>,
    ) -> Self {
        Self {
            stream,
            max_bytes,
            max_spill_bytes,
            total: 0,
            tail: Tail::new(max_bytes),
            dropped: false,
            spill: Spill::Idle(spill_dir),
            scans: Scans::default(),
            finished: false,
            #[cfg(test)]
            faults: tests::Faults::default(),
        }
    }

    /// Takes one chunk from the stream (copied into the tail).
    pub fn push(&mut self, chunk: &[u8]) {
        if chunk.is_empty() || self.finished {
            return;
        }
        let at = self.total;
        self.total += chunk.len() as u64;
        let overflows = self.tail.len() + chunk.len() > self.max_bytes;
        if overflows || matches!(self.spill, Spill::Open { .. }) {
            self.spill_chunk(chunk);
        }
        if self.tail.push(chunk) > 0 {
            self.dropped = true;
        }
        self.scans.feed(at, chunk);
    }

    /// Registers `scan` on the text from whole-stream offset `from`: `None` if it already holds,
    /// else its id and whether it must first catch up from the spill file (see `scan.rs`).
    pub(crate) fn register_scan(
        &mut self,
        from: u64,
        scan: Box<dyn StreamScan>,
        hit: tokio::sync::oneshot::Sender<()>,
    ) -> Option<(u64, bool)> {
        let view = view(self.total, &self.tail, &self.spill);
        self.scans.register(&view, from, scan, hit)
    }

    /// The next step of scan `id`'s catch-up.
    pub(crate) fn catch_up_step(&mut self, id: u64) -> CatchUp {
        let view = view(self.total, &self.tail, &self.spill);
        self.scans.catch_up_step(id, &view)
    }

    /// Takes scan `id` back after a piece of its catch-up.
    pub(crate) fn scan_returned(
        &mut self,
        id: u64,
        scan: Box<dyn StreamScan>,
        fed: usize,
        piece: Piece,
    ) {
        let view = view(self.total, &self.tail, &self.spill);
        self.scans.returned(id, scan, fed, piece, &view);
    }

    /// Forgets scan `id`.
    pub(crate) fn remove_scan(&mut self, id: u64) {
        self.scans.remove(id);
    }

    /// How many scans are registered (for tests).
    #[cfg(test)]
    pub(crate) fn scan_count(&self) -> usize {
        self.scans.len()
    }

    /// Writes `chunk` to the spill file, opening it first (with everything held so far) if needed, or
    /// gives the spill up when the stream has outgrown the spill cap.
    fn spill_chunk(&mut self, chunk: &[u8]) {
        if matches!(self.spill, Spill::Disabled | Spill::Closed { .. }) {
            return;
        }
        if self.total > self.max_spill_bytes {
            self.discard_spill();
            return;
        }
        if let Spill::Idle(dir) = &self.spill {
            let Some(dir) = dir.clone() else {
                self.spill = Spill::Disabled;
                return;
            };
            match create_spill_file(&dir, self.stream) {
                Ok((file, path)) => {
                    tracing::debug!(stream = self.stream.label(), path = %path.display(), "spilling output");
                    self.spill = Spill::Open { file, path, dir };
                    let held = self.tail.copy_from(0);
                    if !self.write_spill(&held) {
                        return;
                    }
                }
                Err(err) => {
                    tracing::warn!(stream = self.stream.label(), error = %err, "cannot create spill file");
                    self.spill = Spill::Disabled;
                    return;
                }
            }
        }
        self.write_spill(chunk);
    }

    /// Appends to the open spill file; a write error gives the spill up. Returns whether it is still open.
    fn write_spill(&mut self, bytes: &[u8]) -> bool {
        let Spill::Open { file, .. } = &mut self.spill else {
            return false;
        };
        if let Err(err) = file.write_all(bytes) {
            tracing::warn!(stream = self.stream.label(), error = %err, "spill write failed; dropping the spill");
            self.discard_spill();
            return false;
        }
        true
    }

    /// Closes and deletes the spill file; failures are logged, never raised.
    fn discard_spill(&mut self) {
        let previous = std::mem::replace(&mut self.spill, Spill::Disabled);
        if let Spill::Open { file, path, .. } = previous {
            if let Err(err) = self.close_file(file) {
                tracing::warn!(path = %path.display(), error = %err, "closing a discarded spill failed");
            }
            if let Err(err) = self.unlink(&path) {
                tracing::warn!(path = %path.display(), error = %err, "deleting a discarded spill failed");
            }
            tracing::debug!(stream = self.stream.label(), "spill over its cap; deleted");
        }
    }

    fn close_file(&mut self, file: File) -> std::io::Result<()> {
        #[cfg(test)]
        if self.faults.take_close_failure() {
            drop(file);
            return Err(std::io::Error::from_raw_os_error(nix::libc::EIO));
        }
        // Closing explicitly is the only way to hear about a delayed write-back error.
        use std::os::fd::IntoRawFd;
        nix::unistd::close(file.into_raw_fd()).map_err(std::io::Error::from)
    }

    fn unlink(&mut self, path: &std::path::Path) -> std::io::Result<()> {
        #[cfg(test)]
        if self.faults.take_unlink_failure() {
            return Err(std::io::Error::from_raw_os_error(nix::libc::EIO));
        }
        std::fs::remove_file(path)
    }

    /// The spill path to advertise right now, if any.
    fn current_spill_path(&self) -> Option<PathBuf> {
        match &self.spill {
            Spill::Open { path, .. } | Spill::Closed { path, .. } => Some(path.clone()),
            Spill::Idle(_) | Spill::Disabled => None,
        }
    }

    /// Reads from whole-stream offset `from` without consuming anything.
    pub fn read_from(&self, from: u64) -> ReadResult {
        let held = self.tail.len();
        let window_start = self.total - held as u64;
        let lossy = from < window_start;
        let skip = if lossy {
            0
        } else {
            (from - window_start).min(held as u64) as usize
        };
        let mut bytes = self.tail.copy_from(skip);
        let mut start_cut = 0;
        if lossy && self.dropped {
            start_cut = leading_continuation_bytes(&bytes);
        }
        let mut end = bytes.len();
        if !self.finished {
            end -= incomplete_utf8_suffix(&bytes[start_cut..]);
        }
        let next_offset = if bytes.is_empty() {
            self.total
        } else {
            self.total - (bytes.len() - end) as u64
        };
        bytes.truncate(end);
        ReadResult {
            text: String::from_utf8_lossy(&bytes[start_cut.min(bytes.len())..]).into_owned(),
            next_offset,
            lossy,
            spill_path: self.current_spill_path(),
        }
    }

    /// What the kept tail costs in memory: the buffer holding it (see `tail.rs`).
    pub fn memory_bytes(&self) -> usize {
        self.tail.memory_bytes()
    }

    /// The spill file, if one exists now (open or complete).
    pub fn spill_path(&self) -> Option<PathBuf> {
        self.current_spill_path()
    }

    /// Bytes of the spill file, if one exists now: the whole stream so far (a spill holds every byte
    /// from the first on, or is deleted).
    pub fn spill_bytes(&self) -> u64 {
        match self.spill {
            Spill::Open { .. } | Spill::Closed { .. } => self.total,
            Spill::Idle(_) | Spill::Disabled => 0,
        }
    }

    /// Ends the stream: closes the spill (a failed close withholds the path) and returns the final view.
    /// Idempotent; never fails.
    pub fn finalize(&mut self) -> CollectedOutput {
        if !self.finished {
            self.finished = true;
            // A finished stream keeps one buffer of exactly its tail.
            self.tail.finish();
            let spill = std::mem::replace(&mut self.spill, Spill::Disabled);
            self.spill = match spill {
                Spill::Open { file, path, dir } => match self.close_file(file) {
                    Ok(()) => Spill::Closed { path, dir },
                    Err(err) => {
                        tracing::warn!(path = %path.display(), error = %err, "spill close failed; path withheld");
                        Spill::Disabled
                    }
                },
                other => other,
            };
        }
        let bytes = self.tail.copy_from(0);
        let cut = if self.dropped {
            leading_continuation_bytes(&bytes)
        } else {
            0
        };
        CollectedOutput {
            text: String::from_utf8_lossy(&bytes[cut..]).into_owned(),
            truncated: self.dropped,
            spill_path: if self.dropped {
                self.current_spill_path()
            } else {
                None
            },
        }
    }
}

/// The stream as a scan sees it: its length, its kept tail and the spill file holding all of it.
fn view<'a>(total: u64, tail: &'a Tail, spill: &Spill) -> StreamView<'a> {
    StreamView {
        total,
        tail: tail.as_slices(),
        spill: match spill {
            Spill::Open { path, dir, .. } | Spill::Closed { path, dir } => {
                Some((dir.clone(), path.clone()))
            }
            Spill::Idle(_) | Spill::Disabled => None,
        },
    }
}

/// How many bytes at the start are UTF-8 continuation bytes (the tail of a cut character), at most 3.
fn leading_continuation_bytes(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .take(3)
        .take_while(|b| (**b & 0xC0) == 0x80)
        .count()
}

/// The length of an incomplete multi-byte sequence at the very end (0 when the end is complete).
fn incomplete_utf8_suffix(bytes: &[u8]) -> usize {
    // Walk back over at most three continuation bytes to the lead byte.
    let len = bytes.len();
    for back in 1..=len.min(4) {
        let byte = bytes[len - back];
        if (byte & 0xC0) == 0x80 {
            continue;
        }
        let needed = match byte {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => return 0,
        };
        return if back < needed { back } else { 0 };
    }
    0
}

mod watch;

pub(crate) use watch::watch_scan;

#[cfg(test)]
mod tests;
