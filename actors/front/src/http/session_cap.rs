//! `--max-sessions`: at most N MCP sessions (2025-11-25 `Mcp-Session-Id` sessions, each ~30 KiB
//! while it idles, most of it rmcp's service task and channels) at once, so a client that keeps
//! initializing cannot grow the server without bound in the 5 minutes an idle session is kept. rmcp
//! answers a failed session creation with a bare 500, so the check is here, in front of it and of
//! the session table (`http/session_table.rs`): an `initialize` while N sessions live is answered
//! HTTP 503 with a JSON-RPC error; every other request (a session's own, a 2026-07-28 stateless one)
//! passes.

use std::sync::Arc;

use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use serde_json::{Value, json};

use crate::http::session_table::SessionTable;

/// Most MCP sessions at once unless `--max-sessions` says.
pub const DEFAULT_MAX_SESSIONS: usize = 4096;

/// The sessions and their bound.
pub struct SessionCap {
    /// The session manager, whose live sessions are counted.
    pub manager: Arc<SessionTable>,
    /// `--max-sessions`.
    pub max: usize,
}

/// The refusal of an `initialize` past the bound; the Display is its JSON-RPC error message.
#[derive(Debug, thiserror::Error)]
#[error("too many MCP sessions (limit {0}); close one or retry later")]
pub struct TooManySessions(pub usize);

/// The middleware; runs after `http/screen.rs`, so the body is already in memory and well-formed.
pub async fn cap_sessions(
    State(cap): State<Arc<SessionCap>>,
    request: Request,
    next: Next,
) -> Response {
    let opens_one = request.method() == Method::POST
        && !request.headers().contains_key("mcp-session-id")
        && cap.manager.len() >= cap.max;
    if !opens_one {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = to_bytes(body, usize::MAX).await else {
        return next.run(Request::from_parts(parts, Body::empty())).await;
    };
    let message: Value = serde_json::from_slice(&bytes).unwrap_or_default();
    if message["method"] != "initialize" {
        return next
            .run(Request::from_parts(parts, Body::from(bytes)))
            .await;
    }
    let error = json!({"jsonrpc": "2.0", "id": message["id"], "error": {
        "code": -32000, "message": TooManySessions(cap.max).to_string()}});
    let mut refused = Response::new(Body::from(error.to_string()));
    *refused.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    refused.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    refused
}
