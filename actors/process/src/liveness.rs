//! Which processes of a task are alive, for subreaper and group containment, answered off the
//! runtime's thread and many questions at a time.
//!
//! Without cgroups, signalling a task's escaped processes, "is anything of it alive" and "tell me
//! when all of it is gone" each need a walk over `/proc` ([`Census`]), 5–20 ms on a host with a
//! thousand processes. The drivers used to walk `/proc` themselves, on the runtime's one thread:
//! every kill walked it to find the task's marked processes, then again (every 20 ms) until the
//! task was gone, and every reply, start and read of every other task waited behind those walks —
//! 1,000 `bash_kill`s took 18.7 s in subreaper mode, 3.7 s in group mode, each kill's cost growing
//! with the number of processes alive. Here the questions go to one thread of the process (started
//! on first use), which takes one census for every question pending when it starts: a burst of a
//! thousand kills costs a few walks, and the runtime's thread walks none.
//!
//! ```text
//!   ask ─► queue ─► census (one walk for all) ─► signal marked processes (verified by pidfd)
//!                       ▲                     ├► answer "alive?"
//!                       └── every 20 ms ◄─────┴► "gone?": answer once nothing is alive, else ask again
//!                           while a kill or a wait is pending
//! ```

use std::collections::HashSet;
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Duration;

use dsh_contain::census::Census;
use dsh_contain::subreaper::{self, Marker};
use nix::libc;
use tokio::sync::oneshot;

use crate::lock::lock_unpoisoned;

/// How often pending "gone?" questions and SIGKILLs are looked at again: there is no kernel event.
const POLL: Duration = Duration::from_millis(20);
/// How many walks a SIGKILL of a task's marked processes is repeated for while some are found (a
/// process forked between a walk and its kill is caught by the next).
const KILL_PASSES: u32 = 100;

/// A question about one task: its process group and, in subreaper mode, its marker.
enum Question {
    /// Signal every live process carrying the marker (its group is signalled by the asker).
    Signal { marker: Marker, signal: i32 },
    /// Whether anything of the task is alive now.
    Alive {
        group: Option<i32>,
        marker: Option<Marker>,
        reply: oneshot::Sender<bool>,
    },
    /// Answered once nothing of the task is alive.
    Gone {
        group: Option<i32>,
        marker: Option<Marker>,
        reply: oneshot::Sender<()>,
    },
}

/// The questions waiting for the next census.
struct Asked {
    questions: Mutex<Vec<Question>>,
    wake: Condvar,
}

/// The process-wide answerer; `None` questions are answered in place if its thread cannot start.
fn asked() -> Option<&'static Asked> {
    static ASKED: OnceLock<Option<&'static Asked>> = OnceLock::new();
    *ASKED.get_or_init(|| {
        let asked: &'static Asked = Box::leak(Box::new(Asked {
            questions: Mutex::new(Vec::new()),
            wake: Condvar::new(),
        }));
        match std::thread::Builder::new()
            .name("dsh-liveness".into())
            .spawn(move || answer(asked))
        {
            Ok(_) => Some(asked),
            Err(err) => {
                tracing::warn!(%err, "cannot start the liveness thread; walking /proc in place");
                None
            }
        }
    })
}

fn ask(question: Question) {
    match asked() {
        Some(asked) => {
            lock_unpoisoned(&asked.questions).push(question);
            asked.wake.notify_one();
        }
        None => {
            let mut pending = Pending::default();
            pending.take(vec![question]);
            pending.answer();
        }
    }
}

/// Sends `signal` to every live process carrying `marker`, soon, off this thread; a SIGKILL is
/// repeated while any is found.
pub(crate) fn signal_marked(marker: Marker, signal: i32) {
    ask(Question::Signal { marker, signal });
}

/// Whether a live process is in group `group` or carries `marker`.
pub(crate) async fn alive(group: Option<i32>, marker: Option<Marker>) -> bool {
    let (reply, answer) = oneshot::channel();
    ask(Question::Alive {
        group,
        marker,
        reply,
    });
    // Unanswered (the thread is gone): say alive, the careful answer for a kill.
    answer.await.unwrap_or(true)
}

