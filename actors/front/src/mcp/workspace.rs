//! The session's workspace from the client's roots, kept apart from the server so both protocol
//! lifecycles share one published answer.
//!
//! Without `--cwd`, the first usable `file://` root is the workspace (`mcp/roots.rs`). A
//! handshake-era session (`initialize`, up to 2025-11-25) is asked with `roots/list` at
//! `initialized` and again on `notifications/roots/list_changed`. A 2026-07-28 session has no
//! server-to-client requests: its first `tools/call`, and the first after a list-changed
//! notification, answers with a `roots/list` input request (`mcp/input_rounds.rs`), and the retried
//! call carries the roots, applied here before the call runs. Either way the sandbox's writable
//! workspace and the published one change together.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh::actors::process::lock_unpoisoned;
use rmcp::RoleServer;
use rmcp::service::Peer;
use serde_json::Value;
use tokio::sync::watch;

use crate::mcp::roots::{file_uri_path, usable_root};

/// Where a 2026-07-28 session's roots stand: they are asked for through an input round until the
/// client has answered one, and again after it said they changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum InlineRoots {
    /// Never asked.
    Unasked,
    /// The client's answer is applied.
    Current,
    /// The client said they changed since.
    Changed,
}

/// The workspace of one connection.
pub struct Workspace {
    /// The runtime's handle on this connection's session.
    session: dsh::Session,
    /// No `--cwd`: the workspace comes from the client's roots.
    uses_roots: bool,
    /// How long a call waits for the client's roots.
    timeout: Duration,
    /// `None` while the client's roots are being asked for; then the workspace root, if any.
    published: watch::Receiver<Option<Option<PathBuf>>>,
    publish: Arc<watch::Sender<Option<Option<PathBuf>>>>,
    /// The roots were asked for (at `initialized`, or at the first call of a session without one).
    requested: AtomicBool,
    /// How many times the roots were asked for; each answer is numbered by the request it answers.
    asked: AtomicU64,
    /// The number of the answer applied last. Held while an answer is applied, so the sandbox's
    /// workspace and the published one change together, and an older answer that arrives after a
    /// newer one is dropped.
    applied: Arc<tokio::sync::Mutex<u64>>,
    /// A 2026-07-28 session's roots.
    inline: Mutex<InlineRoots>,
}

impl Workspace {
    /// `settled`: `--cwd` was given, so the roots are never asked for.
    pub fn new(session: dsh::Session, settled: bool, timeout: Duration) -> Self {
        let (publish, published) = watch::channel(settled.then_some(None));
        Self {
            session,
            uses_roots: !settled,
            timeout,
            published,
            publish: Arc::new(publish),
            requested: AtomicBool::new(false),
            asked: AtomicU64::new(0),
            applied: Arc::default(),
            inline: Mutex::new(InlineRoots::Unasked),
        }
    }

    /// Handshake era: asks for the roots once per session, if they decide the workspace.
    pub fn ensure(&self, peer: &Peer<RoleServer>) {
        if self.uses_roots && !self.requested.swap(true, Ordering::SeqCst) {
            self.refresh(peer.clone());
        }
    }

    /// The client said its roots changed: a handshake-era session is asked again now, a
    /// 2026-07-28 one at its next call.
    pub fn changed(&self, peer: Peer<RoleServer>) {
        if !self.uses_roots {
            return;
        }
        if peer.peer_info().is_some() {
            self.refresh(peer);
        } else {
            let mut inline = lock_unpoisoned(&self.inline);
            if *inline == InlineRoots::Current {
                *inline = InlineRoots::Changed;
            }
        }
    }

    /// 2026-07-28: whether this call must first ask for the roots. A client that does not offer
    /// roots runs in the server's own directory, as a handshake-era one does.
    pub fn needs_round(&self, offers_roots: bool) -> bool {
        if !self.uses_roots {
            return false;
        }
        if !offers_roots {
            self.publish.send_if_modified(|published| {
                let unset = published.is_none();
                if unset {
                    *published = Some(None);
                }
                unset
            });
            return false;
        }
        *lock_unpoisoned(&self.inline) != InlineRoots::Current
    }

