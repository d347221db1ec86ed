//! Retention in the table: after each settlement the retention stack is asked for finished tasks
//! to discard until no policy names one. The built-in limits
//! ([`RetentionLimits`](crate::RetentionLimits)) pick their victim from ordered indexes (read ones
//! first, then the oldest); a host's policies are shown every finished task (`retention.rs` says how
//! a policy decides). An owner whose task goes before it saw the end gets a notice.

use super::TaskTable;
use super::record::Record;
use crate::agent::TaskOwner;
use crate::retention::{FinishedTask, RetentionLoad, RetentionPolicy};

impl TaskTable {
    /// Adds a host's retention policy after the built-in limits.
    pub(crate) fn add_retention_policy(&mut self, policy: Box<dyn RetentionPolicy>) {
        self.retention.push(policy);
    }

    /// Asks the retention stack for finished tasks to discard until no policy names one (see
    /// `retention.rs`). A discarded record's producer removes its spill files.
    pub(super) fn evict_over_cap(&mut self) {
        while let Some((id, by)) = self.retention_victim() {
            let Some(record) = self.records.remove(&id) else {
                break;
            };
            self.forget_settled(&record);
            tracing::debug!(
                target: "dsh::policy",
                task = %id,
                policy = %by,
                reported = record.reported,
                retained = record.ended().map_or(0, |ended| ended.retained),
                spill = record.ended().map_or(0, |ended| ended.spill),
                finished = self.settled_count,
                retained_total = self.retained_total,
                spill_total = self.spill_total,
                "evict: finished task discarded (retention limit)"
            );
            record.producer.discard();
            if !record.reported
                && !self.shutting_down
                && let Some(owner) = record.owner
            {
                let text = format!(
                    "background {} task {id} finished and was discarded unread (retention limit).",
                    record.kind
                );
                self.discard_notices.push((owner, text));
            }
        }
    }

    /// The notices for owners whose unread tasks were discarded since the last call.
    pub(crate) fn take_discard_notices(&mut self) -> Vec<(TaskOwner, String)> {
        std::mem::take(&mut self.discard_notices)
    }

    /// The first finished task a policy of the stack names, and that policy's name. The built-in
    /// limits' rule ([`RetentionLimits`](crate::RetentionLimits)) is applied through the ordered
    /// indexes; only a host's policies are shown every finished task.
    fn retention_victim(&mut self) -> Option<(String, String)> {
        let load = self.load();
        if !self.limits.holds(load) {
            let any_kind = load.finished > self.limits.max_finished
                || load.retained_bytes > self.limits.max_retained_bytes;
            let index = if any_kind {
                &self.finished
            } else {
                &self.spilled
            };
            if let Some((_, id)) = index.first_key_value() {
                return Some((id.clone(), self.limits.name().to_owned()));
            }
        }
        if self.retention.is_empty() {
            return None;
        }
        let finished: Vec<FinishedTask<'_>> = self
            .records
            .iter()
            .filter_map(|(id, r)| {
                let ended = r.ended()?;
                Some(FinishedTask {
                    id,
                    owner_session: r.owner.as_ref().map(|o| o.session_id.as_str()),
                    reported: r.reported,
                    order: r.order,
                    finished_at: Some(ended.finished_at),
                    retained_bytes: ended.retained,
                    spill_bytes: ended.spill,
                })
            })
            .collect();
        for policy in self.retention.iter_mut() {
            if let Some(task) = policy
                .discard(load, &finished)
                .and_then(|i| finished.get(i))
            {
                return Some((task.id.to_owned(), policy.name().to_owned()));
            }
        }
        None
    }

    /// What finished tasks hold now, as retention policies see it.
    pub(crate) fn load(&self) -> RetentionLoad {
        RetentionLoad {
            finished: self.settled_count,
            retained_bytes: self.retained_total,
            spill_bytes: self.spill_total,
        }
    }

    /// Takes a removed settled record out of the retention counts and indexes.
    pub(super) fn forget_settled(&mut self, record: &Record) {
        if let Some(ended) = record.ended() {
            self.settled_count -= 1;
            self.retained_total -= ended.retained;
            self.spill_total -= ended.spill;
            let key = (!record.reported, record.order);
            self.finished.remove(&key);
            self.spilled.remove(&key);
        }
    }

    /// A settled record's owner has now seen its end: it moves ahead in the order of discard.
    pub(super) fn reported_now(&mut self, order: u64) {
        for index in [&mut self.finished, &mut self.spilled] {
            if let Some(id) = index.remove(&(true, order)) {
                index.insert((false, order), id);
            }
        }
    }
}
