//! How `/proc` is read for [`check`](super::check): which descriptor is the input, which system
//! call a process sleeps in, and what it watches (a `select` set, a `poll` array or an epoll's
//! interest list). Kept apart from the verdict rules in the parent module because this is the
//! part that knows the kernel's file formats and system call numbers.

use std::fs;
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt};

use nix::libc;

use super::{Reason, Verdict};

/// What the input is, in the terms `/proc` shows it.
pub(super) enum Target {
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
pub(super) struct Readers {
    any: bool,
    reading: bool,
}

impl Readers {
    /// Adds one reader; `Some` when it decides the answer at once (a busy reader).
    pub(super) fn add(&mut self, pid: i32, stat: &ProcStat, target: &Target) -> Option<Verdict> {
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

    pub(super) fn verdict(&self) -> Verdict {
        match (self.any, self.reading) {
            (false, _) => Verdict::NotWaiting(Reason::NoReader),
            (true, false) => Verdict::NotWaiting(Reason::NotReading),
            (true, true) => Verdict::Waiting,
        }
    }
}

/// The fields of `/proc/<pid>/stat` this module (and the socket gate's sandbox test) needs.
pub(crate) struct ProcStat {
    pub(super) state: char,
    pub(crate) parent: i32,
    pub(super) pgrp: i32,
    pub(crate) session: i32,
    pub(super) tty_nr: u64,
}

impl ProcStat {
    pub(crate) fn read(pid: i32) -> Option<ProcStat> {
        let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        ProcStat::parse(&text)
    }

    /// `pid (comm) state ppid pgrp session tty_nr …`; `comm` may hold spaces and parentheses, so
    /// the fields start after the last `)`.
    fn parse(text: &str) -> Option<ProcStat> {
        let rest = &text[text.rfind(')')? + 1..];
        let mut fields = rest.split_ascii_whitespace();
        let state = fields.next()?.chars().next()?;
        let parent = fields.next()?.parse().ok()?;
        let pgrp = fields.next()?.parse().ok()?;
        let session = fields.next()?.parse().ok()?;
        let tty_nr = fields.next()?.parse::<i64>().ok()?;
        Some(ProcStat {
            state,
            parent,
            pgrp,
            session,
            tty_nr: u64::try_from(tty_nr).unwrap_or(0),
        })
    }
}

/// `/proc/<pid>/stat`'s encoding of a device number (the kernel's `new_encode_dev`).
pub(super) fn encode_tty_nr(device: libc::dev_t) -> u64 {
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
