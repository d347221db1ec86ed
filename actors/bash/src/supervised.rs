//! Restart for host-started background commands: a task whose command is started again when it
//! ends, as an OTP supervisor child or a systemd unit with `Restart=` is. Tasks a model starts never
//! restart; only a host builds a [`Supervised`] task (through `dsh::Runtime::start_supervised`, or by
//! registering one itself).
//!
//! The supervisor loop, one per task:
//!
//! ```text
//!   start ──► run ──ended──► stopping (killed)? ─────────────────────────► finished (last status)
//!                            policy says no restart (never; on-failure and exit 0)? ─► finished
//!                            more than `max_restarts` in `within`? ──► give up: tell the owner ─► finished
//!                            else wait the backoff (a kill ends it) ──► start again ──► run
//! ```
//!
//! The task's output is one stream across runs: what a run left unread is kept and followed by a
//! line `[restarted after <status>; run <n>]`. What a run left running is killed at its end. Every
//! decision is a tracing event (target `dsh::policy`); giving up is also a notice to the owner, when
//! there is one.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use actix::prelude::*;
use dsh_process::lock_unpoisoned;
use dsh_tasks::{AgentRef, Inject, OutputCondition, TaskOutput, TaskProducer, TaskStatus};
use futures::future::BoxFuture;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::background::BashProcess;
use crate::errors::ExecError;
use crate::messages::Start;
use crate::request::BashExecSpec;

/// When a supervised command is started again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Restart {
    /// Never: the task ends with its command (as a model's task does).
    Never,
    /// When the command failed: a non-zero exit, a signal, or out of memory.
    OnFailure,
    /// Whenever the command ends, unless the task was killed.
    Always,
}

/// How a supervised command is restarted: when, how often at most, and how long to wait first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RestartPolicy {
    /// When to restart.
    pub restart: Restart,
    /// The intensity limit: at most this many restarts within `within`; one more gives up.
    pub max_restarts: u32,
    /// The intensity window.
    pub within: Duration,
    /// The wait before the first restart of a burst; doubled for each further restart in the window.
    pub backoff: Duration,
    /// The longest wait.
    pub max_backoff: Duration,
}

impl Default for RestartPolicy {
    /// On failure, at most 5 restarts in 60 s, waiting 100 ms doubling to 10 s (OTP's intensity
    /// defaults are 1 in 5 s; a command is cheaper to restart than a process tree is to rebuild).
    fn default() -> Self {
        Self {
            restart: Restart::OnFailure,
            max_restarts: 5,
            within: Duration::from_secs(60),
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(10),
        }
    }
}

impl RestartPolicy {
    /// The wait before a restart when `recent` restarts already happened within the window:
    /// `backoff` doubled once per recent restart, at most `max_backoff`.
    pub fn backoff_after(&self, recent: usize) -> Duration {
        let doublings = recent.min(16) as u32;
        self.backoff
            .saturating_mul(2u32.saturating_pow(doublings))
            .min(self.max_backoff)
    }

    /// Whether a run that ended as `status` is started again (intensity aside).
    fn wants_restart(&self, status: &TaskStatus) -> bool {
        match self.restart {
            Restart::Never => false,
            Restart::Always => true,
            Restart::OnFailure => !matches!(status, TaskStatus::Completed { exit_code: 0 }),
        }
    }
}

/// A background command started again by its [`RestartPolicy`]. Cheap to clone; clones share state.
#[derive(Clone)]
pub struct Supervised {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
    /// Bumped when a new run starts, so waiters on output look at the new run.
    runs: watch::Sender<u64>,
    /// Set once the loop has ended: the task's final status.
    finished: watch::Sender<Option<TaskStatus>>,
    /// The registry's id, once known (for the give-up notice).
    task_id: OnceLock<String>,
}

struct State {
    current: Option<BashProcess>,
    /// Unread output of earlier runs, with their restart lines.
    carried: String,
    stopping: bool,
}

