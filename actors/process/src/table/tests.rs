//! The table's rules on their own: no actor, and real children only where a record needs one (their
//! drivers are run right here, as plain futures).

use std::time::Duration;

use tokio::sync::oneshot;

use super::*;
use crate::abort::AbortSignal;
use crate::errors::SpawnError;
use crate::messages::SpawnedProcess;
use crate::policy::{AdmitAll, MaxConcurrent, ProcessPolicy};
use crate::spawn::{Started, Stdin, start_child};
use crate::spec::ProcessSpawnSpec;

type Answer = oneshot::Receiver<Result<SpawnedProcess, SpawnError>>;

fn table(policy: Box<dyn ProcessPolicy>, spill: &tempfile::TempDir) -> ProcessTable {
    let config = ManagerConfig {
        spill_dir: Some(spill.path().to_path_buf()),
        policy,
        ..Default::default()
    };
    let mut table = ProcessTable::new(config, AmbientEnv::capture(std::env::vars_os()));
    // No real group is ever left behind by these tests.
    table.group_exists = |_| false;
    table
}

fn spec(cmd: &str) -> ProcessSpawnSpec {
    ProcessSpawnSpec::new(
        vec!["bash".into(), "-c".into(), cmd.into()],
        std::env::temp_dir(),
        1024,
        1 << 20,
        Duration::from_secs(3),
    )
}

fn submit(table: &mut ProcessTable, spec: ProcessSpawnSpec) -> (Pacing, Answer) {
    let (reply, answer) = oneshot::channel();
    (table.submit(spec, reply.into()), answer)
}

fn error_of(mut answer: Answer) -> String {
    match answer.try_recv() {
        Ok(Err(err)) => err.to_string(),
        Ok(Ok(_)) => panic!("expected an error, got a process"),
        Err(err) => panic!("expected an answer: {err}"),
    }
}

/// Starts `launch`'s child as the manager would without a cgroup: in a process group of its own.
fn start_in_group(launch: &Launch) -> Result<(Started, Contained), SpawnError> {
    start_child(
        &launch.program,
        &launch.spec.argv,
        &launch.spec.cwd,
        &launch.env,
        Stdin::Null,
        &Contained::Group,
        None,
    )
    .map(|started| (started, Contained::Group))
}

/// Launches the next ready spawn and drives it to settlement; returns its id.
async fn launch_and_settle(table: &mut ProcessTable) -> (ProcessId, Pacing) {
    let launch = table.next_launch().expect("a ready launch");
    let started = start_in_group(&launch);
    let launched = table.launched(launch, started);
    let (id, driver) = launched.driver.expect("a started child");
    assert_eq!(table.stats().live, 1);
    let (contained, remains) = driver.run().await;
    (id, table.settled(id, contained, remains).pacing)
}

#[test]
fn checks_come_in_a_fixed_order() {
    let spill = tempfile::tempdir().unwrap();
    let mut table = table(Box::new(AdmitAll), &spill);
    let aborted = AbortSignal::new();
    aborted.abort("stop");
    let mut both = spec("true");
    both.argv.clear();
    both.abort = Some(aborted);
    let (pacing, answer) = submit(&mut table, both);
    assert_eq!(pacing, Pacing::Idle);
    assert_eq!(error_of(answer), "aborted before spawn: stop");

    let mut empty = spec("true");
    empty.argv = vec![String::new()];
    let (_, answer) = submit(&mut table, empty);
    assert_eq!(
        error_of(answer),
        "invalid argv: expected a non-empty program name at argv[0]"
    );

    let mut missing = spec("true");
    missing.cwd = spill.path().join("missing");
    let (pacing, answer) = submit(&mut table, missing);
    assert_eq!(pacing, Pacing::Idle);
    assert!(error_of(answer).starts_with("workdir "));
    assert_eq!(table.stats(), ManagerStats::default());
}

#[test]
fn a_refusing_policy_answers_at_once() {
    let spill = tempfile::tempdir().unwrap();
    let mut table = table(Box::new(MaxConcurrent(0)), &spill);
    let (pacing, answer) = submit(&mut table, spec("true"));
    assert_eq!(pacing, Pacing::Idle);
    assert_eq!(
        error_of(answer),
        "spawn refused by supervisor policy: MaxConcurrent(0) admits no process"
    );
}

