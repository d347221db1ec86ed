//! One MCP session's state in `dsh serve`'s session table (`http/session_table.rs`): the client's
//! messages waiting for the session's handler, the SSE streams open to the client, which stream each
//! server message goes to, and the events kept for a `Last-Event-ID` resume.
//!
//! It is plain data under the table's lock, touched by the HTTP requests and by the handler's
//! sends, so a session needs no task and no channel of its own between requests: an idle session
//! holds this struct, empty. (rmcp's `LocalSessionManager` ran a worker task per session with five
//! tokio channels, each a first block of 32 slots of ~500-byte messages; that was most of an idle
//! session's ~60 KiB.) A stream is a small channel of SSE events that lives while its request does.
//!
//! Routing follows rmcp's session worker: a response or error goes to the stream of the request it
//! answers and ends it; a progress notification to the stream of its progress token; a
//! cancellation to the stream of the request it names; a server request raised while handling a
//! client request (rmcp's `OriginatingRequestId`) to that request's stream; everything else to the
//! standalone (GET) stream, whose last events are kept for the next GET to replay. One difference:
//! rmcp kept a stream its client cancelled for a minute, for a resume; here it ends at once, like
//! the stream of an answered request (in both, a resume of an ended stream gets an empty stream).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, GetExtensions, GetMeta, JsonRpcMessage,
    ProgressToken, RequestId, ServerJsonRpcMessage, ServerNotification,
};
use rmcp::service::OriginatingRequestId;
use rmcp::transport::streamable_http_server::session::ServerSseMessage;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::mpsc::{Receiver, Sender, channel};
use tokio::sync::oneshot;

/// Events a stream's channel holds, and the most it keeps for a resume (rmcp's default).
pub const STREAM_CAPACITY: usize = 16;
/// The most idle standalone streams beside the live one (kept open by SSE keep-alive only).
const MAX_SHADOWS: usize = 32;

/// What a client request's stream is known by.
#[derive(Clone, PartialEq, Eq, Hash)]
enum Key {
    Request(RequestId),
    Progress(ProgressToken),
}

/// A resume the session cannot serve.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    /// The `Last-Event-ID` is not one this server writes.
    #[error("invalid Last-Event-ID {0:?}")]
    BadEventId(String),
    /// The request's stream has ended (its answer was sent) or never existed.
    #[error("the stream of Last-Event-ID {0:?} has ended")]
    Ended(String),
}

/// An event that did not fit its stream's channel: the caller sends it when there is room.
pub type Overflow = (Sender<ServerSseMessage>, ServerSseMessage);

/// One SSE stream: where its events go and the last ones, for a resume.
struct Stream {
    /// The listening client's channel; `None` or closed while nobody listens.
    tx: Option<Sender<ServerSseMessage>>,
    /// The last [`STREAM_CAPACITY`] events and their indexes.
    kept: VecDeque<(usize, ServerSseMessage)>,
    next_index: usize,
    /// The HTTP request it answers (event ids `<index>/<request>`); `None` for the standalone one.
    request: Option<u64>,
    keys: Vec<Key>,
}

impl Stream {
    fn new(request: Option<u64>, first_index: usize) -> Self {
        Self {
            tx: None,
            kept: VecDeque::new(),
            next_index: first_index,
            request,
            keys: Vec::new(),
        }
    }

    fn event_id(&self, index: usize) -> String {
        match self.request {
            Some(request) => format!("{index}/{request}"),
            None => index.to_string(),
        }
    }

    /// Numbers `message`, keeps it, and hands it to the listener if there is one.
    fn push(&mut self, message: Option<ServerJsonRpcMessage>, retry: Duration) -> Option<Overflow> {
        let index = self.next_index;
        self.next_index += 1;
        let id = self.event_id(index);
        let event = match message {
            Some(message) => ServerSseMessage::new(id, message),
            None => ServerSseMessage::priming(id, retry),
        };
        if self.kept.len() == STREAM_CAPACITY {
            self.kept.pop_front();
        }
        self.kept.push_back((index, event.clone()));
        let tx = self.tx.as_ref()?;
        match tx.try_send(event) {
            Ok(()) | Err(TrySendError::Closed(_)) => None,
            Err(TrySendError::Full(event)) => Some((tx.clone(), event)),
        }
    }

