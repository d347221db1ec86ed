//! The model-facing tool definitions: names, descriptions and JSON Schemas of `bash`, `bash_output` and
//! `bash_kill`, worded as docs/CONTRACT.md gives them, in the shapes OpenAI, Anthropic and
//! MCP tool lists expect.

use serde::Serialize;
use serde_json::{Value, json};

/// The prompt section offered next to the tool (docs/CONTRACT.md, "The prompt section").
pub const PROMPT_SECTION: &str =
    "Check the [exit code: N] marker on every bash result; investigate failures before moving on.";

/// The sandbox sentence of the `bash` description (legacy wording, with `bash_output`).
const SANDBOX_SENTENCE: &str = " Commands may run under a file sandbox: a blocked file operation is reported as \
     `[sandbox: file access denied under <mode> mode]` (a background task reports the same marker via \
     bash_output once it has finished); that is a policy denial, not a bug in the command — do not retry \
     it another way.";

/// The escalation paragraph, only with a sandboxing executor.
const ESCALATION_PARAGRAPH: &str = "\n\nAttempting a command the sandbox may deny is safe. On a real denial, \
     escalate immediately in the same turn: retry the exact same command once with `sandbox_permissions` \
     (the narrowest wider mode that suffices) and a one-sentence `justification`. Do not ask in chat first — \
     the approval prompt is the consent. If the session says approval prompts are disabled, a denial is \
     final. Never escalate speculatively: ground it in a real denial, normally the one this command just \
     hit, or the same access already denied in this session. A rejected escalation is final for that \
     command, not for others.";

/// One tool: what a model is shown.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ToolDefinition {
    /// The tool's name, as the model calls it.
    pub name: &'static str,
    /// The description the model reads.
    pub description: String,
    /// JSON Schema (draft 2020-12) of the arguments object. The root is open: unknown keys are
    /// accepted and ignored.
    pub input_schema: Value,
}

impl ToolDefinition {
    /// `{"type": "function", "function": {name, description, parameters}}` (OpenAI chat/responses).
    pub fn openai(&self) -> Value {
        json!({"type": "function", "function": {"name": self.name, "description": self.description, "parameters": self.input_schema}})
    }

    /// `{name, description, input_schema}` (Anthropic messages).
    pub fn anthropic(&self) -> Value {
        json!({"name": self.name, "description": self.description, "input_schema": self.input_schema})
    }

    /// `{name, description, inputSchema}` (MCP `tools/list`).
    pub fn mcp(&self) -> Value {
        json!({"name": self.name, "description": self.description, "inputSchema": self.input_schema})
    }
}

/// What the definitions depend on.
#[derive(Clone, Copy, Debug)]
pub struct DefinitionFacts {
    /// The default timeout, quoted in the `timeoutMs` description.
    pub timeout_ms: u64,
    /// The maximum timeout, quoted in the `timeoutMs` description.
    pub max_timeout_ms: u64,
    /// Whether background work is offered (`run_in_background`, `bash_output`, `bash_kill`).
    pub background: bool,
    /// Whether the executor sandboxes: adds the sandbox sentences and the `sandbox_permissions` and
    /// `justification` parameters.
    pub sandbox: bool,
}

/// The four tools (only `bash` when background work is disabled).
pub fn tool_definitions(facts: DefinitionFacts) -> Vec<ToolDefinition> {
    let mut tools = vec![bash_definition(facts)];
    if facts.background {
        tools.push(output_tool());
        tools.push(write_tool());
        tools.push(task_tool(
            "bash_kill",
            "Kill a running background bash task (SIGTERM, then SIGKILL) by task id.",
        ));
    }
    tools
}

/// The writable-set paragraph of the `bash` description (docs/CONTRACT.md, "Tools"): what a
/// `workspace-write` command may write besides the workspace. Appended to `bash`'s description
/// (the first tool) when `paths` is not empty.
pub fn describe_writable(tools: &mut [ToolDefinition], paths: &[std::path::PathBuf]) {
    let Some(bash) = tools.first_mut().filter(|_| !paths.is_empty()) else {
        return;
    };
    let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    bash.description.push_str(&format!(
        "\n\nUnder workspace-write a command may write only the workspace and: {}.",
        shown.join(", ")
    ));
}

