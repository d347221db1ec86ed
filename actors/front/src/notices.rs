//! An agent stand-in for a front end: an actor whose mailbox receives the completion notices of one
//! session and hands each to a callback (write a JSON line, queue it for the next MCP result, …),
//! the inbox of a [`dsh::Session`].

use actix::prelude::*;
use dsh::Inject;
#[cfg(doc)]
use dsh::Runtime;

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

/// An inbox whose notices go to `forward`, for [`Runtime::session`]. The forwarder lives as long
/// as the returned recipient (and its clones).
pub fn forwarder(forward: impl FnMut(String) + 'static) -> Recipient<Inject> {
    NoticeForwarder {
        forward: Box::new(forward),
    }
    .start()
    .recipient()
}

/// [`forwarder`] for a caller off the actix thread: the forwarder is started on `arbiter`.
pub fn forwarder_in(
    arbiter: &ArbiterHandle,
    forward: impl FnMut(String) + Send + 'static,
) -> Recipient<Inject> {
    NoticeForwarder::start_in_arbiter(arbiter, move |_| NoticeForwarder {
        forward: Box::new(forward),
    })
    .recipient()
}
