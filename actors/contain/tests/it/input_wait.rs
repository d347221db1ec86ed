//! The input-wait check against real programs: each one that waits for input is seen waiting
//! (hidden at a password prompt), and none of the ones that do not is ever seen waiting.

use std::time::{Duration, Instant};

use crate::terminal::{Session, have};
use dsh_contain::input_wait::{self, Reason, Verdict};
use dsh_contain::pty::Size;

/// How long a "never waiting" case is watched once it reached its steady state.
const WATCH: Duration = Duration::from_millis(400);

fn waiting(v: Verdict) -> bool {
    v == Verdict::Waiting
}

/// Once `s` waits for input, writes the line `line` and reads until `reply`.
fn answer(s: &mut Session, line: &str, reply: &str) {
    s.wait_verdict(waiting);
    s.write(format!("{line}\n").as_bytes());
    s.read_until(reply);
}

/// A REPL waits for input, computes `line` (which prints 42), and waits again.
fn waits_computes_42_and_waits_again(s: &mut Session, line: &[u8]) {
    s.wait_verdict(waiting);
    s.output.clear();
    s.write(line);
    s.read_until("42");
    s.wait_verdict(waiting);
}

fn hidden(v: Verdict) -> bool {
    v == Verdict::WaitingHidden
}

fn tty(argv: &[&str]) -> Session {
    Session::tty(argv, Size::DEFAULT)
}

fn node_required() -> bool {
    std::env::var_os("DSH_REQUIRE_NODE").is_some_and(|v| v == "1")
}

// ---- a terminal: waiting ----

#[test]
fn bash_read_p_waits_then_runs_on() {
    let mut s = tty(&["bash", "-c", "read -p 'name? ' x; echo got=$x; sleep 30"]);
    s.read_until("name? ");
    answer(&mut s, "ann", "got=ann");
    s.wait_verdict(|v| v == Verdict::NotWaiting(Reason::NotReading));
}

#[test]
fn bash_read_s_waits_for_hidden_input() {
    let mut s = tty(&[
        "bash",
        "-c",
        "read -s -p 'password: ' x; echo; echo len=${#x}",
    ]);
    s.read_until("password: ");
    s.wait_verdict(hidden);
    s.write(b"hunter2\n");
    s.read_until("len=7");
}

#[test]
fn python_input_waits() {
    let mut s = tty(&["python3", "-c", "x = input('name? '); print('got=' + x)"]);
    s.read_until("name? ");
    answer(&mut s, "bob", "got=bob");
}

#[test]
fn python_interactive_waits_in_raw_mode_and_is_not_hidden() {
    let mut s = tty(&["python3", "-q", "-i"]);
    s.read_until(">>> ");
    for (question, answer) in [("6*7", "42"), ("'ab'*3", "'ababab'"), ("len('four')", "4")] {
        s.wait_verdict(waiting);
        assert!(!s.pty().line_mode().unwrap().canonical, "readline runs raw");
        s.output.clear();
        s.write(format!("{question}\r").as_bytes());
        s.read_until(&format!("{answer}\r\n>>> "));
    }
}

#[test]
fn node_repl_waits_in_epoll() {
    if !have("node") {
        assert!(
            !node_required(),
            "node is required (DSH_REQUIRE_NODE=1) but missing"
        );
        return;
    }
    let mut s = tty(&["node"]);
    s.read_until("> ");
    waits_computes_42_and_waits_again(&mut s, b"6*7\r");
}

#[test]
fn interactive_bash_waits() {
    let mut s = tty(&["bash", "--norc", "--noprofile", "-i"]);
    waits_computes_42_and_waits_again(&mut s, b"echo $((6*7))\r");
}

#[test]
fn ssh_keygen_asks_for_a_hidden_passphrase_twice() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("k");
    let mut s = tty(&[
        "ssh-keygen",
        "-q",
        "-t",
        "ed25519",
        "-f",
        key.to_str().unwrap(),
    ]);
    s.read_until("passphrase");
    s.wait_verdict(hidden);
    s.output.clear();
    s.write(b"correct horse\n");
    s.read_until("again");
    s.wait_verdict(hidden);
    s.write(b"correct horse\n");
    assert!(s.child.wait().unwrap().success());
    assert!(key.exists());
}

