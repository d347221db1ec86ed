//! An actix agent actor that embeds the dsh runtime: it calls the three tools the way a model would,
//! receives its completion notices, and prints exactly what a model would see.
//!
//! Run with `cargo run --example agent`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "an example, not product code: it stops loudly on what it does not expect"
)]

use std::time::Duration;

use actix::prelude::*;
use dsh::{AgentRef, Inject, Runtime, ToolCall, ToolResult};
use serde_json::{Value, json};

/// The agent: a session id, the runtime handle, and the notices it has been sent.
struct Agent {
    session_id: String,
    runtime: Runtime,
    notices: Vec<String>,
}

impl Actor for Agent {
    type Context = Context<Self>;
}

/// Completion notices arrive as ordinary messages; a real agent would add them to its next prompt.
impl Handler<Inject> for Agent {
    type Result = ();

    fn handle(&mut self, notice: Inject, _: &mut Self::Context) {
        println!("<notice from {}> {}", notice.source, notice.text);
        self.notices.push(notice.text);
    }
}

/// Ask the agent to make one tool call.
#[derive(Message)]
#[rtype(result = "ToolResult")]
struct UseTool(&'static str, Value);

impl Handler<UseTool> for Agent {
    type Result = ResponseFuture<ToolResult>;

    fn handle(
        &mut self,
        UseTool(name, arguments): UseTool,
        ctx: &mut Self::Context,
    ) -> Self::Result {
        let caller = AgentRef::new(self.session_id.clone(), ctx.address().recipient());
        let runtime = self.runtime.clone();
        Box::pin(async move {
            println!("> {name} {arguments}");
            let result = runtime
                .call(ToolCall::new(name, arguments).with_caller(caller))
                .await;
            println!(
                "{}{}\n",
                if result.is_error { "[error] " } else { "" },
                result.text
            );
            result
        })
    }
}

fn main() {
    let system = System::new();
    system.block_on(async {
        let runtime = Runtime::builder().timeout_ms(5_000).start_in_current_system().expect("runtime");
        println!("tools offered to the model: {:?}\n", runtime.tool_definitions().iter().map(|t| t.name).collect::<Vec<_>>());
        let agent = Agent { session_id: "example-session".into(), runtime: runtime.clone(), notices: Vec::new() }.start();
        let use_tool = |name, args| agent.send(UseTool(name, args));

        use_tool("bash", json!({"command": "echo hello; echo oops >&2; exit 3", "description": "Print and fail"})).await.ok();
        use_tool("bash", json!({"command": "sleep 10", "description": "Sleep too long", "timeoutMs": 200})).await.ok();
        use_tool("bash", json!({"command": "", "description": "Nothing"})).await.ok();
        let started = use_tool(
            "bash",
            json!({"command": "for i in 1 2 3; do echo tick $i; sleep 0.2; done", "description": "Tick three times", "run_in_background": true}),
        )
        .await
        .expect("agent");
        let task_id = started.text.trim_start_matches("started background task ").to_owned();
        use_tool("bash_output", json!({"task_id": task_id})).await.ok();
        // A real agent would carry on with its turn; the notice lands in its mailbox whenever the task
        // ends. Here we simply give the task time to finish.
        tokio::time::sleep(Duration::from_millis(900)).await;
        use_tool("bash_output", json!({"task_id": task_id})).await.ok();
        let sleeper = use_tool("bash", json!({"command": "sleep 60", "description": "Sleep", "run_in_background": true}))
            .await
            .expect("agent");
        let sleeper_id = sleeper.text.trim_start_matches("started background task ").to_owned();
        use_tool("bash_kill", json!({"task_id": sleeper_id})).await.ok();
        runtime.shutdown().await;
    });
}
