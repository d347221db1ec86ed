//! The task table's rules on their own, with a stub producer and no actor.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::future::BoxFuture;

use super::*;
use crate::producer::TaskOutput;

/// Work that never finishes on its own; counts kills and reads.
#[derive(Clone, Default)]
struct Stub {
    kills: Arc<AtomicUsize>,
    reads: Arc<AtomicUsize>,
}

impl TaskProducer for Stub {
    fn read(&self) -> TaskOutput {
        let n = self.reads.fetch_add(1, Ordering::SeqCst);
        TaskOutput {
            delta: format!("read {n}"),
            ..TaskOutput::default()
        }
    }

    fn kill(&self) {
        self.kills.fetch_add(1, Ordering::SeqCst);
    }

    fn finished(&self) -> BoxFuture<'static, TaskStatus> {
        Box::pin(std::future::pending())
    }
}

fn register(table: &mut TaskTable, stub: &Stub) -> String {
    table
        .register("bash".into(), "sleep".into(), None, Box::new(stub.clone()))
        .map(|registered| registered.id)
        .expect("registered")
}

#[test]
fn ids_count_per_kind_and_blank_names_are_refused() {
    let mut table = TaskTable::new(8);
    let stub = Stub::default();
    assert_eq!(register(&mut table, &stub), "bash-1");
    assert_eq!(register(&mut table, &stub), "bash-2");
    let other = table
        .register("py".into(), "x".into(), None, Box::new(stub.clone()))
        .map(|r| r.id);
    assert_eq!(other, Ok("py-1".to_owned()));
    let blank_kind = table.register(" ".into(), "x".into(), None, Box::new(stub.clone()));
    assert_eq!(blank_kind.err(), Some(TaskError::EmptyKind));
    let blank_label = table.register("bash".into(), "".into(), None, Box::new(stub.clone()));
    assert_eq!(blank_label.err(), Some(TaskError::EmptyLabel));
    let listed: Vec<String> = table.list(None).into_iter().map(|s| s.id).collect();
    assert_eq!(listed, ["bash-1", "bash-2", "py-1"]);
}

#[test]
fn a_task_settles_once_with_one_notice() {
    let mut table = TaskTable::new(8);
    let id = register(&mut table, &Stub::default());
    let done = table
        .settle(&id, TaskStatus::Completed { exit_code: 0 })
        .expect("a notice");
    assert_eq!(done.snapshot.status, TaskStatus::Completed { exit_code: 0 });
    assert!(done.snapshot.settled && !done.snapshot.reported);
    assert!(
        table
            .settle(&id, TaskStatus::Killed { signal: None })
            .is_none()
    );
    assert_eq!(
        table.get(&id, None).unwrap().status,
        TaskStatus::Completed { exit_code: 0 }
    );
}

#[test]
fn a_killed_task_stays_killed_even_if_it_exits_zero() {
    let mut table = TaskTable::new(8);
    let stub = Stub::default();
    let id = register(&mut table, &stub);
    let reply = table.kill(&id, None).unwrap();
    assert_eq!(reply.outcome, TaskKillOutcome::Killed);
    assert_eq!(reply.snapshot.status, TaskStatus::Killed { signal: None });
    assert!(reply.snapshot.reported);
    // Issue 11: a second kill while the first is under way answers "killed" and kills once.
    let again = table.kill(&id, None).unwrap();
    assert_eq!(again.outcome, TaskKillOutcome::Killed);
    assert_eq!(stub.kills.load(Ordering::SeqCst), 1);
    let done = table
        .settle(&id, TaskStatus::Completed { exit_code: 0 })
        .unwrap();
    assert_eq!(done.snapshot.status, TaskStatus::Killed { signal: None });

    let signalled = register(&mut table, &stub);
    table.kill(&signalled, None).unwrap();
    let end = TaskStatus::Killed {
        signal: Some("SIGTERM".into()),
    };
    assert_eq!(
        table
            .settle(&signalled, end.clone())
            .unwrap()
            .snapshot
            .status,
        end
    );
}

