//! The JSON-RPC errors of a POSTed body, decided before rmcp sees it, as on stdio.
//!
//! rmcp's HTTP server answers a body it cannot decode with `415 Unsupported Media Type` and a line
//! of text, and mishandles the same malformed messages it mishandles on stdio. A body is one
//! JSON-RPC message, so it is screened exactly like a stdio line (`mcp/jsonrpc_errors.rs`): -32700
//! for unparseable input, -32600 for what is not a request object, -32602 for bad `tools/call`
//! params, each as a JSON-RPC error (HTTP 400 when it has no id to answer, else 200). Everything
//! else goes on to rmcp unchanged. The body is read whole, at most `--max-line-bytes` (413 past
//! that) and within `--header-timeout-ms` of its headers (408 and the connection closed past that,
//! so a client that sends its body a byte a second holds nothing for long).

use std::time::Duration;

use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use serde_json::Value;

use crate::mcp::jsonrpc_errors::{PARSE_ERROR, Screened, error_response, screen};

/// How much of a body is read, and for how long.
#[derive(Clone, Copy)]
pub struct BodyLimits {
    /// `--max-line-bytes`.
    pub max_bytes: usize,
    /// `--header-timeout-ms`.
    pub timeout: Duration,
}

/// The middleware.
pub async fn screen_body(
    State(limits): State<BodyLimits>,
    request: Request,
    next: Next,
) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let bytes = match tokio::time::timeout(limits.timeout, to_bytes(body, limits.max_bytes)).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(_)) => return status_only(StatusCode::PAYLOAD_TOO_LARGE),
        Err(_) => {
            let mut late = status_only(StatusCode::REQUEST_TIMEOUT);
            late.headers_mut().insert(
                header::CONNECTION,
                header::HeaderValue::from_static("close"),
            );
            return late;
        }
    };
    let answer = match std::str::from_utf8(&bytes) {
        Ok(text) => match screen(text) {
            Screened::Answer(answer) => Some(answer),
            Screened::ToolCall(_) | Screened::Cancel(_) | Screened::Pass => None,
        },
        Err(err) => Some(error_response(
            None,
            PARSE_ERROR,
            &format!("Parse error: {err}"),
        )),
    };
    match answer {
        Some(answer) => json_error(answer),
        None => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
    }
}

/// A JSON-RPC error response: 400 when it answers no id, else 200.
fn json_error(answer: String) -> Response {
    let has_id = serde_json::from_str::<Value>(&answer).is_ok_and(|v| !v["id"].is_null());
    let mut response = Response::new(Body::from(answer));
    if !has_id {
        *response.status_mut() = StatusCode::BAD_REQUEST;
    }
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

fn status_only(status: StatusCode) -> Response {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = status;
    response
}
