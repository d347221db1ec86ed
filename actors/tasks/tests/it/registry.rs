//! The TS-, TV- and TL- cases that apply to dsh's registry, driven by a scripted producer.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix::prelude::*;
use dsh_tasks::*;
use dsh_test_support::actors::{Log, Recorder, Stop};
use futures::future::BoxFuture;
use tokio::sync::oneshot;

/// A producer whose output and end the test scripts.
struct Stub {
    chunks: Arc<Mutex<VecDeque<String>>>,
    kills: Arc<AtomicUsize>,
    end: Mutex<Option<oneshot::Receiver<TaskStatus>>>,
}

/// The test's side of a [`Stub`].
struct StubControl {
    chunks: Arc<Mutex<VecDeque<String>>>,
    kills: Arc<AtomicUsize>,
    end: Option<oneshot::Sender<TaskStatus>>,
}

impl StubControl {
    fn print(&self, text: &str) {
        self.chunks.lock().unwrap().push_back(text.to_owned());
    }
    fn settle(&mut self, status: TaskStatus) {
        let _ = self.end.take().expect("settled once").send(status);
    }
    fn kills(&self) -> usize {
        self.kills.load(Ordering::SeqCst)
    }
}

fn stub() -> (Box<dyn TaskProducer>, StubControl) {
    let chunks = Arc::new(Mutex::new(VecDeque::new()));
    let kills = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = oneshot::channel();
    let producer = Stub {
        chunks: chunks.clone(),
        kills: kills.clone(),
        end: Mutex::new(Some(rx)),
    };
    (
        Box::new(producer),
        StubControl {
            chunks,
            kills,
            end: Some(tx),
        },
    )
}

impl TaskProducer for Stub {
    fn read(&self) -> TaskOutput {
        let delta = self.chunks.lock().unwrap().drain(..).collect();
        TaskOutput {
            delta,
            ..Default::default()
        }
    }
    fn kill(&self) {
        self.kills.fetch_add(1, Ordering::SeqCst);
    }
    fn finished(&self) -> BoxFuture<'static, TaskStatus> {
        let rx = self.end.lock().unwrap().take();
        Box::pin(async move {
            match rx {
                Some(rx) => rx.await.unwrap_or(TaskStatus::Killed { signal: None }),
                None => std::future::pending().await,
            }
        })
    }
}

/// A minimal agent: it drops its notices, and can be stopped to close its mailbox.
type Agent = Recorder<Inject>;

fn agent(session: &str) -> (Addr<Agent>, AgentRef) {
    let addr = Agent::start_discarding();
    let agent_ref = AgentRef::new(session, addr.clone().recipient());
    (addr, agent_ref)
}

struct Setup {
    registry: Addr<TaskRegistry>,
    done: Log<TaskDone>,
}

