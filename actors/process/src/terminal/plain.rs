//! The fast path for a flood of plain lines (`yes`, a log, `cat` of a text file): lines of
//! printable ASCII ended by `\r\n` skip the emulator, and only what is still on screen when the
//! terminal is next looked at is fed to it.
//!
//! Through `vt100`, every byte is a cell written and every line a row formatted and stripped as it
//! scrolls off (`Events::on_scroll`): about 20 MB/s, where a raw pty reader copies 80–120 MB/s.
//! For plain text on the main screen the emulator's work is predictable, so [`Plain`] does it on
//! rows of text instead, and writes to the stream, in the same order and as the same text, the
//! rows the emulator would have scrolled off.
//!
//! **Entry** ([`super::Terminal::feed`]): a newline of the output, fed to the emulator, scrolled
//! the main screen by one row and left the cursor at column 0 of the bottom row. That proves the
//! scroll region is the whole screen (the emulator reports a scrolled row only from a region
//! starting at the top, and the cursor stays on the bottom row only if the region ends there),
//! and the cursor's row is a fresh blank row. The escape parser is known to be in its ground
//! state ([`super::ground`]).
//!
//! **While it lasts**, the emulator is left as it was (rows above the cursor as they were, the
//! cursor on the bottom row) and the text goes to [`Plain`]'s rows: each row the cursor leaves
//! (a `\r\n`, or a wrap when a character arrives at a full row) is one row scrolled on the
//! emulator's screen. Once as many rows were left as the screen has rows above the cursor, every
//! row the emulator held has scrolled off: it is made to scroll them itself (a newline per row:
//! they enter the stream through `on_scroll` as they would have), which leaves its screen blank
//! ("blanked"). From then on the rows this keeps are the screen's rows above the cursor, and one
//! more row left scrolls the top one off into the stream, through the same
//! [`Events::scrolled`] as the emulator's rows.
//!
//! **Leaving it** ([`Plain::flush`]): before anything else reads or changes the emulator, the
//! kept rows are fed to it; once blanked, from its top-left corner (`ESC [ H`) and one row each,
//! so that no row scrolls and the screen, its rows' wrap flags and the cursor end as the whole
//! output would have left them. The character `vt100` repeats for `CSI b` (the last printed) is
//! kept right too.
//!
//! A commit and the partial line, asked for at every render, need no flush once blanked: the
//! rows above the cursor are the kept rows, and the cursor's row is the last one. Before the
//! blank, the emulator's rows that the kept rows pushed off its screen enter the stream at the
//! blank or at the flush (a commit flushes): less than a screenful later, never out of order.

use std::collections::VecDeque;

use super::events::{Events, commit_row};

/// The emulator with this module's callbacks.
type Parser = vt100::Parser<Events>;

/// Plain lines taken but not fed to the emulator; see the module doc.
pub(super) struct Plain {
    /// Rows the cursor left, top first: before the blank, every row left since the entry; after,
    /// the screen's rows above the cursor (one fewer than the screen's rows).
    rows: VecDeque<Row>,
    /// The cursor's row (at most `cols` characters; at `cols` a next character wraps).
    cursor: String,
    /// A `\r` ended the last bytes taken; its `\n` has not come yet.
    cr: bool,
    /// Whether the emulator scrolled off every row it held (see the module doc).
    blanked: bool,
    /// The last printable byte taken (what `CSI b` repeats).
    last: Option<u8>,
    /// The screen's rows and columns.
    size: (usize, usize),
    /// Texts of rows that scrolled off, reused.
    spare: Vec<String>,
}

/// A row of text, and whether it wrapped into the next (a line longer than the screen is wide).
struct Row {
    text: String,
    wrapped: bool,
}

/// A byte the fast path takes as text: printable ASCII (one cell, never wide, never combining).
fn printable(byte: u8) -> bool {
    (0x20..=0x7e).contains(&byte)
}

impl Plain {
    /// Starts on an emulator whose cursor was just seen at column 0 of the bottom row after a
    /// newline scrolled the whole screen (see the module doc); `None` for a screen too small for
    /// the blanking (a single row).
    pub(super) fn enter(rows: u16, cols: u16) -> Option<Plain> {
        (rows >= 2).then(|| Plain {
            rows: VecDeque::new(),
            cursor: String::new(),
            cr: false,
            blanked: false,
            last: None,
            size: (usize::from(rows), usize::from(cols)),
            spare: Vec::new(),
        })
    }

