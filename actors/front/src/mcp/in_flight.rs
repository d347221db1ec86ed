//! The `tools/call` requests `dsh mcp` has handed to rmcp and not yet seen end, by id: what
//! `--max-in-flight` counts (`flow.rs`).
//!
//! rmcp starts a handler for every request it reads, at once and without limit, so the count is
//! kept around it: the input side adds a request's id when it forwards the line, and [`Counted`],
//! the service rmcp runs, removes it when rmcp's handling of that request is over — answered,
//! refused before the tool handler (a `_meta` rmcp does not accept), or cancelled (rmcp then sends
//! no response, so the end of the handling is the only sign of it).
//!
//! Every forwarded `tools/call` has first been parsed as rmcp parses it (`mcp/jsonrpc_errors.rs`), so
//! rmcp hands every one to the service and none stays counted for ever; and an id is counted once:
//! a `tools/call` whose id is still in flight is refused before it is forwarded.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use dsh::actors::process::lock_unpoisoned;
use rmcp::model::{
    ClientNotification, ClientRequest, NumberOrString, ProtocolVersion, RequestId, ServerConfig,
    ServerResult,
};
use rmcp::service::{MaybeSendFuture, NotificationContext, RequestContext, Service};
use rmcp::{ErrorData, RoleServer};
use serde_json::Value;
use tokio::sync::Notify;

/// A request id as rmcp sees it: an integer or a string.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RequestKey {
    /// An integer id.
    Number(i64),
    /// A string id.
    Text(String),
}

impl RequestKey {
    /// The key of a JSON id; `None` for ids rmcp does not accept (not an `i64` or a string).
    pub fn from_json(id: &Value) -> Option<Self> {
        match id {
            Value::Number(n) => n.as_i64().map(RequestKey::Number),
            Value::String(s) => Some(RequestKey::Text(s.clone())),
            _ => None,
        }
    }

    /// The id as JSON text.
    pub fn to_json(&self) -> String {
        match self {
            RequestKey::Number(n) => n.to_string(),
            RequestKey::Text(s) => Value::String(s.clone()).to_string(),
        }
    }

    /// The key of an id rmcp hands the service.
    fn from_request_id(id: &RequestId) -> Self {
        match id {
            NumberOrString::Number(n) => RequestKey::Number(*n),
            NumberOrString::String(s) => RequestKey::Text(s.to_string()),
        }
    }
}

/// The ids of the `tools/call` requests in flight.
#[derive(Default)]
pub struct InFlight {
    ids: Mutex<HashSet<RequestKey>>,
    /// Woken whenever one ends, for the input side waiting to forward a held request.
    ended: Notify,
}

impl InFlight {
    /// How many are in flight.
    pub fn len(&self) -> usize {
        lock_unpoisoned(&self.ids).len()
    }

    /// Whether `key` is in flight.
    pub fn contains(&self, key: &RequestKey) -> bool {
        lock_unpoisoned(&self.ids).contains(key)
    }

    /// `key` is forwarded to rmcp.
    pub fn begin(&self, key: RequestKey) {
        lock_unpoisoned(&self.ids).insert(key);
    }

    /// The request `key` has ended (a no-op once it has).
    pub fn end(&self, key: &RequestKey) {
        if lock_unpoisoned(&self.ids).remove(key) {
            // `notify_one` keeps the wake-up when the input side is not waiting yet.
            self.ended.notify_one();
        }
    }

    /// Waits until some request has ended since the last wait.
    pub async fn ended(&self) {
        self.ended.notified().await;
    }
}

/// Held while rmcp handles one `tools/call`: the request leaves [`InFlight`] when the handling
/// returns or is dropped.
struct Running<'a> {
    in_flight: &'a InFlight,
    key: RequestKey,
}

impl<'a> Running<'a> {
    fn new(in_flight: &'a InFlight, id: &RequestId) -> Self {
        Self {
            in_flight,
            key: RequestKey::from_request_id(id),
        }
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.in_flight.end(&self.key);
    }
}

/// The MCP service with each `tools/call`'s handling counted: what rmcp serves.
pub struct Counted<S> {
    /// The server itself.
    pub inner: S,
    /// Where the input side counted the request.
    pub in_flight: Arc<InFlight>,
}

impl<S: Service<RoleServer>> Service<RoleServer> for Counted<S> {
    fn handle_request(
        &self,
        request: ClientRequest,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<ServerResult, ErrorData>> + MaybeSendFuture + '_ {
        let running = matches!(request, ClientRequest::CallToolRequest(_))
            .then(|| Running::new(&self.in_flight, &context.id));
        async move {
            let _running = running;
            self.inner.handle_request(request, context).await
        }
    }

    fn handle_notification(
        &self,
        notification: ClientNotification,
        context: NotificationContext<RoleServer>,
    ) -> impl Future<Output = Result<(), ErrorData>> + MaybeSendFuture + '_ {
        self.inner.handle_notification(notification, context)
    }

    fn get_info(&self) -> ServerConfig {
        self.inner.get_info()
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        self.inner.supported_protocol_versions()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_request_leaves_once_whichever_end_is_seen_first() {
        let in_flight = InFlight::default();
        let id = RequestId::Number(7);
        in_flight.begin(RequestKey::from_json(&Value::from(7)).unwrap());
        in_flight.begin(RequestKey::from_json(&Value::from("a")).unwrap());
        assert_eq!(in_flight.len(), 2);
        drop(Running::new(&in_flight, &id));
        in_flight.ended().await;
        in_flight.end(&RequestKey::Number(7));
        assert_eq!(in_flight.len(), 1);
        assert!(in_flight.contains(&RequestKey::Text("a".into())));
        assert_eq!(RequestKey::from_json(&Value::from(1.5)), None);
    }
}