impl Setup {
    fn new() -> Self {
        Self::with(RegistryConfig {
            owner_check_interval: Duration::from_millis(20),
            ..Default::default()
        })
    }
    fn with(config: RegistryConfig) -> Self {
        let registry = TaskRegistry::new(config).start();
        let (recorder, done) = Recorder::start();
        registry.do_send(Subscribe(recorder.recipient()));
        Self { registry, done }
    }
    async fn register(&self, kind: &str, owner: Option<AgentRef>) -> (String, StubControl) {
        let (id, control) = self.try_register(kind, "sleep 60", owner).await;
        (id.unwrap(), control)
    }
    async fn try_register(
        &self,
        kind: &str,
        label: &str,
        owner: Option<AgentRef>,
    ) -> (Result<String, TaskError>, StubControl) {
        let (producer, control) = stub();
        let registered = self
            .registry
            .send(Register {
                kind: kind.into(),
                label: label.into(),
                owner,
                producer,
            })
            .await
            .unwrap();
        (registered, control)
    }
    /// Sends the message `make` builds for task `id` as `caller` asks about it.
    async fn about<M>(
        &self,
        id: &str,
        caller: Option<&str>,
        make: impl FnOnce(String, Option<String>) -> M,
    ) -> M::Result
    where
        M: Message + Send + 'static,
        M::Result: Send,
        TaskRegistry: Handler<M>,
    {
        let message = make(id.into(), caller.map(Into::into));
        self.registry.send(message).await.unwrap()
    }
    async fn read(&self, id: &str, caller: Option<&str>) -> Result<ReadReply, TaskError> {
        self.about(id, caller, |id, caller| ReadTask { id, caller })
            .await
    }
    async fn kill(&self, id: &str, caller: Option<&str>) -> Result<KillReply, TaskError> {
        self.about(id, caller, |id, caller| KillTask { id, caller })
            .await
    }
    async fn get(&self, id: &str, caller: Option<&str>) -> Result<TaskSnapshot, TaskError> {
        self.about(id, caller, |id, caller| GetTask { id, caller })
            .await
    }
    async fn list(&self, caller: Option<&str>) -> Vec<String> {
        let tasks = self
            .registry
            .send(ListTasks {
                caller: caller.map(Into::into),
            })
            .await
            .unwrap();
        tasks.into_iter().map(|t| t.id).collect()
    }
    /// Waits until `id` has settled (event-driven by polling the registry, bounded).
    async fn settled(&self, id: &str, caller: Option<&str>) -> TaskSnapshot {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let snapshot = self.get(id, caller).await.expect("visible task");
            if snapshot.settled {
                return snapshot;
            }
            assert!(Instant::now() < deadline, "{id} never settled");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    async fn done_count(&self, n: usize) -> Vec<TaskDone> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let done = self.done.lock().unwrap().clone();
            if done.len() >= n {
                return done;
            }
            assert!(Instant::now() < deadline, "only {} TaskDone", done.len());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// Waits (bounded) until the task behind `control` is killed, then ends it as killed by SIGTERM.
async fn ended_by_its_kill(control: &mut StubControl) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while control.kills() == 0 {
        assert!(Instant::now() < deadline, "the task was never killed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    control.settle(TaskStatus::Killed {
        signal: Some("SIGTERM".into()),
    });
}

const COMPLETED_0: TaskStatus = TaskStatus::Completed { exit_code: 0 };

/// Catalogue: TS-01.
#[actix_rt::test]
async fn stub_producer_serves_the_whole_api() {
    let s = Setup::new();
    let (id, mut control) = s.register("bash", None).await;
    assert_eq!(id, "bash-1");
    assert_eq!(s.list(None).await, vec!["bash-1"]);
    assert_eq!(s.get(&id, None).await.unwrap().status, TaskStatus::Running);
    assert_eq!(s.read(&id, None).await.unwrap().output.delta, "");
    assert_eq!(
        s.kill(&id, None).await.unwrap().outcome,
        TaskKillOutcome::Killed
    );
    control.settle(TaskStatus::Killed {
        signal: Some("SIGTERM".into()),
    });
    let done = s.done_count(1).await;
    assert_eq!(done[0].snapshot.id, "bash-1");
}

/// Catalogue: TL-03.
#[actix_rt::test]
async fn invalid_spec_registers_nothing_and_keeps_the_counter() {
    let s = Setup::new();
    for (kind, label, refusal) in [
        ("", "x", "invalid task kind: expected a non-empty string"),
        (
            "bash",
            " ",
            "invalid task label: expected a non-empty string",
        ),
    ] {
        let (refused, _c) = s.try_register(kind, label, None).await;
        assert_eq!(refused.unwrap_err().to_string(), refusal);
    }
    assert_eq!(s.register("bash", None).await.0, "bash-1");
}

/// Catalogue: TL-04.
#[actix_rt::test]
async fn ids_count_per_kind() {
    let s = Setup::new();
    let mut ids = Vec::new();
    for kind in ["bash", "bash", "subagent", "workflow"] {
        ids.push(s.register(kind, None).await.0);
    }
    assert_eq!(ids, ["bash-1", "bash-2", "subagent-1", "workflow-1"]);
}

/// Catalogue: TL-05.
#[actix_rt::test]
async fn reads_consume_and_a_read_after_the_end_marks_reported() {
    let s = Setup::new();
    let (id, mut control) = s.register("bash", None).await;
    control.print("first");
    let r = s.read(&id, None).await.unwrap();
    assert_eq!(
        (
            r.output.delta.as_str(),
            &r.snapshot.status,
            r.snapshot.reported
        ),
        ("first", &TaskStatus::Running, false)
    );
    assert_eq!(s.read(&id, None).await.unwrap().output.delta, "");
    control.print("rest");
    control.settle(COMPLETED_0);
    s.settled(&id, None).await;
    let r = s.read(&id, None).await.unwrap();
    assert_eq!(r.output.delta, "rest");
    assert_eq!(r.snapshot.status, COMPLETED_0);
    assert!(r.snapshot.reported && r.snapshot.finished_at.is_some());
}

/// Catalogue: TL-09.
#[actix_rt::test]
async fn an_unknown_task_id_is_an_error() {
    let s = Setup::new();
    assert_eq!(
        s.read("bash-99", None).await.unwrap_err().to_string(),
        "unknown bash task \"bash-99\""
    );
    assert_eq!(
        s.kill("bash-99", None).await.unwrap_err(),
        TaskError::Unknown("bash-99".into())
    );
}

/// Catalogue: TL-10.
#[actix_rt::test]
async fn task_done_sent_exactly_once_per_task() {
    let s = Setup::new();
    let (id, mut control) = s.register("bash", None).await;
    control.settle(COMPLETED_0);
    let done = s.done_count(1).await;
    assert_eq!(
        (
            done[0].snapshot.id.as_str(),
            &done[0].snapshot.status,
            done[0].snapshot.reported,
            done[0].awaited
        ),
        (id.as_str(), &COMPLETED_0, false, false)
    );
    // Later reads and kills never produce a second one.
    s.read(&id, None).await.unwrap();
    s.kill(&id, None).await.unwrap();
    s.registry.send(ListTasks { caller: None }).await.unwrap();
    assert_eq!(s.done.lock().unwrap().len(), 1);
}

/// A call waiting for the end when it comes reads it next and shows it: the end is `awaited`, and
/// no notice is due (the tool skips it). A wait that already ended (timed out) does not count.
#[actix_rt::test]
async fn an_end_a_wait_was_waiting_for_is_awaited() {
    let s = Setup::new();
    let wait = |id: &str, timeout: Duration| WaitTask {
        id: id.into(),
        caller: None,
        timeout,
        until: None,
        for_input: false,
        cancel: Box::pin(std::future::pending()),
    };
    let (waited, mut control) = s.register("bash", None).await;
    let pending = s.registry.send(wait(&waited, Duration::from_secs(60)));
    let waiting = tokio::spawn(pending);
    // The registry handles messages in order: once this answers, the wait is registered.
    s.get(&waited, None).await.unwrap();
    control.settle(COMPLETED_0);
    assert_eq!(waiting.await.unwrap().unwrap(), Ok(WaitOutcome::Settled));
    let (unwaited, mut other) = s.register("bash", None).await;
    let timed_out = s.registry.send(wait(&unwaited, Duration::from_millis(1)));
    assert_eq!(timed_out.await.unwrap(), Ok(WaitOutcome::TimedOut));
    other.settle(COMPLETED_0);
    let done = s.done_count(2).await;
    let awaited = |id: &str| done.iter().find(|d| d.snapshot.id == id).unwrap().awaited;
    assert!(awaited(&waited));
    assert!(!awaited(&unwaited));
}

/// Catalogue: TL-14.
#[actix_rt::test]
async fn kill_marks_reported_and_the_end_keeps_killed() {
    let s = Setup::new();
    let (id, mut control) = s.register("bash", None).await;
    let reply = s.kill(&id, None).await.unwrap();
    assert_eq!(reply.outcome, TaskKillOutcome::Killed);
    assert_eq!(
        (reply.snapshot.status, reply.snapshot.reported),
        (TaskStatus::Killed { signal: None }, true)
    );
    assert_eq!(control.kills(), 1);
    control.settle(TaskStatus::Killed {
        signal: Some("SIGTERM".into()),
    });
    let done = s.done_count(1).await;
    assert_eq!(
        done[0].snapshot.status,
        TaskStatus::Killed {
            signal: Some("SIGTERM".into())
        }
    );
    assert!(
        done[0].snapshot.reported,
        "the owner already saw the end: no notice is due"
    );
}

#[actix_rt::test]
async fn a_killed_task_that_traps_and_exits_zero_stays_killed() {
    let s = Setup::new();
    let (id, mut control) = s.register("bash", None).await;
    s.kill(&id, None).await.unwrap();
    control.settle(COMPLETED_0);
    assert_eq!(
        s.settled(&id, None).await.status,
        TaskStatus::Killed { signal: None }
    );
}

/// Catalogue: TL-15.
#[actix_rt::test]
async fn kill_after_the_end_is_already_finished() {
    let s = Setup::new();
    let (id, mut control) = s.register("bash", None).await;
    control.settle(COMPLETED_0);
    s.settled(&id, None).await;
    let reply = s.kill(&id, None).await.unwrap();
    assert_eq!(reply.outcome, TaskKillOutcome::AlreadyFinished);
    assert_eq!(control.kills(), 0);
    // A second kill while the first is under way is "killed" (issue 11: the task is still being
    // killed, not finished), and does not kill again; once settled it is "already finished".
    let (id2, mut c2) = s.register("bash", None).await;
    s.kill(&id2, None).await.unwrap();
    assert_eq!(
        s.kill(&id2, None).await.unwrap().outcome,
        TaskKillOutcome::Killed
    );
    assert_eq!(c2.kills(), 1);
    c2.settle(COMPLETED_0);
    s.settled(&id2, None).await;
    assert_eq!(
        s.kill(&id2, None).await.unwrap().outcome,
        TaskKillOutcome::AlreadyFinished
    );
}

/// Catalogue: TL-25.
#[actix_rt::test]
async fn only_the_owning_session_reads_kills_and_gets_an_owned_task() {
    let s = Setup::new();
    let (_alice_addr, alice) = agent("alice");
    let (owned, _c1) = s.register("bash", Some(alice)).await;
    let (open, _c2) = s.register("bash", None).await;
    assert!(s.read(&owned, Some("alice")).await.is_ok());
    assert!(s.read(&open, Some("bob")).await.is_ok());
    let foreign = TaskError::Foreign(owned.clone());
    assert_eq!(s.read(&owned, Some("bob")).await.unwrap_err(), foreign);
    assert_eq!(s.kill(&owned, Some("bob")).await.unwrap_err(), foreign);
    assert_eq!(s.get(&owned, Some("bob")).await.unwrap_err(), foreign);
    assert_eq!(
        s.read(&owned, None).await.unwrap_err().to_string(),
        "task bash-1 belongs to another session"
    );
    assert_eq!(
        s.get(&owned, Some("alice")).await.unwrap().status,
        TaskStatus::Running,
        "bob's kill changed nothing"
    );
}

/// Catalogue: TL-26.
#[actix_rt::test]
async fn a_session_lists_its_own_and_unowned_tasks() {
    let s = Setup::new();
    let (_a, alice) = agent("alice");
    let (_b, bob) = agent("bob");
    let (a, _c1) = s.register("bash", Some(alice)).await;
    let (b, _c2) = s.register("bash", Some(bob)).await;
    let (open, _c3) = s.register("bash", None).await;
    assert_eq!(s.list(Some("alice")).await, vec![a, open.clone()]);
    assert_eq!(s.list(Some("bob")).await, vec![b, open.clone()]);
    assert_eq!(s.list(None).await, vec![open]);
}

#[actix_rt::test]
async fn ownership_persists_after_completion() {
    let s = Setup::new();
    let (_a, alice) = agent("alice");
    let (id, mut control) = s.register("bash", Some(alice)).await;
    control.settle(COMPLETED_0);
    s.done_count(1).await;
    assert_eq!(
        s.read(&id, Some("bob")).await.unwrap_err(),
        TaskError::Foreign(id.clone())
    );
    assert!(s.read(&id, Some("alice")).await.is_ok());
}

/// Catalogue: TL-30.
#[actix_rt::test]
async fn releasing_an_owner_kills_joins_and_removes_its_tasks() {
    let s = Setup::new();
    let (_a, alice) = agent("alice");
    let (live, mut live_control) = s.register("bash", Some(alice.clone())).await;
    let (finished, mut finished_control) = s.register("bash", Some(alice)).await;
    let (open, _c) = s.register("bash", None).await;
    finished_control.settle(COMPLETED_0);
    s.settled(&finished, Some("alice")).await;
    let release = s.registry.send(ReleaseOwner {
        session_id: "alice".into(),
    });
    // The release waits for the live task to end.
    ended_by_its_kill(&mut live_control).await;
    release.await.unwrap();
    assert_eq!(s.list(Some("alice")).await, vec![open]);
    assert_eq!(
        s.read(&live, Some("alice")).await.unwrap_err(),
        TaskError::Unknown(live)
    );
}

/// Catalogue: TL-32.
#[actix_rt::test]
async fn a_gone_agent_is_released_without_touching_a_same_session_replacement() {
    let s = Setup::new();
    let (old_addr, old) = agent("sess");
    let (new_addr, new) = agent("sess");
    let (old_task, mut old_control) = s.register("bash", Some(old)).await;
    let (new_task, new_control) = s.register("bash", Some(new)).await;
    old_addr.send(Stop::new()).await.unwrap();
    ended_by_its_kill(&mut old_control).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.list(Some("sess")).await.contains(&old_task) {
        assert!(
            Instant::now() < deadline,
            "the gone owner's record was never removed"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(s.list(Some("sess")).await, vec![new_task]);
    assert_eq!(new_control.kills(), 0);
    drop(new_addr);
}

/// Catalogue: TL-35.
#[actix_rt::test]
async fn shutdown_kills_awaits_and_sends_no_task_done() {
    let s = Setup::new();
    let (_id, mut control) = s.register("bash", None).await;
    let shutdown = s.registry.send(ShutdownTasks);
    ended_by_its_kill(&mut control).await;
    shutdown.await.unwrap();
    assert!(s.done.lock().unwrap().is_empty());
    let (producer, control) = stub();
    let refused = s
        .registry
        .send(Register {
            kind: "bash".into(),
            label: "x".into(),
            owner: None,
            producer,
        })
        .await
        .unwrap();
    assert_eq!(refused.unwrap_err(), TaskError::ShutDown);
    assert_eq!(control.kills(), 1, "work refused at shutdown is stopped");
}

#[actix_rt::test]
async fn finished_records_over_the_cap_evict_reported_ones_first() {
    let s = Setup::with(RegistryConfig {
        max_finished: 2,
        ..Default::default()
    });
    let mut ids = Vec::new();
    for _ in 0..3 {
        let (id, mut control) = s.register("bash", None).await;
        control.settle(COMPLETED_0);
        s.settled(&id, None).await;
        ids.push(id);
    }
    // Three settled, cap two, none reported: the oldest (bash-1) went.
    assert_eq!(s.list(None).await, vec!["bash-2", "bash-3"]);
    // bash-2 is read (reported), so it goes before the older-but-unread rule applies to bash-3.
    s.read("bash-2", None).await.unwrap();
    let (_id4, mut control) = s.register("bash", None).await;
    control.settle(COMPLETED_0);
    s.done_count(4).await;
    assert_eq!(s.list(None).await, vec!["bash-3", "bash-4"]);
}

/// Catalogue: TV-01.
#[actix_rt::test]
async fn every_snapshot_is_coherent() {
    let s = Setup::new();
    let (_a, alice) = agent("alice");
    let (id, mut control) = s.register("bash", Some(alice)).await;
    let running = s.get(&id, Some("alice")).await.unwrap();
    control.settle(TaskStatus::Completed { exit_code: 3 });
    let settled = s.settled(&id, Some("alice")).await;
    for snap in [&running, &settled] {
        let (kind, ordinal) = snap.id.split_once('-').unwrap();
        assert_eq!(kind, snap.kind);
        assert!(ordinal.parse::<u64>().unwrap() >= 1);
        assert!(!snap.label.is_empty());
        assert_eq!(snap.finished_at.is_some(), snap.settled);
        if let Some(finished) = snap.finished_at {
            assert!(finished >= snap.started_at);
        }
        assert_eq!(snap.owner_session.as_deref(), Some("alice"));
    }
    assert_eq!(settled.status, TaskStatus::Completed { exit_code: 3 });
}
