//! The identities `dsh serve` has seen, each with its MCP session, kept while it is connected
//! and for `--identity-idle-ms` after.
//!
//! An identity's session id is its name, so its background tasks belong to it, not to the
//! connection that started them: a later connection of the same identity reads and kills them,
//! another identity is refused (`task <id> belongs to another session`). A connection is one
//! handler rmcp made — an `Mcp-Session-Id` session (2025-11-25) until it closes or rmcp's
//! keep-alive ends it, or one stateless request (2026-07-28) while it runs — and holds its
//! identity's [`Held`] from its first request on. When an identity has had no holder for
//! `--identity-idle-ms`, a sweep releases its session (its tasks are killed and forgotten) and
//! drops it, so a vanished agent leaves nothing running for ever.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use actix::ArbiterHandle;
use dsh::Runtime;
use dsh::actors::process::lock_unpoisoned;
use rmcp::ErrorData;
use rmcp::model::Extensions;

use crate::http::tokens::Identity;
use crate::mcp::{Foreground, Session, SessionSettings, Sessions};

/// What a connection holds of its identity: while one exists, the identity is connected.
pub struct Held;

/// One identity's entry.
struct Entry {
    foreground: Foreground,
    held: Weak<Held>,
    /// Since when no connection holds it; `None` while one does (as last seen by a sweep).
    idle_since: Option<Instant>,
}

/// Where an identity is in its life here.
enum State {
    /// Its session serves its connections.
    Live(Entry),
    /// Idle too long: its session is being released. A request now is refused (a task it
    /// started could be killed by the release); once released, the identity starts afresh.
    Releasing,
}

/// The identities and their sessions.
pub struct Identities {
    runtime: Runtime,
    /// The actix thread's arbiter, where sessions' actors run.
    arbiter: ArbiterHandle,
    settings: SessionSettings,
    task_after: Duration,
    idle: Duration,
    live: Mutex<HashMap<Identity, State>>,
}

impl Identities {
    /// No identity yet; call on the actix thread.
    pub fn new(
        runtime: Runtime,
        settings: SessionSettings,
        task_after: Duration,
        idle: Duration,
    ) -> Arc<Self> {
        Arc::new(Self {
            runtime,
            arbiter: actix::Arbiter::current(),
            settings,
            task_after,
            idle,
            live: Mutex::default(),
        })
    }

    /// `identity`'s session, opened if it has none, and a hold on it; `None` while its session
    /// is being released.
    fn enter(&self, identity: &Identity) -> Option<(Foreground, Arc<Held>)> {
        let mut live = lock_unpoisoned(&self.live);
        let state = live.entry(identity.clone()).or_insert_with(|| {
            State::Live(Entry {
                foreground: Foreground {
                    session: Session::open(
                        &self.runtime,
                        &self.arbiter,
                        identity.0.clone(),
                        self.settings,
                    ),
                    progress_interval: self.settings.progress_interval,
                    task_after: self.task_after,
                },
                held: Weak::new(),
                idle_since: None,
            })
        });
        let State::Live(entry) = state else {
            return None;
        };
        let held = entry.held.upgrade().unwrap_or_else(|| {
            let held = Arc::new(Held);
            entry.held = Arc::downgrade(&held);
            held
        });
        entry.idle_since = None;
        Some((entry.foreground.clone(), held))
    }

    /// Marks releasing, and returns, the identities idle for `--identity-idle-ms`, and starts
    /// the clock of those that just lost their last connection.
    fn expired(&self, now: Instant) -> Vec<(Identity, Foreground)> {
        let mut live = lock_unpoisoned(&self.live);
        let mut expired = Vec::new();
        for (identity, state) in live.iter_mut() {
            let State::Live(entry) = state else {
                continue;
            };
            if entry.held.strong_count() > 0 {
                entry.idle_since = None;
                continue;
            }
            let since = *entry.idle_since.get_or_insert(now);
            if now.duration_since(since) >= self.idle {
                expired.push((identity.clone(), entry.foreground.clone()));
                *state = State::Releasing;
            }
        }
        expired
    }

    /// Sweeps for ever, a few times per `--identity-idle-ms`: every expired identity's session
    /// is released (its tasks killed, joined and forgotten).
    pub async fn sweep(self: Arc<Self>) {
        let tick = (self.idle / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
        loop {
            tokio::time::sleep(tick).await;
            for (identity, gone) in self.expired(Instant::now()) {
                tracing::info!(session = identity.0, "identity idle; releasing");
                gone.session.handle.release().await;
                lock_unpoisoned(&self.live).remove(&identity);
            }
        }
    }
}

/// A request that reached the handler without an identity (the auth layer always sets one).
const NO_IDENTITY: &str = "the request carries no identity";
/// A request whose token names another identity than the one its MCP session began with.
pub const OTHER_IDENTITY: &str = "this MCP session belongs to another identity";
/// A request of an identity whose idle session is being released right now.
pub const RELEASING: &str = "this identity was idle and its tasks are being released; retry";

/// One connection's view of the identities: bound to the identity of its first request.
pub struct Connection {
    identities: Arc<Identities>,
    bound: Mutex<Option<(Identity, Foreground, Arc<Held>)>>,
}

impl Connection {
    /// A connection not yet bound to an identity.
    pub fn new(identities: Arc<Identities>) -> Self {
        Self {
            identities,
            bound: Mutex::default(),
        }
    }
}

impl Sessions for Connection {
    fn of(&self, extensions: &Extensions) -> Result<Foreground, ErrorData> {
        let identity = extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Identity>())
            .ok_or_else(|| ErrorData::invalid_request(NO_IDENTITY, None))?;
        let mut bound = lock_unpoisoned(&self.bound);
        match &*bound {
            Some((owner, foreground, _)) if owner == identity => Ok(foreground.clone()),
            Some(_) => Err(ErrorData::invalid_request(OTHER_IDENTITY, None)),
            None => {
                let (foreground, held) = self
                    .identities
                    .enter(identity)
                    .ok_or_else(|| ErrorData::invalid_request(RELEASING, None))?;
                *bound = Some((identity.clone(), foreground.clone(), held));
                Ok(foreground)
            }
        }
    }
}
