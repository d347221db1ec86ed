//! dsh-bash's tests, one binary (each former test file is a module): the executor seam and the local
//! executor, the sandbox executor with a fake provider and with the real backends, and the task
//! registry under load.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code: a failed unwrap is a failed test"
)]

mod common;
mod executor;
mod registry_load;
mod sandbox;
mod sandbox_backends;
