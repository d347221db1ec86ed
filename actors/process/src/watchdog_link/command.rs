//! The watchdog process itself, as the link starts and ends it: how it is started (a direct child
//! whose status is its own to reap), how it is told goodbye, and how its end reads in the log.
//!
//! Apart from the link's bookkeeping (`watchdog_link.rs`) because these are the calls into
//! `dsh_contain`, the same for the first watchdog and every replacement.

use std::ffi::OsString;
use std::path::PathBuf;

use dsh_contain::watchdog::Watchdog;
use nix::sys::signal::Signal;

/// How to start the watchdog process.
#[derive(Debug, Clone)]
pub struct WatchdogCommand {
    /// The executable (no `PATH` search).
    pub program: PathBuf,
    /// Its arguments after `argv[0]`.
    pub args: Vec<OsString>,
}

/// Starts a watchdog process, registered as a direct child whose status is its own to reap (the
/// subreaper's orphan reaper leaves it alone).
pub(super) fn start_process(
    command: &WatchdogCommand,
) -> Result<Watchdog, dsh_contain::SpawnError> {
    let guard = dsh_contain::orphans::registry().spawning();
    let watchdog = Watchdog::start(&command.program, &command.args)?;
    guard.register(watchdog.pid());
    Ok(watchdog)
}

/// Tells `watchdog` goodbye and reaps it.
pub(super) fn say_goodbye(watchdog: Watchdog) {
    let pid = watchdog.pid();
    if let Err(err) = watchdog.goodbye() {
        tracing::warn!(%err, "watchdog goodbye failed");
    }
    dsh_contain::orphans::registry().forget(pid);
}

/// How a watchdog ended, for the log.
pub(super) fn describe(status: Option<std::process::ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    let Some(status) = status else {
        return "reaped by someone else".to_owned();
    };
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => match Signal::try_from(signal) {
            Ok(signal) => format!("killed by {signal}"),
            Err(_) => format!("killed by signal {signal}"),
        },
        (None, None) => format!("ended ({status})"),
    }
}
