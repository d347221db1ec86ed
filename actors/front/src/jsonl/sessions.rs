//! The sessions a `dsh jsonl` client names, each kept only while it has something left.
//!
//! A session is a string on a request line; nothing ever ends one. Its state here is an agent
//! stand-in (`notices.rs`: the actor that turns its completion notices into lines) and a map entry,
//! about 1.4 KiB together; kept forever, 10,000 distinct names cost 13 MiB. So a session lives
//! exactly as long as something needs it:
//! - a call of it is running (the call holds the session's agent), or
//! - the task registry keeps a background task it owns — running, finished and unread, or read and
//!   kept until retention discards it (every such task holds the agent's lease,
//!   [`dsh::AgentRef::with_lease`]), so a later `bash_output` or `bash_kill` of a kept task by its
//!   session works, and its completion notice still has somewhere to go.
//!
//! When neither is left the lease's last clone drops, and with it the stand-in; the map keeps only
//! a `Weak` and forgets it when the session's last call ends, or at the next sweep (the map is
//! swept whenever it has doubled since the last sweep, so it holds at most twice the sessions that
//! were live then, or 64). A name that comes back later gets a fresh stand-in: ownership is decided
//! by the name alone, so its tasks that are still kept stay its own. A task that retention discarded
//! reads, to its session as to anyone, `bash task <id> finished and was discarded (retention limit)`.
//!
//! jsonl sets no standing sandbox mode or workspace per session, so the runtime holds nothing else
//! per session name (`Runtime::release_session` is not needed, and sending it here could race a new
//! call of the same name).

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use dsh::AgentRef;

/// What a session's calls and tasks hold: its agent (the stand-in's mailbox).
struct Held {
    agent: AgentRef,
}

/// A sweep only once the map has at least this many entries.
const MIN_SWEEP: usize = 64;

/// The sessions with something left, by name.
#[derive(Default)]
pub struct Sessions {
    live: HashMap<String, Weak<Held>>,
    /// The map's size after the last sweep; the next sweep comes at twice this.
    swept_at: usize,
}

impl Sessions {
    /// The agent for `session`: the live one, or a new one made by `make`. The returned agent
    /// carries the session's lease, so the call it is given to keeps the session alive, and so
    /// does every task the call starts.
    pub fn agent(&mut self, session: &str, make: impl FnOnce() -> AgentRef) -> AgentRef {
        if let Some(held) = self.live.get(session).and_then(Weak::upgrade) {
            return leased(held);
        }
        self.sweep();
        let held = Arc::new(Held { agent: make() });
        self.live.insert(session.to_owned(), Arc::downgrade(&held));
        leased(held)
    }

    /// Forgets `session` if nothing holds it any more (called when one of its calls ends).
    pub fn forget_if_idle(&mut self, session: &str) {
        if self
            .live
            .get(session)
            .is_some_and(|held| held.strong_count() == 0)
        {
            self.live.remove(session);
        }
    }

    /// How many sessions the map holds (live, or gone and not yet forgotten).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.live.len()
    }

    /// Drops the entries of sessions nothing holds, once the map has doubled since the last sweep.
    fn sweep(&mut self) {
        if self.live.len() < MIN_SWEEP.max(self.swept_at * 2) {
            return;
        }
        self.live.retain(|_, held| held.strong_count() > 0);
        self.live.shrink_to_fit();
        self.swept_at = self.live.len();
    }
}

/// The session's agent with the session's lease.
fn leased(held: Arc<Held>) -> AgentRef {
    held.agent.clone().with_lease(held)
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix::prelude::*;

    struct Inbox;
    impl Actor for Inbox {
        type Context = Context<Self>;
    }
    impl Handler<dsh::Inject> for Inbox {
        type Result = ();
        fn handle(&mut self, _: dsh::Inject, _: &mut Self::Context) {}
    }

    #[actix_rt::test]
    async fn a_session_lives_while_its_agent_is_held_and_is_forgotten_after() {
        let inbox = Inbox.start().recipient();
        let mut sessions = Sessions::default();
        let mut made = 0;
        let mut make = || {
            made += 1;
            AgentRef::new("a", inbox.clone())
        };
        let agent = sessions.agent("a", &mut make);
        let again = sessions.agent("a", &mut make);
        assert!(agent.lease.is_some());
        drop(agent);
        sessions.forget_if_idle("a");
        assert_eq!(sessions.len(), 1, "a call still holds it");
        drop(again);
        sessions.forget_if_idle("a");
        assert_eq!(sessions.len(), 0);
        let kept = sessions.agent("a", &mut make).lease;
        assert_eq!(made, 2, "a session that came back is made anew");
        // A lease kept elsewhere (a task) keeps the session.
        sessions.forget_if_idle("a");
        assert_eq!(sessions.len(), 1);
        drop(kept);
        // Gone sessions never make the map grow past twice the live ones, plus a few.
        for n in 0..10_000 {
            drop(sessions.agent(&n.to_string(), || AgentRef::new("x", inbox.clone())));
        }
        assert!(sessions.len() <= 2 * MIN_SWEEP, "{}", sessions.len());
    }
}
