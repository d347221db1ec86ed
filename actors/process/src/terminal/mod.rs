//! What the model reads from a terminal task (issue 22, point 5): a terminal emulator between
//! the pty master and the output collectors.
//!
//! A program on a terminal draws: it redraws a progress bar with `\r`, moves the cursor, erases,
//! colours, and a full-screen program (`less`, `vim`, `top`) paints a screen on the alternate
//! buffer. Stripping escape bytes keeps every intermediate state of a `\r` bar and turns a
//! full-screen program into noise, so the output goes through an emulator, the `vt100` crate
//! (a screen of rows × columns; no scrollback is kept: rows that scroll off go to the
//! collectors). It was chosen over `alacritty_terminal` (a whole terminal with its own event
//! loop and pty) and `termwiz` (large): `vt100` is only the parser and the grid, with a callback
//! for rows scrolling off and for the sequences it does not handle, which is what dsh needs.
//!
//! [`Terminal`] splits what the program drew into two parts:
//!
//! - **the stream**: completed lines as plain text (no `\x1b`, no `\r`), for the tail-keep and
//!   spill collectors. A row of the main screen becomes a completed line when it scrolls off the
//!   top, or, at [`Terminal::commit`], when the cursor is below it. A row is written once; when a
//!   row already written is changed afterwards (the program moved the cursor up and redrew), its
//!   new text is written again when it scrolls off or is committed, after what came meanwhile.
//! - **the live part**, read with every read: [`Terminal::partial`], the cursor's row and what is
//!   below it on the main screen (a prompt, a progress bar in its current state); or, while the
//!   program holds the alternate screen, [`Terminal::visible`], the whole screen as text
//!   ([`Terminal::full_screen`] tells which). Rows of the alternate screen never enter the
//!   stream.
//!
//! Terminal queries are answered, so that programs that ask do not hang: cursor position
//! (`ESC[6n`), status (`ESC[5n`), primary and secondary device attributes (`ESC[c`, `ESC[>c`),
//! and the default foreground and background colours (`OSC 10/11 ?`). The answers collect in
//! [`Terminal::take_replies`]; the driver writes them to the master.
//!
//! A flood of plain lines (printable ASCII ended by `\r\n`, what `yes`, logs and most build tools
//! print) takes a fast path (`plain.rs`): the rows that would scroll off go to the stream directly,
//! as the same text in the same order, and the emulator is fed only what is still on screen when it
//! is next looked at. The differential tests (`differential.rs`) hold the two paths to the same
//! stream and the same screen.
//!
//! Memory is bounded by the size: a grid of rows × columns cells of 32 bytes (150 KiB at the
//! default 40x120), a second one while a program uses the alternate screen, plus the text of the
//! committed rows still on screen. An idle terminal can sleep as the escape sequences that
//! redraw its screen ([`Terminal::hibernate`], a few KiB), and wakes up on the next call.

#[cfg(test)]
mod differential;
mod events;
mod ground;
mod plain;
#[cfg(test)]
mod tests;

use events::{Events, commit_rows};
use plain::Plain;

/// The emulated terminal of one task.
pub struct Terminal {
    /// The emulator; a 1x1 stand-in while asleep.
    parser: vt100::Parser<Events>,
    /// Set while asleep (see [`Terminal::hibernate`]).
    asleep: Option<Asleep>,
    /// Plain lines the fast path took and did not feed to the emulator yet.
    plain: Option<Plain>,
    /// Whether the emulator's escape parser is certainly in its ground state ([`ground`]).
    ground: bool,
    /// Whether the fast path is used (the differential tests turn it off).
    fast: bool,
    /// Bytes the fast path took (the differential tests check that it ran).
    #[cfg(test)]
    fast_bytes: usize,
}

/// An idle terminal: the escape sequences that redraw its screen, and its bookkeeping.
struct Asleep {
    screen: String,
    events: Events,
    rows: std::num::NonZeroU16,
}

impl Terminal {
    /// A terminal of `rows` × `cols` (each at least 1).
    pub fn new(rows: u16, cols: u16) -> Terminal {
        let rows = std::num::NonZeroU16::new(rows).unwrap_or(std::num::NonZeroU16::MIN);
        let cols = std::num::NonZeroU16::new(cols).unwrap_or(std::num::NonZeroU16::MIN);
        let events = Events::new(cols.get());
        Terminal {
            parser: vt100::Parser::new_with_callbacks(rows, cols, 0, events),
            asleep: None,
            plain: None,
            ground: true,
            fast: true,
            #[cfg(test)]
            fast_bytes: 0,
        }
    }

    /// A terminal without the fast path, for the differential tests.
    #[cfg(test)]
    fn slow(rows: u16, cols: u16) -> Terminal {
        Terminal {
            fast: false,
            ..Terminal::new(rows, cols)
        }
    }

