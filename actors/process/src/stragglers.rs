//! Groups that outlived their leader ("stragglers"): a descendant held the pipes past the drain grace,
//! or survived the kill. The table remembers their group ids; this module kills them.

use std::time::Duration;

use nix::sys::signal::Signal;

use crate::signal::{live_group_members, signal_group};

/// How long shutdown waits for SIGKILLed stragglers to vanish from `/proc`.
const STRAGGLER_REAP_WAIT: Duration = Duration::from_secs(2);

/// SIGKILLs group `pgid` if `/proc` shows live members in it. Returns whether it signalled.
pub(crate) fn kill_group_if_members(pgid: i32) -> bool {
    !live_group_members(pgid).is_empty() && signal_group(pgid, Signal::SIGKILL)
}

/// SIGKILLs every remembered group that still has live members, then waits (bounded) until `/proc`
/// shows none of them.
pub(crate) async fn kill_stragglers(pgids: Vec<i32>) {
    let mut remaining: Vec<i32> = pgids
        .into_iter()
        .filter(|pgid| {
            let members = live_group_members(*pgid);
            if members.is_empty() {
                return false;
            }
            tracing::debug!(pgid, ?members, "killing straggler group");
            signal_group(*pgid, Signal::SIGKILL)
        })
        .collect();
    let deadline = tokio::time::Instant::now() + STRAGGLER_REAP_WAIT;
    while !remaining.is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
        remaining.retain(|pgid| !live_group_members(*pgid).is_empty());
    }
    if !remaining.is_empty() {
        tracing::warn!(?remaining, "straggler groups still alive after SIGKILL");
    }
}
