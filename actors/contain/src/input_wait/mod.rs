//! Whether a task is waiting for input, read from the kernel (issue 22, point 4).
//!
//! A foreground `bash` call with `tty: true` or `stdin: "open"` returns the moment its command
//! waits for input. Prompt regexes guess and silence timers are slow; the kernel knows: the
//! program is asleep in a system call that waits for its terminal or its stdin pipe to become
//! readable. [`check`] asks it, cheaply enough to be polled.
//!
//! ## What each verdict means
//!
//! The *readers* are, under a terminal, the task's processes in the terminal's foreground
//! process group (`tcgetpgrp` on the master); with an open stdin pipe, the task's processes
//! whose fd 0 is that pipe (same pipe inode). The *input* is the terminal (a descriptor whose
//! device is the pty's slave, or `/dev/tty` in a process whose controlling terminal it is) or
//! the pipe (same inode).
//!
//! - [`Verdict::Waiting`]: there is at least one reader; every reader that is not a zombie is
//!   asleep (`S` in `/proc/<pid>/stat`); at least one is in a system call that waits for the
//!   input, read from `/proc/<pid>/syscall`:
//!   - `read`, `readv`, `pread64`, `preadv`, `preadv2` on a descriptor that is the input (bash
//!     `read`, python3 `input()`, `ssh-keygen` on `/dev/tty`, `less` on `/dev/tty`, `cat`);
//!   - `select`/`pselect6` whose read set holds the input (readline: `bash -i`, `python3 -i`;
//!     `vim`, `top`), `poll`/`ppoll` whose array asks `POLLIN` of it: the set or array is read
//!     from `/proc/<pid>/mem`; when that is refused, any descriptor below `nfds` (select) or
//!     fd 0 (poll) counts;
//!   - `epoll_wait`/`epoll_pwait`/`epoll_pwait2` on an epoll whose interest list
//!     (`/proc/<pid>/fdinfo/<epfd>`) asks `EPOLLIN` of the input (node's REPL);
//!
//!   and, under a terminal, the master has no unread output (`FIONREAD` is 0); with a pipe, the
//!   pipe holds no unread input (`FIONREAD` on the runtime's write end is 0).
//! - [`Verdict::WaitingHidden`]: as `Waiting`, under a terminal whose termios has `ECHO` off in
//!   canonical mode (`read -s`, `ssh-keygen`, `getpass`). Raw mode clears `ECHO` too, but that
//!   is a line editor (`python3 -i`, `node`, `bash -i`, `less`, `vim`, `top`): plain `Waiting`.
//! - [`Verdict::NotWaiting`] otherwise, with the [`Reason`].
//!
//! ## What it can get wrong
//!
//! - *False positive*: a program that waits in `select`/`poll`/`epoll` on its terminal **and** a
//!   timer is reported waiting between its ticks (`top` between refreshes; a spinner that polls
//!   stdin for a key). The caller's settle time (no output for a while) filters the fast ones.
//! - *False positive*: only the thread-group leader's system call is read (`/proc/<pid>/syscall`);
//!   a program whose main thread waits for input while another thread computes looks waiting.
//! - *False negative*: a process of the foreground group (or holding the pipe) that runs or is in
//!   uninterruptible sleep (`R`, `D`) makes the whole answer "not waiting": `compute & read x` in
//!   one group waits silently until the computation ends. A stopped job (`T`) likewise.
//! - *False negative*: a reader waiting on a descriptor that is neither the terminal nor the pipe
//!   but a copy of it through another open file (`/dev/pts/N` opened by name in another mount
//!   namespace is still the same device and counts; a pipe re-created by a wrapper does not).
//! - *Race*: input written to a terminal is handed to the line discipline by a kernel worker, so
//!   for a few microseconds after a write the reader can still look asleep. The driver should not
//!   trust a `Waiting` taken right after its own write until output settled again.
//! - Without ptrace access to the task (another user, `kernel.yama.ptrace_scope` 2 or 3), the
//!   `syscall` file is unreadable and the verdict is `NotWaiting(ProcUnreadable)`: a silent false
//!   negative, so the runtime should check [`can_inspect`] once and say so in `dsh doctor`.
//!
//! ## Cost
//!
//! One check of a task with one reader is 3 ioctls on the master plus 4–6 small `/proc` reads
//! (`stat`, `syscall`, a `stat` of the descriptor, and for `select`/`poll` a read of
//! `/proc/<pid>/mem`, for `epoll` one `fdinfo` file). Measured on this machine (2 cores shared
//! with five other builds, so the figures are upper bounds), debug and release alike since the
//! time is in the kernel: **25 µs** per check at a bash `read`, **35–60 µs** at `python3 -i`
//! (`pselect6`) and **45–60 µs** at node's REPL (`epoll_pwait`). Polled every 50 ms that is
//! 0.1% of a core per waiting task. Listing the candidates is the caller's and costs more when
//! done by walking `/proc`: [`session_members`] took **1.5–5 ms for ~120 processes**; the
//! runtime should use the cgroup leaf's `cgroup.procs` (one read) or one census walk for all
//! tasks per poll. The test `input_wait_cost` in `tests/it/input_wait.rs` prints the figures.

pub(crate) mod proc_reading;

use std::fs;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};

use nix::libc;

use crate::pty;
use proc_reading::{ProcStat, Readers, Target, encode_tty_nr};

