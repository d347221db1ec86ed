//! An agent embedding the dsh runtime: it names its session once, calls the three tools the way a
//! model would, reads task ids from the typed outcome, receives its completion notices, and prints
//! exactly what a model would see.
//!
//! Run with `cargo run --example agent`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "an example, not product code: it stops loudly on what it does not expect"
)]

use actix::prelude::*;
use dsh::{Inject, Runtime, Session, TaskId, ToolCall, ToolResult};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// The agent's inbox: completion notices arrive as ordinary messages; a real agent would add them
/// to its next prompt. Here each is printed and handed to `main`.
struct Inbox(mpsc::UnboundedSender<String>);

impl Actor for Inbox {
    type Context = Context<Self>;
}

impl Handler<Inject> for Inbox {
    type Result = ();

    fn handle(&mut self, notice: Inject, _: &mut Self::Context) {
        println!("<notice from {}> {}\n", notice.source, notice.text);
        let _ = self.0.send(notice.text);
    }
}

/// One tool call, printed as the model would see it.
async fn use_tool(session: &Session, name: &str, arguments: Value) -> ToolResult {
    println!("> {name} {arguments}");
    let result = session.call(ToolCall::new(name, arguments)).await;
    let marker = if result.is_error { "[error] " } else { "" };
    println!("{marker}{}\n", result.text);
    result
}

fn task_id(result: &ToolResult) -> TaskId {
    result.task_id().cloned().expect("a background task")
}

fn main() {
    let system = System::new();
    system.block_on(async {
        let runtime = Runtime::builder().timeout_ms(5_000).start_in_current_system().expect("runtime");
        let names: Vec<_> = runtime.tool_definitions().iter().map(|t| t.name).collect();
        println!("tools offered to the model: {names:?}\n");
        let (notices, mut notice) = mpsc::unbounded_channel();
        let session = runtime.session("example-session", Inbox(notices).start().recipient());

        use_tool(&session, "bash", json!({"command": "echo hello; echo oops >&2; exit 3", "description": "Print and fail"})).await;
        use_tool(&session, "bash", json!({"command": "sleep 10", "description": "Sleep too long", "timeoutMs": 200})).await;
        let refused = use_tool(&session, "bash", json!({"command": "", "description": "Nothing"})).await;
        println!("(error code: {})\n", refused.error.as_ref().map_or("none", |e| e.code()));

        let ticker = use_tool(
            &session,
            "bash",
            json!({"command": "for i in 1 2 3; do echo tick $i; sleep 0.2; done", "description": "Tick three times", "run_in_background": true}),
        )
        .await;
        let ticker = task_id(&ticker);
        use_tool(&session, "bash_output", json!({"task_id": ticker})).await;
        // A real agent carries on with its turn; the notice lands in its inbox whenever the task ends.
        notice.recv().await.expect("a completion notice");
        use_tool(&session, "bash_output", json!({"task_id": ticker})).await;

        let sleeper = use_tool(&session, "bash", json!({"command": "sleep 60", "description": "Sleep", "run_in_background": true})).await;
        use_tool(&session, "bash_kill", json!({"task_id": task_id(&sleeper)})).await;
        session.release().await;
        runtime.shutdown().await;
    });
}
