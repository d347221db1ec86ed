//! Kernel-facing containment primitives for dsh: a task is all of its descendants.
//!
//! - [`host`]: what the host gives (cgroup mounts, delegation, subreaper, pidfd, `clone3`), for
//!   `dsh doctor` and `--containment auto`;
//! - [`cgroup`]: the runtime-owned cgroup tree with one leaf per process, kill, "all gone", limits,
//!   OOM detection;
//! - [`spawn`]: starting a child in a new session with a clean signal state, only fds 0–2, and
//!   inside its cgroup leaf before it can fork;
//! - [`subreaper`]: without cgroups, the runtime adopts escaped descendants and attributes them by
//!   an inherited environment marker;
//! - [`watchdog`]: a small process that kills everything when the runtime dies without goodbye.
#![deny(missing_docs)]

pub mod cgroup;
pub mod error;
pub mod events;
pub mod host;
pub mod mountinfo;
pub mod pool;
pub mod spawn;
pub mod subreaper;
pub mod watchdog;

pub use cgroup::{CgroupTarget, CgroupTree, Leaf, Limits};
pub use error::{Error, Result};
pub use host::{HostFacts, LimitSource, Mode};
pub use pool::LeafPool;
pub use spawn::{Child, Method, Program, SpawnError, Stdio, spawn, spawn_with};

/// A value unique to this process and call (time, pid and a counter), for names in shared
/// namespaces such as cgroup directories and markers.
pub fn nonce() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{SystemTime, UNIX_EPOCH};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(
        "{:x}",
        nanos ^ (u64::from(std::process::id()) << 40) ^ n.rotate_left(17)
    )
}