    /// A new listener, given the kept events after `after` (all of them if `None`).
    fn listen(&mut self, after: Option<usize>) -> Receiver<ServerSseMessage> {
        let (tx, rx) = channel(STREAM_CAPACITY);
        for (index, event) in &self.kept {
            if after.is_none_or(|after| *index > after) {
                // The channel holds as many as are kept: this never fails.
                let _ = tx.try_send(event.clone());
            }
        }
        self.tx = Some(tx);
        rx
    }

    fn listening(&self) -> bool {
        self.tx.as_ref().is_some_and(|tx| !tx.is_closed())
    }
}

/// One session's state.
pub struct SessionStreams {
    /// Client messages not yet taken by the handler.
    inbox: VecDeque<ClientJsonRpcMessage>,
    /// Where the answer to `initialize` goes while it is awaited.
    init: Option<oneshot::Sender<ServerJsonRpcMessage>>,
    next_request: u64,
    /// The open streams of client requests, by HTTP request.
    open: HashMap<u64, Stream>,
    /// Which open stream a request id or progress token belongs to.
    keys: HashMap<Key, u64>,
    standalone: Stream,
    shadows: Vec<Sender<ServerSseMessage>>,
    /// The SSE `retry` of each request stream's priming event, if any.
    retry: Option<Duration>,
    /// The last message in or out (the session's keep-alive counts from it).
    pub last_active: Instant,
    /// Closed: the handler gets no more messages and no stream opens.
    pub closed: bool,
}

impl SessionStreams {
    /// An empty session; request streams begin with a priming event carrying `retry` if given.
    pub fn new(retry: Option<Duration>) -> Self {
        Self {
            inbox: VecDeque::new(),
            init: None,
            next_request: 0,
            open: HashMap::new(),
            keys: HashMap::new(),
            standalone: Stream::new(None, 1),
            shadows: Vec::new(),
            retry,
            last_active: Instant::now(),
            closed: false,
        }
    }

    /// The next client message for the handler.
    pub fn take_inbound(&mut self) -> Option<ClientJsonRpcMessage> {
        let message = self.inbox.pop_front();
        if self.inbox.is_empty() {
            // An idle session keeps no buffer (a slot is ~500 bytes).
            self.inbox = VecDeque::new();
        }
        message
    }

    /// `initialize`, whose answer goes to `answer` instead of a stream.
    pub fn initialize(
        &mut self,
        message: ClientJsonRpcMessage,
        answer: oneshot::Sender<ServerJsonRpcMessage>,
    ) {
        self.init = Some(answer);
        self.inbox.push_back(message);
    }

    /// A client request with a stream of its own for what answers it.
    pub fn request(&mut self, mut message: ClientJsonRpcMessage) -> Receiver<ServerSseMessage> {
        let request = self.next_request;
        self.next_request = self.next_request.wrapping_add(1);
        let mut stream = Stream::new(Some(request), 0);
        let rx = stream.listen(None);
        if let Some(retry) = self.retry {
            // The priming event: an id to resume from before the answer's.
            let _ = stream.push(None, retry);
        }
        if let JsonRpcMessage::Request(call) = &mut message {
            stream.keys.push(Key::Request(call.id.clone()));
            if let Some(token) = call.request.get_meta().get_progress_token() {
                stream.keys.push(Key::Progress(token));
            }
            for key in &stream.keys {
                self.keys.insert(key.clone(), request);
            }
        }
        self.open.insert(request, stream);
        self.inbox.push_back(message);
        rx
    }

