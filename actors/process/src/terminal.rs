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
//! Memory is bounded by the size: a grid of rows × columns cells of 32 bytes (150 KiB at the
//! default 40x120), a second one while a program uses the alternate screen, plus the text of the
//! committed rows still on screen. An idle terminal can sleep as the escape sequences that
//! redraw its screen ([`Terminal::hibernate`], a few KiB), and wakes up on the next call.

use std::collections::VecDeque;
use std::fmt::Write as _;

/// The emulated terminal of one task.
pub struct Terminal {
    /// The emulator; a 1x1 stand-in while asleep.
    parser: vt100::Parser<Events>,
    /// Set while asleep (see [`Terminal::hibernate`]).
    asleep: Option<Asleep>,
}

/// An idle terminal: the escape sequences that redraw its screen, and its bookkeeping.
struct Asleep {
    screen: String,
    events: Events,
    rows: std::num::NonZeroU16,
}

/// What the parser reports while it processes output.
#[derive(Default)]
struct Events {
    /// A row the stream already holds was drawn over (cursor moved up and redrew): the program
    /// paints a screen on the main buffer (`top`, `watch`, multi-line progress); until a row
    /// scrolls off again, reads show the screen and commits write nothing.
    redrawn: bool,
    /// Completed lines not yet taken.
    lines: String,
    /// Answers to terminal queries not yet taken.
    replies: Vec<u8>,
    /// The text written for each of the main screen's top rows, top first: the rows already in
    /// the stream (so that scrolling them off does not write them twice).
    written: VecDeque<String>,
    cols: u16,
}

impl Terminal {
    /// A terminal of `rows` × `cols` (each at least 1).
    pub fn new(rows: u16, cols: u16) -> Terminal {
        let rows = std::num::NonZeroU16::new(rows).unwrap_or(std::num::NonZeroU16::MIN);
        let cols = std::num::NonZeroU16::new(cols).unwrap_or(std::num::NonZeroU16::MIN);
        let events = Events {
            redrawn: false,
            lines: String::new(),
            replies: Vec::new(),
            written: VecDeque::new(),
            cols: cols.get(),
        };
        Terminal {
            parser: vt100::Parser::new_with_callbacks(rows, cols, 0, events),
            asleep: None,
        }
    }

    /// The live parser, woken up first when asleep.
    fn parser(&mut self) -> &mut vt100::Parser<Events> {
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

    /// Processes output read from the master.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.parser().process(bytes);
    }

