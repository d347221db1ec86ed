//! Stand-in actors for the tests of every layer: an agent that keeps (or drops) what it is sent, and
//! an approver that answers every question the same way.
//!
//! They are generic over the message, so this module names no dsh type and needs no dsh crate: the
//! task registry's tests use `Recorder<Inject>` with the `Inject` of the `dsh-tasks` they test, the
//! tool's tests `Answerer<ApprovalRequest>` with the tool's own request, and no test reaches a second
//! copy of a type through a crate above it.

use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use actix::dev::MessageResponse;
use actix::prelude::*;

/// What a [`Recorder`] kept, in arrival order (an [`Answerer`]'s questions likewise).
pub type Log<M> = Arc<Mutex<Vec<M>>>;

/// An actor that keeps every `M` it is sent in a [`Log`], or drops each one
/// ([`Recorder::start_discarding`]: for a test that must not count what it keeps). A [`Stop`]
/// stops it, which closes its mailbox (an agent that is gone).
pub struct Recorder<M> {
    log: Option<Log<M>>,
}

impl<M> Recorder<M>
where
    M: Message<Result = ()> + Send + Unpin + 'static,
{
    /// Starts a recorder in the current system; the log fills as messages arrive.
    pub fn start() -> (Addr<Self>, Log<M>) {
        let log = Log::default();
        let addr = Actor::start(Self {
            log: Some(log.clone()),
        });
        (addr, log)
    }

    /// Starts a recorder that drops every message.
    pub fn start_discarding() -> Addr<Self> {
        Actor::start(Self { log: None })
    }
}

impl<M: Unpin + 'static> Actor for Recorder<M> {
    type Context = Context<Self>;
}

impl<M> Handler<M> for Recorder<M>
where
    M: Message<Result = ()> + Unpin + 'static,
{
    type Result = ();
    fn handle(&mut self, message: M, _: &mut Self::Context) {
        if let Some(log) = &self.log {
            log.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(message);
        }
    }
}

/// Stops a [`Recorder`] of `M`s. Generic over `M` so that it can never be the message a recorder
/// records (its two handlers would overlap).
pub struct Stop<M>(PhantomData<fn() -> M>);

impl<M> Stop<M> {
    /// The message.
    pub fn new() -> Self {
        Self(PhantomData)
    }
}

impl<M> Default for Stop<M> {
    fn default() -> Self {
        Self::new()
    }
}

impl<M> Message for Stop<M> {
    type Result = ();
}

impl<M> Handler<Stop<M>> for Recorder<M>
where
    M: Message<Result = ()> + Unpin + 'static,
{
    type Result = ();
    fn handle(&mut self, _: Stop<M>, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

/// An actor that answers every question `Q` with the same answer and keeps the questions; it can
/// also act at the moment a question arrives (to cancel the call that asked, say).
pub struct Answerer<Q: Message> {
    answer: Q::Result,
    asked: Log<Q>,
    on_ask: Option<Box<dyn FnMut()>>,
}

impl<Q> Answerer<Q>
where
    Q: Message + Send + Unpin + 'static,
    Q::Result: Clone + Unpin + MessageResponse<Self, Q>,
{
    /// An answerer that answers `answer`.
    pub fn new(answer: Q::Result) -> Self {
        Self {
            answer,
            asked: Log::default(),
            on_ask: None,
        }
    }

    /// Runs `act` each time a question arrives, before answering.
    pub fn on_ask(mut self, act: impl FnMut() + 'static) -> Self {
        self.on_ask = Some(Box::new(act));
        self
    }

    /// Starts it in the current system; the log fills with the questions.
    pub fn start(self) -> (Addr<Self>, Log<Q>) {
        let asked = self.asked.clone();
        (Actor::start(self), asked)
    }
}

impl<Q> Actor for Answerer<Q>
where
    Q: Message + Unpin + 'static,
    Q::Result: Unpin,
{
    type Context = Context<Self>;
}

impl<Q> Handler<Q> for Answerer<Q>
where
    Q: Message + Unpin + 'static,
    Q::Result: Clone + Unpin + MessageResponse<Self, Q>,
{
    type Result = Q::Result;
    fn handle(&mut self, question: Q, _: &mut Self::Context) -> Q::Result {
        self.asked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(question);
        if let Some(act) = &mut self.on_ask {
            act();
        }
        self.answer.clone()
    }
}
