//! The sandbox executor: the same seam as the local executor, but every command runs confined to a
//! [`SandboxMode`] — `read-only`, `workspace-write` or `danger-full-access` — by a
//! [`SandboxProvider`], and every result carries its [`SandboxFacts`] (docs/ARCHITECTURE.md#sandbox).
//!
//! - [`policy`]: the standing policy (default mode, canonical workspace root, per-session overrides);
//! - [`provider`]: the seam a backend implements (`confine` an argv under a policy), the wrap it
//!   returns, and the fail-closed text;
//! - [`local`]: the host's provider, which checks the workspace root (`root_check.rs`) and hands
//!   each call to the backend [`probe`] chose once: [`landlock`] (applied in the spawn, no
//!   launcher), bubblewrap (`bwrap.rs`), or an operator's runner command (`runner.rs`); [`config`]
//!   holds its settings;
//! - [`writable`]: the one writable set both backends grant, and the everyday roots;
//! - [`classify`]: denial and runner-failure classification of a finished command;
//! - [`quote`]: single-quoting a wrapped argv into `exec '<a0>' '<a1>' …`;
//! - [`executor`]: the `SandboxBashExecutor` actor.

mod bwrap;
pub mod classify;
pub mod config;
pub mod executor;
mod gate;
pub mod landlock;
pub mod local;
pub mod policy;
pub mod probe;
pub mod provider;
pub mod quote;
mod root_check;
mod runner;
mod session_temp;
pub mod writable;

pub use classify::matches_signatures;
pub use config::{BackendChoice, LocalSandboxConfig, NetworkPolicy};
pub use executor::SandboxBashExecutor;
pub use local::LocalSandboxProvider;
pub use policy::{SandboxPolicy, SandboxPolicyResolver, canonical_root};
pub use probe::Backend;
pub use provider::{SandboxProvider, Wrap, WrapFacts, sandbox_unavailable_text};
pub use quote::{exec_command, shell_quote};
pub use writable::{WritableRootError, everyday_roots, writable_paths};

pub use dsh_tasks::{Enforcement, SandboxFacts, SandboxMode};