#[test]
fn the_first_spawn_launches_now_and_later_ones_after_a_yield() {
    let spill = tempfile::tempdir().unwrap();
    let mut table = table(Box::new(AdmitAll), &spill);
    let (first, _a) = submit(&mut table, spec("true"));
    let (second, _b) = submit(&mut table, spec("true"));
    assert_eq!(first, Pacing::LaunchNow);
    assert_eq!(second, Pacing::Idle, "the chain under way takes it");
    assert!(table.next_launch().is_some());
    assert!(table.next_launch().is_some());
    assert!(table.next_launch().is_none(), "the chain ends");
    let (third, _c) = submit(&mut table, spec("true"));
    assert_eq!(third, Pacing::LaunchNow);
}

/// A table admitting one process at a time with two spawns of `true` submitted: the answers of the
/// one ready to launch and of the one waiting.
fn one_ready_one_waiting(spill: &tempfile::TempDir) -> (ProcessTable, Answer, Answer) {
    let mut table = table(Box::new(MaxConcurrent(1)), spill);
    let (_, ready) = submit(&mut table, spec("true"));
    let (_, waiting) = submit(&mut table, spec("true"));
    (table, ready, waiting)
}

#[test]
fn shutdown_refuses_waiting_and_later_spawns() {
    let spill = tempfile::tempdir().unwrap();
    let (mut table, ready, waiting) = one_ready_one_waiting(&spill);
    assert_eq!(
        table.stats().queued,
        1,
        "the policy counts ready launches as running"
    );
    let (_, third) = submit(&mut table, spec("true"));
    assert_eq!(table.stats().queued, 2);
    assert!(table.begin_shutdown().is_empty(), "nothing was live");
    for answer in [ready, waiting, third] {
        assert_eq!(error_of(answer), "process manager is shut down");
    }
    let (_, later) = submit(&mut table, spec("true"));
    assert_eq!(error_of(later), "process manager is shut down");
    assert_eq!(table.stats().queued, 0);
}

#[test]
fn a_waiting_spawn_whose_caller_left_is_never_launched() {
    let spill = tempfile::tempdir().unwrap();
    let (mut table, _ready, gone) = one_ready_one_waiting(&spill);
    drop(gone);
    let launch = table.next_launch().unwrap();
    let failed = table.launched(launch, Err(SpawnError::ShutDown));
    assert!(failed.driver.is_none());
    assert_eq!(failed.pacing, Pacing::Idle);
    assert!(table.next_launch().is_none());
    assert_eq!(table.stats().queued, 0);
}

#[actix_rt::test]
async fn a_waiting_spawn_is_admitted_when_the_running_one_settles() {
    let spill = tempfile::tempdir().unwrap();
    let mut table = table(Box::new(MaxConcurrent(1)), &spill);
    let (pacing, first) = submit(&mut table, spec("exit 3"));
    assert_eq!(pacing, Pacing::LaunchNow);
    let (pacing, _second) = submit(&mut table, spec("true"));
    assert_eq!(pacing, Pacing::Idle);
    assert_eq!(table.stats().queued, 1);

    let (id, pacing) = launch_and_settle(&mut table).await;
    assert_eq!(pacing, Pacing::LaunchNow, "admitted as the first settled");
    assert_eq!(table.stats().queued, 0);
    let spawned = first.await.unwrap().unwrap();
    assert_eq!(spawned.id, id);
    match table.wait(id).unwrap() {
        WaitFor::Settled(outcome) => assert_eq!(outcome.exit_code, Some(3)),
        WaitFor::Pending(_) => panic!("settled already"),
    }
    assert_eq!(table.kill(id).unwrap(), KillOutcome::AlreadySettled);
    let stats = table.stats();
    assert_eq!((stats.live, stats.settled, stats.peak_live), (0, 1, 1));

    table.release(id).unwrap();
    assert_eq!(
        table.read(id, StreamKind::Stdout, 0),
        Err(ProcessError::Unknown(id))
    );
    let (next, _) = launch_and_settle(&mut table).await;
    assert_ne!(next, id, "a reused slot gets a new generation");
    assert_eq!(next.generation(), id.generation() + 1);
}

#[actix_rt::test]
async fn a_launched_child_nobody_waits_for_is_killed_and_released() {
    let spill = tempfile::tempdir().unwrap();
    let mut table = table(Box::new(AdmitAll), &spill);
    let (_, answer) = submit(&mut table, spec("sleep 30"));
    drop(answer);
    let launch = table.next_launch().unwrap();
    let started = start_in_group(&launch);
    let (id, driver) = table.launched(launch, started).driver.unwrap();
    let (contained, remains) = tokio::time::timeout(Duration::from_secs(30), driver.run())
        .await
        .expect("the kill token was fired at launch");
    table.settled(id, contained, remains);
    assert_eq!(
        table.stats(),
        ManagerStats {
            peak_live: 1,
            ..ManagerStats::default()
        }
    );
}
