//! The tool layer's own settings. What the executor applies (workspace, timeouts) is not here: the
//! tool reads it from the executor ([`crate::ExecutorRef`]), its one owner.

use std::path::PathBuf;

/// Tool-layer settings.
#[derive(Clone, Debug)]
pub struct ToolBashConfig {
    /// The resolved, absolute `DSH_HOME` given to every command.
    pub dsh_home: PathBuf,
    /// Offer `run_in_background`, `bash_output` and `bash_kill`.
    pub background: bool,
    /// An approval service is composed: escalations are asked of the call's approver. Without it
    /// every escalation fails closed (`… but no approval service is composed`).
    pub approvals: bool,
}
