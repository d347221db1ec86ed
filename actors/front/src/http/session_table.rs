//! `dsh serve`'s MCP session manager (2025-11-25 `Mcp-Session-Id` sessions), in place of rmcp's
//! `LocalSessionManager`, for what an idle session costs: rmcp's ran a worker task per session
//! between the HTTP side and the session's handler, with five tokio channels whose first blocks (32
//! slots of ~500-byte messages each) were allocated up front and touched slot by slot, ~34 KiB of an
//! idle session's ~66 KiB. Here a session is an entry in a table: its state
//! (`http/session_streams.rs`) under a lock, which the HTTP requests and the handler's sends update
//! directly, and a [`Notify`] that wakes the handler's read. The behaviour is rmcp's: the same
//! routing, event ids, priming events, `Last-Event-ID` resume, standalone and shadow streams, and a
//! session ends after five minutes without a message (rmcp's keep-alive) or on DELETE.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use dsh::actors::process::lock_unpoisoned;
use rmcp::RoleServer;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::common::server_side_http::session_id;
use rmcp::transport::streamable_http_server::session::local::SessionConfig;
use rmcp::transport::streamable_http_server::session::{
    ServerSseMessage, SessionId, SessionManager,
};
use tokio::sync::mpsc::Receiver;
use tokio::sync::{Notify, oneshot};

use crate::http::session_streams::{ResumeError, SessionStreams};

/// Why a session operation failed (rmcp answers the HTTP request 500 with this text, or, for a
/// resume, an empty stream).
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// No live session has this id.
    #[error("Session not found: {0}")]
    NotFound(SessionId),
    /// The session ended while the request was in it.
    #[error("Session closed: {0}")]
    Closed(SessionId),
    /// A `Last-Event-ID` the session cannot resume from.
    #[error(transparent)]
    Resume(#[from] ResumeError),
}

/// One session, shared by the table and the session's transport.
struct Shared {
    id: SessionId,
    state: Mutex<SessionStreams>,
    /// Wakes the handler's read when a client message arrives or the session closes.
    arrived: Notify,
}

impl Shared {
    fn close(&self) {
        lock_unpoisoned(&self.state).close();
        self.arrived.notify_one();
    }
}

/// The live sessions.
pub struct SessionTable {
    sessions: Mutex<HashMap<SessionId, Arc<Shared>>>,
    /// A session ends after this long without a message in or out.
    keep_alive: Duration,
    /// The SSE `retry` of each request stream's priming event.
    retry: Option<Duration>,
}

impl Default for SessionTable {
    fn default() -> Self {
        Self {
            sessions: Mutex::default(),
            keep_alive: SessionConfig::DEFAULT_KEEP_ALIVE,
            retry: Some(SessionConfig::DEFAULT_SSE_RETRY),
        }
    }
}

impl SessionTable {
    /// How many sessions live.
    pub fn len(&self) -> usize {
        lock_unpoisoned(&self.sessions).len()
    }

    fn get(&self, id: &SessionId) -> Result<Arc<Shared>, SessionError> {
        lock_unpoisoned(&self.sessions)
            .get(id)
            .cloned()
            .ok_or_else(|| SessionError::NotFound(id.clone()))
    }

    /// Runs `change` on session `id`'s open state, then wakes its handler.
    fn update<T>(
        &self,
        id: &SessionId,
        change: impl FnOnce(&mut SessionStreams) -> T,
    ) -> Result<T, SessionError> {
        let shared = self.get(id)?;
        let result = {
            let mut state = lock_unpoisoned(&shared.state);
            if state.closed {
                return Err(SessionError::Closed(id.clone()));
            }
            state.last_active = Instant::now();
            change(&mut state)
        };
        shared.arrived.notify_one();
        Ok(result)
    }
}

/// A stream's events as the `Stream` rmcp's HTTP side reads.
pub struct Events(Receiver<ServerSseMessage>);

impl futures::Stream for Events {
    type Item = ServerSseMessage;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

#[expect(
    refining_impl_trait,
    reason = "the streams are `Events`; rmcp reads them through the `Stream` bounds"
)]
impl SessionManager for SessionTable {
    type Error = SessionError;
    type Transport = SessionTransport;

    async fn create_session(&self) -> Result<(SessionId, SessionTransport), SessionError> {
        let id = session_id();
        let shared = Arc::new(Shared {
            id: id.clone(),
            state: Mutex::new(SessionStreams::new(self.retry)),
            arrived: Notify::new(),
        });
        lock_unpoisoned(&self.sessions).insert(id.clone(), shared.clone());
        let transport = SessionTransport {
            shared,
            keep_alive: self.keep_alive,
        };
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, SessionError> {
        let (answer, answered) = oneshot::channel();
        self.update(id, |state| state.initialize(message, answer))?;
        answered.await.map_err(|_| SessionError::Closed(id.clone()))
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, SessionError> {
        Ok(lock_unpoisoned(&self.sessions).contains_key(id))
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), SessionError> {
        let removed = lock_unpoisoned(&self.sessions).remove(id);
        if let Some(shared) = removed {
            shared.close();
        }
        Ok(())
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<Events, SessionError> {
        self.update(id, |state| Events(state.request(message)))
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), SessionError> {
        self.update(id, |state| state.accept(message))
    }

    async fn create_standalone_stream(&self, id: &SessionId) -> Result<Events, SessionError> {
        self.update(id, |state| Events(state.listen_standalone(None)))
    }

    async fn resume(&self, id: &SessionId, last_event_id: String) -> Result<Events, SessionError> {
        Ok(Events(
            self.update(id, |state| state.resume(&last_event_id))??,
        ))
    }
}

/// The session's side the handler (rmcp's service loop) reads from and sends to.
pub struct SessionTransport {
    shared: Arc<Shared>,
    keep_alive: Duration,
}

impl Transport<RoleServer> for SessionTransport {
    type Error = SessionError;

    fn send(
        &mut self,
        message: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), SessionError>> + Send + 'static {
        // Routed and numbered now, in the handler's order; only an event that finds its channel full
        // (a client 16 events behind) waits, and a later one may then pass it, as rmcp's sends,
        // each a task of the service's, could too.
        let routed = {
            let mut state = lock_unpoisoned(&self.shared.state);
            if state.closed {
                Err(SessionError::Closed(self.shared.id.clone()))
            } else {
                state.last_active = Instant::now();
                Ok(state.send(message))
            }
        };
        async move {
            if let Some((tx, event)) = routed? {
                let _ = tx.send(event).await;
            }
            Ok(())
        }
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            let idle_until = {
                let mut state = lock_unpoisoned(&self.shared.state);
                if state.closed {
                    return None;
                }
                if let Some(message) = state.take_inbound() {
                    return Some(message);
                }
                state.last_active + self.keep_alive
            };
            tokio::select! {
                () = self.shared.arrived.notified() => {}
                () = tokio::time::sleep_until(idle_until.into()) => {
                    let state = lock_unpoisoned(&self.shared.state);
                    if state.last_active.elapsed() >= self.keep_alive {
                        tracing::debug!(session = %self.shared.id, "MCP session idle; closing");
                        drop(state);
                        self.shared.close();
                        return None;
                    }
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), SessionError> {
        self.shared.close();
        Ok(())
    }
}

impl Drop for SessionTransport {
    fn drop(&mut self) {
        self.shared.close();
    }
}