#[test]
fn less_vim_and_top_wait_for_keys() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f.txt");
    std::fs::write(&file, "line one\nline two\n").unwrap();
    let file = file.to_str().unwrap();
    let mut cases = vec![
        vec!["less", file],
        vec!["vim", "-u", "NONE", "-N", "-n", file],
        vec!["top", "-d", "60"],
    ];
    cases.retain(|argv| have(argv[0]));
    for argv in cases {
        let mut s = tty(&argv);
        s.wait_verdict(waiting);
        assert!(!s.pty().line_mode().unwrap().canonical, "{argv:?} runs raw");
    }
}

#[test]
fn poll_select_and_epoll_on_stdin_wait() {
    for wait in [
        "select.select([0, r], [], [])",
        "p = select.poll(); p.register(r, select.POLLIN); p.register(0, select.POLLIN); p.poll()",
        "e = select.epoll(); e.register(r, select.EPOLLIN); e.register(0, select.EPOLLIN); e.poll()",
    ] {
        let mut s = tty(&[
            "python3",
            "-c",
            &format!("import os, select; r, w = os.pipe(); print('ready', flush=True); {wait}"),
        ]);
        s.read_until("ready");
        s.wait_verdict(waiting);
    }
}

// ---- a terminal: never waiting ----

#[test]
fn sleep_is_not_waiting() {
    let mut s = tty(&["sleep", "30"]);
    s.wait_verdict(|v| v == Verdict::NotWaiting(Reason::NotReading));
    s.never_waiting(WATCH);
}

#[test]
fn a_busy_loop_is_not_waiting() {
    let mut s = tty(&["sh", "-c", "while :; do :; done"]);
    s.wait_verdict(|v| matches!(v, Verdict::NotWaiting(Reason::Busy { state: 'R', .. })));
    s.never_waiting(WATCH);
}

#[test]
fn a_program_blocked_on_a_socket_is_not_waiting() {
    let mut s = tty(&[
        "python3",
        "-c",
        "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); \
         print('listening', flush=True); s.accept()",
    ]);
    s.read_until("listening");
    s.wait_verdict(|v| v == Verdict::NotWaiting(Reason::NotReading));
    s.never_waiting(WATCH);
}

#[test]
fn a_program_reading_a_pipe_that_is_not_its_stdin_is_not_waiting() {
    for wait in [
        "os.read(r, 1)",
        "select.select([r], [], [])",
        "p = select.poll(); p.register(r, select.POLLIN); p.poll()",
        "e = select.epoll(); e.register(r, select.EPOLLIN); e.poll()",
    ] {
        let mut s = tty(&[
            "python3",
            "-c",
            &format!("import os, select; r, w = os.pipe(); print('ready', flush=True); {wait}"),
        ]);
        s.read_until("ready");
        s.wait_verdict(|v| v == Verdict::NotWaiting(Reason::NotReading));
        s.never_waiting(WATCH);
    }
}

#[test]
fn a_background_job_reading_the_terminal_while_the_foreground_computes_is_not_waiting() {
    let mut s = tty(&[
        "bash",
        "-c",
        "set -m; cat & echo started; sh -c 'while :; do :; done'",
    ]);
    s.read_until("started");
    // The job control shell stops `cat` (SIGTTIN) when it reads the terminal from the background.
    let stopped = dsh_test_support::wait::wait_until(dsh_test_support::wait::SOON, || {
        input_wait::session_members(s.pid()).iter().any(|&pid| {
            dsh_test_support::procfs::state_and_parent(pid).is_some_and(|(state, _)| state == 'T')
        })
    });
    assert!(stopped, "the background cat was never stopped");
    s.wait_verdict(|v| matches!(v, Verdict::NotWaiting(Reason::Busy { .. })));
    s.never_waiting(WATCH);
}

// ---- a stdin pipe ----

#[test]
fn a_pipe_reader_waits_and_is_never_hidden() {
    let mut s = Session::pipe(&["bash", "-c", "read -s x; echo got=$x; read y; echo got=$y"]);
    answer(&mut s, "one", "got=one");
    answer(&mut s, "two", "got=two");
}

#[test]
fn python_input_on_a_pipe_waits() {
    let mut s = Session::pipe(&["python3", "-c", "print('got=' + input())"]);
    answer(&mut s, "bob", "got=bob");
}

