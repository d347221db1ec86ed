//! How a [`ProcessManager`](crate::ProcessManager) is set up: where spill files go, which policy
//! decides admission and stragglers, and how processes are contained. Every per-process limit is on
//! the spawn spec, except the kernel limits containment enforces (the same for every process).

use std::path::PathBuf;

use crate::containment::ContainmentConfig;
use crate::policy::{AdmitAll, ProcessPolicy};

/// Manager configuration.
pub struct ManagerConfig {
    /// Spill directory; `None`: a private `dsh-proc-XXXXXX` (0300, `crate::spill`) under the OS temp
    /// dir, created by `ProcessManager::spill_dir` (the runtime asks when it starts) or else at the
    /// first spawn, and removed at shutdown unless `keep_spill`.
    pub spill_dir: Option<PathBuf>,
    /// Keep the private spill directory (and its files) after shutdown.
    pub keep_spill: bool,
    /// Admission and straggler policy.
    pub policy: Box<dyn ProcessPolicy>,
    /// Containment mode (default `auto`), per-process kernel limits, and the watchdog.
    pub containment: ContainmentConfig,

    /// The most terminal spawns running or queued at once (`--max-ttys`, default 64); one beyond it
    /// is refused at admission with [`SpawnError::TooManyTerminals`](crate::SpawnError::TooManyTerminals).
    pub max_terminals: usize,
}

impl Default for ManagerConfig {
    fn default() -> Self {
        Self {
            spill_dir: None,
            keep_spill: false,
            policy: Box::new(AdmitAll),
            containment: ContainmentConfig::default(),
            max_terminals: crate::terminal_slots::DEFAULT_MAX_TERMINALS,
        }
    }
}

impl std::fmt::Debug for ManagerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagerConfig")
            .field("spill_dir", &self.spill_dir)
            .field("keep_spill", &self.keep_spill)
            .field("containment", &self.containment)
            .field("max_terminals", &self.max_terminals)
            .finish_non_exhaustive()
    }
}
