//! The load a policy sees: running and queued spawns, in total and per session, each also counted for
//! background work. The table books every change here, so an admission question costs a map lookup,
//! not a walk over the records.

use std::collections::HashMap;

use crate::policy::Load;

/// The session counts are kept for: its id, or `None` for spawns without one.
pub(super) type Session = Option<String>;

/// Running and queued counts, in total and per session.
#[derive(Default)]
pub(super) struct LoadBook {
    total: Load,
    sessions: HashMap<Session, Load>,
}

/// Which count a change is about.
#[derive(Clone, Copy)]
pub(super) enum Count {
    Running,
    Queued,
}

impl LoadBook {
    fn apply(load: &mut Load, count: Count, background: bool, add: bool) {
        let change = |n: &mut usize| {
            *n = if add { *n + 1 } else { n.saturating_sub(1) };
        };
        match count {
            Count::Running => {
                change(&mut load.running);
                if background {
                    change(&mut load.running_background);
                }
            }
            Count::Queued => {
                change(&mut load.queued);
                if background {
                    change(&mut load.queued_background);
                }
            }
        }
    }

    pub(super) fn add(&mut self, session: &Session, count: Count, background: bool) {
        Self::apply(&mut self.total, count, background, true);
        Self::apply(
            self.sessions.entry(session.clone()).or_default(),
            count,
            background,
            true,
        );
    }

    pub(super) fn remove(&mut self, session: &Session, count: Count, background: bool) {
        Self::apply(&mut self.total, count, background, false);
        if let Some(load) = self.sessions.get_mut(session) {
            Self::apply(load, count, background, false);
            if *load == Load::default() {
                self.sessions.remove(session);
            }
        }
    }

    /// The total and the session's load as a spawn of `session` sees them; `queued_self` takes that
    /// spawn itself out of the queued counts (it is asking about itself).
    pub(super) fn seen_by(
        &self,
        session: &Session,
        background: bool,
        queued_self: bool,
    ) -> (Load, Load) {
        let mut total = self.total;
        let mut session = self.sessions.get(session).copied().unwrap_or_default();
        if queued_self {
            Self::apply(&mut total, Count::Queued, background, false);
            Self::apply(&mut session, Count::Queued, background, false);
        }
        (total, session)
    }

    /// Forgets every queued count (the queue was drained at shutdown).
    pub(super) fn clear_queued(&mut self) {
        self.total.queued = 0;
        self.total.queued_background = 0;
        for load in self.sessions.values_mut() {
            load.queued = 0;
            load.queued_background = 0;
        }
    }
}