/// Where the task takes its input from.
#[derive(Debug, Clone, Copy)]
pub enum Input<'a> {
    /// A pseudo-terminal: the runtime's master and the slave's device number
    /// ([`pty::Pty::device`]).
    Terminal {
        /// The master side.
        master: BorrowedFd<'a>,
        /// The slave's `st_rdev`.
        device: libc::dev_t,
    },
    /// A pipe to the task's stdin: the runtime's write end.
    Pipe {
        /// The write end the runtime holds.
        writer: BorrowedFd<'a>,
    },
}

/// Whether the task waits for input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// It does not (or it cannot be told): why.
    NotWaiting(Reason),
    /// A reader is blocked on the input and nothing else of it runs.
    Waiting,
    /// As `Waiting`, at a password-style prompt (terminal echo off in line mode).
    WaitingHidden,
}

impl Verdict {
    /// `Waiting` or `WaitingHidden`.
    pub fn is_waiting(self) -> bool {
        !matches!(self, Verdict::NotWaiting(_))
    }
}

/// Why a task is not waiting for input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The terminal has no foreground process group (the session has not started or has ended).
    NoForegroundGroup,
    /// None of the candidates is a reader (in the foreground group, or holding the pipe on fd 0).
    NoReader,
    /// A reader is not asleep: running, in uninterruptible sleep, stopped (its `stat` state).
    Busy {
        /// The process.
        pid: i32,
        /// Its state letter.
        state: char,
    },
    /// The readers sleep, but none in a wait for the input (`sleep`, `wait4`, a socket).
    NotReading,
    /// Output the runtime has not read yet is in the terminal (the program may still be talking).
    OutputPending,
    /// Input the program has not read yet is in the pipe.
    InputPending,
    /// `/proc/<pid>/syscall` or the terminal could not be read (no ptrace access, gone).
    ProcUnreadable,
}

/// Decides whether the task whose processes are `candidates` waits for `input`.
///
/// `candidates` are the task's live processes (its cgroup leaf's `cgroup.procs`, or
/// [`session_members`] of its session); processes that vanished meanwhile are skipped.
pub fn check(input: Input<'_>, candidates: &[i32]) -> Verdict {
    match input {
        Input::Terminal { master, device } => check_terminal(master, device, candidates),
        Input::Pipe { writer } => check_pipe(writer, candidates),
    }
}

fn check_terminal(master: BorrowedFd<'_>, device: libc::dev_t, candidates: &[i32]) -> Verdict {
    let group = match pty::foreground_group(master) {
        Ok(Some(group)) => group,
        Ok(None) => return Verdict::NotWaiting(Reason::NoForegroundGroup),
        Err(_) => return Verdict::NotWaiting(Reason::ProcUnreadable),
    };
    match pty::pending_output(master) {
        Ok(0) => {}
        Ok(_) => return Verdict::NotWaiting(Reason::OutputPending),
        Err(_) => return Verdict::NotWaiting(Reason::ProcUnreadable),
    }
    let target = Target::Terminal {
        device,
        tty_nr: encode_tty_nr(device),
    };
    let mut readers = Readers::default();
    for &pid in candidates {
        let Some(stat) = ProcStat::read(pid) else {
            continue;
        };
        if stat.pgrp != group {
            continue;
        }
        if let Some(verdict) = readers.add(pid, &stat, &target) {
            return verdict;
        }
    }
    match readers.verdict() {
        Verdict::Waiting => match pty::line_mode(master) {
            Ok(mode) if mode.hidden() => Verdict::WaitingHidden,
            Ok(_) => Verdict::Waiting,
            Err(_) => Verdict::NotWaiting(Reason::ProcUnreadable),
        },
        other => other,
    }
}

fn check_pipe(writer: BorrowedFd<'_>, candidates: &[i32]) -> Verdict {
    let Ok(meta) = nix::sys::stat::fstat(writer) else {
        return Verdict::NotWaiting(Reason::ProcUnreadable);
    };
    let mut unread: libc::c_int = 0;
    // SAFETY: FIONREAD writes one `int` through the pointer, valid for the call; on a pipe it
    // counts the bytes in the pipe, from either end.
    if unsafe { libc::ioctl(writer.as_raw_fd(), libc::FIONREAD, &mut unread) } == 0 && unread > 0 {
        return Verdict::NotWaiting(Reason::InputPending);
    }
    let target = Target::Pipe {
        dev: meta.st_dev,
        ino: meta.st_ino,
    };
    let mut readers = Readers::default();
    for &pid in candidates {
        let Ok(fd0) = fs::metadata(format!("/proc/{pid}/fd/0")) else {
            continue;
        };
        if !(fd0.file_type().is_fifo() && fd0.dev() == meta.st_dev && fd0.ino() == meta.st_ino) {
            continue;
        }
        let Some(stat) = ProcStat::read(pid) else {
            continue;
        };
        if let Some(verdict) = readers.add(pid, &stat, &target) {
            return verdict;
        }
    }
    readers.verdict()
}

/// Whether this process may read `pid`'s `/proc/<pid>/syscall` (ptrace access: same user and
/// `kernel.yama.ptrace_scope` at most 1 for a descendant, or `CAP_SYS_PTRACE`). Ask it once of
/// the first task: without it every verdict is `NotWaiting(ProcUnreadable)`.
pub fn can_inspect(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/syscall")).is_ok()
}

/// The live processes of session `sid` (the task's session: its first process is the session
/// leader), from one walk of `/proc`.
pub fn session_members(sid: i32) -> Vec<i32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|entry| {
        let pid: i32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = ProcStat::read(pid)?;
        (stat.session == sid && stat.state != 'Z').then_some(pid)
    })
    .collect()
}
