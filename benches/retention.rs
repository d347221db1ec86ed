//! Retained memory of finished background tasks, in two scenarios, each on a runtime of its own with
//! the default retention (1,000 tasks, 64 MiB of memory, 1 GiB of spill files):
//! - chatty: 2,000 tasks that each print 3,000 short lines to stdout and 3,000 to stderr (~170 KB),
//!   started all at once (issue 19: "2,000 finished chatty tasks keep 107–110 MB RSS against the
//!   64 MiB `--retained-output-bytes`"), left unread, then all read;
//! - 200 KB: 1,000 tasks that each print 200 KB in large writes, started 50 at a time, left unread,
//!   then all read.
//!
//! Reports this process's RSS (the runtimes are all it runs) against its RSS before the scenario,
//! what retention counts for the finished tasks (`Runtime::retention_load`), the page-backed tails
//! (`dsh_process::page_backed_bytes`) and the spill files on disk. The criterion part times a read of a
//! finished, drained task.
#![allow(
    clippy::unwrap_used,
    reason = "a bench, not product code: a failed setup should stop it loudly"
)]

use std::time::{Duration, Instant};

use criterion::Criterion;
use dsh::{Runtime, ToolCall};
use dsh_test_support::bench as support;
use serde_json::json;

/// One scenario: its command, how many tasks, and how many are started before waiting for them.
struct Scenario {
    name: &'static str,
    command: &'static str,
    tasks: usize,
    batch: usize,
}

const LARGE: Scenario = Scenario {
    name: "200 KB",
    command: "head -c 200000 /dev/zero | tr '\\0' x",
    tasks: 1000,
    batch: 50,
};

const CHATTY: Scenario = Scenario {
    name: "chatty",
    command: "for i in $(seq 1 3000); do echo \"line $i: some chatty output of a build step\"; \
              echo \"err $i\" >&2; done",
    tasks: 2000,
    batch: 2000,
};

async fn start(runtime: &Runtime, command: &str) -> String {
    let result = runtime
        .call(ToolCall::new(
            "bash",
            json!({"command": command, "description": "bench", "run_in_background": true}),
        ))
        .await;
    support::started_task_id(&result)
}

/// Waits (polling the counts, without reading any task) until no process runs and the registry has
/// recorded every end (its finished count stopped moving).
async fn settled(runtime: &Runtime) {
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut last = None;
    loop {
        let stats = runtime.process_stats().await;
        let load = runtime.retention_load().await;
        if stats.live == 0 && stats.queued == 0 && last == Some(load) {
            return;
        }
        last = Some(load);
        assert!(Instant::now() < deadline, "tasks never settled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn main() {
    let system = actix::System::new();
    let mut c = Criterion::default().configure_from_args();
    // Listing (`--list`) measures nothing: the bench below then never runs its closure.
    if !support::listing() {
        let (runtime, spill) = system.block_on(async { support::runtime() });
        retained_rss(&system, &runtime, spill.path(), &CHATTY);
        system.block_on(runtime.shutdown());
    }
    let (runtime, spill) = system.block_on(async { support::runtime() });
    let last = if support::listing() {
        String::new()
    } else {
        retained_rss(&system, &runtime, spill.path(), &LARGE)
    };
    c.bench_function("bash_output of a finished, drained task", |b| {
        b.iter_custom(|iters| {
            system.block_on(support::time_runs("retention/read", iters, async || {
                runtime
                    .call(ToolCall::new("bash_output", json!({"task_id": last})))
                    .await;
            }))
        })
    });
    system.block_on(runtime.shutdown());
    c.final_summary();
}

/// Starts the finished tasks, reads them all, and prints the RSS at each step. Returns the last id.
fn retained_rss(
    system: &actix::SystemRunner,
    runtime: &Runtime,
    spill: &std::path::Path,
    scenario: &Scenario,
) -> String {
    let (tasks, batch) = if support::measuring() {
        (scenario.tasks, scenario.batch)
    } else {
        (50, 50)
    };
    let idle = support::rss_kib();
    let ids = system.block_on(async {
        let mut ids = Vec::with_capacity(tasks);
        for _ in (batch..=tasks).step_by(batch) {
            // Started 100 at a time without waiting, so a batch of 2,000 is 2,000 tasks at once.
            for _ in 0..batch / batch.min(100) {
                let starts = (0..batch.min(100)).map(|_| start(runtime, scenario.command));
                ids.extend(futures::future::join_all(starts).await);
            }
            settled(runtime).await;
        }
        ids
    });
    let unread = support::rss_kib();
    let load = system.block_on(runtime.retention_load());
    let pages = dsh_process::page_backed_bytes();
    let spilled: u64 = std::fs::read_dir(spill)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    let mut discarded = 0;
    system.block_on(async {
        for id in &ids {
            let result = runtime
                .call(ToolCall::new("bash_output", json!({"task_id": id})))
                .await;
            if result.is_error {
                assert!(result.text.contains("discarded"), "{}", result.text);
                discarded += 1;
                continue;
            }
            assert!(
                result.text.ends_with("[status: completed, exit code: 0]"),
                "{}",
                result.text
            );
        }
    });
    let read = support::rss_kib();
    // Diagnostic only: what of `read` is memory glibc keeps after it was freed, not live data.
    // SAFETY: malloc_trim only hands free heap pages back to the kernel; no pointer is touched.
    unsafe { nix::libc::malloc_trim(0) };
    let trimmed = support::rss_kib();
    println!(
        "RESULT retention, {tasks} finished {} tasks ({} kept, {discarded} discarded): RSS before \
         {:.1} MiB, all finished unread {:.1} MiB (+{:.1}; retention counts {:.1} MiB, of which \
         {:.1} MiB are page-backed tails), all read {:.1} MiB (+{:.1}; {:.1} MiB after \
         malloc_trim); spill files {:.1} MiB on disk",
        scenario.name,
        load.finished,
        mib(idle),
        mib(unread),
        mib(unread.saturating_sub(idle)),
        load.retained_bytes as f64 / (1 << 20) as f64,
        pages as f64 / (1 << 20) as f64,
        mib(read),
        mib(read.saturating_sub(idle)),
        mib(trimmed),
        spilled as f64 / (1 << 20) as f64
    );
    ids.last().unwrap().clone()
}
