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