    /// Changes the size (after [`dsh_contain::pty::resize`]); rows that no longer fit scroll off
    /// into the stream.
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
        std::mem::take(&mut self.parser().callbacks_mut().lines)
    }

    /// Answers to terminal queries, to write to the master.
    pub fn take_replies(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.parser().callbacks_mut().replies)
    }

    /// Whether the program paints a screen rather than writing lines: it holds the alternate
    /// screen (`less`, `vim`, curses), or it redrew rows of the main screen that had entered the
    /// stream and nothing scrolled since (procps `top`, `watch`). Reads then show
    /// [`Terminal::visible`] instead of the stream and [`Terminal::partial`].
    pub fn full_screen(&mut self) -> bool {
        let parser = self.parser();
        parser.screen().alternate_screen() || parser.callbacks().redrawn
    }

    /// The main screen from the cursor's row down to the last non-blank row, trailing blanks
    /// trimmed: the partial last line (a prompt, a progress bar's current state).
    pub fn partial(&mut self) -> String {
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

/// Writes the main screen's rows `0..end` that are not in the stream yet (or changed since).
///
/// Outside `finishing`, a row found changed since it was written stops the commit and marks the
/// terminal as painting a screen.
fn commit_rows(screen: &vt100::Screen, events: &mut Events, end: u16, finishing: bool) {
    for (index, row) in screen
        .rows(0, events.cols)
        .take(usize::from(end))
        .enumerate()
    {
        let wrapped = screen.row_wrapped(u16::try_from(index).unwrap_or(u16::MAX));
        match events.written.get_mut(index) {
            Some(seen) if *seen == row => continue,
            Some(_) if !finishing => {
                // Drawn over after it was written: a screen, not lines. Stop committing.
                events.redrawn = true;
                return;
            }
            Some(seen) => seen.clone_from(&row),
            None => events.written.push_back(row.clone()),
        }
        events.lines.push_str(&row);
        if !wrapped {
            events.lines.push('\n');
        }
    }
}

impl vt100::Callbacks for Events {
    fn on_scroll(&mut self, contents: vt100::capture::RowContents<'_>, alternate_screen: bool) {
        if alternate_screen {
            return;
        }
        // Lines scroll: the program writes lines again.
        self.redrawn = false;
        let mut state = vt100::capture::BasicFormattedCaptureState::new();
        let mut formatted = String::new();
        let _ = contents.write_formatted_basic(&mut formatted, &mut state);
        let row: String = vt100::capture::basic_formatted_to_plain(&formatted).collect();
        // A wrapped row fills every column; only then ask (by writing the row once more: the
        // capture state puts a newline first unless the row wrapped).
        let wrapped = row.len() >= usize::from(self.cols) && {
            let mut probe = String::new();
            let _ = contents.write_formatted_basic(&mut probe, &mut state);
            !probe.starts_with('\n')
        };
        if self.written.pop_front().is_some_and(|seen| seen == row) {
            return;
        }
        self.lines.push_str(&row);
        if !wrapped {
            self.lines.push('\n');
        }
    }

    fn unhandled_csi(
        &mut self,
        screen: &mut vt100::Screen,
        i1: Option<u8>,
        _i2: Option<u8>,
        params: &[&[u16]],
        c: char,
    ) {
        let first = params.first().and_then(|p| p.first()).copied().unwrap_or(0);
        match (i1, c, first) {
            // Cursor position report, 1-based.
            (None, 'n', 6) => {
                let (row, col) = screen.cursor_position();
                let _ = write!(Reply(&mut self.replies), "\x1b[{};{}R", row + 1, col + 1);
            }
            // Device status: OK.
            (None, 'n', 5) => self.replies.extend_from_slice(b"\x1b[0n"),
            // Primary device attributes: a VT100 with advanced video.
            (None, 'c', 0) => self.replies.extend_from_slice(b"\x1b[?1;2c"),
            // Secondary device attributes: a VT220, firmware 10.
            (Some(b'>'), 'c', 0) => self.replies.extend_from_slice(b"\x1b[>1;10;0c"),
            _ => {}
        }
    }

    fn unhandled_osc(&mut self, _: &mut vt100::Screen, params: &[&[u8]]) {
        // OSC 10 ; ? and OSC 11 ; ?: the default foreground (white) and background (black).
        match params {
            [b"10", b"?"] => self
                .replies
                .extend_from_slice(b"\x1b]10;rgb:ffff/ffff/ffff\x1b\\"),
            [b"11", b"?"] => self
                .replies
                .extend_from_slice(b"\x1b]11;rgb:0000/0000/0000\x1b\\"),
            _ => {}
        }
    }
}

/// `fmt::Write` into a byte buffer.
struct Reply<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Reply<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fed(rows: u16, cols: u16, bytes: &[u8]) -> Terminal {
        let mut t = Terminal::new(rows, cols);
        t.feed(bytes);
        t
    }

    /// Everything a read would show now: committed lines, then the partial line.
    fn read(t: &mut Terminal) -> String {
        t.commit();
        let mut text = t.take_lines();
        text.push_str(&t.partial());
        text
    }

    #[test]
    fn colours_are_stripped_and_no_escape_or_cr_reaches_the_text() {
        let mut t = fed(
            5,
            40,
            b"\x1b[1;31mred\x1b[0m plain\r\n\x1b[32mgreen\x1b[m\r\nprompt> ",
        );
        let text = read(&mut t);
        assert_eq!(text, "red plain\ngreen\nprompt>");
        assert!(!text.contains('\x1b') && !text.contains('\r'));
    }

    #[test]
    fn a_progress_bar_redrawn_with_cr_reads_as_its_final_state() {
        let mut bytes = Vec::new();
        for pct in 0..=100 {
            bytes.extend_from_slice(
                format!("\rprogress {pct:3}% [{}]", "#".repeat(pct / 10)).as_bytes(),
            );
        }
        let mut t = fed(5, 80, &bytes);
        assert_eq!(read(&mut t), "progress 100% [##########]");
        t.feed(b"\r\ndone\r\n");
        assert_eq!(read(&mut t), "progress 100% [##########]\ndone\n");
    }

    #[test]
    fn lines_scrolling_off_enter_the_stream_once() {
        let mut t = Terminal::new(3, 20);
        t.feed(b"one\r\ntwo\r\n");
        assert_eq!(read(&mut t), "one\ntwo\n");
        t.feed(b"three\r\nfour\r\nfive\r\nsix\r\n");
        assert_eq!(read(&mut t), "three\nfour\nfive\nsix\n");
        assert_eq!(read(&mut t), "");
    }

    #[test]
    fn a_long_line_wraps_on_screen_but_reads_as_one_line() {
        let long = "x".repeat(25);
        let mut t = Terminal::new(3, 10);
        t.feed(format!("{long}\r\nend\r\n").as_bytes());
        assert_eq!(read(&mut t), format!("{long}\nend\n"));
        // And when the wrapped rows scroll off.
        let mut t = Terminal::new(2, 10);
        t.feed(format!("{long}\r\na\r\nb\r\nc\r\n").as_bytes());
        assert_eq!(read(&mut t), format!("{long}\na\nb\nc\n"));
    }

    #[test]
    fn erase_and_cursor_moves_are_applied() {
        // Write, move back three columns, erase to end of line, write again.
        let mut t = fed(3, 30, b"hello world\x1b[5D\x1b[Kthere");
        assert_eq!(read(&mut t), "hello there");
        // A row drawn over after it entered the stream: the program paints a screen, read as
        // such until lines scroll again; then the changed row is written once more.
        t.feed(b"\r\nnext\r\n");
        assert_eq!(read(&mut t), "hello there\nnext\n");
        t.feed(b"\x1b[2A\r\x1b[2Kchanged\r\n\r\n");
        t.commit();
        assert!(t.full_screen());
        assert_eq!(t.take_lines(), "");
        assert_eq!(t.visible(), "changed\nnext");
        t.feed(b"a\r\nb\r\n");
        assert!(!t.full_screen());
        assert_eq!(read(&mut t), "changed\na\nb\n");
    }

    #[test]
    fn a_full_screen_program_is_read_as_its_current_screen_and_stays_out_of_the_stream() {
        let mut t = Terminal::new(4, 20);
        t.feed(b"$ top\r\n");
        t.feed(b"\x1b[?1049h\x1b[H\x1b[2Jtop - 01:00\r\nTasks: 3\r\n");
        t.feed(b"\x1b[H\x1b[2Jtop - 01:03\r\nTasks: 4\r\n");
        assert!(t.full_screen());
        assert_eq!(t.visible(), "top - 01:03\nTasks: 4");
        t.commit();
        assert_eq!(t.take_lines(), "");
        t.feed(b"\x1b[?1049l$ ");
        assert!(!t.full_screen());
        assert_eq!(read(&mut t), "$ top\n$");
    }

    #[test]
    fn queries_are_answered() {
        let mut t = fed(5, 20, b"ab\x1b[6n\x1b[5n\x1b[c\x1b[>c\x1b]11;?\x07");
        assert_eq!(
            t.take_replies(),
            b"\x1b[1;3R\x1b[0n\x1b[?1;2c\x1b[>1;10;0c\x1b]11;rgb:0000/0000/0000\x1b\\".to_vec()
        );
        assert!(t.take_replies().is_empty());
    }

    #[test]
    fn finish_writes_the_last_unterminated_line() {
        let mut t = fed(5, 20, b"out\r\nlast");
        t.finish();
        assert_eq!(t.take_lines(), "out\nlast");
        let mut t = fed(5, 20, b"out\r\nlast\r\n");
        assert_eq!(read(&mut t), "out\nlast\n");
        t.finish();
        assert_eq!(t.take_lines(), "", "nothing twice");
    }

    #[test]
    fn a_hibernated_terminal_wakes_up_as_it_was() {
        let mut t = fed(5, 30, b"\x1b[31mone\x1b[m\r\ntwo\r\nname? ");
        assert_eq!(read(&mut t), "one\ntwo\nname?");
        assert!(t.hibernate());
        assert!(
            t.asleep
                .as_ref()
                .is_some_and(|asleep| asleep.screen.len() < 200)
        );
        assert_eq!(t.partial(), "name?");
        t.feed(b"ann\r\nhello ann\r\n");
        assert_eq!(read(&mut t), "name? ann\nhello ann\n");
        // Lines written before the sleep are not written again when they scroll off.
        t.feed(b"3\r\n4\r\n5\r\n");
        assert_eq!(read(&mut t), "3\n4\n5\n");
        // Not on the alternate screen.
        t.feed(b"\x1b[?1049hpager");
        assert!(!t.hibernate());
        assert_eq!(t.visible(), "pager");
    }

    #[test]
    fn a_resize_keeps_the_text() {
        let mut t = fed(4, 20, b"a\r\nb\r\nc\r\nd");
        t.resize(2, 20);
        assert_eq!(read(&mut t), "a\nb\nc\nd");
    }
}
