//! dsh-tool-bash: the model-facing tools `bash`, `bash_output`, `bash_write` and `bash_kill`.
//!
//! Pure schema, validation and text shaping over the executor seam and the task registry: every
//! process concern lives behind them, so a sandboxed or remote executor changes nothing the model sees.
//!
//! A call comes in as a [`ToolCall`] (`call.rs`), is parsed once into a [`ToolRequest`]
//! (`request.rs`, `args.rs`), runs in the [`ToolBash`] actor (`tool.rs`), and comes back as a
//! [`ToolResult`]: the model's text (`render.rs`), the typed [`ToolOutcome`] (`outcome.rs`, whose
//! serialization is the MCP `structuredContent`, schema in `structured.rs`) and, for a failure, a
//! [`ToolError`] with its code (`error.rs`).

mod approval;
mod args;
mod call;
mod config;
mod definitions;
mod error;
mod escalation;
mod executor_ref;
pub mod keys;
mod managed_env;
mod outcome;
mod render;
mod reply;
mod request;
mod session;
mod structured;
mod task_id;
mod tool;
mod until;
mod write;

pub use approval::{ApprovalOutcome, ApprovalRequest, NoApprovalChannel, approval_reason};
pub use args::{
    BashArgs, CommandInput, DEFAULT_WAIT, DEFAULT_WRITE_WAIT, ESCALATION_MODES, Escalation,
    MAX_WAIT, ReadArgs, STDIN_MODES, WriteArgs, parse_bash_args, parse_bash_args_with,
    parse_read_args, parse_task_id, parse_write_args,
};
pub use call::{ToolCall, ToolResult};
pub use config::ToolBashConfig;
pub use definitions::{DefinitionFacts, PROMPT_SECTION, ToolDefinition, tool_definitions};
pub use error::{EscalationError, ToolError};
pub use executor_ref::ExecutorRef;
pub use managed_env::{managed_env, resolve_dsh_home};
pub use outcome::{Ending, KillResult, LeftRunning, Ran, Read, Signal, StreamFacts, ToolOutcome};
pub use render::{
    ESCALATION_HINT, denial_marker, render_kill, render_moved, render_notice, render_read,
    render_read_input, render_read_with, render_result, render_result_with, render_started,
    render_waiting, runner_failure_marker, sandbox_markers, status_line, status_line_with_input,
};
pub use request::{Offered, ToolRequest};
pub use session::{SetSessionSandboxMode, SetSessionWorkspace, StandingSandboxPolicy};
pub use structured::{output_schema, sandbox_structured};
pub use task_id::TaskId;
pub use tool::ToolBash;
pub use until::UntilPattern;

pub use dsh_bash::{OutputPeek, PeekSnapshot};
pub use dsh_tasks::{AgentRef, Inject};
