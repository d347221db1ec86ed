//! What a watchdog must know at this moment: every registration still in force.
//!
//! The watchdog is told by lines over a pipe, and a new watchdog (its predecessor died) knows
//! nothing. So the runtime keeps its own account of what it registered — this ledger — and updates
//! it under the same lock, in the same step, as it writes the line to the running watchdog. A
//! replacement is told the ledger as it stands when it is installed, under that lock: a
//! registration made while the replacement was starting is in the ledger and so is told; one
//! withdrawn meanwhile is not in it, so nothing withdrawn comes back.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::path::{Path, PathBuf};

use dsh_contain::watchdog::Registration;

/// The registrations in force.
#[derive(Debug, Default)]
pub(super) struct Ledger {
    cgroups: Vec<PathBuf>,
    cgroups_v1: Vec<PathBuf>,
    runtimes: Vec<String>,
    spills: Vec<PathBuf>,
    /// Each process group and how many registrations it holds: a group number reused by a newer
    /// task can be registered again before the older task withdraws its own (the watchdog counts
    /// the same way, one `ungroup` per `group`).
    groups: BTreeMap<i32, usize>,
}

impl Ledger {
    /// Books `registration`: adds what it registers, or withdraws one registration of a group.
    pub(super) fn record(&mut self, registration: &Registration<'_>) {
        match *registration {
            Registration::Cgroup(path) => add_path(&mut self.cgroups, path),
            Registration::CgroupV1(path) => add_path(&mut self.cgroups_v1, path),
            Registration::Spill(path) => add_path(&mut self.spills, path),
            Registration::Runtime(nonce) => {
                if !self.runtimes.iter().any(|n| n == nonce) {
                    self.runtimes.push(nonce.to_owned());
                }
            }
            Registration::Group(pgid) => *self.groups.entry(pgid).or_default() += 1,
            Registration::Ungroup(pgid) => {
                if let Entry::Occupied(mut held) = self.groups.entry(pgid) {
                    *held.get_mut() -= 1;
                    if *held.get() == 0 {
                        held.remove();
                    }
                }
            }
        }
    }

    /// Everything in force, as a new watchdog is to be told it: the cgroup parents and the runtime
    /// marker first (they cover the most), then the spill directory, then each group.
    pub(super) fn registrations(&self) -> Vec<Registration<'_>> {
        let cgroups = self.cgroups.iter().map(|p| Registration::Cgroup(p));
        let v1 = self.cgroups_v1.iter().map(|p| Registration::CgroupV1(p));
        let runtimes = self.runtimes.iter().map(|n| Registration::Runtime(n));
        let spills = self.spills.iter().map(|p| Registration::Spill(p));
        let groups = self
            .groups
            .iter()
            .flat_map(|(pgid, held)| std::iter::repeat_n(Registration::Group(*pgid), *held));
        cgroups
            .chain(v1)
            .chain(runtimes)
            .chain(spills)
            .chain(groups)
            .collect()
    }
}

fn add_path(paths: &mut Vec<PathBuf>, path: &Path) {
    if !paths.iter().any(|p| p == path) {
        paths.push(path.to_path_buf());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(ledger: &Ledger) -> Vec<String> {
        ledger
            .registrations()
            .iter()
            .map(|r| format!("{r:?}"))
            .collect()
    }

    #[test]
    fn a_withdrawn_group_is_not_told_again_and_a_new_one_is() {
        let mut ledger = Ledger::default();
        ledger.record(&Registration::Runtime("n1"));
        ledger.record(&Registration::Spill(Path::new("/tmp/dsh-proc-a")));
        ledger.record(&Registration::Group(40));
        ledger.record(&Registration::Group(41));
        ledger.record(&Registration::Ungroup(40));
        ledger.record(&Registration::Group(42));
        assert_eq!(
            lines(&ledger),
            [
                "Runtime(\"n1\")",
                "Spill(\"/tmp/dsh-proc-a\")",
                "Group(41)",
                "Group(42)"
            ]
        );
    }

    #[test]
    fn a_reused_group_number_holds_one_registration_per_task() {
        let mut ledger = Ledger::default();
        ledger.record(&Registration::Group(7));
        ledger.record(&Registration::Group(7));
        ledger.record(&Registration::Ungroup(7));
        assert_eq!(lines(&ledger), ["Group(7)"]);
        ledger.record(&Registration::Ungroup(7));
        ledger.record(&Registration::Ungroup(7));
        assert!(lines(&ledger).is_empty());
        ledger.record(&Registration::Group(7));
        assert_eq!(
            lines(&ledger),
            ["Group(7)"],
            "a stray ungroup went negative"
        );
    }

    #[test]
    fn the_trees_come_first_and_are_booked_once() {
        let mut ledger = Ledger::default();
        ledger.record(&Registration::Group(9));
        ledger.record(&Registration::Cgroup(Path::new("/sys/fs/cgroup/x/dsh-1")));
        ledger.record(&Registration::CgroupV1(Path::new(
            "/sys/fs/cgroup/pids/dsh-1",
        )));
        ledger.record(&Registration::Cgroup(Path::new("/sys/fs/cgroup/x/dsh-1")));
        assert_eq!(
            lines(&ledger),
            [
                "Cgroup(\"/sys/fs/cgroup/x/dsh-1\")",
                "CgroupV1(\"/sys/fs/cgroup/pids/dsh-1\")",
                "Group(9)"
            ]
        );
    }
}