fn bash_definition(facts: DefinitionFacts) -> ToolDefinition {
    let mut description = String::from(
        "Execute a bash command (`bash -c`) and return its stdout/stderr. \
         Each call runs in a fresh shell: no state (cwd, variables, functions) persists between calls — \
         pass `workdir` instead of using `cd`. Non-zero exits are reported as `[exit code: N]`. \
         Harness facts are exposed to the command as managed `$DSH_*` environment variables \
         (`DSH_HOME`, `DSH_SHELL`, `DSH_SESSION_ID`). \
         Long output is truncated to its tail; the full output is saved to a file whose path is reported.",
    );
    if facts.sandbox {
        description.push_str(SANDBOX_SENTENCE);
    }
    if facts.background {
        description.push_str(
            " Set `run_in_background: true` for long-running commands: the call returns a task id immediately; \
             poll it with `bash_output` and stop it with `bash_kill`.",
        );
    } else {
        description.push_str(
            " Background execution is not available; long-running commands must finish within the timeout.",
        );
    }
    if facts.sandbox {
        description.push_str(ESCALATION_PARAGRAPH);
    }
    let mut properties = serde_json::Map::new();
    properties.insert(
        "command".into(),
        json!({"type": "string", "description": "The bash command to execute."}),
    );
    properties.insert(
        "description".into(),
        json!({"type": "string", "description": "Clear, concise description of what this command does in active voice, \
            5-10 words (shown in the UI). Examples: \"ls\" → \"List files in current directory\"; \
            \"git status\" → \"Show working tree status\"; \"npm install\" → \"Install package dependencies\"."}),
    );
    properties.insert(
        "timeoutMs".into(),
        json!({"type": "number", "description": format!(
            "Timeout in milliseconds (default {}, max {}). The command is killed on expiry.",
            facts.timeout_ms, facts.max_timeout_ms
        )}),
    );
    properties.insert(
        "workdir".into(),
        json!({"type": "string", "description": "Working directory for this command. Relative paths resolve against the workspace."}),
    );
    if facts.background {
        properties.insert(
            "run_in_background".into(),
            json!({"type": "boolean", "description": "Run in the background and return a task id immediately. No timeout applies."}),
        );
        properties.insert(
            "tty".into(),
            json!({"type": "boolean", "description": "Run under a pseudo-terminal (40x120, TERM=xterm-256color), for programs that need one: REPLs, password prompts, full-screen programs. stdout and stderr are then one stream (no [stderr] section), rendered as the screen shows it. Input is open: the call returns as soon as the command waits for input, and you answer with bash_write."}),
        );
        properties.insert(
            "stdin".into(),
            json!({"type": "string", "enum": crate::args::STDIN_MODES, "description": "\"closed\" (default): stdin is /dev/null. \"open\": keep a pipe to the command's stdin; the call returns as soon as the command waits for input, and you answer with bash_write."}),
        );
    }
    if facts.sandbox {
        properties.insert(
            "sandbox_permissions".into(),
            json!({"type": "string", "enum": crate::args::ESCALATION_MODES, "description":
                "The wider sandbox mode this command needs. Only valid as a one-shot retry of a command the \
                 sandbox just denied; requires `justification` and the user's approval."}),
        );
        properties.insert(
            "justification".into(),
            json!({"type": "string", "description":
                "Required with sandbox_permissions: one sentence for the user explaining why this exact \
                 command needs wider access."}),
        );
    }
    ToolDefinition {
        name: "bash",
        description,
        input_schema: json!({"type": "object", "properties": properties, "required": ["command", "description"]}),
    }
}

/// `bash_output`: a read, optionally after a wait (`wait`, `timeout_ms`, `until`).
fn output_tool() -> ToolDefinition {
    let mut tool = task_tool(
        "bash_output",
        "Read new output from a background bash task started with `bash` + `run_in_background`. \
         Returns only output produced since the previous bash_output call, plus the task status. \
         Tasks keep running while you do other work; read again later for more output. \
         Instead of calling this in a loop, wait: `wait: true` returns once the task has finished \
         (use it only when you are blocked on the task), and `until` returns as soon as the new output \
         matches a regular expression (e.g. a dev server's `Listening on`), or when the task finishes. \
         Either waits at most `timeout_ms` (default 30000, max 600000); a wait that runs out returns \
         the output so far with `[status: running]` and leaves the task running.",
    );
    if let Some(properties) = tool.input_schema["properties"].as_object_mut() {
        properties.insert(
            "wait".into(),
            json!({"type": "boolean", "description": "Wait until the task finishes (at most timeout_ms) before reading."}),
        );
        properties.insert(
            "timeout_ms".into(),
            json!({"type": "number", "description": "Longest wait in milliseconds with wait or until (default 30000, max 600000)."}),
        );
        properties.insert(
            "until".into(),
            json!({"type": "string", "description": "Regular expression (Rust regex syntax): wait until output produced since the previous read matches it, or the task finishes. Implies wait."}),
        );
    }
    tool
}

/// `bash_write`: input to a task started with `tty: true` or `stdin: "open"`, then a wait.
fn write_tool() -> ToolDefinition {
    let mut tool = task_tool(
        "bash_write",
        "Answer a bash task that waits for input (started with `tty: true` or `stdin: \"open\"`; a \
         foreground call that waits for input becomes such a task). Writes `input` as given, then \
         the named `keys` in order, then waits until the task waits for input again, finishes, or \
         `until` matches its new output — at most `timeout_ms` (default 10000, max 600000) — and \
         returns what bash_output returns: the new output and `[status: …]`, which says \
         `[status: waiting for input]` (or `waiting for hidden input` at a password prompt) when \
         it waits again. Include the Enter key (or a newline) to submit a line.",
    );
    if let Some(properties) = tool.input_schema["properties"].as_object_mut() {
        properties.insert(
            "input".into(),
            json!({"type": "string", "description": "Text to write, as given (UTF-8)."}),
        );
        properties.insert(
            "keys".into(),
            json!({"type": "array", "items": {"type": "string"}, "description": format!(
                "Named keys written after input, in order: {}. Under a terminal C-c, C-z and C-\\ signal the \
                 foreground program; with stdin \"open\", C-c sends SIGINT and C-d closes stdin.",
                crate::keys::KNOWN_KEYS
            )}),
        );
        properties.insert(
            "until".into(),
            json!({"type": "string", "description": "Regular expression (Rust regex syntax): also stop waiting once output produced since the previous read matches it."}),
        );
        properties.insert(
            "timeout_ms".into(),
            json!({"type": "number", "description": "Longest wait in milliseconds after writing (default 10000, max 600000)."}),
        );
    }
    tool
}

fn task_tool(name: &'static str, description: &str) -> ToolDefinition {
    ToolDefinition {
        name,
        description: description.to_owned(),
        input_schema: json!({
            "type": "object",
            "properties": {"task_id": {"type": "string", "description": "Task id returned by the bash tool."}},
            "required": ["task_id"],
        }),
    }
}
