//! dsh-process's tests, one binary (each former test file is a module): spawning and capture
//! through the manager's messages (`spawn`), and the manager's own guarantees (`manager`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code: a failed unwrap is a failed test"
)]

mod common;
mod interactive;
mod manager;
mod spawn;
mod terminal;
