//! dsh-tool-bash: the model-facing tools `bash`, `bash_output` and `bash_kill`.
//!
//! Pure schema, validation and text shaping over the executor seam and the task registry: every
//! process concern lives behind them, so a sandboxed or remote executor changes nothing the model sees.

mod approval;
mod args;
mod definitions;
mod escalation;
pub mod keys;
mod managed_env;
mod render;
mod structured;
mod tool;
mod until;

pub use approval::{ApprovalOutcome, ApprovalRequest, NoApprovalChannel, approval_reason};
pub use args::{
    BashArgs, DEFAULT_WAIT_MS, ESCALATION_MODES, Escalation, MAX_WAIT_MS, ReadArgs,
    parse_bash_args, parse_bash_args_with, parse_read_args, parse_task_id,
};
pub use definitions::{DefinitionFacts, PROMPT_SECTION, ToolDefinition, tool_definitions};
pub use managed_env::{managed_env, resolve_dsh_home};
pub use render::{
    ESCALATION_HINT, denial_marker, render_kill, render_moved, render_notice, render_read,
    render_read_with, render_result, render_result_with, render_started, runner_failure_marker,
    sandbox_markers, status_line,
};
pub use structured::{
    bash_structured, kill_structured, moved_structured, output_schema, read_structured,
    sandbox_structured, started_structured,
};
pub use tool::{
    ExecutorRef, SetSessionSandboxMode, SetSessionWorkspace, StandingSandboxPolicy, ToolBash,
    ToolBashConfig, ToolCall, ToolResult,
};
pub use until::UntilPattern;

pub use dsh_bash::{OutputPeek, PeekSnapshot};
pub use dsh_tasks::{AgentRef, Inject};
