//! dsh: an actor-based runtime that gives AI agents a bash tool they can trust.
//!
//! [`Runtime`] wires the actors — `ProcessManager` (one driver task per child), `TaskRegistry`,
//! `LocalBashExecutor`, `ToolBash` — and hands out a `Send + Sync + Clone` handle usable from any tokio
//! code: [`Runtime::call`] runs a tool call, [`Runtime::tool_definitions`] lists the tools for a model,
//! [`Runtime::shutdown`] kills and joins everything.
//!
//! ```no_run
//! # async fn demo() -> Result<(), dsh::RuntimeError> {
//! let runtime = dsh::Runtime::builder().timeout_ms(30_000).start()?;
//! let result = runtime
//!     .call(dsh::ToolCall::new("bash", serde_json::json!({"command": "ls", "description": "List files"})))
//!     .await;
//! println!("{}", result.text);
//! runtime.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! Crate layout: `actors/process` (dsh-process), `actors/tasks` (dsh-tasks), `actors/bash` (dsh-bash),
//! `actors/tool-bash` (dsh-tool-bash); this crate adds the facade and the `dsh` binary's front ends.

mod runtime;

pub use runtime::{Runtime, RuntimeBuilder, RuntimeError};

pub use dsh_bash::sandbox::{
    BackendChoice, LocalSandboxConfig, LocalSandboxProvider, NetworkPolicy,
};
pub use dsh_bash::{
    AbortSignal, BashConfig, BashExecRequest, OnTimeout, ProcessPolicy, Restart, RestartPolicy,
    SandboxFacts, SandboxMode,
};
pub use dsh_process::{
    Admission, AdmissionRequest, ContainmentMode, Load, ManagerStats, MaxConcurrent, MaxPerSession,
    PolicyStack, SettledProcess, StragglerAction, TaskLimits, WATCHDOG_RESTARTS_IN_A_ROW,
    WatchdogStatus, lock_unpoisoned,
};
pub use dsh_tasks::{
    AgentRef, FinishedTask, Inject, Lease, RetentionLimits, RetentionLoad, RetentionPolicy,
    TaskSnapshot,
};
pub use dsh_tool_bash::{
    ApprovalOutcome, ApprovalRequest, NoApprovalChannel, PROMPT_SECTION, ToolCall, ToolDefinition,
    ToolResult,
};

/// The actor crates, for hosts that talk to the actors by message.
pub mod actors {
    pub use dsh_bash as bash;
    pub use dsh_process as process;
    pub use dsh_tasks as tasks;
    pub use dsh_tool_bash as tool_bash;
}
