//! The sandbox executor (seed §1.6): the same seam as the local executor, but every command runs
//! confined to a [`SandboxMode`] — `read-only`, `workspace-write` or `danger-full-access` — by a
//! [`SandboxProvider`], and every result carries its [`SandboxFacts`].
//!
//! - [`policy`]: the standing policy (default mode, canonical workspace root, per-session overrides);
//! - [`provider`]: the seam a backend implements (`confine` an argv under a policy), the wrap it
//!   returns, and the fail-closed text;
//! - [`local`]: the host's backends — Landlock applied in the spawn (no launcher), bubblewrap, or an
//!   operator's runner command — chosen once by probing;
//! - [`classify`]: denial and runner-failure classification of a finished command;
//! - [`quote`]: single-quoting a wrapped argv into `exec '<a0>' '<a1>' …`;
//! - [`executor`]: the `SandboxBashExecutor` actor.

pub mod classify;
pub mod executor;
pub mod local;
pub mod policy;
pub mod provider;
pub mod quote;

pub use classify::matches_signatures;
pub use executor::SandboxBashExecutor;
pub use local::{Backend, BackendChoice, LocalSandboxConfig, LocalSandboxProvider, NetworkPolicy};
pub use policy::{SandboxPolicy, SandboxPolicyResolver, canonical_root};
pub use provider::{SandboxProvider, Wrap, WrapFacts, sandbox_unavailable_text};
pub use quote::{exec_command, shell_quote};

pub use dsh_tasks::{Enforcement, SandboxFacts, SandboxMode};
