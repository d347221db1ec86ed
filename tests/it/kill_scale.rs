//! Killing at scale (issue 19): `bash_kill` answers without waiting for anything it need not wait for,
//! and killing many tasks costs time linear in their number, in every containment mode.
//!
//! Before, a kill's work ran on the runtime's one thread and grew with what else was alive: in
//! cgroup mode each killed leaf's "all gone" watch closed an inotify instance (an RCU grace period,
//! 12–20 ms, during which nothing else ran), and in subreaper and group modes each kill walked
//! `/proc` to signal and then to wait (a walk over every process of the host, repeated every 20 ms,
//! per task). 100 kills one after another took 0.85 s (cgroup), 0.21 s (subreaper), 0.05 s
//! (group), and 1,000 took 8.0 s, 15.6 s, 2.7 s (BENCHMARKS.md, "Killing at scale").
//!
//! One runtime per mode (each kept for all its 1,100 kills), the kills issued one after another as
//! a client does, each reply awaited before the next call:
//! - 100 kills, from the first call until every process is gone, take at most 5× what tokio takes
//!   to kill and reap 100 `sleep`s it spawned itself, one after another, measured beside it (the
//!   target is 2×; the bound is generous for a shared two-core machine), plus 150 ms;
//! - 1,000 kills take less than 15× what the 100 took (10× the work), plus 500 ms of noise;
//! - nothing is left running (the task's unique `sleep` argument is not in `/proc/*/cmdline`).

use std::time::{Duration, Instant};

use crate::common::*;
use dsh::ContainmentMode;
use dsh_test_support::own_process;
use dsh_test_support::procfs::live_with_cmdline;
use serde_json::json;

/// The tests of this module run one at a time, each in a process of its own: each times itself
/// against the machine, and a runtime in subreaper mode changes the whole process.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Starts `n` background `sleep <marker>` tasks (100 starts at a time) and waits until all run.
async fn start(rt: &dsh::Runtime, n: usize, marker: &str) -> Vec<String> {
    let command = format!("sleep {marker}");
    let mut ids = Vec::with_capacity(n);
    for batch in (0..n).collect::<Vec<_>>().chunks(100) {
        let starts = batch.iter().map(|_| start_bg(rt, None, &command));
        ids.extend(futures::future::join_all(starts).await);
    }
    assert_eq!(rt.process_stats().await.live, n);
    ids
}

/// Kills every task of `ids` one after another, each reply awaited; returns the time from the first
/// call until every process is gone.
async fn kill_each(rt: &dsh::Runtime, ids: &[String]) -> Duration {
    let began = Instant::now();
    for id in ids {
        let r = call(rt, "bash_kill", json!({"task_id": id})).await;
        assert_eq!(r.text, format!("killed background task {id}"));
    }
    while rt.process_stats().await.live > 0 {
        assert!(began.elapsed() < SOON * 6, "kills never ended");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    began.elapsed()
}

/// The raw baseline: `n` `sleep <marker>` children this test spawns, killed and reaped one after
/// another.
async fn raw_kill_each(n: usize, marker: &str) -> Duration {
    let mut children: Vec<tokio::process::Child> = (0..n)
        .map(|_| {
            tokio::process::Command::new("sleep")
                .arg(marker)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let began = Instant::now();
    for child in &mut children {
        child.kill().await.unwrap();
    }
    began.elapsed()
}

async fn kills_scale_linearly_in(mode: ContainmentMode, marker: &str, raw_marker: &str) {
    let spill = tempfile::tempdir().unwrap();
    let rt = match dsh::Runtime::builder()
        .spill_dir(spill.path())
        .containment(Some(mode))
        .start_in_current_system()
    {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("skipped: {err}");
            return;
        }
    };
    // A warm-up of ten, so the first kills pay for nothing one-off (a thread, a leaf pool).
    let ids = start(&rt, 10, marker).await;
    kill_each(&rt, &ids).await;

    // The hundred is measured before and after the thousand: the faster one is set against raw
    // kills, the slower one against the thousand, so a moment of load on the machine during one of
    // them cannot make either bound fail.
    let mut hundreds = Vec::new();
    let ids = start(&rt, 100, marker).await;
    hundreds.push(kill_each(&rt, &ids).await);
    let raw = raw_kill_each(100, raw_marker).await;
    let ids = start(&rt, 1000, marker).await;
    let thousand = kill_each(&rt, &ids).await;
    let ids = start(&rt, 100, marker).await;
    hundreds.push(kill_each(&rt, &ids).await);
    let (fast, slow) = (hundreds[0].min(hundreds[1]), hundreds[0].max(hundreds[1]));
    eprintln!(
        "{mode}: 100 kills {hundreds:?} (raw tokio {raw:?}), 1,000 kills {thousand:?} ({:.1}x)",
        thousand.as_secs_f64() / slow.as_secs_f64()
    );
    finish(rt).await;
    assert_eq!(
        live_with_cmdline(&format!("sleep {marker}")),
        Vec::<i32>::new()
    );
    assert_eq!(
        live_with_cmdline(&format!("sleep {raw_marker}")),
        Vec::<i32>::new()
    );
    assert!(
        fast <= raw * 5 + Duration::from_millis(150),
        "{mode}: 100 kills took {hundreds:?}, raw tokio {raw:?}"
    );
    assert!(
        thousand <= slow * 15 + Duration::from_millis(500),
        "{mode}: 1,000 kills took {thousand:?}, 100 took {hundreds:?}: not linear"
    );
}

#[actix_rt::test]
async fn cgroup_kills_scale_linearly_and_cost_what_raw_kills_cost() {
    let _serial = SERIAL.lock().await;
    own_process!(cgroup_kills_scale_linearly_and_cost_what_raw_kills_cost);
    kills_scale_linearly_in(ContainmentMode::Cgroup, "31.19011", "31.19012").await;
}

#[actix_rt::test]
async fn subreaper_kills_scale_linearly_and_cost_what_raw_kills_cost() {
    let _serial = SERIAL.lock().await;
    own_process!(subreaper_kills_scale_linearly_and_cost_what_raw_kills_cost);
    kills_scale_linearly_in(ContainmentMode::Subreaper, "31.19021", "31.19022").await;
}

#[actix_rt::test]
async fn group_kills_scale_linearly_and_cost_what_raw_kills_cost() {
    let _serial = SERIAL.lock().await;
    own_process!(group_kills_scale_linearly_and_cost_what_raw_kills_cost);
    kills_scale_linearly_in(ContainmentMode::Group, "31.19031", "31.19032").await;
}