    /// The parser up to date: woken up first when asleep, fed what the fast path kept.
    fn parser(&mut self) -> &mut vt100::Parser<Events> {
        self.awake();
        if let Some(plain) = self.plain.take() {
            plain.flush(&mut self.parser);
        }
        &mut self.parser
    }

    /// The parser, woken up first when asleep; its screen may lack what the fast path kept, but
    /// its modes and callbacks are current (plain text changes neither).
    fn awake(&mut self) -> &mut vt100::Parser<Events> {
        if let Some(Asleep {
            screen,
            events,
            rows,
        }) = self.asleep.take()
        {
            let cols = std::num::NonZeroU16::new(events.cols).unwrap_or(std::num::NonZeroU16::MIN);
            let mut parser = vt100::Parser::new_with_callbacks(rows, cols, 0, Events::default());
            parser.process(screen.as_bytes());
            *parser.callbacks_mut() = events;
            self.parser = parser;
        }
        &mut self.parser
    }

    /// Shrinks an idle terminal to the escape sequences that redraw its screen (a few KiB instead
    /// of a grid of 32-byte cells: 150 KiB at 40x120); the next call wakes it up. Call it for a
    /// task that has been waiting for a while. Not while a full-screen program holds the
    /// alternate screen (the main screen behind it would be lost): returns whether it sleeps.
    pub fn hibernate(&mut self) -> bool {
        if self.asleep.is_some() {
            return true;
        }
        self.parser();
        let screen = self.parser.screen();
        if screen.alternate_screen() {
            return false;
        }
        let rows = screen.size().0;
        let formatted = screen.state_formatted();
        let events = std::mem::take(self.parser.callbacks_mut());
        let one = std::num::NonZeroU16::MIN;
        self.parser = vt100::Parser::new_with_callbacks(one, one, 0, Events::default());
        self.asleep = Some(Asleep {
            screen: formatted,
            events,
            rows,
        });
        true
    }

    /// Whether it sleeps now (see [`Terminal::hibernate`]).
    pub fn asleep(&self) -> bool {
        self.asleep.is_some()
    }

