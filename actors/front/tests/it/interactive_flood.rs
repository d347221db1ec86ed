//! A flood of lines through a terminal (issue 22), through the `dsh` binary: what the stream's
//! spill file holds is exactly what the program printed as the model should read it (colours
//! stripped, a `\r` overdraw applied, tabs expanded, long lines whole), in order, whether a line
//! went through the fast path for plain lines or through the emulator.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code: a failed unwrap is a failed test"
)]

use dsh_test_support::procfs::live_with_cmdline;
use dsh_test_support::wait::wait_until;
use serde_json::json;

use crate::jsonl_server::{SOON, Server, bash, unique_marker};

/// The `awk` program: 20,000 lines, plain mostly, some long (they wrap at 120 columns), some
/// coloured, some with a tab, some drawn over after a `\r`.
const PROGRAM: &str = r#"BEGIN { for (i = 1; i <= 20000; i++) {
  if (i % 1000 == 0) printf "\033[31mred %d\033[0m\n", i;
  else if (i % 7 == 0) { s = ""; for (j = 0; j < 30; j++) s = s "long" i " "; print s }
  else if (i % 501 == 0) printf "bar %d\rBAR\n", i;
  else if (i % 333 == 0) printf "tab\there %d\n", i;
  else print "line " i } }"#;

/// What the model should read of [`PROGRAM`]'s output.
fn expected() -> String {
    let mut text = String::new();
    for i in 1..=20000 {
        let line = if i % 1000 == 0 {
            format!("red {i}")
        } else if i % 7 == 0 {
            format!("long{i} ").repeat(30)
        } else if i % 501 == 0 {
            format!("BAR {i}")
        } else if i % 333 == 0 {
            format!("tab     here {i}")
        } else {
            format!("line {i}")
        };
        text.push_str(&line);
        text.push('\n');
    }
    text
}

#[test]
fn a_flood_through_a_terminal_reaches_the_spill_file_as_printed() {
    let marker = unique_marker(2290);
    let mut server = Server::start(&[]).unwrap();
    let command = format!("awk -v marker={marker} '{PROGRAM}'");
    server.call_as(
        "s",
        "flood",
        "bash",
        bash(&command, json!({"tty": true, "timeout_ms": 120_000})),
    );
    let reply = server.text("flood");
    assert!(
        reply.contains("red 20000\n\n[output truncated; full output: "),
        "{:?}",
        &reply[reply.len().saturating_sub(400)..]
    );
    assert!(!reply.contains('\x1b') && !reply.contains('\r'));
    let start = reply.find("full output: ").expect(&reply) + "full output: ".len();
    let end = start + reply[start..].find(']').expect(&reply);
    let spilled = std::fs::read_to_string(&reply[start..end]).unwrap();
    let expected = expected();
    if spilled != expected {
        let at = spilled
            .bytes()
            .zip(expected.bytes())
            .position(|(a, b)| a != b)
            .unwrap_or(spilled.len().min(expected.len()));
        let from = at.saturating_sub(200);
        panic!(
            "the spill file differs at byte {at} ({} bytes, {} expected):\n{:?}\nexpected:\n{:?}",
            spilled.len(),
            expected.len(),
            &spilled[from..spilled.len().min(at + 200)],
            &expected[from..expected.len().min(at + 200)],
        );
    }
    server.finish();
    assert!(
        wait_until(SOON, || live_with_cmdline(&marker).is_empty()),
        "processes with {marker} were left running"
    );
}