    /// 2026-07-28: applies the client's answer to a `roots/list` input request (a
    /// `ListRootsResult`; anything else is no root) before the call runs.
    pub async fn apply_listed(&self, answer: &Value) {
        if !self.uses_roots {
            return;
        }
        let root = answer
            .get("roots")
            .and_then(Value::as_array)
            .and_then(|roots| {
                roots
                    .iter()
                    .filter_map(|r| r.get("uri").and_then(Value::as_str))
                    .find_map(file_uri_path)
            });
        if root.is_none() {
            tracing::info!("the client's roots answer names no file:// root");
        }
        *lock_unpoisoned(&self.inline) = InlineRoots::Current;
        let asked = self.asked.fetch_add(1, Ordering::SeqCst) + 1;
        let root = root.as_deref().and_then(usable_root);
        apply(&self.session, &self.publish, &self.applied, asked, root).await;
    }

    /// The workspace root, waiting (bounded) for the client's answer to `roots/list`.
    pub async fn current(&self) -> Option<PathBuf> {
        let mut published = self.published.clone();
        let ready = tokio::time::timeout(self.timeout, published.wait_for(Option::is_some)).await;
        match ready {
            Ok(Ok(root)) => root.clone().flatten(),
            Ok(Err(_)) => None,
            Err(_) => {
                tracing::info!(
                    timeout_ms = self.timeout.as_millis(),
                    "no answer to roots/list in time (--roots-timeout-ms); this call runs without a client root"
                );
                None
            }
        }
    }

    /// Handshake era: asks the client for its roots (when it has any) and publishes the first
    /// `file://` one.
    #[allow(deprecated, reason = "roots are how MCP clients name the workspace")]
    fn refresh(&self, peer: Peer<RoleServer>) {
        let offers_roots = peer
            .peer_info()
            .is_some_and(|info| info.capabilities.roots.is_some());
        if !offers_roots {
            self.publish.send_replace(Some(None));
            return;
        }
        let asked = self.asked.fetch_add(1, Ordering::SeqCst) + 1;
        let (session, publish, applied) = (
            self.session.clone(),
            self.publish.clone(),
            self.applied.clone(),
        );
        let timeout = self.timeout;
        tokio::spawn(async move {
            let listed = tokio::time::timeout(timeout, peer.list_roots()).await;
            let root = match listed {
                Ok(Ok(result)) => result.roots.iter().find_map(|r| file_uri_path(&r.uri)),
                Ok(Err(err)) => {
                    tracing::info!(%err, "the client did not list its roots");
                    None
                }
                Err(_) => {
                    tracing::info!("the client did not answer roots/list in time");
                    None
                }
            };
            let root = root.as_deref().and_then(usable_root);
            apply(&session, &publish, &applied, asked, root).await;
        });
    }
}

/// Applies answer number `asked`, unless a newer one was applied first.
async fn apply(
    session: &dsh::Session,
    publish: &watch::Sender<Option<Option<PathBuf>>>,
    applied: &tokio::sync::Mutex<u64>,
    asked: u64,
    root: Option<PathBuf>,
) {
    let mut applied = applied.lock().await;
    if *applied > asked {
        tracing::info!(?root, "an older roots answer arrived late; dropped");
        return;
    }
    *applied = asked;
    tracing::info!(?root, "workspace from the client's roots");
    // The sandbox's writable workspace follows (or falls back to the server's own when the roots
    // went away), before any call is let through.
    if let Err(err) = session.set_workspace(root.clone()).await {
        tracing::warn!(%err, "cannot set the session's sandbox workspace");
    }
    publish.send_replace(Some(root));
}
