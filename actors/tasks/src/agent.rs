//! How an agent is named to the runtime: its session id (identity for access) and its mailbox for
//! notices (`Recipient<Inject>`), so any actor type can be an agent.

use actix::WeakRecipient;
use actix::prelude::*;

/// A notice for an agent: durable context for its next model request (not a wake-up).
#[derive(Message, Clone, Debug, PartialEq, Eq)]
#[rtype(result = "()")]
pub struct Inject {
    /// The notice text the model will see.
    pub text: String,
    /// Who sent it (`tool-bash`).
    pub source: &'static str,
}

/// An agent calling the tools: who it is and where its notices go.
#[derive(Clone, Debug)]
pub struct AgentRef {
    /// The agent's session id. Access to owned tasks is decided by this id alone.
    pub session_id: String,
    /// Where completion notices are delivered.
    pub inbox: Recipient<Inject>,
}

impl AgentRef {
    /// Names an agent by its session id and the mailbox its notices go to.
    pub fn new(session_id: impl Into<String>, inbox: Recipient<Inject>) -> Self {
        Self {
            session_id: session_id.into(),
            inbox,
        }
    }
}

/// The owner of a task as the registry keeps it: a weak mailbox, so holding tasks never keeps a
/// finished agent alive.
#[derive(Clone, Debug)]
pub struct TaskOwner {
    /// The owning agent's session id.
    pub session_id: String,
    inbox: WeakRecipient<Inject>,
}

impl TaskOwner {
    /// Keeps the agent's session id and a weak handle on its mailbox.
    pub fn from_agent(agent: &AgentRef) -> Self {
        Self {
            session_id: agent.session_id.clone(),
            inbox: agent.inbox.downgrade(),
        }
    }

    /// The owner's mailbox while it is still open.
    pub fn inbox(&self) -> Option<Recipient<Inject>> {
        self.inbox.upgrade().filter(Recipient::connected)
    }

    /// Whether the agent is gone (its mailbox closed).
    pub fn is_gone(&self) -> bool {
        self.inbox().is_none()
    }
}
