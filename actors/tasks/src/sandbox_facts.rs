//! The sandbox vocabulary that travels with results: the mode a command ran under and what its
//! confinement did (docs/ARCHITECTURE.md#sandbox). It lives in this crate, the lowest one that
//! carries it, because a background task's read ([`crate::TaskOutput`]) reports the facts stamped
//! when the task settled.

use std::fmt;
use std::str::FromStr;

use crate::names::{Named, UnknownValue};

/// What a confined command may change on the filesystem.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SandboxMode {
    /// No writes anywhere; only `/dev/null` is writable.
    ReadOnly,
    /// Writes only below the workspace root and `/tmp` (and `/dev/null`).
    WorkspaceWrite,
    /// No confinement at all.
    DangerFullAccess,
}

impl SandboxMode {
    /// The three modes, narrowest first.
    pub const ALL: [SandboxMode; 3] = [
        SandboxMode::ReadOnly,
        SandboxMode::WorkspaceWrite,
        SandboxMode::DangerFullAccess,
    ];

    /// `read-only`, `workspace-write` or `danger-full-access`.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::ReadOnly => "read-only",
            SandboxMode::WorkspaceWrite => "workspace-write",
            SandboxMode::DangerFullAccess => "danger-full-access",
        }
    }

    /// The mode named `text`, if it is one of the three.
    pub fn parse(text: &str) -> Option<SandboxMode> {
        SandboxMode::ALL.into_iter().find(|m| m.as_str() == text)
    }

    /// Whether the mode confines at all.
    pub fn confines(self) -> bool {
        self != SandboxMode::DangerFullAccess
    }

    /// The modes strictly wider than this one: what an escalation may ask for (docs/CONTRACT.md#bash,
    /// escalation step 2).
    pub fn wider(self) -> &'static [SandboxMode] {
        match self {
            SandboxMode::ReadOnly => &[SandboxMode::WorkspaceWrite, SandboxMode::DangerFullAccess],
            SandboxMode::WorkspaceWrite => &[SandboxMode::DangerFullAccess],
            SandboxMode::DangerFullAccess => &[],
        }
    }
}

impl fmt::Display for SandboxMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Named for SandboxMode {
    const VALUES: &'static [SandboxMode] = &SandboxMode::ALL;
    const WHAT: &'static str = "a sandbox mode";

    fn name(self) -> &'static str {
        self.as_str()
    }
}

impl FromStr for SandboxMode {
    type Err = UnknownValue;

    /// `read-only`, `workspace-write` or `danger-full-access`, exactly.
    fn from_str(text: &str) -> Result<Self, UnknownValue> {
        SandboxMode::from_name(text)
    }
}

/// How completely the backend enforces the mode on this host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Enforcement {
    /// Every write path is controlled.
    Full,
    /// Some write paths are not controlled (an older Landlock ABI).
    Partial,
}

impl Enforcement {
    /// `full` or `partial`.
    pub fn as_str(self) -> &'static str {
        match self {
            Enforcement::Full => "full",
            Enforcement::Partial => "partial",
        }
    }
}

/// The sandbox facts of one result: structured results carry them as
/// `sandbox: {mode, denied, enforcement?, runner_failed?}` (docs/CONTRACT.md#front-ends).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxFacts {
    /// The mode the command actually ran under.
    pub mode: SandboxMode,
    /// The command failed on a sandbox denial (classified from its exit code and stderr).
    pub denied: bool,
    /// The backend's enforcement; `None` for `danger-full-access`.
    pub enforcement: Option<Enforcement>,
    /// The sandbox runner itself failed: the command did not run.
    pub runner_failed: bool,
}
