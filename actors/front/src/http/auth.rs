//! The HTTP layer that decides who a request is: with `--auth-tokens`, the identity of its
//! `Authorization: Bearer` token, and a bare 401 (no body, no hint) for a missing or unknown
//! one; without, every request is [`LOCAL`]. The identity rides in the request's extensions,
//! where the MCP handler finds it (`http/identities.rs`).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;

use crate::http::tokens::{Identity, Tokens};

/// The identity of every client when no `--auth-tokens` is given.
pub const LOCAL: &str = "local";

/// How requests are authenticated.
#[derive(Clone)]
pub enum Auth {
    /// No tokens: every request is [`LOCAL`] (loopback only).
    Off,
    /// Every request must carry one of these tokens.
    Tokens(Arc<Tokens>),
}

/// The middleware: tags the request with its identity or answers 401.
pub async fn authenticate(State(auth): State<Auth>, mut request: Request, next: Next) -> Response {
    let identity = match &auth {
        Auth::Off => Some(Identity(LOCAL.to_owned())),
        Auth::Tokens(tokens) => request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|value| value.as_bytes().strip_prefix(b"Bearer "))
            .and_then(|token| tokens.identify(token)),
    };
    match identity {
        Some(identity) => {
            request.extensions_mut().insert(identity);
            next.run(request).await
        }
        None => {
            let mut refused = Response::new(Body::empty());
            *refused.status_mut() = StatusCode::UNAUTHORIZED;
            refused
        }
    }
}
