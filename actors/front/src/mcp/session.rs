//! The connection's session as `dsh mcp` keeps it: the runtime's session, the approvers, the calls
//! parked on approval rounds, the MCP tasks, the notices not yet shown, the log gate and the
//! workspace; and the result a call's request carries.

use std::sync::{Arc, Mutex};

use dsh::ToolResult;
use dsh::actors::process::lock_unpoisoned;
use rmcp::model::{CallToolResult, ContentBlock};

use crate::mcp::input_rounds::Rounds;
use crate::mcp::log_gate::LogGate;
use crate::mcp::tasks::Tasks;
use crate::mcp::workspace::Workspace;

/// The connection's session: its agent identity and the notices not yet shown to the model.
pub struct Session {
    /// The runtime's handle on this connection's session.
    pub handle: dsh::Session,
    /// Asks a handshake-era client through `elicitation/create` (used only when it declared the
    /// capability).
    pub approver: actix::Recipient<dsh::ApprovalRequest>,
    /// Hands a 2026-07-28 call's approvals back to its run, for an input round.
    pub round_approver: actix::Recipient<dsh::ApprovalRequest>,
    /// The calls parked on approval rounds.
    pub rounds: Arc<Rounds>,
    /// The session's MCP tasks.
    pub tasks: Arc<Tasks>,
    /// Notices not yet shown to the model.
    pub pending: Arc<Mutex<Vec<String>>>,
    /// Which log notifications the client gets.
    pub logs: Arc<LogGate>,
    /// Where the session's commands run.
    pub workspace: Workspace,
}

impl Session {
    /// The MCP result of a call: its text, then any notices not yet shown, and the same facts as
    /// `structuredContent`.
    pub fn reply(&self, result: ToolResult) -> CallToolResult {
        let mut content = vec![ContentBlock::text(result.text)];
        let notices = std::mem::take(&mut *lock_unpoisoned(&self.pending));
        if !notices.is_empty() {
            content.push(ContentBlock::text(notices.join("\n")));
        }
        let mut reply = if result.is_error {
            CallToolResult::error(content)
        } else {
            CallToolResult::success(content)
        };
        reply.structured_content = result.structured;
        reply
    }
}

/// A session id for this connection: unique per process and connection.
pub fn new_session_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("mcp-{}-{nanos:08x}", std::process::id())
}
