//! Differential tests of the fast path for plain lines ([`super::plain`]): the same output, in the
//! same random chunks, through a terminal with the fast path and one without must give the same
//! stream, the same partial line and the same screen (text, colours, cursor, wrap flags, modes, and
//! the character `CSI b` repeats), whatever is mixed into the plain lines: long lines that wrap,
//! lines split across chunks, escapes and control bytes (split across chunks too), tabs, UTF-8
//! with wide and combining characters, `\r` overdraws, scroll regions, the alternate screen, and
//! the terminal put to sleep or resized in between.

use dsh_test_support::rng::Rng;

use super::Terminal;

/// Draws from the shared seeded generator in `usize`.
trait Draw {
    fn below_usize(&mut self, n: usize) -> usize;
    fn chance(&mut self, percent: usize) -> bool;
}

impl Draw for Rng {
    fn below_usize(&mut self, n: usize) -> usize {
        usize::try_from(self.below(n as u64)).unwrap_or(0)
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below_usize(100) < percent
    }
}

/// Printable ASCII, `len` bytes.
fn text(rng: &mut Rng, len: usize) -> Vec<u8> {
    (0..len).map(|_| b' ' + rng.below_usize(95) as u8).collect()
}

/// A line length: short, exactly a multiple of the width, one more or less, or long.
fn line_len(rng: &mut Rng, cols: usize) -> usize {
    match rng.below_usize(6) {
        0 => 0,
        1 => cols * (1 + rng.below_usize(3)),
        2 => cols * (1 + rng.below_usize(3)) - 1,
        3 => cols * (1 + rng.below_usize(3)) + 1,
        4 => rng.below_usize(4 * cols),
        _ => rng.below_usize(cols),
    }
}

/// Things mixed into the plain lines.
const OTHERS: &[&[u8]] = &[
    b"\x1b[31m",
    b"\x1b[0m",
    b"\x1b[41m",
    b"\x1b[7m",
    b"\x1b[K",
    b"\x1b[2J",
    b"\x1b[2A",
    b"\x1b[H",
    b"\x1b[3;2H",
    b"\x1b[99;1H",
    b"\x1b[3b",
    b"\x1b[2;3r",
    b"\x1b[1;3r",
    b"\x1b[3",
    b"\x1b",
    b"\x1b[r",
    b"\x1b[?1049h",
    b"\x1b[?1049l",
    b"\x1b[6n",
    b"\x1b]0;a title\x07",
    b"\x1b]0;an unfinished ti",
    b"\x07",
    b"\x1b(B",
    b"\x18",
    b"\t",
    b"\x08",
    b"\n",
    b"\r",
    b"\r\r\n",
    "é".as_bytes(),
    "中文".as_bytes(),
    "e\u{301}".as_bytes(),
    "🎉".as_bytes(),
    b"\xe4\xb8",
    b"\xff",
    // Last: `vt100` 0.18.1 panics on it in a terminal one column wide (`text_cleanup`).
    "\u{2764}\u{fe0f}".as_bytes(),
];

/// An output of plain lines with `others` percent of other things mixed in.
fn output(rng: &mut Rng, rows: usize, cols: usize, others: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..rng.below_usize(12 * rows.max(4)) + 1 {
        if rng.chance(others) {
            let last = OTHERS.len() - usize::from(cols == 1);
            out.extend_from_slice(OTHERS[rng.below_usize(last)]);
            continue;
        }
        match rng.below_usize(10) {
            // A partial line, or an overdraw.
            0 => {
                let len = line_len(rng, cols);
                out.extend(text(rng, len));
                if rng.chance(50) {
                    out.push(b'\r');
                }
            }
            // A burst of lines.
            1 => {
                for _ in 0..rng.below_usize(3 * rows) {
                    let len = line_len(rng, cols);
                    out.extend(text(rng, len));
                    out.extend_from_slice(b"\r\n");
                }
            }
            _ => {
                let len = line_len(rng, cols);
                out.extend(text(rng, len));
                out.extend_from_slice(b"\r\n");
            }
        }
    }
    out
}

/// What a read shows, and whether the terminal paints a screen.
fn read(t: &mut Terminal) -> (String, String, bool) {
    t.commit();
    let lines = t.take_lines();
    let full = t.full_screen();
    let live = if full { t.visible() } else { t.partial() };
    (lines, live, full)
}