    /// A client notification, response or error; a cancellation ends its request's stream.
    pub fn accept(&mut self, message: ClientJsonRpcMessage) {
        if let JsonRpcMessage::Notification(notification) = &message
            && let ClientNotification::CancelledNotification(cancelled) = &notification.notification
            && let Some(id) = &cancelled.params.request_id
            && let Some(&request) = self.keys.get(&Key::Request(id.clone()))
        {
            self.end(request);
        }
        self.inbox.push_back(message);
    }

    /// Routes a message of the handler; an event that did not fit its channel comes back.
    pub fn send(&mut self, message: ServerJsonRpcMessage) -> Option<Overflow> {
        if self.init.is_some()
            && matches!(
                message,
                JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_)
            )
        {
            if let Some(answer) = self.init.take() {
                let _ = answer.send(message);
            }
            return None;
        }
        let (key, ends) = route(&message);
        let retry = self.retry.unwrap_or_default();
        match key.and_then(|key| self.keys.get(&key).copied()) {
            Some(request) => {
                let stream = self.open.get_mut(&request)?;
                let overflow = stream.push(Some(message), retry);
                if ends {
                    self.end(request);
                }
                overflow
            }
            None => self.standalone.push(Some(message), retry),
        }
    }

    /// Ends a request's stream: its listener sees the end once it has read what was sent.
    fn end(&mut self, request: u64) {
        if let Some(stream) = self.open.remove(&request) {
            for key in &stream.keys {
                self.keys.remove(key);
            }
        }
        if self.open.is_empty() {
            // Free the tables an idle session would otherwise keep.
            self.open = HashMap::new();
            self.keys = HashMap::new();
        }
    }

    /// A new listener for the standalone stream: the live one if none listens (with the kept
    /// events after `after`, or all), else a shadow that only keeps its connection alive.
    pub fn listen_standalone(&mut self, after: Option<usize>) -> Receiver<ServerSseMessage> {
        if !self.standalone.listening() {
            return self.standalone.listen(after);
        }
        self.shadows.retain(|tx| !tx.is_closed());
        if self.shadows.len() >= MAX_SHADOWS {
            self.shadows.remove(0);
        }
        let (tx, rx) = channel(1);
        self.shadows.push(tx);
        rx
    }

    /// A resume from `last_event_id`: the rest of a request's stream, or of the standalone one.
    pub fn resume(
        &mut self,
        last_event_id: &str,
    ) -> Result<Receiver<ServerSseMessage>, ResumeError> {
        let bad = || ResumeError::BadEventId(last_event_id.to_owned());
        match last_event_id.split_once('/') {
            Some((index, request)) => {
                let index: usize = index.parse().map_err(|_| bad())?;
                let request: u64 = request.parse().map_err(|_| bad())?;
                let stream = self
                    .open
                    .get_mut(&request)
                    .ok_or_else(|| ResumeError::Ended(last_event_id.to_owned()))?;
                Ok(stream.listen(Some(index)))
            }
            None => {
                let index: usize = last_event_id.parse().map_err(|_| bad())?;
                Ok(self.listen_standalone(Some(index)))
            }
        }
    }

    /// Closes the session: every stream ends and the handler's next read finds none.
    pub fn close(&mut self) {
        self.closed = true;
        self.inbox = VecDeque::new();
        self.init = None;
        self.open = HashMap::new();
        self.keys = HashMap::new();
        self.standalone = Stream::new(None, 1);
        self.shadows = Vec::new();
    }
}

