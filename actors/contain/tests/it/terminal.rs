//! A program on a fresh pseudo-terminal (or with a stdin pipe), for the pty and input-wait tests:
//! started with `std::process::Command` and `pre_exec` (the runtime's own spawn joins later),
//! killed with its whole session when dropped, and checked gone.
#![allow(dead_code)]

use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dsh_contain::input_wait::{self, Input, Verdict};
use dsh_contain::pty::{self, Pty, Size};
use dsh_test_support::procfs::assert_all_gone;
use dsh_test_support::terminal::spawn_on_terminal;
pub use dsh_test_support::wait::SOON;

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
/// How the program gets its input.
pub enum Mode {
    /// A pseudo-terminal as its controlling terminal and fds 0–2.
    Tty(Pty),
    /// A pipe on fd 0 (the runtime's write end here), fds 1–2 a pipe read here.
    Pipe { writer: OwnedFd, reader: OwnedFd },
}

pub struct Session {
    pub mode: Mode,
    pub child: Child,
    pub output: Vec<u8>,
}

impl Session {
    /// `argv` on a new terminal of `size`, `TERM=xterm-256color`.
    pub fn tty(argv: &[&str], size: Size) -> Session {
        let mut pty = Pty::open(size).unwrap();
        let slave = pty.take_slave().unwrap();
        // SAFETY: `attach` is async-signal-safe, and the spawn runs it in the fresh child.
        let child = unsafe { spawn_on_terminal(argv, &[], slave, attach) };
        Session {
            mode: Mode::Tty(pty),
            child,
            output: Vec::new(),
        }
    }

    /// `argv` in a new session with a stdin pipe and its output on another pipe.
    pub fn pipe(argv: &[&str]) -> Session {
        let (stdin_r, stdin_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let (out_r, out_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        set_nonblocking(&out_r);
        let mut command = Command::new(argv[0]);
        command
            .args(&argv[1..])
            .stdin(Stdio::from(stdin_r))
            .stdout(Stdio::from(out_w.try_clone().unwrap()))
            .stderr(Stdio::from(out_w));
        // SAFETY: setsid is async-signal-safe; the fresh child is about to exec.
        unsafe {
            command.pre_exec(|| {
                nix::unistd::setsid()?;
                Ok(())
            });
        }
        let child = command.spawn().unwrap();
        drop(command);
        Session {
            mode: Mode::Pipe {
                writer: stdin_w,
                reader: out_r,
            },
            child,
            output: Vec::new(),
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn pty(&self) -> &Pty {
        match &self.mode {
            Mode::Tty(pty) => pty,
            Mode::Pipe { .. } => panic!("not a terminal session"),
        }
    }

    fn source(&self) -> std::os::fd::BorrowedFd<'_> {
        match &self.mode {
            Mode::Tty(pty) => pty.master(),
            Mode::Pipe { reader, .. } => reader.as_fd(),
        }
    }

    /// Reads what is there without blocking; returns whether anything came.
    pub fn drain(&mut self) -> bool {
        let mut buf = [0u8; 65536];
        let mut any = false;
        loop {
            let fd = self.source().as_raw_fd();
            // SAFETY: reads into a live buffer of its length from a descriptor we own.
            let n = unsafe { nix::libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                return any;
            }
            any = true;
            self.output.extend_from_slice(&buf[..n as usize]);
        }
    }

    /// Waits until the output holds `needle`, failing with the output after [`SOON`].
    pub fn read_until(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + SOON;
        loop {
            self.drain();
            let text = String::from_utf8_lossy(&self.output).into_owned();
            if text.contains(needle) {
                return text;
            }
            assert!(
                Instant::now() < deadline,
                "never saw {needle:?} in {text:?}"
            );
            let mut fds = [nix::poll::PollFd::new(
                self.source(),
                nix::poll::PollFlags::POLLIN,
            )];
            let _ = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(50u16));
        }
    }

    pub fn write(&mut self, bytes: &[u8]) {
        match &self.mode {
            Mode::Tty(pty) => {
                let mut file = std::fs::File::from(pty.master().try_clone_to_owned().unwrap());
                file.write_all(bytes).unwrap();
            }
            Mode::Pipe { writer, .. } => {
                let mut file = std::fs::File::from(writer.try_clone().unwrap());
                file.write_all(bytes).unwrap();
            }
        }
    }

    /// The verdict now (draining output first, as the driver does).
    pub fn verdict(&mut self) -> Verdict {
        self.drain();
        let members = input_wait::session_members(self.pid());
        self.verdict_for(&members)
    }

    /// Waits until the verdict satisfies `want`, failing with the last verdict and the output.
    pub fn wait_verdict(&mut self, want: impl Fn(Verdict) -> bool) -> Verdict {
        let deadline = Instant::now() + SOON;
        loop {
            let verdict = self.verdict();
            if want(verdict) {
                return verdict;
            }
            assert!(
                Instant::now() < deadline,
                "last verdict {verdict:?}; output {:?}",
                String::from_utf8_lossy(&self.output)
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Checks for `span` that the verdict is never a wait.
    pub fn never_waiting(&mut self, span: Duration) {
        let deadline = Instant::now() + span;
        while Instant::now() < deadline {
            let verdict = self.verdict();
            assert!(!verdict.is_waiting(), "falsely waiting: {verdict:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The foreground process's current system call (the first word of `/proc/<pid>/syscall`).
    pub fn syscall_of(pid: i32) -> String {
        std::fs::read_to_string(format!("/proc/{pid}/syscall")).unwrap_or_default()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let members = input_wait::session_members(self.pid());
        for &pid in &members {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !std::thread::panicking() {
            assert_all_gone(&members, SOON);
        }
    }
}

fn set_nonblocking(fd: &OwnedFd) {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    let flags = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL).unwrap());
    fcntl(fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK)).unwrap();
}

/// Whether `program` is on the `PATH`.
pub fn have(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

impl Session {
    /// The verdict for a given candidate list, without draining (for timing the check alone).
    pub fn verdict_for(&self, members: &[i32]) -> Verdict {
        match &self.mode {
            Mode::Tty(pty) => input_wait::check(
                Input::Terminal {
                    master: pty.master(),
                    device: pty.device(),
                },
                members,
            ),
            Mode::Pipe { writer, .. } => input_wait::check(
                Input::Pipe {
                    writer: writer.as_fd(),
                },
                members,
            ),
        }
    }
}