#[test]
fn reading_after_the_end_marks_it_reported() {
    let mut table = TaskTable::new(8);
    let id = register(&mut table, &Stub::default());
    let before = table.read(&id, None).unwrap();
    assert_eq!(before.output.delta, "read 0");
    assert!(!before.snapshot.reported);
    table.settle(&id, TaskStatus::Completed { exit_code: 1 });
    let after = table.read(&id, None).unwrap();
    assert!(after.snapshot.reported && after.snapshot.settled);
    assert_eq!(
        table.read("bash-9", None).err(),
        Some(TaskError::Unknown("bash-9".into()))
    );
}

/// A table keeping `capacity` finished tasks, with two tasks of one stub registered: the stub and
/// their ids.
fn two_registered(capacity: usize) -> (TaskTable, Stub, String, String) {
    let mut table = TaskTable::new(capacity);
    let stub = Stub::default();
    let first = register(&mut table, &stub);
    let second = register(&mut table, &stub);
    (table, stub, first, second)
}

#[test]
fn an_id_not_spelled_as_issued_is_unknown_not_discarded() {
    let (mut table, _stub, first, _second) = two_registered(8);
    assert_eq!(first, "bash-1");
    for id in ["bash-01", "bash-+1", "bash-02", "bash-+2"] {
        assert_eq!(
            table.get(id, None).err(),
            Some(TaskError::Unknown(id.into())),
            "{id}"
        );
    }
    assert!(table.get(&first, None).is_ok());
}

#[test]
fn eviction_drops_reported_records_first() {
    let (mut table, _stub, first, second) = two_registered(1);
    table.settle(&first, TaskStatus::Completed { exit_code: 0 });
    table.read(&first, None).unwrap();
    table.settle(&second, TaskStatus::Completed { exit_code: 0 });
    assert_eq!(
        table.get(&first, None).err(),
        Some(TaskError::Discarded {
            kind: "bash".into(),
            id: first
        })
    );
    assert!(table.get(&second, None).is_ok());
}

#[test]
fn shutdown_kills_live_tasks_sends_no_notice_and_refuses_new_ones() {
    let (mut table, stub, live, ended) = two_registered(8);
    table.settle(&ended, TaskStatus::Completed { exit_code: 0 });
    let mut watches = table.begin_shutdown();
    assert_eq!(watches.len(), 1);
    assert_eq!(stub.kills.load(Ordering::SeqCst), 1);
    assert!(
        table
            .settle(&live, TaskStatus::Killed { signal: None })
            .is_none()
    );
    assert_eq!(watches[0].try_recv(), Ok(()));
    let late = table.register("bash".into(), "x".into(), None, Box::new(stub.clone()));
    assert_eq!(late.err(), Some(TaskError::ShutDown));
    assert_eq!(
        stub.kills.load(Ordering::SeqCst),
        2,
        "a refused producer is killed"
    );
    table.clear();
    assert!(table.list(None).is_empty());
}

/// Finished work holding `bytes` of output in memory and `spill` bytes on disk; counts discards.
#[derive(Clone, Default)]
struct Held {
    bytes: usize,
    spill: u64,
    discards: Arc<AtomicUsize>,
}

impl TaskProducer for Held {
    fn read(&self) -> TaskOutput {
        TaskOutput::default()
    }

    fn kill(&self) {}

    fn finished(&self) -> BoxFuture<'static, TaskStatus> {
        Box::pin(std::future::pending())
    }

    fn retained_bytes(&self) -> usize {
        self.bytes
    }

    fn spill_bytes(&self) -> u64 {
        self.spill
    }

    fn discard(&self) {
        self.discards.fetch_add(1, Ordering::SeqCst);
    }
}

fn finished(table: &mut TaskTable, held: &Held) -> String {
    let id = table
        .register("bash".into(), "x".into(), None, Box::new(held.clone()))
        .map(|r| r.id)
        .expect("registered");
    table.settle(&id, TaskStatus::Completed { exit_code: 0 });
    id
}

