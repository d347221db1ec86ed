//! The `dsh` library's own tests, one binary (each former test file is a module): the tool contract
//! through the runtime handle, background tasks and their waits, structured results, policies and
//! restarts, the sandbox through the facade, and what a task costs, kills at scale and subreaper
//! mode in a host. The tests that drive the `dsh` binary live beside its front ends.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code: a failed unwrap is a failed test"
)]

use dsh_test_support::runtime as common;

mod background;
mod interactive;
mod kill_scale;
mod policies_actors;
mod restart;
mod retained_bytes;
mod sandbox_runtime;
mod structured;
mod subreaper_library;
mod tool_bash;
mod wait_output;
