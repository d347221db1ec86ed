//! The connection's session as `dsh mcp` keeps it: the runtime's session, the approvers, the calls
//! parked on approval rounds, the MCP tasks, the notices not yet shown, the log gate and the
//! workspace; and the result a call's request carries.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use actix::{Actor, ArbiterHandle};
use dsh::actors::process::lock_unpoisoned;
use dsh::{Runtime, ToolResult};
use rmcp::RoleServer;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::service::Peer;

use crate::mcp::approvals::McpApprover;
use crate::mcp::input_rounds::{self, RoundApprover, Rounds};
use crate::mcp::log_gate::LogGate;
use crate::mcp::logging;
use crate::mcp::tasks::Tasks;
use crate::mcp::workspace::Workspace;
use crate::notices::forwarder_in;

/// What a session is opened with, beside the runtime and its id.
#[derive(Clone, Copy)]
pub struct SessionSettings {
    /// `--max-in-flight`: the most parked rounds and MCP tasks.
    pub max_in_flight: usize,
    /// `--max-finished-tasks`.
    pub max_finished_tasks: usize,
    /// `--progress-interval-ms`.
    pub progress_interval: Duration,
    /// `--roots-timeout-ms`.
    pub roots_timeout: Duration,
    /// With `--cwd` the workspace is settled; otherwise it comes from the client's roots.
    pub cwd_settled: bool,
}

/// The client the session's server-to-client requests and log notifications go to: the one that
/// last completed an `initialize` handshake, while its connection lasts.
pub type PeerSlot = Arc<Mutex<Option<Peer<RoleServer>>>>;

/// The connection's session: its agent identity and the notices not yet shown to the model.
pub struct Session {
    /// The runtime's handle on this connection's session.
    pub handle: dsh::Session,
    /// The arbiter its actors run on.
    arbiter: ArbiterHandle,
    /// Asks a handshake-era client through `elicitation/create`; started by the first call that
    /// needs it ([`Session::approver`]), so a session that never asks holds no actor for it.
    approver: OnceLock<actix::Recipient<dsh::ApprovalRequest>>,
    /// Hands a 2026-07-28 call's approvals back to its run, for an input round; started as late.
    round_approver: OnceLock<actix::Recipient<dsh::ApprovalRequest>>,
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
    /// The client its approvals and log notifications go to.
    pub peer: PeerSlot,
}

impl Session {
    /// Opens the runtime's session `id` for MCP: its notices are kept for the next result and
    /// logged to the attached client. Its actors run on `arbiter` (rmcp's handlers, which may
    /// open a session, run off the actix thread).
    pub fn open(
        runtime: &Runtime,
        arbiter: &ArbiterHandle,
        id: String,
        settings: SessionSettings,
    ) -> Arc<Self> {
        let pending = Arc::new(Mutex::new(Vec::new()));
        let logs = Arc::new(LogGate::default());
        let peer: PeerSlot = Arc::default();
        let handle = {
            let (pending, peer, logs) = (pending.clone(), peer.clone(), logs.clone());
            let inbox = forwarder_in(arbiter, move |notice| {
                lock_unpoisoned(&pending).push(notice.clone());
                if let Some(peer) = lock_unpoisoned(&peer).clone() {
                    logging::send(peer, &logs, notice);
                }
            });
            runtime.session(id.clone(), inbox)
        };
        let rounds = Arc::new(Rounds::new(
            id.clone(),
            settings.max_in_flight,
            input_rounds::PARKED_FOR,
        ));
        let tasks = Arc::new(Tasks::new(
            id,
            settings.max_in_flight,
            settings.max_finished_tasks,
            settings.progress_interval.as_millis() as u64,
        ));
        Arc::new(Session {
            arbiter: arbiter.clone(),
            approver: OnceLock::new(),
            round_approver: OnceLock::new(),
            rounds,
            tasks,
            pending,
            logs,
            workspace: Workspace::new(handle.clone(), settings.cwd_settled, settings.roots_timeout),
            handle,
            peer,
        })
    }

    /// Asks a handshake-era client through `elicitation/create` (for a client that declared the
    /// capability).
    pub fn approver(&self) -> actix::Recipient<dsh::ApprovalRequest> {
        let start = || {
            let peer = self.peer.clone();
            McpApprover::start_in_arbiter(&self.arbiter, move |_| McpApprover { peer }).recipient()
        };
        self.approver.get_or_init(start).clone()
    }

    /// Hands a 2026-07-28 call's approvals back to its run, for an input round.
    pub fn round_approver(&self) -> actix::Recipient<dsh::ApprovalRequest> {
        let start = || {
            let asking = self.rounds.asking.clone();
            RoundApprover::start_in_arbiter(&self.arbiter, move |_| RoundApprover { asking })
                .recipient()
        };
        self.round_approver.get_or_init(start).clone()
    }

    /// Sends the session's approvals and log notifications to `peer` from now on.
    pub fn attach(&self, peer: Peer<RoleServer>) {
        *lock_unpoisoned(&self.peer) = Some(peer);
    }

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
