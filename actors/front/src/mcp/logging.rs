//! MCP logging, deprecated by SEP-2577 but still how clients surface a server's messages; kept in one
//! place so it is easy to replace.
#![allow(
    deprecated,
    reason = "notices are also sent as MCP log notifications, as the issue asks"
)]

use rmcp::RoleServer;
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam, ServerCapabilities};
use rmcp::service::Peer;
use serde_json::Value;

use crate::mcp::log_gate::LogGate;

pub fn capabilities() -> ServerCapabilities {
    ServerCapabilities::builder()
        .enable_tools()
        .enable_logging()
        .enable_tasks()
        .build()
}

/// Sends a notice at `info`, if the gate allows it now.
pub fn send(peer: Peer<RoleServer>, gate: &LogGate, text: String) {
    if !gate.allows(LoggingLevel::Info) {
        return;
    }
    tokio::spawn(async move {
        let param = LoggingMessageNotificationParam::new(LoggingLevel::Info, Value::String(text))
            .with_logger("dsh");
        if let Err(err) = peer.notify_logging_message(param).await {
            tracing::debug!(%err, "could not send a notice as a log notification");
        }
    });
}