/// The whole state of the emulator: the screen with its colours and modes, the cursor, the wrap
/// flags, what the stream holds of the rows on screen, and what `CSI b` repeats (printed last).
fn state(t: &mut Terminal) -> String {
    let parser = t.parser();
    let screen = parser.screen();
    let rows = screen.size().0.get();
    let wraps: Vec<bool> = (0..rows).map(|row| screen.row_wrapped(row)).collect();
    let mut state = format!(
        "{:?}\n{:?}\n{:?}\n{:?}\n{}",
        screen.state_formatted(),
        screen.cursor_position(),
        wraps,
        parser.callbacks().written,
        parser.callbacks().redrawn,
    );
    t.feed(b"\x1b[b");
    state.push_str(&format!("\n{:?}", t.parser().screen().contents_formatted()));
    state
}

/// Feeds `out` in random chunks to both terminals, reading both now and then (and with `upsets`,
/// putting both to sleep or shrinking them now and then); returns the bytes the fast path took.
/// Panics where they differ.
fn compare(seed: u64, rows: u16, cols: u16, out: &[u8], reads: usize, upsets: bool) -> usize {
    let mut rng = Rng::new(seed);
    let mut fast = Terminal::new(rows, cols);
    let mut slow = Terminal::slow(rows, cols);
    let mut at = 0;
    let mut chunks = Vec::new();
    while at < out.len() {
        let len = match rng.below_usize(4) {
            0 => 1 + rng.below_usize(8),
            1 => 4096,
            _ => 1 + rng.below_usize(600),
        };
        let chunk = &out[at..out.len().min(at + len)];
        at += chunk.len();
        chunks.push(String::from_utf8_lossy(chunk).into_owned());
        fast.feed(chunk);
        slow.feed(chunk);
        let context = || format!("seed {seed}, {rows}x{cols}, chunks {chunks:?}");
        assert_eq!(fast.take_replies(), slow.take_replies(), "{}", context());
        if rng.chance(reads) {
            assert_eq!(read(&mut fast), read(&mut slow), "{}", context());
        }
        if rng.chance(reads / 10) {
            assert_eq!(state(&mut fast), state(&mut slow), "{}", context());
        }
        if upsets && rng.chance(2) {
            assert_eq!(fast.hibernate(), slow.hibernate(), "{}", context());
        }
        if upsets && rng.chance(1) {
            // Fewer or as many rows: see `Terminal::resize` for more.
            let now = slow.parser().screen().size().0.get();
            let (rows, cols) = (
                1 + rng.below_usize(usize::from(now)) as u16,
                1 + rng.below_usize(24) as u16,
            );
            fast.resize(rows, cols);
            slow.resize(rows, cols);
        }
    }
    let context = format!("seed {seed}, {rows}x{cols}, chunks {chunks:?}");
    assert_eq!(read(&mut fast), read(&mut slow), "{context}");
    assert_eq!(state(&mut fast), state(&mut slow), "{context}");
    fast.finish();
    slow.finish();
    assert_eq!(fast.take_lines(), slow.take_lines(), "{context}");
    fast.fast_bytes
}

#[test]
fn plain_lines_mixed_with_anything_give_what_the_emulator_gives() {
    let mut taken = 0;
    let mut total = 0;
    for seed in 1..=1000u64 {
        let mut rng = Rng::new(seed ^ 0x5eed);
        let (rows, cols) = match rng.below_usize(4) {
            0 => (40, 120),
            _ => (
                1 + rng.below_usize(8) as u16,
                1 + rng.below_usize(24) as u16,
            ),
        };
        let others = [0, 1, 5, 20][rng.below_usize(4)];
        let reads = [0, 2, 20, 100][rng.below_usize(4)];
        let out = output(&mut rng, usize::from(rows), usize::from(cols), others);
        total += out.len();
        taken += compare(seed, rows, cols, &out, reads, true);
    }
    // The fast path must have run, or this compares the emulator with itself.
    assert!(
        taken * 2 > total,
        "the fast path took {taken} of {total} bytes"
    );
}

#[test]
fn a_flood_of_plain_lines_is_taken_by_the_fast_path_and_reads_the_same() {
    let line = "the quick brown fox jumps over the lazy dog; 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJK";
    let out = format!("{line}\r\n").repeat(5000);
    // All but the lines that fill the screen first (until then a newline scrolls nothing).
    let taken = compare(7, 40, 120, out.as_bytes(), 1, false);
    assert!(
        taken + 40 * (line.len() + 2) >= out.len(),
        "the fast path took {taken} of {} bytes",
        out.len()
    );
    // Lines longer than the width, and the end of the flood without a newline.
    let long = format!("{line}{line}\r\n").repeat(3000) + line;
    assert!(
        compare(8, 40, 120, long.as_bytes(), 0, false) + 20 * (2 * line.len() + 2) >= long.len()
    );
}