impl Supervised {
    /// Starts `spec` through `start` (an executor) and supervises it with `policy`; `owner` hears
    /// when the supervisor gives up. Fails as a background start fails.
    pub async fn start(
        start: Recipient<Start>,
        spec: BashExecSpec,
        policy: RestartPolicy,
        owner: Option<AgentRef>,
    ) -> Result<Self, ExecError> {
        let first = start_run(&start, &spec).await?;
        let supervised = Supervised {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    current: Some(first),
                    carried: String::new(),
                    stopping: false,
                }),
                runs: watch::Sender::new(1),
                finished: watch::Sender::new(None),
                task_id: OnceLock::new(),
            }),
        };
        actix::spawn(supervise(supervised.clone(), start, spec, policy, owner));
        Ok(supervised)
    }

    /// Names the task for the give-up notice (the id the registry gave it).
    pub fn set_task_id(&self, id: impl Into<String>) {
        let _ = self.inner.task_id.set(id.into());
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock_unpoisoned(&self.inner.state)
    }

    fn current(&self) -> Option<BashProcess> {
        self.state().current.clone()
    }

    /// Watches the earlier runs' unread text and the current run: `None` if the condition already
    /// holds on the earlier text, else what resolves when it holds on the current run.
    fn watch_run(&self, condition: &Arc<dyn OutputCondition>) -> Option<BoxFuture<'static, ()>> {
        let state = self.state();
        if condition.scan().feed(state.carried.as_bytes()) {
            return None;
        }
        Some(match &state.current {
            Some(current) => TaskProducer::output_matches(current, condition.clone()),
            None => Box::pin(std::future::pending()),
        })
    }
}

async fn start_run(
    start: &Recipient<Start>,
    spec: &BashExecSpec,
) -> Result<BashProcess, ExecError> {
    start
        .send(Start(spec.clone()))
        .await
        .map_err(|_| ExecError::ManagerGone)?
}

/// The supervisor loop of one task (see the module doc).
async fn supervise(
    task: Supervised,
    start: Recipient<Start>,
    spec: BashExecSpec,
    policy: RestartPolicy,
    owner: Option<AgentRef>,
) {
    let mut restarts: VecDeque<Instant> = VecDeque::new();
    let mut run = 1u64;
    let status = loop {
        let Some(current) = task.current() else {
            break TaskStatus::Killed { signal: None };
        };
        // As `finished`: the end, and the manager's record of what the run left running.
        let status = TaskProducer::finished(&current).await;
        // What a run left running (a daemon that let go of the pipes) dies with it, as a service
        // manager's leftovers do: no restart starts a second beside it, nothing outlives the task.
        if let Some(left) = TaskProducer::left_behind(&current) {
            left.producer.kill();
        }
        if task.state().stopping || !policy.wants_restart(&status) {
            break status;
        }
        let now = Instant::now();
        while restarts
            .front()
            .is_some_and(|at| now.duration_since(*at) > policy.within)
        {
            restarts.pop_front();
        }
        if restarts.len() >= policy.max_restarts as usize {
            // The last run's output comes before the give-up line.
            let mut rest = current.read_output().delta;
            if !rest.is_empty() && !rest.ends_with('\n') {
                rest.push('\n');
            }
            task.state().carried.push_str(&rest);
            give_up(&task, &policy, &status, owner.as_ref());
            break status;
        }
        let wait = policy.backoff_after(restarts.len());
        restarts.push_back(now);
        run += 1;
        tracing::debug!(
            target: "dsh::policy",
            decision = "restart",
            task = task.inner.task_id.get().map(String::as_str).unwrap_or("-"),
            ended = ?status,
            run,
            wait_ms = wait.as_millis() as u64,
            "restart"
        );
        let mut finished = task.inner.finished.subscribe();
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            // A kill during the backoff: the stop flag is checked below.
            _ = finished.changed() => {}
        }
        let mut leftover = current.read_output().delta;
        if task.state().stopping {
            task.state().carried.push_str(&leftover);
            break status;
        }
        if !leftover.is_empty() && !leftover.ends_with('\n') {
            leftover.push('\n');
        }
        leftover.push_str(&format!(
            "[restarted after {}; run {run}]\n",
            describe(&status)
        ));
        match start_run(&start, &spec).await {
            Ok(next) => {
                let mut state = task.state();
                state.carried.push_str(&leftover);
                if state.stopping {
                    next.kill();
                }
                state.current = Some(next);
            }
            Err(err) => {
                let mut state = task.state();
                state.carried.push_str(&leftover);
                state
                    .carried
                    .push_str(&format!("[stderr]\nspawn failed: {err}\n"));
                state.current = None;
                break TaskStatus::Killed { signal: None };
            }
        }
        task.inner.runs.send_modify(|n| *n += 1);
    };
    task.inner.finished.send_replace(Some(status));
}

/// Gives up restarting: a tracing event, a line in the task's output, and a notice to the owner.
fn give_up(
    task: &Supervised,
    policy: &RestartPolicy,
    status: &TaskStatus,
    owner: Option<&AgentRef>,
) {
    let id = task
        .inner
        .task_id
        .get()
        .cloned()
        .unwrap_or_else(|| "(unregistered)".to_owned());
    let text = format!(
        "background bash task {id} keeps ending ({}): gave up restarting it after {} restarts in {}s.",
        describe(status),
        policy.max_restarts,
        policy.within.as_secs()
    );
    tracing::info!(target: "dsh::policy", decision = "give up", task = %id, "{text}");
    task.state().carried.push_str(&format!("[{text}]\n"));
    if let Some(owner) = owner {
        owner.inbox.do_send(Inject {
            text,
            source: "tool-bash",
        });
    }
}

