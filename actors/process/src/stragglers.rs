//! Processes that outlived their leader ("stragglers"): a descendant held the pipes past the drain
//! grace, or left the group and kept running. The table remembers their groups and containment
//! handles; this module names them for the caller who left them ([`left_running`]), finds the ones
//! still alive, and kills them.

use std::time::Duration;

use nix::sys::signal::Signal;

use crate::containment::{Contained, Containment, SharedContainment};
use crate::outcome::LeftProcess;

/// A settled process of which something still ran: its group and its containment handle.
pub(crate) struct Straggler {
    pub pgid: i32,
    pub contained: Contained,
}

/// How many characters of a left process's command line are kept.
const COMMAND_CHARS: usize = 120;

/// The processes of a settled command that still run, lowest pid first: the cgroup leaf's members
/// (which include any that left the group), else the group's live members and, in subreaper mode,
/// every process carrying the task's marker.
pub(crate) fn left_running(pgid: i32, contained: &Contained) -> Vec<LeftProcess> {
    let pids = match contained {
        Contained::Leaf(leaf) => leaf.members().unwrap_or_default(),
        Contained::Group => crate::signal::live_group_members(pgid),
        Contained::Marker(marker) => {
            let mut pids = crate::signal::live_group_members(pgid);
            pids.extend(dsh_contain::subreaper::find_marked(marker));
            pids
        }
    };
    named(pids)
}

/// The live members of group `pgid`, named as [`left_running`] names them: what a command whose
/// pipes closed left in its group. A walk of `/proc`, for a blocking thread.
pub(crate) fn left_in_group(pgid: i32) -> Vec<LeftProcess> {
    named(crate::signal::live_group_members(pgid))
}

/// `pids`, lowest first, those still running, with their command lines.
fn named(mut pids: Vec<i32>) -> Vec<LeftProcess> {
    pids.sort_unstable();
    pids.dedup();
    // A leaf lists a process that has exited and awaits its reaper too; one that is exiting (the
    // last process of bubblewrap's pid namespace, as the call ends) is going as well.
    pids.retain(|pid| {
        crate::signal::proc_stat(*pid).is_some_and(|stat| stat.is_live() && !stat.exiting)
    });
    pids.into_iter()
        .filter_map(|pid| {
            Some(LeftProcess {
                pid,
                command: command_line(pid)?,
            })
        })
        .collect()
}

/// `/proc/<pid>/cmdline` with its arguments joined by spaces, cut to [`COMMAND_CHARS`]; empty when
/// it cannot be read (or reads empty, as in the middle of an `execve`); `None` when the process is
/// gone.
fn command_line(pid: i32) -> Option<String> {
    let raw = match std::fs::read(format!("/proc/{pid}/cmdline")) {
        Ok(raw) => raw,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return None,
        Err(_) => return Some(String::new()),
    };
    let text = String::from_utf8_lossy(&raw);
    let joined = text
        .split('\0')
        .filter(|arg| !arg.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    Some(match joined.char_indices().nth(COMMAND_CHARS) {
        Some((cut, _)) => format!("{}…", &joined[..cut]),
        None => joined,
    })
}

/// The remembered straggler led by `pgid`, if something of it is still alive (its group has live
/// members, or its containment holds a process outside the group).
pub(crate) fn find_alive<'a>(
    stragglers: &'a [Straggler],
    containment: &Containment,
    pgid: i32,
    group_exists: fn(i32) -> bool,
) -> Option<&'a Straggler> {
    stragglers.iter().find(|s| {
        s.pgid == pgid
            && (group_exists(pgid) || containment.remains_outside_group(pgid, &s.contained))
    })
}

/// Forgets the stragglers of which nothing is alive any more, handing their containment back.
pub(crate) fn prune(
    stragglers: &mut Vec<Straggler>,
    containment: &Containment,
    group_exists: fn(i32) -> bool,
) {
    for gone in stragglers.extract_if(.., |s| {
        !group_exists(s.pgid) && !containment.remains_outside_group(s.pgid, &s.contained)
    }) {
        containment.finish(gone.pgid, gone.contained);
    }
}

/// How long shutdown waits for SIGKILLed stragglers to vanish from `/proc`.
const STRAGGLER_REAP_WAIT: Duration = Duration::from_secs(2);

/// SIGKILLs every process of every straggler, then waits (bounded) until all of it is gone and
/// hands the handles back to containment.
pub(crate) async fn kill_stragglers(containment: SharedContainment, stragglers: Vec<Straggler>) {
    for straggler in &stragglers {
        tracing::debug!(pgid = straggler.pgid, "killing straggler");
        containment.signal_straggler(straggler.pgid, &straggler.contained, Signal::SIGKILL);
    }
    for straggler in stragglers {
        let gone = containment.all_gone(straggler.pgid, &straggler.contained);
        if tokio::time::timeout(STRAGGLER_REAP_WAIT, gone)
            .await
            .is_err()
        {
            tracing::warn!(pgid = straggler.pgid, "straggler still alive after SIGKILL");
        }
        containment.finish(straggler.pgid, straggler.contained);
    }
}
