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
//! tasks per poll. The test `input_wait_cost` in `tests/input_wait.rs` prints the figures.

use std::fs;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt};

use nix::libc;

use crate::pty;

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

/// What the input is, in the terms `/proc` shows it.
enum Target {
    Terminal {
        device: libc::dev_t,
        /// The device as `/proc/<pid>/stat` encodes a controlling terminal.
        tty_nr: u64,
    },
    Pipe {
        dev: libc::dev_t,
        ino: libc::ino_t,
    },
}

impl Target {
    /// Whether descriptor `fd` of `pid` (whose controlling terminal is `tty_nr`) is the input.
    fn is(&self, pid: i32, fd: u64, tty_nr: u64) -> bool {
        let Ok(meta) = fs::metadata(format!("/proc/{pid}/fd/{fd}")) else {
            return false;
        };
        match *self {
            Target::Terminal {
                device,
                tty_nr: ours,
            } => {
                let kind = meta.file_type();
                if !kind.is_char_device() {
                    return false;
                }
                if meta.rdev() == device {
                    return true;
                }
                // `/dev/tty` (5, 0) is the process's controlling terminal, whichever it is.
                meta.rdev() == libc::makedev(5, 0) && tty_nr == ours
            }
            Target::Pipe { dev, ino } => {
                meta.file_type().is_fifo() && meta.dev() == dev && meta.ino() == ino
            }
        }
    }
}

/// The readers seen so far.
#[derive(Default)]
struct Readers {
    any: bool,
    reading: bool,
}

impl Readers {
    /// Adds one reader; `Some` when it decides the answer at once (a busy reader).
    fn add(&mut self, pid: i32, stat: &ProcStat, target: &Target) -> Option<Verdict> {
        match stat.state {
            'Z' | 'X' => return None,
            'S' => {}
            state => return Some(Verdict::NotWaiting(Reason::Busy { pid, state })),
        }
        self.any = true;
        if !self.reading {
            match waits_for(pid, stat.tty_nr, target) {
                Ok(true) => self.reading = true,
                Ok(false) => {}
                // Gone since its `stat` was read: as if it had not been a candidate.
                Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                Err(_) => return Some(Verdict::NotWaiting(Reason::ProcUnreadable)),
            }
        }
        None
    }

    fn verdict(&self) -> Verdict {
        match (self.any, self.reading) {
            (false, _) => Verdict::NotWaiting(Reason::NoReader),
            (true, false) => Verdict::NotWaiting(Reason::NotReading),
            (true, true) => Verdict::Waiting,
        }
    }
}

/// The fields of `/proc/<pid>/stat` this module needs.
struct ProcStat {
    state: char,
    pgrp: i32,
    session: i32,
    tty_nr: u64,
}

impl ProcStat {
    fn read(pid: i32) -> Option<ProcStat> {
        let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        ProcStat::parse(&text)
    }

    /// `pid (comm) state ppid pgrp session tty_nr …`; `comm` may hold spaces and parentheses, so
    /// the fields start after the last `)`.
    fn parse(text: &str) -> Option<ProcStat> {
        let rest = &text[text.rfind(')')? + 1..];
        let mut fields = rest.split_ascii_whitespace();
        let state = fields.next()?.chars().next()?;
        let _ppid = fields.next()?;
        let pgrp = fields.next()?.parse().ok()?;
        let session = fields.next()?.parse().ok()?;
        let tty_nr = fields.next()?.parse::<i64>().ok()?;
        Some(ProcStat {
            state,
            pgrp,
            session,
            tty_nr: u64::try_from(tty_nr).unwrap_or(0),
        })
    }
}

/// `/proc/<pid>/stat`'s encoding of a device number (the kernel's `new_encode_dev`).
fn encode_tty_nr(device: libc::dev_t) -> u64 {
    let major = u64::from(libc::major(device));
    let minor = u64::from(libc::minor(device));
    (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12)
}

/// System call numbers (x86-64 and aarch64 differ; the generic table is aarch64's).
#[cfg(target_arch = "x86_64")]
mod nr {
    pub const READ: &[u64] = &[0, 17, 19, 295, 327];
    pub const SELECT: &[u64] = &[23, 270];
    pub const POLL: &[u64] = &[7, 271];
    pub const EPOLL: &[u64] = &[232, 281, 441];
}
#[cfg(not(target_arch = "x86_64"))]
mod nr {
    pub const READ: &[u64] = &[63, 65, 67, 69, 286];
    pub const SELECT: &[u64] = &[72];
    pub const POLL: &[u64] = &[73];
    pub const EPOLL: &[u64] = &[22, 441];
}

/// The most descriptors of one `poll` array or `select` set this module reads.
const MAX_WATCHED: u64 = 1024;

