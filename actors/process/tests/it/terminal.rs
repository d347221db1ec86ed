//! The terminal emulator against real programs on a real pseudo-terminal: a full-screen program
//! reads as its current screen, a `\r` progress bar as its final state, a pager as its page, and
//! a program that asks for the cursor position gets an answer.

use std::io::Write;
use std::os::fd::{AsRawFd, RawFd};
use std::process::Child;
use std::time::Instant;

use dsh_contain::pty::{self, Pty, Size};
use dsh_process::terminal::Terminal;
use dsh_test_support::SOON;
use dsh_test_support::procfs::assert_all_gone;
use dsh_test_support::terminal::spawn_on_terminal;

const SIZE: Size = Size { rows: 24, cols: 80 };

/// Makes the terminal whose slave end is `raw` the controlling terminal and fds 0–2 of the fresh
/// child (async-signal-safe).
///
/// # Safety
///
/// Only in a fresh child about to exec, as [`pty::attach_terminal`].
unsafe fn attach(raw: RawFd) -> std::io::Result<()> {
    // SAFETY: the caller runs this in the fresh child before exec.
    unsafe { pty::attach_terminal(raw, true) }
        .map_err(|failure| std::io::Error::from_raw_os_error(failure.errno))
}
/// A program on a new terminal, its output fed through a [`Terminal`] the way the driver will.
struct Run {
    pty: Pty,
    child: Child,
    term: Terminal,
    /// Everything taken from the stream so far.
    stream: String,
    ended: bool,
}

impl Run {
    fn start(argv: &[&str]) -> Run {
        let mut pty = Pty::open(SIZE).unwrap();
        let slave = pty.take_slave().unwrap();
        // SAFETY: `attach` is async-signal-safe, and the spawn runs it in the fresh child.
        let child = unsafe { spawn_on_terminal(argv, &[("LESS", "")], slave, attach) };
        Run {
            pty,
            child,
            term: Terminal::new(SIZE.rows, SIZE.cols),
            stream: String::new(),
            ended: false,
        }
    }

    /// Reads what is there (waiting up to 50 ms for something), feeds it, answers queries.
    fn pump(&mut self) {
        let mut fds = [nix::poll::PollFd::new(
            self.pty.master(),
            nix::poll::PollFlags::POLLIN,
        )];
        let _ = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(50u16));
        let mut buf = [0u8; 65536];
        loop {
            // SAFETY: reads into a live buffer of its length from the master we own.
            let n = unsafe {
                nix::libc::read(
                    self.pty.master().as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                )
            };
            if n == 0 || (n < 0 && nix::errno::Errno::last() == nix::errno::Errno::EIO) {
                // Every slave descriptor is closed: the end of output.
                self.ended = true;
                break;
            }
            if n < 0 {
                break;
            }
            self.term.feed(&buf[..n as usize]);
        }
        let replies = self.term.take_replies();
        if !replies.is_empty() {
            self.write(&replies);
        }
        self.stream.push_str(&self.term.take_lines());
    }

    fn write(&self, bytes: &[u8]) {
        let mut master = std::fs::File::from(self.pty.master().try_clone_to_owned().unwrap());
        master.write_all(bytes).unwrap();
    }

    /// Pumps until `cond` holds, failing with the screen after [`SOON`].
    fn until(&mut self, what: &str, cond: impl Fn(&mut Run) -> bool) {
        let deadline = Instant::now() + SOON;
        loop {
            self.pump();
            if cond(self) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "never {what}; screen:\n{}\nstream:\n{}",
                self.term.visible(),
                self.stream
            );
        }
    }

    /// Pumps to the end of output, then takes the rest of the screen into the stream.
    fn read_to_end(&mut self) -> String {
        self.until("ended", |r| r.ended);
        self.term.finish();
        self.stream.push_str(&self.term.take_lines());
        self.stream.clone()
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let pid = self.child.id() as i32;
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = self.child.wait();
        if !std::thread::panicking() {
            assert_all_gone(&[pid], SOON);
        }
    }
}

#[test]
fn top_reads_as_its_current_screen() {
    // procps top paints the main screen (no alternate screen): once it redrew rows that had
    // entered the stream, reads show its current screen.
    let mut run = Run::start(&["top", "-d", "0.3"]);
    run.until("saw top's screen as a screen", |r| {
        r.term.commit();
        r.stream.push_str(&r.term.take_lines());
        let screen = r.term.visible();
        r.term.full_screen() && screen.contains("load average") && screen.contains("PID")
    });
    let screen = run.term.visible();
    assert!(screen.starts_with("top - "), "{screen}");
    assert!(
        !screen.contains('\x1b') && !screen.contains('\r'),
        "{screen:?}"
    );
    assert!(screen.lines().count() <= usize::from(SIZE.rows));
    let before = run.stream.len();
    run.until("saw another refresh", |r| {
        r.term.commit();
        r.stream.push_str(&r.term.take_lines());
        r.term.visible() != screen
    });
    assert_eq!(run.stream.len(), before, "refreshes stay out of the stream");
    run.write(b"q");
    run.read_to_end();
}

