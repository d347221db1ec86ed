//! How an agent is named to the runtime: its session id (identity for access) and its mailbox for
//! notices (`Recipient<Inject>`), so any actor type can be an agent.
//!
//! An agent may also hand the registry a *lease* ([`AgentRef::with_lease`]): every task it owns
//! keeps a clone until the registry forgets the task. A front end that serves sessions named by a
//! client (`dsh jsonl`) has no agent that ends; it keeps a session's state only while a call of it
//! runs or a task of it is kept, and learns when neither is left from its weak handle on the lease.

use std::any::Any;
use std::sync::Arc;

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
#[derive(Clone)]
pub struct AgentRef {
    /// The agent's session id. Access to owned tasks is decided by this id alone.
    pub session_id: String,
    /// Where completion notices are delivered.
    pub inbox: Recipient<Inject>,
    /// Held by every task the agent owns, as long as the registry keeps the task.
    pub lease: Option<Lease>,
}

/// What an agent's tasks hold for it (see [`AgentRef::with_lease`]): anything the agent wants kept
/// alive while the registry keeps a task of its.
pub type Lease = Arc<dyn Any + Send + Sync>;

impl AgentRef {
    /// Names an agent by its session id and the mailbox its notices go to.
    pub fn new(session_id: impl Into<String>, inbox: Recipient<Inject>) -> Self {
        Self {
            session_id: session_id.into(),
            inbox,
            lease: None,
        }
    }

    /// Every task this agent starts holds `lease` until the registry forgets the task (retention
    /// discards it, its owner is released, or the runtime shuts down). The agent learns that no
    /// task of its is left when its own `Weak` on the lease no longer upgrades.
    pub fn with_lease(mut self, lease: Lease) -> Self {
        self.lease = Some(lease);
        self
    }
}

impl std::fmt::Debug for AgentRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentRef")
            .field("session_id", &self.session_id)
            .field("inbox", &self.inbox)
            .field("leased", &self.lease.is_some())
            .finish()
    }
}

/// The owner of a task as the registry keeps it: a weak mailbox, so holding tasks never keeps a
/// finished agent alive (only what the agent chose to lease to them).
#[derive(Clone)]
pub struct TaskOwner {
    /// The owning agent's session id.
    pub session_id: String,
    inbox: WeakRecipient<Inject>,
    /// The agent's lease, held for as long as this owner is (see [`AgentRef::with_lease`]).
    _lease: Option<Lease>,
}

impl std::fmt::Debug for TaskOwner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskOwner")
            .field("session_id", &self.session_id)
            .field("leased", &self._lease.is_some())
            .finish()
    }
}

impl TaskOwner {
    /// Keeps the agent's session id, a weak handle on its mailbox, and its lease.
    pub fn from_agent(agent: &AgentRef) -> Self {
        Self {
            session_id: agent.session_id.clone(),
            inbox: agent.inbox.downgrade(),
            _lease: agent.lease.clone(),
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
