//! Unit tests of the terminal emulator: what a read shows for redraws, wraps, full screens,
//! queries, sleep and resizes.

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
