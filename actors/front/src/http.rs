//! `dsh serve`: one runtime shared by every client, the MCP handler of `dsh mcp`
//! (`mcp/server.rs`) served over Streamable HTTP at `/mcp` by rmcp's server, and `GET /healthz`.
//!
//! rmcp's `StreamableHttpService` carries both protocol lines: 2025-11-25 sessions
//! (`initialize`, `Mcp-Session-Id`, SSE streams, server-to-client requests) and 2026-07-28
//! stateless requests with per-request `_meta` and input rounds; the sessions are entries of dsh's
//! own session table (`http/session_table.rs`, cheaper per idle session than rmcp's worker per
//! session). It also checks `Host`
//! (loopback names while listening on loopback), `Origin` (loopback origins and
//! `--allow-origin`) and the body size (`--max-line-bytes`, 413). Around it: the identity of
//! each request (`http/auth.rs`, `http/tokens.rs`), which owns its session's tasks
//! (`http/identities.rs`), and the accept loop that bounds connections and times out slow
//! headers and idle connections (`http/listen.rs`). The flags and the refusal to listen beyond
//! loopback without tokens are in `http/options.rs`. Malformed JSON-RPC bodies are answered as
//! on stdio, and slow bodies time out (`http/screen.rs`); an `initialize` past `--max-sessions`
//! is refused (`http/session_cap.rs`). `--tls-cert`/`--tls-key` serve HTTPS
//! with rustls (`http/tls.rs`).

mod auth;
mod identities;
mod listen;
mod options;
mod screen;
mod session_cap;
mod session_streams;
mod session_table;
mod tls;
mod tokens;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::flags::RuntimeFlags;
use crate::http::auth::Auth;
use crate::http::identities::{Connection, Identities};
use crate::http::listen::ConnectionLimits;
use crate::http::session_table::SessionTable;
use crate::http::tokens::Tokens;
use crate::mcp::{DshServer, SessionSettings, mcp_tools};
use crate::signals;

pub use crate::http::options::ServeOptions;

/// Serves until SIGINT or SIGTERM, then kills every identity's tasks.
pub async fn main(flags: RuntimeFlags, options: ServeOptions) -> Result<i32, String> {
    options.check().map_err(|err| err.to_string())?;
    let auth = match &options.auth_tokens {
        Some(path) => Auth::Tokens(Arc::new(Tokens::load(path).map_err(|e| e.to_string())?)),
        None => Auth::Off,
    };
    let tls = match (&options.tls_cert, &options.tls_key) {
        (Some(cert), Some(key)) => Some(tls::acceptor(cert, key).map_err(|e| e.to_string())?),
        _ => None,
    };
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|err| format!("--listen {}: {err}", options.listen))?;
    let (mut interrupts, runtime) = flags.start_interruptible()?;
    let settings = SessionSettings {
        max_in_flight: options.max_in_flight,
        max_finished_tasks: flags.max_finished_tasks,
        progress_interval: Duration::from_millis(options.progress_interval_ms),
        roots_timeout: Duration::from_millis(options.roots_timeout_ms),
        cwd_settled: flags.cwd.is_some(),
    };
    let identities = Identities::new(
        runtime.clone(),
        settings,
        Duration::from_millis(options.task_after_ms),
        Duration::from_millis(options.identity_idle_ms),
    );
    let sweeper = actix::spawn(identities.clone().sweep());
    let stop = CancellationToken::new();
    let mut config = StreamableHttpServerConfig::default()
        .with_allowed_origins(options.origins())
        .enforce_origin_validation()
        .with_max_request_body_bytes(options.max_line_bytes)
        .with_cancellation_token(stop.clone());
    if !options.listen.ip().is_loopback() {
        // Reached by other names than loopback ones; the tokens keep strangers out.
        config = config.disable_allowed_hosts();
    }
    let tools = Arc::new(mcp_tools(&runtime));
    let manager = Arc::new(SessionTable::default());
    let cap = Arc::new(session_cap::SessionCap {
        manager: manager.clone(),
        max: options.max_sessions,
    });
    let mcp = StreamableHttpService::new(
        move || {
            Ok(DshServer {
                tools: tools.clone(),
                sessions: Arc::new(Connection::new(identities.clone())),
            })
        },
        manager,
        config,
    );
    let router = Router::new()
        .nest_service("/mcp", mcp)
        .layer(axum::middleware::from_fn_with_state(
            cap,
            session_cap::cap_sessions,
        ))
        // Runs after the auth layer (the outer one): a stranger gets 401, never a parse error.
        .layer(axum::middleware::from_fn_with_state(
            screen::BodyLimits {
                max_bytes: options.max_line_bytes,
                timeout: Duration::from_millis(options.header_timeout_ms),
            },
            screen::screen_body,
        ))
        .layer(axum::middleware::from_fn_with_state(
            auth.clone(),
            auth::authenticate,
        ))
        .route("/healthz", get(|| async { "ok\n" }));
    let limits = ConnectionLimits {
        max_connections: options.max_connections,
        header_timeout: Duration::from_millis(options.header_timeout_ms),
    };
    let address = listener.local_addr().map_err(|err| err.to_string())?;
    let auth_state = match auth {
        Auth::Off => "off (every client is the identity `local`)",
        Auth::Tokens(_) => "on (bearer tokens)",
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    eprintln!("dsh serve: MCP at {scheme}://{address}/mcp; auth {auth_state}");
    tokio::select! {
        () = listen::serve(listener, router, limits, tls) => {}
        () = interrupts.next() => tracing::info!("interrupted; shutting down"),
    }
    stop.cancel();
    sweeper.abort();
    signals::shutdown(&runtime, &mut interrupts).await;
    Ok(0)
}
