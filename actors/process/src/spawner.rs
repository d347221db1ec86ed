//! A dedicated spawner thread, so a burst of spawns does not stall the supervision of children that
//! are already running.
//!
//! `posix_spawn` blocks its caller until the child has exec'd (a few hundred microseconds). Done on the
//! actor thread, a burst of a hundred spawns holds up every exit, pipe read and notice behind it. The
//! manager therefore spawns inline only when nothing else is running, and otherwise queues the spawn
//! here: one thread takes jobs back to back (a queue, not a pool, so it never idles between jobs of a
//! burst), leaving the other cores to supervision. The thread ends when the manager drops its sender.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::mpsc;

use tokio::sync::oneshot;

use crate::errors::SpawnError;
use crate::spawn::{RawChild, spawn_raw};

/// One spawn to perform.
pub(crate) struct SpawnJob {
    pub program: PathBuf,
    pub argv: Vec<String>,
    pub cwd: PathBuf,
    pub env: BTreeMap<OsString, OsString>,
    pub with_stdin: bool,
    pub done: oneshot::Sender<Result<RawChild, SpawnError>>,
}

/// The manager's handle on its spawner thread, started on first use.
#[derive(Default)]
pub(crate) struct Spawner {
    jobs: Option<mpsc::Sender<SpawnJob>>,
}

impl Spawner {
    /// Queues a spawn; the result arrives on `job.done`. If the thread cannot be started, the spawn
    /// happens right here instead.
    pub(crate) fn submit(&mut self, job: SpawnJob) {
        let Some(jobs) = self.sender() else {
            return run(job);
        };
        if let Err(mpsc::SendError(job)) = jobs.send(job) {
            self.jobs = None;
            run(job);
        }
    }

    fn sender(&mut self) -> Option<&mpsc::Sender<SpawnJob>> {
        if self.jobs.is_none() {
            let (tx, rx) = mpsc::channel::<SpawnJob>();
            let started = std::thread::Builder::new()
                .name("dsh-spawner".into())
                .spawn(move || {
                    while let Ok(job) = rx.recv() {
                        run(job);
                    }
                });
            match started {
                Ok(_) => self.jobs = Some(tx),
                Err(err) => {
                    tracing::warn!(%err, "cannot start the spawner thread; spawning inline")
                }
            }
        }
        self.jobs.as_ref()
    }
}

fn run(job: SpawnJob) {
    let result = spawn_raw(&job.program, &job.argv, &job.cwd, &job.env, job.with_stdin);
    let _ = job.done.send(result);
}
