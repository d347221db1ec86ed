//! dsh-tasks's tests, one binary: the task registry driven by a scripted producer.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code: a failed unwrap is a failed test"
)]

mod registry;
