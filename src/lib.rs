//! dsh: an actor-based runtime that gives AI agents a bash tool they can trust.
//!
//! [`Runtime`] wires the actors — `ProcessManager` (one driver task per child), `TaskRegistry`,
//! the bash executor, `ToolBash` — and hands out a `Send + Sync + Clone` handle usable from any
//! tokio code. A host names each agent session once ([`Runtime::session`]) and calls the tools
//! through its [`Session`]; each call comes back as a [`ToolResult`]: the text the model sees, the
//! typed [`ToolOutcome`] (exit code, task id, …) and, for a failure, a [`ToolError`] whose
//! [`code`](ToolError::code) tells a sandbox failure from a bad argument.
//!
//! ```no_run
//! # async fn demo(inbox: actix::Recipient<dsh::Inject>) -> Result<(), dsh::RuntimeError> {
//! let runtime = dsh::Runtime::builder().timeout_ms(30_000).start()?;
//! let session = runtime.session("agent-1", inbox);
//! let result = session
//!     .call(dsh::ToolCall::new("bash", serde_json::json!({"command": "ls", "description": "List files"})))
//!     .await;
//! println!("{}", result.text);
//! if let Some(dsh::ToolOutcome::Ran(ran)) = &result.outcome {
//!     println!("exit code {:?}", ran.exit_code);
//! }
//! runtime.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! Crate layout: `actors/process` (dsh-process), `actors/tasks` (dsh-tasks), `actors/bash` (dsh-bash),
//! `actors/tool-bash` (dsh-tool-bash); this crate adds the host API: the builder (`builder.rs`,
//! wired in `compose.rs`), the handle (`runtime.rs`), sessions (`session.rs`), shutdown
//! (`shutdown.rs`) and errors (`error.rs`).

#[cfg(not(target_os = "linux"))]
compile_error!("dsh runs on Linux only: it is built on cgroups, pidfds, clone3 and Landlock");

mod builder;
mod compose;
mod error;
mod runtime;
mod session;
mod shutdown;

pub use builder::RuntimeBuilder;
pub use error::RuntimeError;
pub use runtime::Runtime;
pub use session::Session;

pub use dsh_bash::sandbox::{
    BackendChoice, LocalSandboxConfig, LocalSandboxProvider, NetworkPolicy,
};
pub use dsh_bash::{
    AbortSignal, BashConfig, BashExecRequest, OnTimeout, ProcessPolicy, Restart, RestartPolicy,
    SandboxFacts, SandboxMode, TerminalSize,
};
pub use dsh_process::{
    Admission, AdmissionRequest, ContainmentMode, Load, ManagerStats, MaxConcurrent, MaxPerSession,
    PolicyStack, SettledProcess, StragglerAction, TaskLimits, WATCHDOG_RESTARTS_IN_A_ROW,
    WatchdogStatus,
};
pub use dsh_tasks::{
    AgentRef, FinishedTask, Inject, Lease, RetentionLimits, RetentionLoad, RetentionPolicy,
    TaskSnapshot, TaskStatus,
};
pub use dsh_tool_bash::{
    ApprovalOutcome, ApprovalRequest, Ending, KillResult, NoApprovalChannel, PROMPT_SECTION, Ran,
    Read, Signal, StreamFacts, TaskId, ToolCall, ToolDefinition, ToolError, ToolOutcome,
    ToolResult,
};

/// The actor crates, for hosts that talk to the actors by message.
pub mod actors {
    pub use dsh_bash as bash;
    pub use dsh_process as process;
    pub use dsh_tasks as tasks;
    pub use dsh_tool_bash as tool_bash;
}
