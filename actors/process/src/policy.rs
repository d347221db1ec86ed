//! Process policies: what the manager asks before it admits a spawn and after a child settles.
//!
//! A policy sees who asks ([`AdmissionRequest`]: the owning session or none, foreground or
//! background, and the load in total and of that session) and answers admit, queue or refuse. The
//! manager consults a [`PolicyStack`]: every policy in it is asked, and the most restrictive answer
//! wins (any refusal, the first one's reason; else any queue; else admit), so the order of the stack
//! matters only for which refusal reason is shown. Spawns that wait are admitted fairly: round-robin
//! between sessions, first come first served within one (the table's `fair_queue`).
//!
//! A policy is consulted synchronously inside the manager actor, so it must be quick and must not
//! panic (a panicking actix actor is never restarted). Policies act on explicit facts, never on panics.
//! Every decision is a tracing event (target `dsh::policy`).

use crate::outcome::ProcessOutcome;

/// Load counts at one moment, in total or for one session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Load {
    /// Processes admitted and not yet settled.
    pub running: usize,
    /// Spawns waiting for admission (not counting the one asking).
    pub queued: usize,
    /// Of `running`, the background ones.
    pub running_background: usize,
    /// Of `queued`, the background ones.
    pub queued_background: usize,
}

/// A spawn asking to be admitted: who asks, how, and the load it would join.
#[derive(Clone, Copy, Debug)]
pub struct AdmissionRequest<'a> {
    /// The agent session that owns the spawn; `None` for a caller without one (a host, `dsh run`).
    pub session: Option<&'a str>,
    /// A background task (true) or a foreground call someone is waiting on (false).
    pub background: bool,
    /// The whole manager's load.
    pub total: Load,
    /// The load of the asking spawn's session (of the spawns without a session when it has none).
    pub session_load: Load,
}

/// The answer to a spawn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Start it now.
    Admit,
    /// Hold it; the manager asks again, fairly across sessions, whenever a child settles.
    Queue,
    /// Fail the spawn with this reason (shown to the model as the error text).
    Refuse(String),
}

impl Admission {
    /// The word a tracing event uses for it.
    pub fn label(&self) -> &'static str {
        match self {
            Admission::Admit => "admit",
            Admission::Queue => "queue",
            Admission::Refuse(_) => "refuse",
        }
    }
}

/// What to do with the group of a settled child that still has live members (a descendant that held
/// the pipes past the drain grace, or survived the kill).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StragglerAction {
    /// Leave it running and kill it when the manager shuts down (the default: docs/ARCHITECTURE.md,
    /// "Settlement").
    KeepUntilShutdown,
    /// SIGKILL the group now.
    KillNow,
}

/// Facts about a child that just settled.
#[derive(Debug)]
pub struct SettledProcess<'a> {
    /// The leader's pid, which is also its process group id.
    pub pid: i32,
    /// How it ended.
    pub outcome: &'a ProcessOutcome,
    /// Whether the group still had members at settlement (zombies included).
    pub group_remains: bool,
}

/// A process policy: the manager supervises, the policy decides. The default methods admit
/// everything and keep stragglers until shutdown.
pub trait ProcessPolicy: Send + 'static {
    /// A short name for tracing events (`max-concurrent`).
    fn name(&self) -> &str {
        "custom"
    }

    /// Decides whether a new (or waiting) spawn starts now, waits, or fails.
    fn admit(&mut self, request: &AdmissionRequest<'_>) -> Admission {
        let _ = request;
        Admission::Admit
    }

    /// Told about every settled child; decides about its stragglers.
    fn on_settled(&mut self, settled: &SettledProcess<'_>) -> StragglerAction {
        let _ = settled;
        StragglerAction::KeepUntilShutdown
    }
}

/// Admits every spawn at once.
#[derive(Clone, Copy, Debug, Default)]
pub struct AdmitAll;

impl ProcessPolicy for AdmitAll {
    fn name(&self) -> &str {
        "admit-all"
    }
}

/// Runs at most `n` children at a time (`n` ≥ 1; 0 refuses everything); further spawns queue and start
/// as others settle, round-robin between sessions.
#[derive(Clone, Copy, Debug)]
pub struct MaxConcurrent(pub usize);

impl ProcessPolicy for MaxConcurrent {
    fn name(&self) -> &str {
        "max-concurrent"
    }

    fn admit(&mut self, request: &AdmissionRequest<'_>) -> Admission {
        if self.0 == 0 {
            Admission::Refuse("MaxConcurrent(0) admits no process".to_owned())
        } else if request.total.running < self.0 {
            Admission::Admit
        } else {
            Admission::Queue
        }
    }
}

/// Per-session limits on background tasks: at most `running` of a session's background tasks run;
/// beyond that up to `queued` wait; beyond that a start is refused. Foreground calls are not limited
/// here (a session waits on them itself).
#[derive(Clone, Copy, Debug)]
pub struct MaxPerSession {
    /// Background tasks of one session running at once.
    pub running: usize,
    /// Background tasks of one session waiting to start.
    pub queued: usize,
}

