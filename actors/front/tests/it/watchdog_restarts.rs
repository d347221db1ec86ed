//! A library runtime's watchdog restarts, as a host sees them in `Runtime::process_stats()`: a
//! killed watchdog is replaced and counted, and a watchdog that keeps dying at once is given up on
//! after a bounded number of restarts with growing waits between them (no busy loop), while the
//! runtime keeps serving calls.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use dsh::{ContainmentMode, WATCHDOG_RESTARTS_IN_A_ROW, WatchdogStatus};
use dsh_test_support::procfs::live_with_cmdline;
use dsh_test_support::wait::poll_until;

/// Polls the runtime's stats until `wanted` holds for its watchdog status (bounded by `SOON`).
async fn watchdog_becomes(
    rt: &dsh::Runtime,
    wanted: impl Fn(WatchdogStatus) -> bool,
) -> dsh::ManagerStats {
    let deadline = Instant::now() + SOON * 3;
    loop {
        let stats = rt.process_stats().await;
        if wanted(stats.watchdog) {
            return stats;
        }
        assert!(
            Instant::now() < deadline,
            "watchdog never as wanted: {stats:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn sigkill(pid: i32) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
}

#[actix_rt::test]
async fn a_killed_watchdog_is_replaced_and_counted_in_the_stats() {
    let (rt, _spill) = runtime_with(|b| {
        b.containment(Some(ContainmentMode::Group))
            .watchdog(env!("CARGO_BIN_EXE_dsh"), ["__watchdog"])
    });
    let first = watchdog_becomes(&rt, |s| matches!(s, WatchdogStatus::Running { .. })).await;
    let WatchdogStatus::Running { pid: old } = first.watchdog else {
        unreachable!()
    };
    assert_eq!(first.watchdog_restarts, 0);
    sigkill(old);
    let replaced = watchdog_becomes(
        &rt,
        |s| matches!(s, WatchdogStatus::Running { pid } if pid != old),
    )
    .await;
    let WatchdogStatus::Running { pid: new } = replaced.watchdog else {
        unreachable!()
    };
    assert_eq!(replaced.watchdog_restarts, 1, "{replaced:?}");
    // The stats name the new watchdog as soon as its spawn returns, which is when its exec has
    // replaced the old image but before the kernel has set up its argument area: until then its
    // `/proc/<pid>/cmdline` reads empty. Wait for that exec to finish, bounded.
    assert!(
        poll_until(SOON, || live_with_cmdline("__watchdog").contains(&new)).await,
        "the stats name {new}, which is not a live watchdog (cmdline {:?})",
        std::fs::read(format!("/proc/{new}/cmdline"))
            .map(|c| String::from_utf8_lossy(&c).into_owned())
    );
    let result = bash(&rt, "echo still serving").await;
    assert_eq!(result.text, "still serving\n");
    finish(rt.clone()).await;
    assert_eq!(rt.process_stats().await.watchdog, WatchdogStatus::Stopped);
    assert!(
        poll_until(SOON, || !live_with_cmdline("__watchdog").contains(&new)).await,
        "the new watchdog outlived the shutdown"
    );
}

#[actix_rt::test]
async fn a_watchdog_that_keeps_dying_at_once_is_given_up_after_bounded_restarts() {
    let log = tempfile::NamedTempFile::new().unwrap();
    // Each start appends a line and exits at once.
    let script = format!("echo started >> '{}'", log.path().display());
    let started_at = Instant::now();
    let (rt, _spill) = runtime_with(|b| {
        b.containment(Some(ContainmentMode::Group))
            .watchdog("/bin/sh", ["-c", script.as_str()])
    });
    let gave_up = watchdog_becomes(&rt, |s| s == WatchdogStatus::GaveUp).await;
    let took = started_at.elapsed();
    let starts = || std::fs::read_to_string(log.path()).unwrap().lines().count();
    assert_eq!(
        gave_up.watchdog_restarts,
        u64::from(WATCHDOG_RESTARTS_IN_A_ROW),
        "{gave_up:?}"
    );
    assert_eq!(starts(), WATCHDOG_RESTARTS_IN_A_ROW as usize + 1);
    // The waits between restarts double from 100 ms: 100 + 200 + 400 + 800 + 1600 ms at least.
    assert!(
        took >= Duration::from_millis(3100),
        "gave up after {took:?}: the restarts did not back off"
    );
    // Given up is given up: no start after it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(starts(), WATCHDOG_RESTARTS_IN_A_ROW as usize + 1);
    assert_eq!(rt.process_stats().await.watchdog, WatchdogStatus::GaveUp);
    let result = bash(&rt, "echo still serving").await;
    assert_eq!(result.text, "still serving\n");
    finish(rt).await;
}
