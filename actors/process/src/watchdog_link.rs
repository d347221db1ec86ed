//! The runtime's link to its watchdog, kept whole: a watchdog that dies is replaced.
//!
//! The watchdog (`dsh_contain::watchdog`) is what kills every task when the runtime dies without
//! goodbye. A watchdog that is itself gone — the OOM killer, an operator's `kill -9`, an unconfined
//! command — would leave the next SIGKILL of the runtime with nobody to clean up. So this link:
//! - keeps the [`Ledger`] of every registration in force, and the current watchdog, under one lock:
//!   a registration is booked and written to the watchdog in one step;
//! - is watched by [`watch`], a task on the manager's arbiter that awaits the watchdog's pidfd (it
//!   turns readable when the watchdog exits: no polling). A watchdog that exits without goodbye is
//!   reaped through its pidfd, its death logged at warn, and a new one started and told the whole
//!   ledger under the lock (a registration made while it started is in the ledger; one withdrawn
//!   meanwhile is not, so it does not come back);
//! - bounds restarts: a watchdog that lived [`STABLE`] is replaced at once; one that dies sooner
//!   (or cannot start) is a *quick death*, and the replacement waits [`FIRST_BACKOFF`], doubled per
//!   quick death in a row. After [`MAX_RESTARTS_IN_A_ROW`] quick deaths in a row it gives up with an
//!   error log: the runtime keeps serving, and nothing guards it against its own SIGKILL any more.
//!
//! What an operator or a host sees is [`WatchdogStatus`] and the restart count in the manager's
//! stats. Without pidfds (Linux < 5.3) the watchdog runs unwatched, as it did before this link.

mod command;
mod ledger;
#[cfg(test)]
mod tests;

use std::sync::{Mutex, Weak};
use std::time::{Duration, Instant};

use dsh_contain::watchdog::{Exit, ExitNotice, Registration, Watchdog};

use crate::lock::lock_unpoisoned;
pub use command::WatchdogCommand;
use command::{describe, say_goodbye, start_process};
use ledger::Ledger;

/// A watchdog that lived this long died of something other than its start: it is replaced at
/// once, and the quick deaths before it are forgotten.
const STABLE: Duration = Duration::from_secs(10);
/// The wait before the replacement of a watchdog that died quickly; doubled per quick death in a
/// row (100 ms, 200 ms, … 1.6 s).
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// Quick deaths in a row that are answered with a new watchdog; the next one is given up on.
pub const MAX_RESTARTS_IN_A_ROW: u32 = 5;

/// The runtime's watchdog, its registrations, and what became of it.
#[derive(Debug)]
pub(crate) struct WatchdogLink {
    /// How to start a watchdog; `None`: the host asked for none.
    command: Option<WatchdogCommand>,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    ledger: Ledger,
    phase: Phase,
    /// Watchdogs started after the first one.
    restarts: u64,
    /// Watchdogs installed so far; each one's number tells a late exit notice of an older one apart.
    installed: u64,
}

/// Where the link stands.
#[derive(Debug)]
enum Phase {
    /// No watchdog was asked for.
    Off,
    /// A watchdog runs and was told the ledger.
    Watching(Current),
    /// None runs: the last one died (or none could start); [`watch`] starts one after a backoff.
    Down {
        /// Quick deaths in a row so far (0: the one that died had lived [`STABLE`]).
        quick_deaths: u32,
    },
    /// It kept dying right after its start: nothing guards the runtime any more.
    GaveUp,
    /// The runtime said goodbye (a clean shutdown).
    Stopped,
}

/// The running watchdog.
#[derive(Debug)]
struct Current {
    watchdog: Watchdog,
    /// Its number among the watchdogs installed.
    number: u64,
    started: Instant,
    /// Quick deaths in a row before it started.
    quick_deaths: u32,
}

/// What the watcher does next.
enum Step {
    /// Wait for the exit of watchdog `number`.
    AwaitExit { number: u64, notice: ExitNotice },
    /// Start a new watchdog after `after`.
    Replace { after: Duration },
    /// Nothing is left to watch (no watchdog, given up, goodbye, or it cannot be watched).
    Done,
}

/// What an exit notice turned out to mean.
enum Noticed {
    /// The watchdog was reaped (or is no longer the link's to watch).
    Gone,
    /// It still runs: the notice fired for nothing.
    StillRunning,
}

impl WatchdogLink {
    /// A link with no watchdog (the host asked for none).
    pub(crate) fn off() -> Self {
        Self {
            command: None,
            state: Mutex::new(State {
                ledger: Ledger::default(),
                phase: Phase::Off,
                restarts: 0,
                installed: 0,
            }),
        }
    }

