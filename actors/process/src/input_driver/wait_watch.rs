//! When the driver asks the kernel whether the program waits for input, and when it believes the
//! answer: the settle time, the two-checks rule, the rule after a write of ours, and the back-off
//! while the program computes. Kept apart from the input and terminal plumbing in `mod.rs`
//! because this is the detection's policy, the part to tune.

use std::time::Duration;

use dsh_contain::input_wait::{self, Verdict};
use tokio::time::Instant;

use super::{AFTER_WRITE, CHECK_BACKED_OFF, CHECK_EVERY, CHECK_WHILE_WAITING, SETTLE};
use crate::containment::Contained;
use crate::input::{InputChannel, InputState};

/// Where the wait detection stands.
pub(super) struct WaitWatch {
    pub(super) last_output: Instant,
    /// Our last write, until output followed it.
    pub(super) unanswered_write: Option<Instant>,
    /// Consecutive checks that said waiting.
    pub(super) seen: u8,
    pub(super) published: InputState,
    pub(super) interval: Duration,
    pub(super) next_check: Instant,
}

impl WaitWatch {
    pub(super) fn new() -> Self {
        let now = Instant::now();
        WaitWatch {
            last_output: now,
            unanswered_write: None,
            seen: 0,
            published: InputState::Busy,
            interval: CHECK_EVERY,
            next_check: now + SETTLE,
        }
    }

    pub(super) fn reset(&mut self, now: Instant) {
        self.seen = 0;
        self.published = InputState::Busy;
        self.interval = CHECK_EVERY;
        self.next_check = now + SETTLE;
    }

    /// Whether output has been quiet for [`SETTLE`]; if not, the next check waits until it was.
    pub(super) fn settled(&mut self, now: Instant) -> bool {
        let quiet_until = self.last_output + SETTLE;
        if now < quiet_until {
            self.next_check = quiet_until;
            return false;
        }
        true
    }

    /// Takes one verdict; `idle`: nothing of ours is queued or being written. Publishes a wait
    /// seen twice in a row (and not right after our write), or the end of one.
    pub(super) fn judge(
        &mut self,
        now: Instant,
        verdict: Verdict,
        idle: bool,
        channel: &InputChannel,
    ) {
        let state = match verdict {
            Verdict::Waiting => InputState::Waiting,
            Verdict::WaitingHidden => InputState::WaitingHidden,
            Verdict::NotWaiting(_) => InputState::Busy,
        };
        if state.is_waiting() && idle {
            self.seen = self.seen.saturating_add(1);
            let write_settled = self
                .unanswered_write
                .is_none_or(|at| now.duration_since(at) >= AFTER_WRITE);
            if self.seen >= 2 && write_settled {
                self.published = state;
                channel.publish(state);
                self.interval = CHECK_WHILE_WAITING;
            } else {
                self.interval = CHECK_EVERY;
            }
        } else {
            self.seen = 0;
            if self.published.is_waiting() {
                self.published = InputState::Busy;
                channel.publish(InputState::Busy);
                self.interval = CHECK_EVERY;
            } else {
                self.interval = (self.interval * 2).min(CHECK_BACKED_OFF);
            }
        }
        self.next_check = now + self.interval;
    }
}

/// The process's live members: its cgroup leaf's `cgroup.procs` (one read), else its session
/// (one `/proc` walk; the child leads its own session).
pub(super) fn candidates(contained: &Contained, pgid: i32) -> Vec<i32> {
    if let Contained::Leaf(leaf) = contained
        && let Ok(text) = std::fs::read_to_string(leaf.path().join("cgroup.procs"))
    {
        return text.lines().filter_map(|line| line.parse().ok()).collect();
    }
    input_wait::session_members(pgid)
}
