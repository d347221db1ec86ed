//! Every direct child of this process, and reaping the orphans a subreaper adopts.
//!
//! A subreaper inherits the zombies of escaped descendants and must reap them, but each manager
//! reaps its own children by pid through their pidfds ([`crate::reap`]), and a `waitpid(-1)` would
//! steal those statuses. So every spawn of every manager in the process registers its pid in one
//! process-wide [`ChildRegistry`] (held across the spawn, see [`crate::subreaper`]), forgets it
//! once reaped, and the SIGCHLD thread reaps only zombie children that descend from a task (see
//! [`ChildRegistry::reap_orphans`]): a host that embeds dsh keeps its own children.
//!
//! The reaper is a thread of this crate's own (beside the socket gate's and the confined spawning
//! threads): it must outlive any one runtime's arbiter, and the process-wide registry it reads is
//! this crate's.

use std::sync::OnceLock;

use crate::subreaper::ChildRegistry;
use tokio::signal::unix::{SignalKind, signal};

/// How often live children are checked for a runtime's marker (adopted escapees).
const ADOPTION_SCAN: std::time::Duration = std::time::Duration::from_secs(1);
/// SIGCHLDs that arrive this close together share one `/proc` scan: every command's end raises
/// one, and scanning per command cost a busy runtime a scan per spawn. An adopted orphan stays a
/// zombie at most this much longer.
const COALESCE: std::time::Duration = std::time::Duration::from_millis(25);

/// The process-wide registry of direct children.
pub fn registry() -> &'static ChildRegistry {
    static REGISTRY: OnceLock<ChildRegistry> = OnceLock::new();
    REGISTRY.get_or_init(ChildRegistry::new)
}

/// Starts reaping adopted orphans on every SIGCHLD, on a thread of its own. Once per process
/// is enough; later calls do nothing.
pub fn reap_on_sigchld() {
    static STARTED: OnceLock<()> = OnceLock::new();
    if STARTED.set(()).is_err() {
        return;
    }
    // A thread of its own: the manager's arbiter may stop while the process lives on.
    std::thread::Builder::new()
        .name("dsh-orphans".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            let Ok(runtime) = runtime else { return };
            runtime.block_on(async move {
                let mut sigchld = match signal(SignalKind::child()) {
                    Ok(stream) => stream,
                    Err(err) => {
                        tracing::warn!(%err, "cannot watch SIGCHLD; adopted orphans stay zombies");
                        return;
                    }
                };
                loop {
                    for (pid, status) in registry().reap_orphans() {
                        tracing::trace!(pid, status, "reaped an adopted orphan");
                    }
                    // SIGCHLD reaps; the periodic pass notices adopted escapees while they live,
                    // so one that started a session of its own is known once it dies.
                    tokio::select! {
                        signal = sigchld.recv() => {
                            if signal.is_none() {
                                return;
                            }
                            // Signals meanwhile are coalesced by the stream into one pending.
                            tokio::time::sleep(COALESCE).await;
                        }
                        () = tokio::time::sleep(ADOPTION_SCAN) => {}
                    }
                }
            });
        })
        .map(drop)
        .unwrap_or_else(|err| tracing::warn!(%err, "cannot start the orphan reaper"));
}
