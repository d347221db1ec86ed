//! dsh-tool-bash: the model-facing tools `bash`, `bash_output` and `bash_kill`.
//!
//! Pure schema, validation and text shaping over the executor seam and the task registry: every
//! process concern lives behind them, so a sandboxed or remote executor changes nothing the model sees.

mod args;
mod definitions;
mod managed_env;
mod render;
mod structured;
mod tool;

pub use args::{
    BashArgs, DEFAULT_WAIT_MS, MAX_WAIT_MS, ReadArgs, parse_bash_args, parse_read_args,
    parse_task_id,
};
pub use definitions::{DefinitionFacts, PROMPT_SECTION, ToolDefinition, tool_definitions};
pub use managed_env::{managed_env, resolve_dsh_home};
pub use render::{
    render_kill, render_moved, render_notice, render_read, render_result, render_started,
    status_line,
};
pub use structured::{
    bash_structured, kill_structured, moved_structured, output_schema, read_structured,
    started_structured,
};
pub use tool::{ExecutorRef, ToolBash, ToolBashConfig, ToolCall, ToolResult};

pub use dsh_bash::{OutputPeek, PeekSnapshot};
pub use dsh_tasks::{AgentRef, Inject};
