//! Helpers shared by dsh's tests, and only by them (every crate takes this as a dev-dependency).
//!
//! - [`isolate`]: run one test in a process of its own, for tests that measure the whole process
//!   (its descriptors, memory, threads or children) or change something process-wide.
//! - [`wait`]: event-based waits with generous bounds, never fixed sleeps.
//! - [`procfs`]: what `/proc` says about a pid.

pub mod isolate;
pub mod procfs;
pub mod wait;

pub use wait::{SOON, within};