/// `exit code 3`, `SIGTERM`, `out of memory`.
fn describe(status: &TaskStatus) -> String {
    match status {
        TaskStatus::Completed { exit_code } => format!("exit code {exit_code}"),
        TaskStatus::Killed {
            signal: Some(signal),
        } => signal.clone(),
        TaskStatus::Killed { signal: None } => "killed".to_owned(),
        TaskStatus::OutOfMemory => "out of memory".to_owned(),
        TaskStatus::Running | TaskStatus::Queued => "running".to_owned(),
    }
}

impl TaskProducer for Supervised {
    fn read(&self) -> TaskOutput {
        let mut state = self.state();
        let carried = std::mem::take(&mut state.carried);
        let Some(current) = state.current.clone() else {
            return TaskOutput {
                delta: carried,
                ..TaskOutput::default()
            };
        };
        drop(state);
        let mut output = current.read_output();
        output.delta = carried + &output.delta;
        output
    }

    fn kill(&self) {
        let current = {
            let mut state = self.state();
            state.stopping = true;
            state.current.clone()
        };
        if let Some(current) = current {
            current.kill();
        }
        // Ends a backoff wait at once.
        self.inner.finished.send_modify(|_| {});
    }

    fn finished(&self) -> BoxFuture<'static, TaskStatus> {
        let mut finished = self.inner.finished.subscribe();
        Box::pin(async move {
            match finished.wait_for(Option::is_some).await {
                Ok(status) => status
                    .clone()
                    .unwrap_or(TaskStatus::Killed { signal: None }),
                Err(_) => TaskStatus::Killed { signal: None },
            }
        })
    }

    /// The unread text of earlier runs is one text, the current run's streams two more; a new run
    /// is watched as it starts (its predecessor's unread rest then joins the earlier runs' text).
    fn output_matches(&self, condition: Arc<dyn OutputCondition>) -> BoxFuture<'static, ()> {
        let task = self.clone();
        let mut runs = self.inner.runs.subscribe();
        let mut watching = task.watch_run(&condition);
        Box::pin(async move {
            loop {
                let Some(current) = watching.as_mut() else {
                    return;
                };
                tokio::select! {
                    () = current => return,
                    changed = runs.changed() => {
                        if changed.is_err() {
                            std::future::pending::<()>().await;
                        }
                        watching = task.watch_run(&condition);
                    }
                }
            }
        })
    }

    fn queued(&self) -> bool {
        self.current().is_some_and(|c| TaskProducer::queued(&c))
    }

    fn retained_bytes(&self) -> usize {
        let state = self.state();
        state.carried.len()
            + state
                .current
                .as_ref()
                .map_or(0, TaskProducer::retained_bytes)
    }

    fn spill_bytes(&self) -> u64 {
        self.current()
            .map_or(0, |current| TaskProducer::spill_bytes(&current))
    }

    fn discard(&self) {
        if let Some(current) = self.current() {
            TaskProducer::discard(&current);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_per_recent_restart_up_to_its_cap() {
        let policy = RestartPolicy {
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(1000),
            ..RestartPolicy::default()
        };
        let waits: Vec<u128> = (0..6)
            .map(|n| policy.backoff_after(n).as_millis())
            .collect();
        assert_eq!(waits, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(
            policy.backoff_after(usize::MAX),
            Duration::from_millis(1000)
        );
    }

    #[test]
    fn on_failure_restarts_failures_only_and_never_never_does() {
        let on_failure = RestartPolicy::default();
        assert!(!on_failure.wants_restart(&TaskStatus::Completed { exit_code: 0 }));
        assert!(on_failure.wants_restart(&TaskStatus::Completed { exit_code: 2 }));
        assert!(on_failure.wants_restart(&TaskStatus::Killed {
            signal: Some("SIGSEGV".into())
        }));
        assert!(on_failure.wants_restart(&TaskStatus::OutOfMemory));
        let always = RestartPolicy {
            restart: Restart::Always,
            ..RestartPolicy::default()
        };
        assert!(always.wants_restart(&TaskStatus::Completed { exit_code: 0 }));
        let never = RestartPolicy {
            restart: Restart::Never,
            ..RestartPolicy::default()
        };
        assert!(!never.wants_restart(&TaskStatus::Completed { exit_code: 1 }));
    }
}