#[test]
fn retention_discards_read_tasks_first_then_the_oldest_and_says_so() {
    let mut table = TaskTable::new(2);
    let held = Held::default();
    let first = finished(&mut table, &held);
    let second = finished(&mut table, &held);
    // The owner saw the second one's end: it goes first although it is younger.
    table.read(&second, None).expect("readable");
    let third = finished(&mut table, &held);
    assert_eq!(
        held.discards.load(Ordering::SeqCst),
        0,
        "a drained task discards through its stand-in"
    );
    assert!(table.get(&first, None).is_ok());
    assert_eq!(
        table.read(&second, None).err().map(|e| e.to_string()),
        Some(format!(
            "bash task {second} finished and was discarded (retention limit)"
        ))
    );
    let fourth = finished(&mut table, &held);
    assert!(table.get(&first, None).is_err(), "then the oldest");
    assert_eq!(held.discards.load(Ordering::SeqCst), 1);
    assert!(table.get(&third, None).is_ok() && table.get(&fourth, None).is_ok());
    // Ids never issued stay unknown.
    assert_eq!(
        table.read("bash-99", None).err(),
        Some(TaskError::Unknown("bash-99".into()))
    );
}

#[test]
fn retention_bounds_the_memory_of_finished_tasks_records_included() {
    let mut table = TaskTable::with_retention(RetentionLimits {
        max_finished: 100,
        max_retained_bytes: 250_000,
        max_spill_bytes: u64::MAX,
    });
    let big = Held {
        bytes: 100_000,
        ..Held::default()
    };
    let ids: Vec<String> = (0..3).map(|_| finished(&mut table, &big)).collect();
    assert!(
        table.get(&ids[0], None).is_err(),
        "300 000 bytes > 250 000: the oldest goes"
    );
    assert_eq!(big.discards.load(Ordering::SeqCst), 1);
    // What is counted is the producer's bytes and the record's own.
    let load = table.load();
    assert!(
        load.retained_bytes > 200_000 && load.retained_bytes < 203_000,
        "{load:?}"
    );
    // A read drains a task: its output no longer counts, only its small record, so a fourth fits
    // beside the other two.
    table.read(&ids[1], None).expect("readable");
    let drained = table.load().retained_bytes;
    assert!(drained > 100_000 && drained < 102_000, "{drained}");
    finished(&mut table, &big);
    assert!(table.get(&ids[1], None).is_ok() && table.get(&ids[2], None).is_ok());
    // A thousand small finished tasks are not free either: their records alone outgrow a budget.
    let mut small = TaskTable::with_retention(RetentionLimits {
        max_finished: 10_000,
        max_retained_bytes: 100_000,
        max_spill_bytes: u64::MAX,
    });
    let quiet = Held::default();
    let first = finished(&mut small, &quiet);
    for _ in 0..999 {
        finished(&mut small, &quiet);
    }
    assert!(small.load().retained_bytes <= 100_000);
    assert!(small.get(&first, None).is_err(), "the oldest went");
    assert!(small.load().finished > 100, "{:?}", small.load());
}

#[test]
fn retention_bounds_the_spill_bytes_of_finished_tasks_read_or_not() {
    let mut table = TaskTable::with_retention(RetentionLimits {
        max_finished: 100,
        max_retained_bytes: usize::MAX,
        max_spill_bytes: 250,
    });
    let spilled = Held {
        spill: 100,
        ..Held::default()
    };
    let quiet = Held::default();
    let first = finished(&mut table, &spilled);
    let second = finished(&mut table, &spilled);
    let small = finished(&mut table, &quiet);
    // Reading the second to its end frees its memory, not its files: they still count, and being
    // read it goes first.
    table.read(&second, None).expect("readable");
    assert_eq!(table.load().spill_bytes, 200);
    let third = finished(&mut table, &spilled);
    assert!(table.get(&second, None).is_err(), "read first");
    assert!(table.get(&first, None).is_ok() && table.get(&third, None).is_ok());
    let fourth = finished(&mut table, &spilled);
    assert_eq!(
        table.read(&first, None).err().map(|e| e.to_string()),
        Some(format!(
            "bash task {first} finished and was discarded (retention limit)"
        )),
        "then the oldest that holds spill files"
    );
    assert!(
        table.get(&small, None).is_ok(),
        "a task with no spill file is no candidate"
    );
    assert!(table.get(&third, None).is_ok() && table.get(&fourth, None).is_ok());
    assert_eq!(table.load().spill_bytes, 200);
    assert_eq!(
        spilled.discards.load(Ordering::SeqCst),
        1,
        "the unread one discards through its producer (the read one through its stand-in)"
    );
}

