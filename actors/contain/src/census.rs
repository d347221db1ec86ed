//! One pass over `/proc` that answers for many tasks at once: which process groups still have a live
//! member, and which live processes carry which task markers.
//!
//! Without cgroups there is no kernel event for "every process of this task is gone", and no list of
//! a task's processes: the answer is a walk over every process of the host, reading its `stat` (its
//! group and state) and, for markers, its `environ`. Such a walk costs 5–20 ms on a host with a
//! thousand processes. Asked task by task, a burst of a thousand kills walked `/proc` a thousand
//! times or more; one census serves every question pending when it starts, so a burst costs a few
//! walks (`dsh-process`'s `liveness.rs` batches the questions).
//!
//! Zombies are not alive (a zombie has exited; its `environ` is empty).

use std::collections::{HashMap, HashSet};

use crate::subreaper::{MARKER_VAR, Marker};

/// What one walk over `/proc` found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Census {
    /// The asked-for groups that have a live member.
    pub live_groups: HashSet<i32>,
    /// The live processes carrying each asked-for marker that has any.
    pub marked: HashMap<Marker, Vec<i32>>,
}

impl Census {
    /// Walks `/proc` once: which of `groups` have a live member, and which live processes carry
    /// each of `markers` (task markers; a runtime-wide marker matches no process here). `environ`
    /// is read only when `markers` is not empty. This process is not counted.
    pub fn take(groups: &HashSet<i32>, markers: &HashSet<Marker>) -> Census {
        let mut census = Census::default();
        if groups.is_empty() && markers.is_empty() {
            return census;
        }
        let own = std::process::id() as i32;
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return census;
        };
        for pid in entries
            .flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| *pid != own)
        {
            let Some((live, group)) = stat(pid) else {
                continue;
            };
            if !live {
                continue;
            }
            if groups.contains(&group) {
                census.live_groups.insert(group);
            }
            if markers.is_empty() {
                continue;
            }
            let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
                continue;
            };
            for entry in marker_entries(&environ) {
                // Task markers are whole entries: look the entry up as one.
                let Ok(entry) = std::str::from_utf8(entry) else {
                    continue;
                };
                let marker = Marker::Task(entry.to_owned());
                if markers.contains(&marker) {
                    census.marked.entry(marker).or_default().push(pid);
                }
            }
        }
        census
    }

    /// Whether anything of the task led by group `group` (and carrying `marker`) was alive.
    pub fn alive(&self, group: Option<i32>, marker: Option<&Marker>) -> bool {
        group.is_some_and(|group| self.live_groups.contains(&group))
            || marker.is_some_and(|marker| self.marked.contains_key(marker))
    }
}

/// The `DSH_TASK=` entries of a NUL-separated environment block.
fn marker_entries(environ: &[u8]) -> impl Iterator<Item = &[u8]> {
    environ.split(|b| *b == 0).filter(|entry| {
        entry.len() > MARKER_VAR.len()
            && entry.starts_with(MARKER_VAR.as_bytes())
            && entry[MARKER_VAR.len()] == b'='
    })
}

/// `/proc/<pid>/stat`: whether the process is alive (not a zombie or dead) and its group. The
/// command name may hold spaces and parentheses, so fields are read after the last `)`.
fn stat(pid: i32) -> Option<(bool, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')').map(|(_, r)| r)?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    let _ppid = fields.next()?;
    let group = fields.next()?.parse::<i32>().ok()?;
    Some((!matches!(state, "Z" | "X" | "x"), group))
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::CommandExt;

    use super::*;

    #[test]
    fn one_walk_finds_live_groups_and_marked_processes() {
        let marker = Marker::task("census-test", "1");
        let (name, value) = marker.env_entry().unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env(name, value)
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        // Until it has exec'd, the child shows this process's environment.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| marker.matches(&env)) {
            assert!(
                std::time::Instant::now() < deadline,
                "the child never exec'd"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let other = Marker::task("census-test", "2");
        let census = Census::take(
            &HashSet::from([pid, 1 << 30]),
            &HashSet::from([marker.clone(), other.clone()]),
        );
        assert_eq!(census.live_groups, HashSet::from([pid]), "{census:?}");
        assert_eq!(census.marked.get(&marker), Some(&vec![pid]), "{census:?}");
        assert!(census.alive(Some(pid), None) && census.alive(None, Some(&marker)));
        assert!(!census.alive(Some(1 << 30), Some(&other)));
        child.kill().unwrap();
        let _ = child.wait();
        let census = Census::take(&HashSet::from([pid]), &HashSet::from([marker.clone()]));
        assert!(!census.alive(Some(pid), Some(&marker)), "{census:?}");
    }
}
