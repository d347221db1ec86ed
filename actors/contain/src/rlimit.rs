//! The open-files limit children start with.
//!
//! A server that runs many commands at once raises its own soft `RLIMIT_NOFILE` (each child costs it
//! several pipe descriptors), but its children should see the limit the server was started with: some
//! programs size tables by it or misbehave with `select` above 1024.
//!
//! The child sets it itself between clone and exec ([`crate::Program::with_nofile_soft_limit`]).
//! Lowering the parent's limit around the spawn instead fails once
//! the runtime holds more descriptors than the original limit: the spawn's own pidfd could not be
//! allocated. Setting it with `prlimit(2)` after the spawn loses the race against the program.
//!
//! The setting is process-wide because the limit it undoes is process-wide.

use std::sync::OnceLock;

use nix::sys::resource::{Resource, getrlimit};

/// The limit for children.
#[derive(Clone, Copy, Debug)]
struct Limits {
    child_soft: u64,
}

static LIMITS: OnceLock<Limits> = OnceLock::new();

/// Gives every child spawned from now on this soft open-files limit, while the host keeps its
/// current (raised) one. Only the first call takes effect; nothing happens if the limits cannot be
/// read or `soft` is not below the host's.
pub fn set_child_nofile_soft_limit(soft: u64) {
    let Ok((now, _)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    if soft < now {
        let _ = LIMITS.set(Limits { child_soft: soft });
    }
}

/// The soft open-files limit children start with, when it differs from the runtime's own.
pub fn child_soft_limit() -> Option<u64> {
    LIMITS.get().map(|limits| limits.child_soft)
}