/// Resolves once no live process is in group `group` or carries `marker`.
pub(crate) async fn gone(group: Option<i32>, marker: Option<Marker>) {
    let (reply, answer) = oneshot::channel();
    ask(Question::Gone {
        group,
        marker,
        reply,
    });
    if answer.await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// The answering thread: waits for questions (or, with some pending, for the poll interval), takes
/// one census for all of them, answers what it can, and keeps the rest for the next round.
fn answer(asked: &'static Asked) {
    let mut pending = Pending::default();
    loop {
        let mut questions = lock_unpoisoned(&asked.questions);
        while questions.is_empty() {
            if pending.is_empty() {
                questions = asked
                    .wake
                    .wait(questions)
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
            } else {
                let (guard, waited) = asked
                    .wake
                    .wait_timeout(questions, POLL)
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                questions = guard;
                if waited.timed_out() {
                    break;
                }
            }
        }
        let new = std::mem::take(&mut *questions);
        drop(questions);
        pending.take(new);
        pending.answer();
    }
}

/// A SIGKILL of a task's marked processes still being repeated.
struct Killing {
    marker: Marker,
    passes: u32,
}

/// The questions one round answers.
#[derive(Default)]
struct Pending {
    signals: Vec<(Marker, i32)>,
    killing: Vec<Killing>,
    alive: Vec<(Option<i32>, Option<Marker>, oneshot::Sender<bool>)>,
    gone: Vec<(Option<i32>, Option<Marker>, oneshot::Sender<()>)>,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.signals.is_empty()
            && self.killing.is_empty()
            && self.alive.is_empty()
            && self.gone.is_empty()
    }

    fn take(&mut self, questions: Vec<Question>) {
        for question in questions {
            match question {
                Question::Signal { marker, signal } => self.signals.push((marker, signal)),
                Question::Alive {
                    group,
                    marker,
                    reply,
                } => self.alive.push((group, marker, reply)),
                Question::Gone {
                    group,
                    marker,
                    reply,
                } => self.gone.push((group, marker, reply)),
            }
        }
    }

    /// One census for every pending question, and the answers it allows.
    fn answer(&mut self) {
        // Nobody waits for these any more (a driver dropped).
        self.alive.retain(|(_, _, reply)| !reply.is_closed());
        self.gone.retain(|(_, _, reply)| !reply.is_closed());
        if self.is_empty() {
            return;
        }
        let mut groups = HashSet::new();
        let mut markers = HashSet::new();
        for (group, marker) in self
            .alive
            .iter()
            .map(|(g, m, _)| (g, m))
            .chain(self.gone.iter().map(|(g, m, _)| (g, m)))
        {
            groups.extend(group.iter().copied());
            markers.extend(marker.iter().cloned());
        }
        markers.extend(self.signals.iter().map(|(m, _)| m.clone()));
        markers.extend(self.killing.iter().map(|k| k.marker.clone()));
        let census = Census::take(&groups, &markers);
        let alive = |group: Option<i32>, marker: Option<&Marker>| census.alive(group, marker);

        self.killing.retain_mut(|killing| {
            let Some(found) = census.marked.get(&killing.marker) else {
                return false;
            };
            for pid in found {
                subreaper::signal_verified(*pid, &killing.marker, libc::SIGKILL);
            }
            killing.passes += 1;
            killing.passes < KILL_PASSES
        });
        for (marker, signal) in self.signals.drain(..) {
            let found = census.marked.get(&marker).map(Vec::as_slice).unwrap_or(&[]);
            for pid in found {
                subreaper::signal_verified(*pid, &marker, signal);
            }
            if signal == libc::SIGKILL && !found.is_empty() {
                self.killing.push(Killing { marker, passes: 1 });
            }
        }
        for (group, marker, reply) in self.alive.drain(..) {
            let _ = reply.send(alive(group, marker.as_ref()));
        }
        let mut still = Vec::with_capacity(self.gone.len());
        for (group, marker, reply) in self.gone.drain(..) {
            if alive(group, marker.as_ref()) {
                still.push((group, marker, reply));
            } else {
                let _ = reply.send(());
            }
        }
        self.gone = still;
    }
}
