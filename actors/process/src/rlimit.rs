//! The open-files limit children start with.
//!
//! A server that runs many commands at once raises its own soft `RLIMIT_NOFILE` (each child costs it
//! several pipe descriptors), but its children should see the limit the server was started with: some
//! programs size tables by it or misbehave with `select` above 1024.
//!
//! `posix_spawn` cannot set a limit and a `pre_exec` hook would force a full `fork`. Setting it with
//! `prlimit(2)` after the spawn returns was tried and loses the race: `bash -c 'ulimit -n'` can run
//! before the call lands. So the soft limit is lowered for the duration of the `posix_spawn` call
//! (the child inherits it at clone time) and raised again right after, under a lock so concurrent
//! spawns from several managers cannot interleave. While it is lowered, a descriptor allocation on
//! *another* thread of the host could fail if it needed a number at or above the original limit; in
//! the dsh binary the manager, its supervisors and the front ends share the one thread that spawns,
//! so nothing else allocates descriptors meanwhile.
//!
//! The setting is process-wide because the limit it undoes is process-wide.

use std::sync::{Mutex, OnceLock};

use nix::libc;

/// The limits in force for the host and for its children.
#[derive(Clone, Copy, Debug)]
struct Limits {
    child_soft: u64,
    host_soft: u64,
    hard: u64,
}

static LIMITS: OnceLock<Limits> = OnceLock::new();
static SPAWNING: Mutex<()> = Mutex::new(());

fn current() -> Option<libc::rlimit> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0).then_some(limit)
}

fn set_soft(soft: u64, hard: u64) -> bool {
    let limit = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: setrlimit only reads the struct we pass.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 }
}

/// Gives every child spawned from now on this soft open-files limit, while the host keeps its
/// current (raised) one. Only the first call takes effect; nothing happens if the limits cannot be
/// read or `soft` is not below the host's.
pub fn set_child_nofile_soft_limit(soft: u64) {
    let Some(now) = current() else { return };
    if soft < now.rlim_cur {
        let _ = LIMITS.set(Limits {
            child_soft: soft,
            host_soft: now.rlim_cur,
            hard: now.rlim_max,
        });
    }
}

/// Runs `spawn` (a `posix_spawn`) with the children's soft limit in force.
pub(crate) fn with_child_limit<T>(spawn: impl FnOnce() -> T) -> T {
    let Some(limits) = LIMITS.get() else {
        return spawn();
    };
    let _one_at_a_time = SPAWNING.lock().unwrap_or_else(|p| p.into_inner());
    if !set_soft(limits.child_soft, limits.hard) {
        return spawn();
    }
    let spawned = spawn();
    if !set_soft(limits.host_soft, limits.hard) {
        tracing::warn!(err = %std::io::Error::last_os_error(), "cannot restore the open-files limit after a spawn");
    }
    spawned
}
