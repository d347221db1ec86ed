//! Helpers shared by dsh's tests and benches, and only by them (every crate takes this as a
//! dev-dependency).
//!
//! - [`isolate`]: run one test in a process of its own, for tests that measure the whole process
//!   (its descriptors, memory, threads or children) or change something process-wide.
//! - [`wait`]: event-based waits with generous bounds, never fixed sleeps.
//! - [`procfs`]: what `/proc` says about a pid.
//! - [`scratch`]: temp dirs outside `/tmp`, for the sandbox tests.
//! - [`rng`]: a small seeded generator for tests that draw random cases.
//! - [`terminal`]: a program started on a pseudo-terminal by hand, for the pty and emulator tests.
//! - `actors` (feature `actors`): an agent that records what it is sent, an approver that answers
//!   every question the same way.
//! - `runtime` (feature `runtime`): the library's runtime set up for tests, with calls and a
//!   shutdown that checks nothing is left.
//! - `bench` (feature `bench`): what the benches share: a runtime to bench, per-iteration
//!   timings for the ratio lines, paired rounds and memory readings.
//!
//! Layers: each crate's tests must see the types of the crate they test, not a second copy reached
//! through a crate above it. So the helpers are layered by cargo features, and each test crate
//! enables only the one it needs: the modules without a feature need no dsh crate (dsh-process,
//! dsh-contain); `actors` needs actix only and is generic over the message, so the task
//! registry's tests record their own `Inject` and the tool's tests answer their own
//! `ApprovalRequest`; only `runtime` depends on `dsh`, and only the `dsh` package's own tests
//! enable it. (A workspace-wide build unifies the features; `cargo test -p <crate>` checks that a
//! crate's tests name only what their own features give.)

#[cfg(feature = "actors")]
pub mod actors;
#[cfg(feature = "bench")]
pub mod bench;
pub mod isolate;
pub mod procfs;
pub mod rng;
#[cfg(feature = "runtime")]
pub mod runtime;
pub mod scratch;
pub mod terminal;
pub mod wait;

pub use wait::{SOON, within};
