//! What a foreground command left running, as a background task of the caller (issue 21): a
//! descendant that still held the command's pipes when the drain grace ran out (a daemon started
//! with `&`, a dev server). The caller is told its pids and the task id, and `bash_kill` of that
//! task stops it through the process manager, which remembered it as a straggler — the only way a
//! later sandboxed call can, since each confined command is its own Landlock domain and may not
//! signal another's processes.
//!
//! The task has no output of its own (its pipes were closed at settlement); one read shows who was
//! left. It ends when nothing of it is alive: `killed` after a `bash_kill`, else `completed` with
//! exit code 0, since dsh did not start these processes directly and cannot know how they ended.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use actix::Addr;
use dsh_process::{KillLeftovers, LeftProcess, LeftoversAlive, ProcessManager};
use dsh_tasks::{TaskOutput, TaskProducer, TaskStatus};
use futures::future::BoxFuture;

/// How soon a leftover task first looks again whether its processes are gone (nothing signals
/// it); the wait doubles up to [`POLL_MAX`], so a dev server left running for hours costs the
/// manager a look every few seconds (in subreaper mode a `/proc` walk once its group is gone).
const POLL: Duration = Duration::from_millis(100);
/// The longest wait between two looks.
const POLL_MAX: Duration = Duration::from_secs(2);

/// The processes a foreground command left running, stoppable as one task.
#[derive(Clone, Debug)]
pub struct Leftovers {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    manager: Addr<ProcessManager>,
    /// The command's leader pid, under which the manager remembers them.
    pgid: i32,
    processes: Vec<LeftProcess>,
    grace: Duration,
    kill_requested: AtomicBool,
    read_once: AtomicBool,
}

impl Leftovers {
    pub(crate) fn new(
        manager: Addr<ProcessManager>,
        pgid: i32,
        processes: Vec<LeftProcess>,
        grace: Duration,
    ) -> Self {
        Leftovers {
            inner: Arc::new(Inner {
                manager,
                pgid,
                processes,
                grace,
                kill_requested: AtomicBool::new(false),
                read_once: AtomicBool::new(false),
            }),
        }
    }

    /// The processes, lowest pid first, as they were when the command settled.
    pub fn processes(&self) -> &[LeftProcess] {
        &self.inner.processes
    }
}

/// Two are the same when they name the same processes of the same command (results compare by
/// value; the manager handle has no equality).
impl PartialEq for Leftovers {
    fn eq(&self, other: &Self) -> bool {
        self.inner.pgid == other.inner.pgid && self.inner.processes == other.inner.processes
    }
}

impl Eq for Leftovers {}

/// `pid 4242 (node server.js), pid 4243 (sleep 9)`.
pub fn describe(processes: &[LeftProcess]) -> String {
    processes
        .iter()
        .map(|p| match p.command.as_str() {
            "" => format!("pid {}", p.pid),
            command => format!("pid {} ({command})", p.pid),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

impl TaskProducer for Leftovers {
    fn read(&self) -> TaskOutput {
        let delta = if self.inner.read_once.swap(true, Ordering::Relaxed) {
            String::new()
        } else {
            format!("left running: {}\n", describe(&self.inner.processes))
        };
        TaskOutput {
            delta,
            ..TaskOutput::default()
        }
    }

    fn kill(&self) {
        self.inner.kill_requested.store(true, Ordering::Relaxed);
        self.inner.manager.do_send(KillLeftovers {
            pgid: self.inner.pgid,
            grace: self.inner.grace,
        });
    }

    fn finished(&self) -> BoxFuture<'static, TaskStatus> {
        let inner = self.inner.clone();
        Box::pin(async move {
            let mut poll = POLL;
            loop {
                let alive = inner
                    .manager
                    .send(LeftoversAlive { pgid: inner.pgid })
                    .await
                    // The manager is gone: it killed its stragglers on the way out.
                    .unwrap_or(false);
                if !alive {
                    break;
                }
                tokio::time::sleep(poll).await;
                poll = (poll * 2).min(POLL_MAX);
            }
            TaskStatus::Completed { exit_code: 0 }
                .stays_killed(inner.kill_requested.load(Ordering::Relaxed))
        })
    }
}
