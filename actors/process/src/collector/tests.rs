//! Unit cases of the output collector (catalogue PL-22…PL-30 at the collector level) and our UTF-8 rules.

use super::*;

/// Test-only failure injection for the spill file's close and unlink.
#[derive(Debug, Default)]
pub(super) struct Faults {
    close_failures: u32,
    unlink_failures: u32,
}

impl Faults {
    pub(super) fn take_close_failure(&mut self) -> bool {
        take(&mut self.close_failures)
    }
    pub(super) fn take_unlink_failure(&mut self) -> bool {
        take(&mut self.unlink_failures)
    }
}

fn take(counter: &mut u32) -> bool {
    if *counter > 0 {
        *counter -= 1;
        true
    } else {
        false
    }
}

/// A collector keeping `cap` bytes and spilling up to `spill_cap` into the returned temp dir.
fn collector(cap: usize, spill_cap: u64) -> (OutputCollector, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let collector = OutputCollector::new(
        StreamKind::Stdout,
        cap,
        spill_cap,
        Some(crate::spill::SpillDir::open(dir.path()).unwrap()),
    );
    (collector, dir)
}

/// What a collector ([`collector`]) makes of `text` pushed in one chunk, and its spill dir.
fn collected(cap: usize, spill_cap: u64, text: &str) -> (CollectedOutput, tempfile::TempDir) {
    let (mut c, dir) = collector(cap, spill_cap);
    push(&mut c, text);
    (c.finalize(), dir)
}

fn push(c: &mut OutputCollector, s: &str) {
    c.push(s.as_bytes());
}

#[test]
fn pl_25_single_oversize_chunk_keeps_its_tail() {
    let (out, _dir) = collected(10, 100, "0123456789abcdef");
    assert_eq!(out.text, "6789abcdef");
    assert!(out.truncated);
    let path = out.spill_path.expect("spill path");
    assert_eq!(std::fs::read_to_string(path).unwrap(), "0123456789abcdef");
}

#[test]
fn pl_26_incremental_reads_and_lossy_flag() {
    let (mut c, _dir) = collector(10, 100);
    push(&mut c, "aaaaa");
    let r = c.read_from(0);
    assert_eq!(
        (r.text.as_str(), r.lossy, r.next_offset),
        ("aaaaa", false, 5)
    );
    push(&mut c, "bbbbb");
    let r = c.read_from(5);
    assert_eq!(
        (r.text.as_str(), r.lossy, r.next_offset),
        ("bbbbb", false, 10)
    );
    push(&mut c, &"c".repeat(20));
    let r = c.read_from(10);
    assert!(r.lossy);
    assert_eq!(r.text, "c".repeat(10));
    assert!(r.spill_path.is_some());
    assert_eq!(r.next_offset, 30);
}

#[test]
fn pl_27_close_failure_drops_the_path() {
    let (mut c, _dir) = collector(4, 100);
    push(&mut c, "aaaa");
    push(&mut c, "bbbb");
    assert!(c.read_from(0).spill_path.is_some());
    c.faults.close_failures = 1;
    let out = c.finalize();
    assert_eq!(out.text, "bbbb");
    assert!(out.truncated);
    assert_eq!(out.spill_path, None);
}

#[test]
fn pl_24_final_spill_close_failure_keeps_the_tail() {
    // PL-24 drives the 200-line command through a spawn with the next close failing; the failure point
    // is this collector's finalisation, so the same bytes are fed here.
    let (mut c, _dir) = collector(500, 64 << 20);
    for i in 1..=200 {
        push(&mut c, &format!("line-{i:04}\n"));
    }
    c.faults.close_failures = 1;
    let out = c.finalize();
    assert!(out.truncated);
    assert!(out.text.contains("line-0200"));
    assert_eq!(out.spill_path, None);
}

#[test]
fn pl_28_oversize_spill_discarded() {
    let (mut c, _dir) = collector(4, 8);
    push(&mut c, "aaaa");
    push(&mut c, "bbbb");
    let path = c.read_from(0).spill_path.expect("spilling");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "aaaabbbb");
    push(&mut c, "c");
    push(&mut c, "dddd");
    let out = c.finalize();
    assert_eq!(out.text, "dddd");
    assert!(out.truncated);
    assert_eq!(out.spill_path, None);
    assert!(!path.exists(), "the oversize spill is deleted");
}

#[test]
fn pl_29_no_spill_when_first_overflow_exceeds_spill_cap() {
    let (out, dir) = collected(4, 4, "abcdefgh");
    assert_eq!(out.text, "efgh");
    assert!(out.truncated);
    assert_eq!(out.spill_path, None);
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "no file was created"
    );
}

#[test]
fn pl_30_cleanup_failures_contained_when_disabling_an_oversize_spill() {
    let (mut c, _dir) = collector(4, 8);
    push(&mut c, "aaaa");
    push(&mut c, "bbbb");
    c.faults.close_failures = 1;
    c.faults.unlink_failures = 1;
    push(&mut c, "c");
    let out = c.finalize();
    assert_eq!(out.spill_path, None);
    assert!(out.truncated);
}

#[test]
fn exactly_at_cap_is_not_truncated_and_never_touches_disk() {
    let (out, dir) = collected(500, 1000, &"x".repeat(500));
    assert_eq!(out.text.len(), 500);
    assert!(!out.truncated);
    assert_eq!(out.spill_path, None);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn tail_cut_never_splits_a_code_point() {
    // "é" is two bytes; a cap of 5 over "aéééé" (9 bytes) cuts inside a character.
    let (out, _dir) = collected(5, 100, "aéééé");
    assert!(out.truncated);
    assert_eq!(
        out.text, "éé",
        "the partial leading byte is dropped, no U+FFFD"
    );
}

#[test]
fn offset_reads_hold_back_an_incomplete_character_until_it_completes() {
    let (mut c, _dir) = collector(100, 1000);
    let euro = "€".as_bytes(); // 3 bytes
    c.push(&[b'x', euro[0]]);
    let r = c.read_from(0);
    assert_eq!((r.text.as_str(), r.next_offset), ("x", 1));
    c.push(&euro[1..]);
    let r = c.read_from(1);
    assert_eq!((r.text.as_str(), r.next_offset), ("€", 4));
}

#[test]
fn a_finished_stream_returns_even_an_incomplete_tail() {
    let (mut c, _dir) = collector(100, 1000);
    c.push(&[b'o', b'k', 0xE2]);
    c.finalize();
    let r = c.read_from(0);
    assert_eq!(r.text, "ok\u{FFFD}");
    assert_eq!(r.next_offset, 3);
}

#[test]
fn binary_output_is_replaced_not_lost() {
    let (mut c, _dir) = collector(100, 1000);
    c.push(&[0xFF, 0x00, b'a']);
    let out = c.finalize();
    assert_eq!(out.text, "\u{FFFD}\u{0}a");
}

#[test]
fn spill_file_holds_every_byte_in_order() {
    let (mut c, _dir) = collector(64, 1 << 20);
    let mut expected = String::new();
    for i in 0..1000 {
        let line = format!("{i}\n");
        expected.push_str(&line);
        push(&mut c, &line);
    }
    let out = c.finalize();
    assert_eq!(
        std::fs::read_to_string(out.spill_path.unwrap()).unwrap(),
        expected
    );
    assert!(expected.ends_with(&out.text));
}
