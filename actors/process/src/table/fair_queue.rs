//! The spawns waiting for admission, kept fair across sessions: one first-come-first-served lane per
//! session and kind (foreground calls, background tasks; spawns without a session share one lane per
//! kind), served round-robin. One agent's hundred waiting calls thus hold back another agent's one by
//! at most a turn or two, not by a hundred. Kinds have lanes of their own because policies may hold
//! back one kind only (per-session limits hold background tasks): a session's foreground call never
//! waits behind its own background task that its limit holds.
//!
//! ```text
//!   turn:  [B, A, C]          lanes: A: a3 a4 a5 …   B: b1   C: c1 c2
//!   admit_waiting asks about the head of the lane whose turn it is; admitted → that lane goes to the
//!   back of the turn; queued again (its session is at a limit) → the next lane is asked; a full round
//!   with no admission ends the pass.
//! ```

use std::collections::{HashMap, VecDeque};

/// A lane's key: the owning session (`None` for spawns without one) and whether it is background work.
pub(super) type Lane = (Option<String>, bool);

/// Waiting items in per-session lanes, and whose turn it is.
pub(super) struct FairQueue<T> {
    lanes: HashMap<Lane, VecDeque<T>>,
    /// Lanes that hold items, in the order they get their next turn.
    turn: VecDeque<Lane>,
    len: usize,
}

impl<T> Default for FairQueue<T> {
    fn default() -> Self {
        Self {
            lanes: HashMap::new(),
            turn: VecDeque::new(),
            len: 0,
        }
    }
}

impl<T> FairQueue<T> {
    pub(super) fn len(&self) -> usize {
        self.len
    }

    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds `item` at the end of its session's lane; a lane that was empty takes the last turn.
    pub(super) fn push(&mut self, lane: Lane, item: T) {
        let queue = self.lanes.entry(lane.clone()).or_default();
        if queue.is_empty() {
            self.turn.push_back(lane);
        }
        queue.push_back(item);
        self.len += 1;
    }

    /// How many lanes hold items (the length of one full round).
    pub(super) fn lanes_waiting(&self) -> usize {
        self.turn.len()
    }

    /// The lane whose turn it is and its oldest item.
    pub(super) fn head(&self) -> Option<(&Lane, &T)> {
        let lane = self.turn.front()?;
        let item = self.lanes.get(lane)?.front()?;
        Some((lane, item))
    }

    /// Takes the head item of the lane whose turn it is; the lane then goes to the back of the turn
    /// (or leaves it, when empty).
    pub(super) fn pop_head(&mut self) -> Option<T> {
        let lane = self.turn.pop_front()?;
        let queue = self.lanes.get_mut(&lane)?;
        let item = queue.pop_front();
        if queue.is_empty() {
            self.lanes.remove(&lane);
        } else {
            self.turn.push_back(lane);
        }
        if item.is_some() {
            self.len -= 1;
        }
        item
    }

    /// The lane whose turn it is goes to the back of the turn without giving anything up.
    pub(super) fn skip_head(&mut self) {
        if let Some(lane) = self.turn.pop_front() {
            self.turn.push_back(lane);
        }
    }

    /// Removes every item for which `keep` is false, and returns them.
    pub(super) fn remove_where(&mut self, mut remove: impl FnMut(&T) -> bool) -> Vec<T> {
        let mut removed = Vec::new();
        for queue in self.lanes.values_mut() {
            let mut kept = VecDeque::with_capacity(queue.len());
            for item in queue.drain(..) {
                if remove(&item) {
                    removed.push(item);
                } else {
                    kept.push_back(item);
                }
            }
            *queue = kept;
        }
        self.lanes.retain(|_, queue| !queue.is_empty());
        let lanes = &self.lanes;
        self.turn.retain(|lane| lanes.contains_key(lane));
        self.len -= removed.len();
        removed
    }

    /// Takes every item, lane by lane.
    pub(super) fn drain_all(&mut self) -> Vec<T> {
        self.remove_where(|_| true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lane(name: &str) -> Lane {
        (Some(name.to_owned()), false)
    }

    #[test]
    fn lanes_are_served_round_robin_and_first_come_within_one() {
        let mut queue = FairQueue::default();
        for i in 0..5 {
            queue.push(lane("a"), format!("a{i}"));
        }
        queue.push(lane("b"), "b0".to_owned());
        queue.push((None, false), "n0".to_owned());
        queue.push(lane("b"), "b1".to_owned());
        let order: Vec<String> = std::iter::from_fn(|| queue.pop_head()).collect();
        assert_eq!(order, ["a0", "b0", "n0", "a1", "b1", "a2", "a3", "a4"]);
        assert!(queue.is_empty());
        assert_eq!(queue.lanes_waiting(), 0);
    }

    #[test]
    fn a_skipped_lane_keeps_its_items_and_removed_items_leave_no_empty_lane() {
        let mut queue = FairQueue::default();
        queue.push(lane("a"), 1);
        queue.push(lane("b"), 2);
        queue.skip_head();
        assert_eq!(
            queue.head().map(|(l, i)| (l.clone(), *i)),
            Some((lane("b"), 2))
        );
        assert_eq!(queue.remove_where(|i| *i == 2), vec![2]);
        assert_eq!(queue.lanes_waiting(), 1);
        assert_eq!(queue.len(), 1);
        assert_eq!(queue.pop_head(), Some(1));
    }
}
