//! A tool call parsed once: the tool name and the model's JSON become one [`ToolRequest`] with
//! typed fields, and everything after works on that.

use serde_json::Value;

use crate::args::{
    BashArgs, ReadArgs, WriteArgs, parse_bash_args_with, parse_read_args, parse_task_id,
    parse_write_args,
};
use crate::error::ToolError;
use crate::task_id::TaskId;

/// A validated tool call.
#[derive(Clone, Debug)]
pub enum ToolRequest {
    /// `bash`: run a command, in the foreground or as a background task.
    Bash(BashArgs),
    /// `bash_output`: read (optionally after waiting) a background task's new output.
    Output(ReadArgs),
    /// `bash_write`: write to a task's input, then wait as `bash_output` does (issue 22).
    Write(WriteArgs),
    /// `bash_kill`: kill a background task.
    Kill {
        /// The task.
        task_id: TaskId,
    },
}

/// What a composition offers, which decides what a call may name.
#[derive(Clone, Copy, Debug)]
pub struct Offered {
    /// `bash_output`, `bash_write`, `bash_kill` and `run_in_background`.
    pub background: bool,
    /// The escalation parameters (`sandbox_permissions`, `justification`).
    pub sandbox: bool,
}

impl Offered {
    /// The tools a model may call, in the order they are offered.
    pub fn tools(self) -> &'static [&'static str] {
        if self.background {
            &["bash", "bash_output", "bash_write", "bash_kill"]
        } else {
            &["bash"]
        }
    }
}

impl ToolRequest {
    /// Parses the call `name` with the model's `arguments`.
    pub fn parse(name: &str, arguments: &Value, offered: Offered) -> Result<Self, ToolError> {
        match name {
            "bash" => Ok(ToolRequest::Bash(parse_bash_args_with(
                arguments,
                offered.sandbox,
            )?)),
            "bash_output" if offered.background => {
                Ok(ToolRequest::Output(parse_read_args(arguments)?))
            }
            "bash_write" if offered.background => {
                Ok(ToolRequest::Write(parse_write_args(arguments)?))
            }
            "bash_kill" if offered.background => Ok(ToolRequest::Kill {
                task_id: parse_task_id(arguments)?,
            }),
            other => Err(ToolError::UnknownTool {
                name: other.to_owned(),
                available: offered.tools().join(", "),
            }),
        }
    }
}
