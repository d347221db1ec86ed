//! An agent stand-in for a front end: an actor whose mailbox receives the completion notices of one
//! session and hands each to a callback (write a JSON line, queue it for the next MCP result, …).

use actix::prelude::*;
use dsh::{AgentRef, Inject};

/// Receives a session's notices.
pub struct NoticeForwarder {
    forward: Box<dyn FnMut(String)>,
}

impl Actor for NoticeForwarder {
    type Context = Context<Self>;
}

impl Handler<Inject> for NoticeForwarder {
    type Result = ();

    fn handle(&mut self, notice: Inject, _: &mut Self::Context) {
        (self.forward)(notice.text);
    }
}

/// An agent for `session_id` whose notices go to `forward`. The forwarder lives as long as the returned
/// reference (and its clones).
pub fn session_agent(session_id: String, forward: impl FnMut(String) + 'static) -> AgentRef {
    let addr = NoticeForwarder {
        forward: Box::new(forward),
    }
    .start();
    AgentRef::new(session_id, addr.recipient())
}
