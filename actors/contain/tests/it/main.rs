//! dsh-contain's tests, one binary (each former test file is a module): cgroup mode with real
//! processes and its v2 limit path, host discovery, the spawn primitive and its confined spawning thread, subreaper mode, the
//! watchdog, and an ignored spawn timing harness.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code: a failed unwrap is a failed test"
)]

mod cgroup;
mod cgroup_v2_limits;
mod common;
mod confined_thread;
mod host;
mod input_wait;
mod pty;
mod spawn;
mod spawn_timing;
mod subreaper;
mod terminal;
mod watchdog;