    /// Takes the plain text at the start of `bytes`: printable ASCII and `\r\n` (a final `\r`
    /// waits for its `\n`). Returns how many bytes it took; the rest is for the emulator, after
    /// [`Plain::flush`].
    pub(super) fn take(&mut self, bytes: &[u8], parser: &mut Parser) -> usize {
        let mut at = 0;
        if self.cr {
            if bytes.first() != Some(&b'\n') {
                return 0;
            }
            self.cr = false;
            self.leave_row(false, parser);
            at = 1;
        }
        while at < bytes.len() {
            let run = bytes[at..]
                .iter()
                .position(|&b| !printable(b))
                .unwrap_or(bytes.len() - at);
            if run > 0 {
                self.text(&bytes[at..at + run], parser);
                at += run;
                continue;
            }
            match (bytes[at], bytes.get(at + 1)) {
                (b'\r', Some(b'\n')) => {
                    self.leave_row(false, parser);
                    at += 2;
                }
                (b'\r', None) => {
                    self.cr = true;
                    at += 1;
                }
                _ => break,
            }
        }
        at
    }

    /// Printable ASCII at the cursor, wrapping at full rows.
    fn text(&mut self, mut run: &[u8], parser: &mut Parser) {
        self.last = run.last().copied().or(self.last);
        let cols = self.size.1;
        while !run.is_empty() {
            if self.cursor.len() >= cols {
                self.leave_row(true, parser);
            }
            let (now, rest) = run.split_at(run.len().min(cols - self.cursor.len()));
            // Printable ASCII is UTF-8.
            self.cursor
                .push_str(std::str::from_utf8(now).unwrap_or_default());
            run = rest;
        }
    }

    /// The cursor leaves its row (a newline, or a wrap): one row scrolls on the screen.
    fn leave_row(&mut self, wrapped: bool, parser: &mut Parser) {
        let next = self.spare.pop().unwrap_or_default();
        let text = std::mem::replace(&mut self.cursor, next);
        self.rows.push_back(Row { text, wrapped });
        let above = self.size.0 - 1;
        if !self.blanked {
            if self.rows.len() == above {
                // Every row the emulator held above the cursor has scrolled off: let it scroll
                // them into the stream itself, which leaves its screen blank.
                parser.process(&b"\n".repeat(above));
                self.blanked = true;
            }
            return;
        }
        if let Some(Row { mut text, wrapped }) = self.rows.pop_front() {
            parser.callbacks_mut().scrolled(&text, wrapped);
            text.clear();
            self.spare.push(text);
        }
    }

    /// Feeds what it kept to the emulator, which then shows what the whole output would have
    /// left (see the module doc).
    pub(super) fn flush(self, parser: &mut Parser) {
        let mut bytes = Vec::with_capacity((self.rows.len() + 1) * (self.size.1 + 2) + 8);
        if self.blanked {
            let nothing_shown =
                self.cursor.is_empty() && self.rows.iter().all(|r| r.text.is_empty());
            if let (true, Some(last)) = (nothing_shown, self.last) {
                // Only blank rows to draw: print the last character on the blank screen and
                // scroll it away unseen, so that `CSI b` repeats what it would have.
                parser.callbacks_mut().mute = self.size.0;
                bytes.extend_from_slice(&[last, b'\r']);
                bytes.extend(std::iter::repeat_n(b'\n', self.size.0));
            }
            bytes.extend_from_slice(b"\x1b[H");
        }
        for row in &self.rows {
            bytes.extend_from_slice(row.text.as_bytes());
            if !row.wrapped {
                bytes.extend_from_slice(b"\r\n");
            }
        }
        bytes.extend_from_slice(self.cursor.as_bytes());
        if self.cr {
            bytes.push(b'\r');
        }
        parser.process(&bytes);
        parser.callbacks_mut().mute = 0;
    }

    /// [`super::Terminal::commit`] without the emulator, once blanked: the rows above the cursor
    /// are the kept rows. False before the blank (flush, then commit).
    pub(super) fn commit(&self, events: &mut Events) -> bool {
        if !self.blanked {
            return false;
        }
        if !events.redrawn {
            for (index, row) in self.rows.iter().enumerate() {
                if !commit_row(events, index, &row.text, row.wrapped, false) {
                    break;
                }
            }
        }
        true
    }

    /// [`super::Terminal::partial`]: the cursor is on the bottom row.
    pub(super) fn partial(&self) -> String {
        self.cursor.trim_end().to_owned()
    }
}
