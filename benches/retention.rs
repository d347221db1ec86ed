//! Retained memory of finished background tasks: 1,000 tasks that each print 200 KB, started 50 at a
//! time and left unread, then all read to the end. Reports this process's RSS (the runtime is all it
//! runs) against its idle RSS measured first in the same run: with the default retention (1,000 tasks,
//! 64 MiB of output in memory) the unread tasks keep at most their 64,000-byte tails, and a task read to
//! the end keeps no output at all. The criterion part times a read of a finished, drained task.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a bench, not product code: a failed setup should stop it loudly"
)]

#[path = "support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use criterion::Criterion;
use dsh::{Runtime, ToolCall};
use serde_json::json;

const TASKS: usize = 1000;
const BATCH: usize = 50;
const COMMAND: &str = "head -c 200000 /dev/zero | tr '\\0' x";

async fn start(runtime: &Runtime) -> String {
    let result = runtime
        .call(ToolCall::new(
            "bash",
            json!({"command": COMMAND, "description": "bench", "run_in_background": true}),
        ))
        .await;
    result
        .text
        .strip_prefix("started background task ")
        .expect(&result.text)
        .to_owned()
}

/// Waits (polling the task list, without reading any task) until `n` tasks have settled.
async fn settled(runtime: &Runtime, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(300);
    while runtime
        .tasks(None)
        .await
        .iter()
        .filter(|t| t.settled)
        .count()
        < n
    {
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
    let (runtime, spill) = system.block_on(async { support::runtime() });
    // Listing (`--list`) measures nothing: the bench below then never runs its closure.
    let last = if support::listing() {
        String::new()
    } else {
        retained_rss(&system, &runtime, spill.path())
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
) -> String {
    let tasks = if support::measuring() { TASKS } else { BATCH };
    let idle = support::rss_kib();
    let ids = system.block_on(async {
        let mut ids = Vec::with_capacity(tasks);
        for batch in 0..tasks / BATCH {
            let started = futures::future::join_all((0..BATCH).map(|_| start(runtime))).await;
            ids.extend(started);
            settled(runtime, (batch + 1) * BATCH).await;
        }
        ids
    });
    let unread = support::rss_kib();
    let spilled: u64 = std::fs::read_dir(spill)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    system.block_on(async {
        for id in &ids {
            let result = runtime
                .call(ToolCall::new("bash_output", json!({"task_id": id})))
                .await;
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
        "RESULT retention, {tasks} finished tasks x 200 KB: RSS idle {:.1} MiB, all unread {:.1} MiB \
         (+{:.1}), all read {:.1} MiB (+{:.1}; {:.1} MiB after malloc_trim); spill files {:.1} MiB on disk",
        mib(idle),
        mib(unread),
        mib(unread.saturating_sub(idle)),
        mib(read),
        mib(read.saturating_sub(idle)),
        mib(trimmed),
        spilled as f64 / (1 << 20) as f64
    );
    ids.last().unwrap().clone()
}
