//! dsh-tool-bash's tests, one binary (each former test file is a module): the rendering units and the
//! sandbox escalation of the bash tool.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code: a failed unwrap is a failed test"
)]

mod escalation;
mod render;