    /// Starts the first watchdog with `command` and tells it `initial` (the runtime's cgroup tree,
    /// or its marker). One that cannot start is retried by [`watch`], as after a quick death.
    pub(crate) fn start(command: WatchdogCommand, initial: &[Registration<'_>]) -> Self {
        let mut ledger = Ledger::default();
        for registration in initial {
            ledger.record(registration);
        }
        let link = Self {
            command: Some(command),
            state: Mutex::new(State {
                ledger,
                phase: Phase::Down { quick_deaths: 0 },
                restarts: 0,
                installed: 0,
            }),
        };
        link.replace();
        link
    }

    /// Books `registration` and tells the running watchdog; a watchdog being replaced is told by
    /// its replacement's replay.
    pub(crate) fn register(&self, registration: Registration<'_>) {
        let mut guard = lock_unpoisoned(&self.state);
        let state = &mut *guard;
        match &mut state.phase {
            Phase::Watching(current) => {
                state.ledger.record(&registration);
                if let Err(err) = current.watchdog.register(registration) {
                    if err.kind() == std::io::ErrorKind::BrokenPipe {
                        // It died: its exit notice fires, and its replacement hears the ledger.
                        tracing::debug!(%err, "the watchdog is gone; its replacement will be told");
                    } else {
                        tracing::warn!(%err, "cannot register with the watchdog");
                    }
                }
            }
            Phase::Down { .. } => state.ledger.record(&registration),
            Phase::Off | Phase::GaveUp | Phase::Stopped => {}
        }
    }

    /// Whether a watchdog guards the runtime, and how many were started after the first.
    pub(crate) fn status(&self) -> (WatchdogStatus, u64) {
        let state = lock_unpoisoned(&self.state);
        let status = match &state.phase {
            Phase::Off => WatchdogStatus::Off,
            Phase::Watching(current) => WatchdogStatus::Running {
                pid: current.watchdog.pid(),
            },
            Phase::Down { .. } => WatchdogStatus::Restarting,
            Phase::GaveUp => WatchdogStatus::GaveUp,
            Phase::Stopped => WatchdogStatus::Stopped,
        };
        (status, state.restarts)
    }

    /// A clean shutdown: the watchdog is told goodbye and reaped, and none is started again.
    /// Idempotent.
    pub(crate) fn goodbye(&self) {
        let phase = {
            let mut state = lock_unpoisoned(&self.state);
            if matches!(state.phase, Phase::Off) {
                return;
            }
            std::mem::replace(&mut state.phase, Phase::Stopped)
        };
        if let Phase::Watching(current) = phase {
            say_goodbye(current.watchdog);
        }
    }

    /// What the watcher does next.
    fn next_step(&self) -> Step {
        let state = lock_unpoisoned(&self.state);
        match &state.phase {
            Phase::Watching(current) => match current.watchdog.exit_notice() {
                Ok(notice) => Step::AwaitExit {
                    number: current.number,
                    notice,
                },
                Err(err) => {
                    tracing::warn!(%err, "the watchdog cannot be watched: if it dies, it is not replaced");
                    Step::Done
                }
            },
            Phase::Down { quick_deaths } => Step::Replace {
                after: backoff(*quick_deaths),
            },
            Phase::Off | Phase::GaveUp | Phase::Stopped => Step::Done,
        }
    }

    /// The exit notice of watchdog `number` fired: reaps it, logs its death, and marks the link
    /// down (or given up).
    fn exited(&self, number: u64) -> Noticed {
        let mut state = lock_unpoisoned(&self.state);
        let current = match std::mem::replace(&mut state.phase, Phase::Stopped) {
            Phase::Watching(current) if current.number == number => current,
            other => {
                state.phase = other;
                return Noticed::Gone;
            }
        };
        let Current {
            watchdog,
            number,
            started,
            quick_deaths,
        } = current;
        let pid = watchdog.pid();
        match watchdog.reap_if_exited() {
            Exit::Running(watchdog) => {
                state.phase = Phase::Watching(Current {
                    watchdog,
                    number,
                    started,
                    quick_deaths,
                });
                Noticed::StillRunning
            }
            Exit::Exited(status) => {
                dsh_contain::orphans::registry().forget(pid);
                let lived = started.elapsed();
                let quick_deaths = if lived >= STABLE { 0 } else { quick_deaths + 1 };
                let how = describe(status);
                if quick_deaths > MAX_RESTARTS_IN_A_ROW {
                    tracing::warn!(pid, %how, ?lived, "the watchdog died");
                } else {
                    let after = backoff(quick_deaths);
                    tracing::warn!(
                        pid, %how, ?lived, ?after,
                        "the watchdog died; starting a new one (until it runs, a SIGKILL of this \
                         runtime would leave its tasks running)"
                    );
                }
                state.went_down(quick_deaths);
                Noticed::Gone
            }
        }
    }

    /// Starts a watchdog if none runs, tells it the ledger, and installs it.
    fn replace(&self) {
        let Some(command) = &self.command else {
            return;
        };
        if !matches!(lock_unpoisoned(&self.state).phase, Phase::Down { .. }) {
            return;
        }
        // Started outside the lock (the spawn takes the process-wide spawn gate, as every spawn
        // does, and a spawn holding the gate may be about to register); the replay below is under
        // it, so it tells exactly what is in force at the moment the new watchdog takes over.
        let started = start_process(command);
        let mut guard = lock_unpoisoned(&self.state);
        let state = &mut *guard;
        let Phase::Down { quick_deaths } = state.phase else {
            // Goodbye came meanwhile: nothing is left to guard.
            drop(guard);
            if let Ok(watchdog) = started {
                say_goodbye(watchdog);
            }
            return;
        };
        let mut watchdog = match started {
            Ok(watchdog) => watchdog,
            Err(err) => {
                tracing::warn!(%err, program = %command.program.display(), "cannot start the watchdog");
                state.went_down(quick_deaths + 1);
                return;
            }
        };
        let registrations = state.ledger.registrations();
        let told = registrations.len();
        let mut failed = None;
        for registration in registrations {
            // Each one is tried: one that cannot be written must not hide the others.
            if let Err(err) = watchdog.register(registration) {
                failed.get_or_insert(err);
            }
        }
        if let Some(err) = failed {
            // It may have died already; its exit notice says so next.
            tracing::warn!(%err, "cannot register with the new watchdog");
        }
        let pid = watchdog.pid();
        if state.installed > 0 {
            state.restarts += 1;
            tracing::warn!(
                pid,
                restarts = state.restarts,
                registrations = told,
                "a new watchdog runs and was told every registration in force"
            );
        }
        state.installed += 1;
        state.phase = Phase::Watching(Current {
            watchdog,
            number: state.installed,
            started: Instant::now(),
            quick_deaths,
        });
    }
}

impl State {
    /// No watchdog runs after `quick_deaths` quick deaths in a row: wait for a replacement, or give
    /// up.
    fn went_down(&mut self, quick_deaths: u32) {
        if quick_deaths > MAX_RESTARTS_IN_A_ROW {
            tracing::error!(
                restarts_in_a_row = MAX_RESTARTS_IN_A_ROW,
                "the watchdog keeps dying right after its start; giving up on it: this runtime \
                 keeps serving, but a SIGKILL of it now leaves its tasks running"
            );
            self.phase = Phase::GaveUp;
        } else {
            self.phase = Phase::Down { quick_deaths };
        }
    }
}

/// Keeps the runtime's watchdog running for as long as `link` lives: awaits each watchdog's exit
/// through its pidfd and starts the next one (see the module docs). Run it on the manager's
/// arbiter; it holds the link only weakly, so a dropped runtime ends it (its watchdog then reads
/// end of file and cleans up).
pub(crate) async fn watch(link: Weak<WatchdogLink>) {
    loop {
        let Some(step) = link.upgrade().map(|link| link.next_step()) else {
            return;
        };
        match step {
            Step::Done => return,
            Step::Replace { after } => {
                if !after.is_zero() {
                    tokio::time::sleep(after).await;
                }
                let Some(link) = link.upgrade() else { return };
                link.replace();
            }
            Step::AwaitExit { number, notice } => {
                if let Err(err) = notice.exited().await {
                    tracing::warn!(%err, "cannot wait for the watchdog's exit: if it dies, it is not replaced");
                    return;
                }
                drop(notice);
                let Some(link) = link.upgrade() else { return };
                if let Noticed::StillRunning = link.exited(number) {
                    // Never the case for a pidfd; looping on it would spin.
                    tracing::warn!(
                        "the watchdog's pidfd turned readable while it runs: it is no longer watched"
                    );
                    return;
                }
            }
        }
    }
}

/// The wait before replacing a watchdog after `quick_deaths` quick deaths in a row.
fn backoff(quick_deaths: u32) -> Duration {
    match quick_deaths {
        0 => Duration::ZERO,
        n => FIRST_BACKOFF.saturating_mul(1 << (n - 1).min(16)),
    }
}

/// Whether a watchdog guards the runtime: if the runtime dies without goodbye, its watchdog kills
/// every task and removes the spill directory. A watchdog that dies is replaced (the
/// link to it, `watchdog_link.rs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WatchdogStatus {
    /// No watchdog was asked for (a library host without a watchdog program).
    #[default]
    Off,
    /// A watchdog runs and knows every registration in force.
    Running {
        /// Its process id.
        pid: i32,
    },
    /// The watchdog died (or could not start); a new one is about to start.
    Restarting,
    /// It kept dying right after its start and is not restarted any more: the runtime serves on,
    /// but a SIGKILL of it would leave its tasks running.
    GaveUp,
    /// The runtime shut down cleanly and said goodbye.
    Stopped,
}

impl std::fmt::Display for WatchdogStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WatchdogStatus::Off => f.write_str("off"),
            WatchdogStatus::Running { pid } => write!(f, "running (pid {pid})"),
            WatchdogStatus::Restarting => f.write_str("restarting"),
            WatchdogStatus::GaveUp => f.write_str("gave up"),
            WatchdogStatus::Stopped => f.write_str("stopped"),
        }
    }
}
