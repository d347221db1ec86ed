//! Signalling process groups, and asking `/proc` who is still alive.
//!
//! Rules learned from nextest, watchexec and codex:
//! - never signal a group id ≤ 1 (0 is our own group, 1 would be init's, negative ids are nonsense);
//! - signalling never fails loudly: a vanished group (ESRCH) or a refusal (EPERM) is logged and ignored;
//! - "is anyone left?" is answered from `/proc`, where a zombie is dead; `kill(pid, 0)` says a zombie
//!   is alive, which is wrong for us.

use std::fs;

pub use nix::sys::signal::Signal;
use nix::sys::signal::killpg;
use nix::unistd::Pid;

/// Sends `signal` to every member of group `pgid`. Returns whether the kernel accepted it.
pub fn signal_group(pgid: i32, signal: Signal) -> bool {
    signal_group_with(pgid, signal, killpg)
}

/// [`signal_group`] with the OS call injected, so its error handling can be tested.
pub fn signal_group_with(
    pgid: i32,
    signal: Signal,
    kill: impl FnOnce(Pid, Signal) -> nix::Result<()>,
) -> bool {
    if pgid <= 1 {
        tracing::warn!(pgid, ?signal, "refusing to signal a process group id <= 1");
        return false;
    }
    match kill(Pid::from_raw(pgid), signal) {
        Ok(()) => {
            tracing::debug!(pgid, signal = signal.as_str(), "signalled process group");
            true
        }
        Err(err) => {
            tracing::debug!(pgid, signal = signal.as_str(), %err, "process group signal not delivered");
            false
        }
    }
}

/// Whether any process (zombies included) still has process group `pgid`; one cheap syscall.
pub fn group_exists(pgid: i32) -> bool {
    pgid > 1 && killpg(Pid::from_raw(pgid), None).is_ok()
}

/// One line of `/proc/<pid>/stat`, the fields we need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcStat {
    /// The process id.
    pub pid: i32,
    /// `R`, `S`, `D`, `Z`, `T`, …
    pub state: char,
    /// The parent's pid.
    pub ppid: i32,
    /// The process group id.
    pub pgrp: i32,
    /// The session id.
    pub session: i32,
    /// The kernel marks it exiting (`PF_EXITING`): on its way to zombie, no longer running anything.
    pub exiting: bool,
}

/// `PF_EXITING` in the flags field of `/proc/<pid>/stat` (`include/linux/sched.h`).
const PF_EXITING: u32 = 0x4;

impl ProcStat {
    /// Running, sleeping or stopped: anything but a zombie or a dead task.
    pub fn is_live(&self) -> bool {
        !matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// Reads `/proc/<pid>/stat`; `None` when the process is gone.
pub fn proc_stat(pid: i32) -> Option<ProcStat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// Parses a stat line. The command name may hold spaces and parentheses, so fields are counted from
/// the last `)`.
fn parse_stat(text: &str) -> Option<ProcStat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let pid = text[..open].trim().parse().ok()?;
    let mut rest = text[close + 1..].split_whitespace();
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    let pgrp = rest.next()?.parse().ok()?;
    let session = rest.next()?.parse().ok()?;
    // After the session: the terminal, its foreground group, then the flags.
    let exiting = rest
        .nth(2)
        .and_then(|flags| flags.parse::<u32>().ok())
        .is_some_and(|flags| flags & PF_EXITING != 0);
    Some(ProcStat {
        pid,
        state,
        ppid,
        pgrp,
        session,
        exiting,
    })
}

/// Whether `pid` exists and is not a zombie.
pub fn pid_is_live(pid: i32) -> bool {
    proc_stat(pid).is_some_and(|s| s.is_live())
}

/// The live (non-zombie) members of group `pgid`, found by scanning `/proc`.
pub fn live_group_members(pgid: i32) -> Vec<i32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(proc_stat)
        .filter(|stat| stat.pgrp == pgid && stat.is_live())
        .map(|stat| stat.pid)
        .collect()
}

/// The name of a signal number (`SIGTERM`), or `SIG<n>` for one nix does not know.
pub fn signal_name(number: i32) -> String {
    Signal::try_from(number)
        .map(|s| s.as_str().to_owned())
        .unwrap_or_else(|_| format!("SIG{number}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pl_31_non_positive_pids_are_ignored() {
        let mut called = false;
        assert!(!signal_group_with(-1, Signal::SIGTERM, |_, _| {
            called = true;
            Ok(())
        }));
        assert!(!signal_group_with(0, Signal::SIGTERM, |_, _| Ok(())));
        assert!(!signal_group_with(1, Signal::SIGKILL, |_, _| Ok(())));
        assert!(!called, "the OS call is never made for pgid <= 1");
    }

    #[test]
    fn pl_44_group_signalling_never_throws_on_eperm() {
        assert!(!signal_group_with(12345, Signal::SIGTERM, |_, _| Err(
            nix::errno::Errno::EPERM
        )));
    }

    #[test]
    fn stat_parsing_survives_odd_command_names() {
        let stat = parse_stat("42 (a) b (c)) S 1 40 40 0 -1").unwrap();
        assert_eq!(
            stat,
            ProcStat {
                pid: 42,
                state: 'S',
                ppid: 1,
                pgrp: 40,
                session: 40,
                exiting: false,
            }
        );
        assert!(stat.is_live());
        assert!(!parse_stat("7 (x) Z 1 7 7").unwrap().is_live());
    }

    #[test]
    fn the_exiting_flag_is_read_from_the_flags_field() {
        let exiting = parse_stat("9 (sh) R 1 9 9 0 -1 4194564 0 0").unwrap();
        assert!(exiting.exiting && exiting.is_live());
        let running = parse_stat("9 (sh) S 1 9 9 0 -1 4194560 0 0").unwrap();
        assert!(!running.exiting);
        let this = proc_stat(std::process::id() as i32).unwrap();
        assert!(!this.exiting && this.is_live());
    }

    #[test]
    fn signal_names() {
        assert_eq!(signal_name(15), "SIGTERM");
        assert_eq!(signal_name(9), "SIGKILL");
    }
}