    /// Processes output read from the master: plain lines through the fast path once it could
    /// start (see `plain.rs`), the rest through the emulator.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.awake();
        let mut rest = bytes;
        while !rest.is_empty() {
            if let Some(plain) = &mut self.plain {
                let taken = plain.take(rest, &mut self.parser);
                #[cfg(test)]
                {
                    self.fast_bytes += taken;
                }
                rest = &rest[taken..];
                if rest.is_empty() {
                    return;
                }
                if let Some(plain) = self.plain.take() {
                    plain.flush(&mut self.parser);
                }
            }
            let Some(cr) = self.entry(rest) else {
                self.process(rest);
                return;
            };
            // Up to the newline, then the newline alone: did it scroll the whole screen, the
            // cursor at column 0 of the bottom row?
            self.process(&rest[..=cr]);
            let scrolls = self.parser.callbacks().scrolls;
            self.process(b"\n");
            rest = &rest[cr + 2..];
            let screen = self.parser.screen();
            let (rows, cols) = screen.size();
            if self.ground
                && !screen.alternate_screen()
                && self.parser.callbacks().scrolls == scrolls + 1
                && screen.cursor_position() == (rows.get() - 1, 0)
            {
                self.plain = Plain::enter(rows.get(), cols.get());
            }
        }
    }

    /// Where the fast path could start in `bytes`: the `\r` of the first `\r\n` followed by
    /// plain text (or by nothing).
    fn entry(&self, bytes: &[u8]) -> Option<usize> {
        if !self.fast {
            return None;
        }
        let mut from = 0;
        while let Some(lf) = bytes[from..].iter().position(|&b| b == b'\n') {
            let lf = from + lf;
            if lf > 0
                && bytes[lf - 1] == b'\r'
                && bytes
                    .get(lf + 1)
                    .is_none_or(|&b| (0x20..=0x7e).contains(&b) || b == b'\r')
            {
                return Some(lf - 1);
            }
            from = lf + 1;
        }
        None
    }

    /// Feeds the emulator, keeping track of its escape parser's state.
    fn process(&mut self, bytes: &[u8]) {
        self.parser.process(bytes);
        self.ground = ground::after(self.ground, bytes);
    }

    /// Changes the size (after [`dsh_contain::pty::resize`]); rows that no longer fit scroll off
    /// into the stream.
    ///
    /// A resize that adds rows is not exactly what the emulator alone would do once the fast path
    /// ran: `vt100` counts every row ever scrolled off and, growing, pulls up to that many blank
    /// rows in at the top as if from scrollback; the rows the fast path wrote to the stream itself
    /// are not in that count. dsh keeps a terminal at its `--tty-size` (this has no caller but the
    /// tests), and the differential tests resize to fewer rows only.
    pub fn resize(&mut self, rows: u16, cols: u16) {
        let rows = std::num::NonZeroU16::new(rows).unwrap_or(std::num::NonZeroU16::MIN);
        let cols = std::num::NonZeroU16::new(cols).unwrap_or(std::num::NonZeroU16::MIN);
        self.parser().callbacks_mut().cols = cols.get();
        self.parser().set_size(rows, cols);
        let keep = usize::from(rows.get());
        self.parser().callbacks_mut().written.truncate(keep);
    }

    /// Moves the main screen's rows above the cursor into the stream (those not written yet, or
    /// changed since): call it before a read, and when the task ends (after which the cursor's
    /// row is completed too: see [`Terminal::finish`]).
    pub fn commit(&mut self) {
        self.awake();
        if let Some(plain) = &self.plain
            && plain.commit(self.parser.callbacks_mut())
        {
            return;
        }
        let (screen, events) = self.parser().screen_and_callbacks_mut();
        if screen.alternate_screen() || events.redrawn {
            return;
        }
        let (cursor_row, _) = screen.cursor_position();
        commit_rows(screen, events, cursor_row, false);
    }

    /// At the task's end: the whole main screen down to its last non-blank row enters the
    /// stream (a last line without a newline keeps none).
    pub fn finish(&mut self) {
        let (screen, events) = self.parser().screen_and_callbacks_mut();
        if screen.alternate_screen() {
            return;
        }
        let rows: Vec<String> = screen.rows(0, events.cols).collect();
        let (cursor_row, _) = screen.cursor_position();
        let Some(last) = rows.iter().rposition(|row| !row.trim_end().is_empty()) else {
            return;
        };
        let last = u16::try_from(last).unwrap_or(u16::MAX);
        if cursor_row > last {
            // The output ended with a newline: every row is a completed line.
            commit_rows(screen, events, cursor_row, true);
            return;
        }
        commit_rows(screen, events, last, true);
        // The last row: a line without a newline.
        let index = usize::from(last);
        let tail = rows
            .get(index)
            .map(|row| row.trim_end())
            .unwrap_or_default();
        if events.written.get(index).is_none_or(|seen| seen != tail) {
            events.lines.push_str(tail);
        }
    }

    /// The completed lines since the last call, plain text, each ending in `\n` (a row the
    /// program wrapped is joined with the next).
    pub fn take_lines(&mut self) -> String {
        std::mem::take(&mut self.awake().callbacks_mut().lines)
    }

    /// Answers to terminal queries, to write to the master.
    pub fn take_replies(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.awake().callbacks_mut().replies)
    }

    /// Whether the program paints a screen rather than writing lines: it holds the alternate
    /// screen (`less`, `vim`, curses), or it redrew rows of the main screen that had entered the
    /// stream and nothing scrolled since (procps `top`, `watch`). Reads then show
    /// [`Terminal::visible`] instead of the stream and [`Terminal::partial`].
    pub fn full_screen(&mut self) -> bool {
        let parser = self.awake();
        parser.screen().alternate_screen() || parser.callbacks().redrawn
    }

    /// Whether the program asked for application cursor keys (DECCKM: `ESC O A` instead of
    /// `ESC [ A` for Up), which decides the bytes of the cursor keys written to it.
    pub fn application_cursor(&mut self) -> bool {
        self.awake().screen().application_cursor()
    }

    /// The main screen from the cursor's row down to the last non-blank row, trailing blanks
    /// trimmed: the partial last line (a prompt, a progress bar's current state).
    pub fn partial(&mut self) -> String {
        self.awake();
        if let Some(plain) = &self.plain {
            return plain.partial();
        }
        let parser = self.parser();
        let screen = parser.screen();
        let (cursor_row, _) = screen.cursor_position();
        let cols = parser.callbacks().cols;
        let mut text = String::new();
        for (offset, row) in screen
            .rows(0, cols)
            .skip(usize::from(cursor_row))
            .enumerate()
        {
            let index = cursor_row.saturating_add(u16::try_from(offset).unwrap_or(u16::MAX));
            text.push_str(&row);
            if !screen.row_wrapped(index) {
                text.push('\n');
            }
        }
        let trimmed = text.trim_end().len();
        text.truncate(trimmed);
        text
    }

    /// The visible screen as text, one line per row, trailing blank rows and blanks trimmed.
    pub fn visible(&mut self) -> String {
        let parser = self.parser();
        let screen = parser.screen();
        let cols = parser.callbacks().cols;
        let mut text = String::new();
        for row in screen.rows(0, cols) {
            text.push_str(row.trim_end());
            text.push('\n');
        }
        let trimmed = text.trim_end().len();
        text.truncate(trimmed);
        text
    }
}
