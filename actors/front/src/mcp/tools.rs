//! What `dsh mcp` tells a client about itself: the tools with titles, annotations and output schemas,
//! the server's name and title, and instructions that say only what is true of the results.

use std::sync::Arc;

use dsh::Runtime;
use dsh::actors::tool_bash::output_schema;
use rmcp::model::{Implementation, Tool, ToolAnnotations};

/// For the model, next to the tool descriptions. A successful command has no marker at all, so say so.
pub const INSTRUCTIONS: &str = "Each bash call runs in a fresh `bash -c`: no cwd, variables or functions \
persist between calls; pass `workdir` instead of `cd`. A command that exits 0 gets its output only; \
otherwise the result ends with `[exit code: N]`, `[killed by signal: SIGNAME]` and/or `[timed out after \
Nms]`: check for these and investigate failures before moving on. Long output keeps its tail and names \
a file holding all of it. For long-running commands set `run_in_background: true`, then poll with \
`bash_output` and stop with `bash_kill`; when a background task finishes, a notice is added to a later \
tool result. With `tty: true` or `stdin: \"open\"` a call returns as soon as the command waits for input \
(`[waiting for input; moved to background task bash-<k>; answer with bash_write]`); answer with \
`bash_write`. Every result also carries these facts as `structuredContent`.";

pub fn server_info() -> Implementation {
    Implementation::new("dsh", env!("CARGO_PKG_VERSION")).with_title("dsh: bash for AI agents")
}

/// Each tool's title and hints; the annotations carry the title too, for clients that read it there.
fn title_and_annotations(name: &str) -> Option<(&'static str, ToolAnnotations)> {
    let title = match name {
        "bash" => "Run a bash command",
        "bash_output" => "Read a background task's output",
        "bash_write" => "Answer a task that waits for input",
        "bash_kill" => "Kill a background task",
        _ => return None,
    };
    let hints = ToolAnnotations::with_title(title);
    Some(match name {
        "bash" => (
            title,
            hints
                .read_only(false)
                .destructive(true)
                .idempotent(false)
                .open_world(true),
        ),
        "bash_output" => (
            title,
            hints
                .read_only(true)
                .destructive(false)
                .idempotent(true)
                .open_world(false),
        ),
        "bash_write" => (
            title,
            hints
                .read_only(false)
                .destructive(true)
                .idempotent(false)
                .open_world(false),
        ),
        _ => (
            title,
            hints
                .read_only(false)
                .destructive(true)
                .idempotent(true)
                .open_world(false),
        ),
    })
}

/// The runtime's tool definitions as MCP tools.
pub fn mcp_tools(runtime: &Runtime) -> Vec<Tool> {
    runtime
        .tool_definitions()
        .iter()
        .map(|def| {
            let schema = def.input_schema.as_object().cloned().unwrap_or_default();
            let mut tool = Tool::new(def.name, def.description.clone(), Arc::new(schema));
            if let Some((title, annotations)) = title_and_annotations(def.name) {
                tool = tool.with_title(title).with_annotations(annotations);
            }
            if let Some(serde_json::Value::Object(schema)) = output_schema(def.name) {
                tool = tool.with_raw_output_schema(Arc::new(schema));
            }
            tool
        })
        .collect()
}