/// Whether `pid` is blocked in a system call that waits for the input.
fn waits_for(pid: i32, tty_nr: u64, target: &Target) -> io::Result<bool> {
    let text = fs::read_to_string(format!("/proc/{pid}/syscall"))?;
    // "running", "-1 sp pc" (blocked outside a system call) or "nr a0 a1 a2 a3 a4 a5 sp pc".
    let mut words = text.split_ascii_whitespace();
    let Some(Ok(number)) = words.next().map(str::parse::<u64>) else {
        return Ok(false);
    };
    let args: Vec<u64> = words
        .take(6)
        .filter_map(|w| u64::from_str_radix(w.trim_start_matches("0x"), 16).ok())
        .collect();
    let arg = |i: usize| args.get(i).copied().unwrap_or(0);
    let is_input = |fd: u64| target.is(pid, fd, tty_nr);
    if nr::READ.contains(&number) {
        return Ok(is_input(arg(0)));
    }
    if nr::SELECT.contains(&number) {
        let nfds = arg(0).min(MAX_WATCHED);
        let readfds = arg(1);
        if readfds == 0 {
            return Ok(false);
        }
        let mut set = vec![0u8; usize::try_from(nfds.div_ceil(8)).unwrap_or(0)];
        return Ok(match read_memory(pid, readfds, &mut set) {
            Ok(()) => (0..nfds).any(|fd| {
                let byte = set.get((fd / 8) as usize).copied().unwrap_or(0);
                byte & (1 << (fd % 8)) != 0 && is_input(fd)
            }),
            Err(_) => (0..nfds).any(is_input),
        });
    }
    if nr::POLL.contains(&number) {
        let count = arg(1).min(MAX_WATCHED);
        let mut array = vec![0u8; usize::try_from(count * 8).unwrap_or(0)];
        return Ok(match read_memory(pid, arg(0), &mut array) {
            Ok(()) => array.chunks_exact(8).any(|entry| {
                let fd = i32::from_ne_bytes([entry[0], entry[1], entry[2], entry[3]]);
                let events = i16::from_ne_bytes([entry[4], entry[5]]);
                fd >= 0 && events & (libc::POLLIN | libc::POLLPRI) != 0 && is_input(fd as u64)
            }),
            Err(_) => is_input(0),
        });
    }
    if nr::EPOLL.contains(&number) {
        let Ok(info) = fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", arg(0))) else {
            return Ok(false);
        };
        return Ok(epoll_targets(&info)
            .filter(|&(_, events)| events & libc::EPOLLIN as u32 != 0)
            .any(|(fd, _)| is_input(fd)));
    }
    Ok(false)
}

/// The `(tfd, events)` pairs of an epoll's fdinfo (`tfd:        0 events:       19 data: …`).
fn epoll_targets(info: &str) -> impl Iterator<Item = (u64, u32)> + '_ {
    info.lines().filter_map(|line| {
        let rest = line.strip_prefix("tfd:")?;
        let mut words = rest.split_ascii_whitespace();
        let fd = words.next()?.parse().ok()?;
        if words.next()? != "events:" {
            return None;
        }
        let events = u32::from_str_radix(words.next()?, 16).ok()?;
        Some((fd, events))
    })
}

/// Reads `buf.len()` bytes at `address` of `pid`'s memory (`/proc/<pid>/mem`, ptrace access).
fn read_memory(pid: i32, address: u64, buf: &mut [u8]) -> io::Result<()> {
    if buf.is_empty() {
        return Ok(());
    }
    fs::File::open(format!("/proc/{pid}/mem"))?.read_exact_at(buf, address)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_come_after_the_last_parenthesis() {
        let stat =
            ProcStat::parse("42 (a) b (c)) S 1 42 42 34816 42 4194560 0 0 0 0 0 0 0 0").unwrap();
        assert_eq!(stat.state, 'S');
        assert_eq!((stat.pgrp, stat.session, stat.tty_nr), (42, 42, 34816));
    }

    #[test]
    fn tty_nr_encoding_matches_the_kernel() {
        // /dev/pts/0 is (136, 0): 34816; /dev/pts/300 puts the high minor bits above the major.
        assert_eq!(encode_tty_nr(libc::makedev(136, 0)), 34816);
        assert_eq!(
            encode_tty_nr(libc::makedev(136, 300)),
            (300 & 0xff) | (136 << 8) | ((300 & !0xff) << 12)
        );
    }

    #[test]
    fn epoll_fdinfo_lists_targets_and_events() {
        let info = "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\n\
                    tfd:        0 events:       19 data:                0  pos:0 ino:3 sdev:18\n\
                    tfd:        9 events:        4 data:                9  pos:0 ino:5 sdev:d\n";
        let targets: Vec<_> = epoll_targets(info).collect();
        assert_eq!(targets, vec![(0, 0x19), (9, 0x4)]);
    }
}
