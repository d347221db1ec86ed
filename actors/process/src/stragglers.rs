//! Processes that outlived their leader ("stragglers"): a descendant held the pipes past the drain
//! grace, or left the group and kept running. The table remembers their groups and containment
//! handles; this module kills them.

use std::time::Duration;

use nix::sys::signal::Signal;

use crate::containment::SharedContainment;
use crate::table::Straggler;

/// How long shutdown waits for SIGKILLed stragglers to vanish from `/proc`.
const STRAGGLER_REAP_WAIT: Duration = Duration::from_secs(2);

/// SIGKILLs every process of every straggler, then waits (bounded) until all of it is gone and
/// hands the handles back to containment.
pub(crate) async fn kill_stragglers(containment: SharedContainment, stragglers: Vec<Straggler>) {
    for straggler in &stragglers {
        tracing::debug!(pgid = straggler.pgid, "killing straggler");
        containment.signal_straggler(straggler.pgid, &straggler.contained, Signal::SIGKILL);
    }
    for straggler in stragglers {
        let gone = containment.all_gone(straggler.pgid, &straggler.contained);
        if tokio::time::timeout(STRAGGLER_REAP_WAIT, gone)
            .await
            .is_err()
        {
            tracing::warn!(pgid = straggler.pgid, "straggler still alive after SIGKILL");
        }
        containment.finish(straggler.pgid, straggler.contained);
    }
}