/// Runs `argv` on a terminal to its end and asserts its text reads as `expected`.
fn assert_reads_as(argv: &[&str], expected: &str) {
    let mut run = Run::start(argv);
    assert_eq!(run.read_to_end(), expected);
}

#[test]
fn a_progress_bar_reads_as_its_final_state() {
    assert_reads_as(
        &[
            "python3",
            "-c",
            "import sys\nfor i in range(101):\n    sys.stdout.write('\\rdownloading %3d%%' % i); sys.stdout.flush()\nprint('\\ndone')",
        ],
        "downloading 100%\ndone\n",
    );
}

#[test]
fn colours_from_a_real_program_are_stripped() {
    assert_reads_as(
        &[
            "sh",
            "-c",
            "printf '\\033[1;31merror:\\033[0m bad\\n'; ls --color=always -d /",
        ],
        "error: bad\n/\n",
    );
}

#[test]
fn a_pager_reads_as_its_page() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("numbers.txt");
    let lines: Vec<String> = (1..=100).map(|n| format!("line {n}")).collect();
    std::fs::write(&file, lines.join("\n")).unwrap();
    let mut run = Run::start(&["less", file.to_str().unwrap()]);
    run.until("saw the first page", |r| {
        r.term.full_screen() && r.term.visible().contains("line 23")
    });
    let page = run.term.visible();
    assert!(page.starts_with("line 1\nline 2\n"), "{page}");
    assert!(!page.contains("line 24\n"), "{page}");
    run.write(b" ");
    run.until("saw the second page", |r| {
        r.term.visible().contains("line 46")
    });
    run.write(b"q");
    run.read_to_end();
    assert!(
        !run.stream.contains("line 1"),
        "the pager's screens stay out of the stream"
    );
}

#[test]
fn a_program_asking_for_the_cursor_position_gets_an_answer() {
    let mut run = Run::start(&[
        "bash",
        "-c",
        "stty -echo; printf 'abc\\033[6n'; IFS='[;' read -d R -r _ row col; echo; \
         echo \"row=$row col=$col\"",
    ]);
    let text = run.read_to_end();
    assert!(text.ends_with("row=1 col=4\n"), "{text:?}");
}

#[test]
fn memory_of_a_terminal_is_bounded_by_its_size() {
    let cell = std::mem::size_of::<vt100::Cell>();
    let grid = cell * usize::from(SIZE.rows) * usize::from(SIZE.cols);
    eprintln!(
        "vt100::Cell is {cell} bytes: a {}x{} grid is {grid} bytes, 40x120 is {} bytes (main and alternate: twice)",
        SIZE.rows,
        SIZE.cols,
        cell * 40 * 120
    );
    assert!(cell <= 64);
}

#[test]
fn throughput_of_the_emulator() {
    // 8 MiB of build-log-like output: colours, \r progress, long lines that wrap.
    let mut chunk = Vec::new();
    for n in 0..2000 {
        chunk.extend_from_slice(
            format!(
                "\x1b[32m   Compiling\x1b[0m crate-{n} v1.0.{n} (/work/some/path/crate-{n})\r\n"
            )
            .as_bytes(),
        );
        if n % 10 == 0 {
            chunk.extend_from_slice(
                format!("\rBuilding [{}>  ] {n}/2000", "=".repeat(n % 60)).as_bytes(),
            );
            chunk.extend_from_slice(b"\r\x1b[K");
        }
    }
    let rounds = (8 << 20) / chunk.len() + 1;
    let mut term = Terminal::new(40, 120);
    let start = Instant::now();
    let mut lines = 0;
    for _ in 0..rounds {
        for piece in chunk.chunks(4096) {
            term.feed(piece);
            lines += term.take_lines().matches('\n').count();
        }
    }
    let elapsed = start.elapsed();
    let mib = (rounds * chunk.len()) as f64 / f64::from(1 << 20);
    eprintln!(
        "terminal throughput: {mib:.1} MiB in {elapsed:?} = {:.1} MiB/s ({} build)",
        mib / elapsed.as_secs_f64(),
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    // Every line but the last screenful has scrolled into the stream, none twice.
    assert_eq!(lines, rounds * 2000 - 39);
}