/// The stream key a server message belongs to, and whether it ends that stream.
fn route(message: &ServerJsonRpcMessage) -> (Option<Key>, bool) {
    match message {
        JsonRpcMessage::Request(request) => {
            let originating = request.request.extensions().get::<OriginatingRequestId>();
            (originating.map(|id| Key::Request(id.0.clone())), false)
        }
        JsonRpcMessage::Notification(notification) => match &notification.notification {
            ServerNotification::ProgressNotification(progress) => (
                Some(Key::Progress(progress.params.progress_token.clone())),
                false,
            ),
            ServerNotification::CancelledNotification(cancelled) => {
                (cancelled.params.request_id.clone().map(Key::Request), false)
            }
            _ => (None, false),
        },
        JsonRpcMessage::Response(response) => (Some(Key::Request(response.id.clone())), true),
        JsonRpcMessage::Error(error) => (error.id.clone().map(Key::Request), true),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};
    use tokio::sync::mpsc::error::TryRecvError;

    use super::*;

    fn client(message: Value) -> ClientJsonRpcMessage {
        serde_json::from_value(message).unwrap()
    }

    fn server(message: Value) -> ServerJsonRpcMessage {
        serde_json::from_value(message).unwrap()
    }

    fn call(id: u64, token: Option<&str>) -> ClientJsonRpcMessage {
        let mut params = json!({"name": "bash", "arguments": {}});
        if let Some(token) = token {
            params["_meta"] = json!({"progressToken": token});
        }
        client(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}))
    }

    fn progress(token: &str) -> ServerJsonRpcMessage {
        server(json!({"jsonrpc": "2.0", "method": "notifications/progress",
            "params": {"progressToken": token, "progress": 1}}))
    }

    /// The event ids on `rx` until it is empty, and whether it has ended.
    fn drain(rx: &mut Receiver<ServerSseMessage>) -> (Vec<String>, bool) {
        let mut ids = Vec::new();
        loop {
            match rx.try_recv() {
                Ok(event) => ids.push(event.event_id.unwrap_or_default()),
                Err(TryRecvError::Empty) => return (ids, false),
                Err(TryRecvError::Disconnected) => return (ids, true),
            }
        }
    }

    #[test]
    fn a_response_ends_its_stream_and_an_idle_session_keeps_no_table() {
        let mut session = SessionStreams::new(Some(Duration::from_secs(3)));
        let mut rx = session.request(call(1, Some("p")));
        assert!(session.take_inbound().is_some() && session.take_inbound().is_none());
        assert!(session.send(progress("p")).is_none());
        assert!(
            session
                .send(server(json!({"jsonrpc": "2.0", "id": 1, "result": {}})))
                .is_none()
        );
        assert_eq!(
            drain(&mut rx),
            (vec!["0/0".into(), "1/0".into(), "2/0".into()], true)
        );
        assert_eq!((session.open.capacity(), session.keys.capacity()), (0, 0));
        assert_eq!(session.inbox.capacity(), 0);
    }

    #[test]
    fn what_belongs_to_no_request_goes_to_the_standalone_stream_and_is_replayed() {
        let mut session = SessionStreams::new(None);
        let log = json!({"jsonrpc": "2.0", "method": "notifications/message",
            "params": {"level": "info", "data": "x"}});
        let _ = session.send(server(log.clone()));
        let _ = session.send(progress("nobody's"));
        let mut first = session.listen_standalone(None);
        assert_eq!(drain(&mut first), (vec!["1".into(), "2".into()], false));
        // While it listens, another GET is a shadow that gets nothing.
        let mut shadow = session.listen_standalone(None);
        let _ = session.send(server(log));
        assert_eq!(drain(&mut shadow).0, Vec::<String>::new());
        assert_eq!(drain(&mut first).0, vec!["3".to_owned()]);
        drop(first);
        let mut resumed = session.resume("2").unwrap();
        assert_eq!(drain(&mut resumed).0, vec!["3".to_owned()]);
    }

    #[test]
    fn a_resume_replays_what_came_after_and_a_cancellation_ends_the_stream() {
        let mut session = SessionStreams::new(Some(Duration::from_secs(3)));
        let rx = session.request(call(7, Some("t")));
        drop(rx);
        let _ = session.send(progress("t"));
        let _ = session.send(progress("t"));
        let mut resumed = session.resume("1/0").unwrap();
        assert_eq!(drain(&mut resumed), (vec!["2/0".into()], false));
        assert!(matches!(
            session.resume("x/0"),
            Err(ResumeError::BadEventId(_))
        ));
        session.accept(client(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 7}}),
        ));
        assert!(drain(&mut resumed).1, "the cancelled request's stream ends");
        assert!(matches!(session.resume("2/0"), Err(ResumeError::Ended(_))));
    }
}