impl ProcessPolicy for MaxPerSession {
    fn name(&self) -> &str {
        "max-per-session"
    }

    fn admit(&mut self, request: &AdmissionRequest<'_>) -> Admission {
        if !request.background || request.session_load.running_background < self.running {
            Admission::Admit
        } else if request.session_load.queued_background < self.queued {
            Admission::Queue
        } else {
            Admission::Refuse(format!(
                "too many running tasks for this session (limit {}); wait for one to finish or stop \
                 one with bash_kill",
                self.running
            ))
        }
    }
}

/// An ordered stack of policies, consulted as one: every policy is asked; any refusal wins (the first
/// one's reason), else any queue, else admit. A straggler is killed now if any policy says so.
#[derive(Default)]
pub struct PolicyStack {
    policies: Vec<Box<dyn ProcessPolicy>>,
}

impl PolicyStack {
    /// An empty stack: admits everything, keeps stragglers until shutdown.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `policy` at the end of the stack.
    pub fn push(&mut self, policy: Box<dyn ProcessPolicy>) {
        self.policies.push(policy);
    }

    /// Adds `policy` at the end of the stack (builder style).
    pub fn with(mut self, policy: Box<dyn ProcessPolicy>) -> Self {
        self.push(policy);
        self
    }

    /// How many policies the stack holds.
    pub fn len(&self) -> usize {
        self.policies.len()
    }

    /// Whether the stack holds no policy.
    pub fn is_empty(&self) -> bool {
        self.policies.is_empty()
    }

    /// The decision and the name of the policy that made it (`None` when every policy admitted).
    pub fn decide(&mut self, request: &AdmissionRequest<'_>) -> (Admission, Option<&str>) {
        let mut decision = Admission::Admit;
        let mut by = None;
        for (index, policy) in self.policies.iter_mut().enumerate() {
            let answer = policy.admit(request);
            let stronger = match (&decision, &answer) {
                (Admission::Refuse(_), _) => false,
                (_, Admission::Refuse(_)) => true,
                (Admission::Admit, Admission::Queue) => true,
                _ => false,
            };
            if stronger {
                decision = answer;
                by = Some(index);
            }
        }
        (decision, by.map(|index| self.policies[index].name()))
    }
}

impl std::fmt::Debug for PolicyStack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.policies.iter().map(|p| p.name()))
            .finish()
    }
}

impl ProcessPolicy for PolicyStack {
    fn name(&self) -> &str {
        "stack"
    }

    fn admit(&mut self, request: &AdmissionRequest<'_>) -> Admission {
        self.decide(request).0
    }

    fn on_settled(&mut self, settled: &SettledProcess<'_>) -> StragglerAction {
        let mut action = StragglerAction::KeepUntilShutdown;
        for policy in &mut self.policies {
            if policy.on_settled(settled) == StragglerAction::KillNow {
                action = StragglerAction::KillNow;
            }
        }
        action
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(background: bool, total: Load, session_load: Load) -> AdmissionRequest<'static> {
        AdmissionRequest {
            session: Some("a"),
            background,
            total,
            session_load,
        }
    }

    #[test]
    fn the_most_restrictive_answer_of_the_stack_wins() {
        let mut stack = PolicyStack::new()
            .with(Box::new(MaxConcurrent(1)))
            .with(Box::new(MaxPerSession {
                running: 1,
                queued: 0,
            }));
        let busy = Load {
            running: 1,
            running_background: 1,
            ..Load::default()
        };
        let (decision, by) = stack.decide(&request(true, busy, busy));
        assert!(matches!(decision, Admission::Refuse(_)), "{decision:?}");
        assert_eq!(by, Some("max-per-session"));
        let (decision, by) = stack.decide(&request(false, busy, busy));
        assert_eq!((decision, by), (Admission::Queue, Some("max-concurrent")));
        let (decision, by) = stack.decide(&request(true, Load::default(), Load::default()));
        assert_eq!((decision, by), (Admission::Admit, None));
    }

    #[test]
    fn per_session_limits_queue_then_refuse_background_work_only() {
        let mut policy = MaxPerSession {
            running: 2,
            queued: 1,
        };
        let running = |n, q| Load {
            running: n,
            running_background: n,
            queued: q,
            queued_background: q,
        };
        assert_eq!(
            policy.admit(&request(true, running(1, 0), running(1, 0))),
            Admission::Admit
        );
        assert_eq!(
            policy.admit(&request(true, running(2, 0), running(2, 0))),
            Admission::Queue
        );
        assert_eq!(
            policy.admit(&request(true, running(2, 1), running(2, 1))),
            Admission::Refuse(
                "too many running tasks for this session (limit 2); wait for one to finish or \
                 stop one with bash_kill"
                    .to_owned()
            )
        );
        assert_eq!(
            policy.admit(&request(false, running(2, 1), running(2, 1))),
            Admission::Admit
        );
    }
}
