//! The emulator's side of the terminal: what the `vt100` parser reports while it processes
//! output (rows scrolling off, queries it does not answer itself) and how rows become lines of
//! the stream. Kept apart from [`Terminal`](super::Terminal)'s reads and sleep because these are
//! the parser's callbacks, called from inside `vt100`.

use std::collections::VecDeque;
use std::fmt::Write as _;

/// What the parser reports while it processes output.
#[derive(Default)]
pub(super) struct Events {
    /// A row the stream already holds was drawn over (cursor moved up and redrew): the program
    /// paints a screen on the main buffer (`top`, `watch`, multi-line progress); until a row
    /// scrolls off again, reads show the screen and commits write nothing.
    pub(super) redrawn: bool,
    /// Completed lines not yet taken.
    pub(super) lines: String,
    /// Answers to terminal queries not yet taken.
    pub(super) replies: Vec<u8>,
    /// The text written for each of the main screen's top rows, top first: the rows already in
    /// the stream (so that scrolling them off does not write them twice).
    pub(super) written: VecDeque<String>,
    pub(super) cols: u16,
    /// Rows of the main screen scrolled off so far (the fast path checks that a newline of its
    /// own scrolled the whole screen).
    pub(super) scrolls: u64,
    /// Rows still to scroll off without entering the stream: the fast path's own scrolling of a
    /// screen it knows to be blank.
    pub(super) mute: usize,
    /// Buffers reused by every row scrolling off: its formatted and its plain text.
    formatted: String,
    plain: String,
}

impl Events {
    /// The callbacks of a terminal `cols` wide.
    pub(super) fn new(cols: u16) -> Events {
        Events {
            cols,
            ..Events::default()
        }
    }

    /// A row of the main screen scrolled off the top: its text enters the stream, unless the
    /// stream holds it already (it was committed while on screen). The slow path (from
    /// [`vt100::Callbacks::on_scroll`]) and the fast path for plain lines both end here.
    pub(super) fn scrolled(&mut self, row: &str, wrapped: bool) {
        // Lines scroll: the program writes lines again.
        self.redrawn = false;
        if self.written.pop_front().is_some_and(|seen| seen == row) {
            return;
        }
        self.lines.push_str(row);
        if !wrapped {
            self.lines.push('\n');
        }
    }
}

/// Writes the main screen's rows `0..end` that are not in the stream yet (or changed since).
///
/// Outside `finishing`, a row found changed since it was written stops the commit and marks the
/// terminal as painting a screen.
pub(super) fn commit_rows(screen: &vt100::Screen, events: &mut Events, end: u16, finishing: bool) {
    for (index, row) in screen
        .rows(0, events.cols)
        .take(usize::from(end))
        .enumerate()
    {
        let wrapped = screen.row_wrapped(u16::try_from(index).unwrap_or(u16::MAX));
        if !commit_row(events, index, &row, wrapped, finishing) {
            return;
        }
    }
}

/// Commits row `index` (see [`commit_rows`]); false when it stops the commit.
pub(super) fn commit_row(
    events: &mut Events,
    index: usize,
    row: &str,
    wrapped: bool,
    finishing: bool,
) -> bool {
    match events.written.get_mut(index) {
        Some(seen) if *seen == row => return true,
        Some(_) if !finishing => {
            // Drawn over after it was written: a screen, not lines. Stop committing.
            events.redrawn = true;
            return false;
        }
        Some(seen) => row.clone_into(seen),
        None => events.written.push_back(row.to_owned()),
    }
    events.lines.push_str(row);
    if !wrapped {
        events.lines.push('\n');
    }
    true
}

impl vt100::Callbacks for Events {
    fn on_scroll(&mut self, contents: vt100::capture::RowContents<'_>, alternate_screen: bool) {
        if alternate_screen {
            return;
        }
        if self.mute > 0 {
            self.mute -= 1;
            self.redrawn = false;
            return;
        }
        self.scrolls += 1;
        // The crate hands the row only formatted: format it, then strip the SGR sequences.
        let mut formatted = std::mem::take(&mut self.formatted);
        let mut plain = std::mem::take(&mut self.plain);
        formatted.clear();
        plain.clear();
        let mut state = vt100::capture::BasicFormattedCaptureState::new();
        let _ = contents.write_formatted_basic(&mut formatted, &mut state);
        plain.extend(vt100::capture::basic_formatted_to_plain(&formatted));
        // A wrapped row fills every column; only then ask. Writing the row once more puts a
        // newline first unless the row wrapped: the first character written answers, and the
        // writer stops the capture right there.
        let wrapped = plain.len() >= usize::from(self.cols) && {
            let mut first = FirstChar(None);
            let _ = contents.write_formatted_basic(&mut first, &mut state);
            first.0 != Some('\n')
        };
        self.scrolled(&plain, wrapped);
        self.formatted = formatted;
        self.plain = plain;
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

/// A `fmt::Write` that keeps the first character written and refuses the rest.
struct FirstChar(Option<char>);

impl std::fmt::Write for FirstChar {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        match s.chars().next() {
            Some(c) => {
                self.0 = Some(c);
                Err(std::fmt::Error)
            }
            None => Ok(()),
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