#[test]
fn a_long_label_is_kept_to_its_first_bytes() {
    let mut table = TaskTable::new(10);
    let stub = Stub::default();
    let short = table
        .register(
            "bash".into(),
            "echo hi".into(),
            None,
            Box::new(stub.clone()),
        )
        .unwrap()
        .id;
    assert_eq!(table.get(&short, None).unwrap().label, "echo hi");
    // A heredoc of 4 KiB, with a two-byte character across the cut.
    let long = format!("cat <<'EOF'\n{}é{}\nEOF", "x".repeat(240), "y".repeat(4096));
    let id = table
        .register("bash".into(), long.clone(), None, Box::new(stub))
        .unwrap()
        .id;
    let label = table.get(&id, None).unwrap().label;
    assert!(label.len() <= MAX_LABEL_BYTES, "{}", label.len());
    assert!(label.ends_with('…'), "{label}");
    assert!(long.starts_with(label.trim_end_matches('…')), "{label}");
    assert_eq!(
        label.len(),
        252 + "…".len(),
        "cut before the two-byte character"
    );
}

/// Work that, once ended, left a stub running.
struct Leaves(Stub);

impl TaskProducer for Leaves {
    fn read(&self) -> TaskOutput {
        TaskOutput::default()
    }

    fn kill(&self) {}

    fn finished(&self) -> BoxFuture<'static, TaskStatus> {
        Box::pin(std::future::pending())
    }

    fn left_behind(&self) -> Option<crate::LeftBehind> {
        Some(crate::LeftBehind {
            producer: Box::new(self.0.clone()),
            description: "pid 42 (server)".into(),
            pids: vec![42],
        })
    }
}

/// A table holding one task, `serve`, whose work leaves the returned stub running.
fn table_with_a_task_that_leaves() -> (TaskTable, String, Stub) {
    let mut table = TaskTable::new(8);
    let left = Stub::default();
    let work = Box::new(Leaves(left.clone()));
    let id = table
        .register("bash".into(), "serve".into(), None, work)
        .unwrap()
        .id;
    (table, id, left)
}

#[test]
fn what_an_ended_task_left_running_becomes_a_task_named_in_its_end() {
    let (mut table, id, left) = table_with_a_task_that_leaves();
    let successor = table
        .adopt_left_behind(&id)
        .expect("a task of what was left");
    assert_eq!(successor.id, "bash-2");
    let done = table
        .settle(&id, TaskStatus::Completed { exit_code: 0 })
        .expect("a notice");
    let named = crate::LeftRunning {
        task_id: "bash-2".into(),
        description: "pid 42 (server)".into(),
        pids: vec![42],
    };
    assert_eq!(done.snapshot.left_running.as_ref(), Some(&named));
    let new = table.get("bash-2", None).expect("a task");
    assert_eq!(new.label, "left running by: serve");
    assert!(new.status.is_running() && new.left_running.is_none());
    // Asked once: a settled task leaves nothing more.
    assert!(table.adopt_left_behind(&id).is_none());
    assert!(table.kill("bash-2", None).is_ok());
    assert_eq!(left.kills.load(Ordering::SeqCst), 1);
}

#[test]
fn a_task_killed_before_its_end_arrived_has_what_it_left_killed_not_adopted() {
    let (mut table, id, left) = table_with_a_task_that_leaves();
    // The kill lands after the work ended but before the registry heard of it.
    assert!(table.kill(&id, None).is_ok());
    assert!(table.adopt_left_behind(&id).is_none());
    assert_eq!(
        left.kills.load(Ordering::SeqCst),
        1,
        "what it left is killed"
    );
    let done = table.settle(&id, TaskStatus::Completed { exit_code: 0 });
    let snapshot = table.get(&id, None).unwrap();
    assert_eq!(snapshot.status, TaskStatus::Killed { signal: None });
    assert!(snapshot.left_running.is_none());
    assert!(done.is_none_or(|done| done.snapshot.left_running.is_none()));
    assert_eq!(table.list(None).len(), 1, "no task was made of it");
}