#[test]
fn a_sleeping_pipe_holder_is_not_waiting_and_unread_input_is_seen() {
    let mut s = Session::pipe(&["sh", "-c", "echo up; sleep 30"]);
    s.read_until("up");
    s.wait_verdict(|v| v == Verdict::NotWaiting(Reason::NotReading));
    s.never_waiting(WATCH);
    s.write(b"typed ahead\n");
    assert_eq!(s.verdict(), Verdict::NotWaiting(Reason::InputPending));
}

// ---- cost ----

fn mean_cost(s: &mut Session, rounds: u32) -> (Duration, Duration) {
    let members = input_wait::session_members(s.pid());
    let start = Instant::now();
    for _ in 0..rounds {
        assert!(s.verdict_for(&members).is_waiting());
    }
    let check = start.elapsed() / rounds;
    let start = Instant::now();
    for _ in 0..rounds / 10 {
        std::hint::black_box(input_wait::session_members(s.pid()));
    }
    (check, start.elapsed() / (rounds / 10))
}

#[test]
fn input_wait_cost() {
    let mut s = tty(&["bash", "-c", "read -p 'name? ' x"]);
    s.read_until("name? ");
    s.wait_verdict(waiting);
    let (check, walk) = mean_cost(&mut s, 2000);
    let processes = std::fs::read_dir("/proc")
        .unwrap()
        .filter(|e| {
            e.as_ref().is_ok_and(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| n.parse::<u32>().is_ok())
            })
        })
        .count();
    eprintln!(
        "input_wait cost: bash read: {check:?} per check; session_members: {walk:?} per /proc walk \
         of {processes} processes"
    );
    if have("node") {
        let mut s = tty(&["node"]);
        s.read_until("> ");
        s.wait_verdict(waiting);
        let (check, _) = mean_cost(&mut s, 1000);
        eprintln!("input_wait cost: node epoll: {check:?} per check");
    }
    let mut s = tty(&["python3", "-q", "-i"]);
    s.read_until(">>> ");
    s.wait_verdict(waiting);
    let (check, _) = mean_cost(&mut s, 1000);
    eprintln!("input_wait cost: python3 -i pselect6: {check:?} per check");
    assert!(
        check < Duration::from_millis(5),
        "a check must stay cheap: {check:?}"
    );
}

// ---- latency: from the prompt on the master to the verdict ----

/// Polls every millisecond from the moment `prompt` is on the master until the verdict is a
/// wait; returns how long that took, and how long after writing `answer` the verdict stopped
/// being a wait.
fn prompt_latency(argv: &[&str], prompt: &str, answer: &[u8]) -> (Duration, Duration) {
    let mut s = tty(argv);
    s.read_until(prompt);
    let seen = Instant::now();
    while !s.verdict().is_waiting() {
        assert!(seen.elapsed() < crate::terminal::SOON, "never waiting");
        std::thread::sleep(Duration::from_millis(1));
    }
    let to_wait = seen.elapsed();
    s.write(answer);
    let written = Instant::now();
    while s.verdict().is_waiting() {
        assert!(
            written.elapsed() < crate::terminal::SOON,
            "never left the wait"
        );
    }
    (to_wait, written.elapsed())
}

#[test]
fn prompt_to_verdict_latency() {
    let mut cases: Vec<(&str, Vec<&str>, &str, &[u8])> = vec![
        (
            "bash read -p",
            vec!["bash", "-c", "read -p 'name? ' x; sleep 5"],
            "name? ",
            b"a\n",
        ),
        (
            "python3 input()",
            vec![
                "python3",
                "-c",
                "input('name? '); import time; time.sleep(5)",
            ],
            "name? ",
            b"a\n",
        ),
        (
            "python3 -i",
            vec!["python3", "-q", "-i"],
            ">>> ",
            b"import time; time.sleep(5)\r",
        ),
    ];
    if have("node") {
        cases.push((
            "node",
            vec!["node"],
            "> ",
            b"Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 5000)\r",
        ));
    }
    for (name, argv, prompt, answer) in cases {
        let (to_wait, to_leave) = prompt_latency(&argv, prompt, answer);
        eprintln!(
            "latency {name}: prompt on master -> waiting {to_wait:?}; answer written -> not waiting {to_leave:?}"
        );
    }
}
