//! Background benches under load (no raw baseline exists for these; the targets are absolute):
//! - fleet: 1,000 background `sleep 30` tasks — start all, `bash_output` each twice, `bash_kill` all, await
//!   their ends. Reports runtime RSS per live task, `bash_output` p99 while all 1,000 run, and the time from
//!   the first kill until every task has ended and been joined.
//! - notices: 1,000 owned background tasks that print the time and exit — every notice delivered exactly
//!   once, and the p99 from exit to notice. Beside it, the raw baseline: the same commands in the same
//!   bursts through tokio, timed from the printed time to `wait` returning, which shows how much of the
//!   figure is the children's own exit competing for the cores.
//! - kills (issue 19): 100 and 1,000 background `sleep 30` tasks killed with `bash_kill` one after
//!   another, each reply awaited before the next call (as a client does over one connection): the
//!   time until the last reply, and until every process is gone. Beside it, paired round by round
//!   (which arm goes first alternates), the raw baseline: tokio kills as many `sleep 30` children it
//!   spawned, one after another, each kill awaited until the child is reaped (`Child::kill`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a bench, not product code: a failed setup should stop it loudly"
)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use actix::prelude::*;
use criterion::Criterion;
use dsh::{AgentRef, Inject, Runtime, ToolCall};
use dsh_test_support::bench as support;
use serde_json::json;

const TASKS: usize = 1000;

async fn start_all(runtime: &Runtime, command: &str, agent: Option<&AgentRef>) -> Vec<String> {
    start_in_batches(runtime, command, agent, 100).await
}

/// Starts `TASKS` background commands, `batch` concurrent starts at a time.
async fn start_in_batches(
    runtime: &Runtime,
    command: &str,
    agent: Option<&AgentRef>,
    batch: usize,
) -> Vec<String> {
    let mut ids = Vec::with_capacity(TASKS);
    for batch in (0..TASKS).collect::<Vec<_>>().chunks(batch) {
        let calls = batch.iter().map(|_| {
            let mut call = ToolCall::new(
                "bash",
                json!({"command": command, "description": "bench", "run_in_background": true}),
            );
            if let Some(agent) = agent {
                call = call.with_caller(agent.clone());
            }
            runtime.call(call)
        });
        for result in futures::future::join_all(calls).await {
            ids.push(support::started_task_id(&result));
        }
    }
    ids
}

#[derive(Default, Debug, Clone, Copy)]
struct FleetMetrics {
    rss_per_task_kib: f64,
    read_p99_ms: f64,
    kill_join_ms: f64,
}

async fn fleet_cycle(runtime: &Runtime) -> FleetMetrics {
    let rss_before = support::rss_kib();
    let ids = start_all(runtime, "sleep 30", None).await;
    let stats = runtime.process_stats().await;
    assert_eq!(stats.live, TASKS);
    let rss_per_task_kib = (support::rss_kib().saturating_sub(rss_before)) as f64 / TASKS as f64;
    let mut latencies = Vec::with_capacity(2 * TASKS);
    for _round in 0..2 {
        for id in &ids {
            let start = Instant::now();
            let result = runtime
                .call(ToolCall::new("bash_output", json!({"task_id": id})))
                .await;
            latencies.push(start.elapsed());
            assert_eq!(result.text, "(no new output)\n[status: running]");
        }
    }
    let kill_start = Instant::now();
    let kills = ids
        .iter()
        .map(|id| runtime.call(ToolCall::new("bash_kill", json!({"task_id": id}))));
    for result in futures::future::join_all(kills).await {
        assert!(
            result.text.starts_with("killed background task"),
            "{}",
            result.text
        );
    }
    loop {
        if runtime.process_stats().await.live == 0 {
            break;
        }
        assert!(
            kill_start.elapsed() < Duration::from_secs(60),
            "kills never finished"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let kill_join_ms = kill_start.elapsed().as_secs_f64() * 1e3;
    FleetMetrics {
        rss_per_task_kib,
        read_p99_ms: support::percentile_ms(&mut latencies, 99.0),
        kill_join_ms,
    }
}

/// Records when each notice arrived, by task id.
struct NoticeClock {
    arrivals: Arc<Mutex<HashMap<String, Vec<SystemTime>>>>,
}

impl Actor for NoticeClock {
    type Context = Context<Self>;
}

impl Handler<Inject> for NoticeClock {
    type Result = ();
    fn handle(&mut self, notice: Inject, _: &mut Self::Context) {
        let now = SystemTime::now();
        let id = notice
            .text
            .split_whitespace()
            .nth(3)
            .unwrap_or_default()
            .to_owned();
        self.arrivals
            .lock()
            .unwrap()
            .entry(id)
            .or_default()
            .push(now);
    }
}

async fn notices_cycle(runtime: &Runtime, session: &str, batch: usize) -> (f64, f64) {
    let arrivals: Arc<Mutex<HashMap<String, Vec<SystemTime>>>> = Arc::default();
    let clock = NoticeClock {
        arrivals: arrivals.clone(),
    }
    .start();
    let agent = AgentRef::new(session, clock.recipient());
    let ids = start_in_batches(runtime, "exec date +%s%N", Some(&agent), batch).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    while arrivals.lock().unwrap().len() < TASKS {
        assert!(
            Instant::now() < deadline,
            "only {} notices",
            arrivals.lock().unwrap().len()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Give a duplicate the chance to show up before counting.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let arrivals = arrivals.lock().unwrap().clone();
    let mut latencies = Vec::with_capacity(TASKS);
    for id in &ids {
        let times = arrivals
            .get(id)
            .unwrap_or_else(|| panic!("no notice for {id}"));
        assert_eq!(times.len(), 1, "{id} notified {} times", times.len());
        let output = runtime
            .call(ToolCall::new("bash_output", json!({"task_id": id})).with_caller(agent.clone()))
            .await;
        let printed_ns: u128 = output
            .text
            .lines()
            .next()
            .unwrap()
            .parse()
            .expect(&output.text);
        let arrived_ns = times[0].duration_since(UNIX_EPOCH).unwrap().as_nanos();
        latencies.push(Duration::from_nanos(
            arrived_ns.saturating_sub(printed_ns) as u64
        ));
    }
    runtime.release_session(session).await;
    (
        support::percentile_ms(&mut latencies.clone(), 50.0),
        support::percentile_ms(&mut latencies, 99.0),
    )
}

/// The raw baseline of `notices_cycle`: the same 1,000 commands started in the same bursts through
/// tokio, each awaited by a task of its own; the latency is from the printed time to `wait` returning.
/// Under a burst the children's own exit competes for the two cores, and this shows how much of
/// dsh's exit→notice figure that contention accounts for.
async fn raw_exit_cycle(batch: usize) -> (f64, f64) {
    let latencies: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let mut waiters = Vec::with_capacity(TASKS);
    for _burst in 0..TASKS / batch {
        for _ in 0..batch {
            let child = tokio::process::Command::new("bash")
                .args(["-c", "exec date +%s%N"])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("raw bash");
            let latencies = latencies.clone();
            waiters.push(actix::spawn(async move {
                let output = child.wait_with_output().await.expect("raw wait");
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap()
                    .as_nanos();
                let printed: u128 = String::from_utf8_lossy(&output.stdout)
                    .trim()
                    .parse()
                    .expect("date output");
                latencies
                    .lock()
                    .unwrap()
                    .push(Duration::from_nanos(now.saturating_sub(printed) as u64));
            }));
            // Let the waiters of earlier children run between spawns (a spawn blocks this thread).
            tokio::task::yield_now().await;
        }
    }
    futures::future::join_all(waiters).await;
    let mut latencies = latencies.lock().unwrap().clone();
    (
        support::percentile_ms(&mut latencies.clone(), 50.0),
        support::percentile_ms(&mut latencies, 99.0),
    )
}

/// One dsh arm of the kills bench: starts `n` background `sleep 30` tasks (100 starts at a time),
/// then kills them one after another. Returns the time until the last reply and until every
/// process is gone.
async fn dsh_kills(runtime: &Runtime, n: usize) -> (Duration, Duration) {
    let mut ids = Vec::with_capacity(n);
    for batch in (0..n).collect::<Vec<_>>().chunks(100) {
        let starts = batch.iter().map(|_| {
            runtime.call(ToolCall::new(
                "bash",
                json!({"command": "sleep 30", "description": "bench", "run_in_background": true}),
            ))
        });
        for result in futures::future::join_all(starts).await {
            ids.push(support::started_task_id(&result));
        }
    }
    assert_eq!(runtime.process_stats().await.live, n);
    let start = Instant::now();
    for id in &ids {
        let result = runtime
            .call(ToolCall::new("bash_kill", json!({"task_id": id})))
            .await;
        assert_eq!(result.text, format!("killed background task {id}"));
    }
    let replies = start.elapsed();
    while runtime.process_stats().await.live > 0 {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "kills never ended"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    (replies, start.elapsed())
}

/// The raw arm: tokio spawns `n` `sleep 30` children, then kills them one after another, each kill
/// awaited until the child is reaped.
async fn raw_kills(n: usize) -> Duration {
    let mut children: Vec<tokio::process::Child> = (0..n)
        .map(|_| {
            tokio::process::Command::new("sleep")
                .arg("30")
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("raw sleep")
        })
        .collect();
    let start = Instant::now();
    for child in &mut children {
        child.kill().await.expect("raw kill");
    }
    start.elapsed()
}

/// Paired rounds of both kill arms for `n` tasks; prints the medians and returns dsh's (replies,
/// all gone) medians in ms.
fn kills(system: &actix::SystemRunner, runtime: &Runtime, n: usize, rounds: usize) -> (f64, f64) {
    let (mut replies, mut gone, mut raw) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        if round % 2 == 1 {
            raw.push(system.block_on(raw_kills(n)));
        }
        let (r, g) = system.block_on(dsh_kills(runtime, n));
        replies.push(r);
        gone.push(g);
        if round % 2 == 0 {
            raw.push(system.block_on(raw_kills(n)));
        }
    }
    let (replies, gone, raw) = (
        support::median_ms(&mut replies),
        support::median_ms(&mut gone),
        support::median_ms(&mut raw),
    );
    println!(
        "RESULT kills x{n}, one after another, paired x{rounds} (medians): dsh replies {replies:.1} ms, \
         all gone {gone:.1} ms; raw tokio kill+reap {raw:.1} ms; replies/raw {:.2}, all gone/raw {:.2} \
         (target <= 2)",
        replies / raw,
        gone / raw
    );
    (replies, gone)
}

/// The median over cycles of each cycle's p99, from `(p50, p99)` pairs.
fn median_p99(cycles: &[(f64, f64)]) -> f64 {
    let mut p99s: Vec<f64> = cycles.iter().map(|c| c.1).collect();
    p99s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    p99s[p99s.len() / 2]
}

fn main() {
    let system = actix::System::new();
    let mut c = Criterion::default().configure_from_args();
    let (runtime, _spill) = system.block_on(async { support::runtime() });

    let fleet: Arc<Mutex<Vec<FleetMetrics>>> = Arc::default();
    let mut group = support::group(&mut c, "background_fleet_1000", 10, 0.001, 5.0);
    support::bench_runs(
        &mut group,
        &system,
        "start_read2_kill_join",
        "fleet/cycle",
        async || {
            let metrics = fleet_cycle(&runtime).await;
            fleet.lock().unwrap().push(metrics);
        },
    );
    group.finish();

    let notices: Arc<Mutex<Vec<(f64, f64)>>> = Arc::default();
    let mut group = support::group(&mut c, "notices_1000", 10, 0.001, 5.0);
    let mut round = 0;
    support::bench_runs(
        &mut group,
        &system,
        "owned_tasks_exit_to_notice",
        "notices/dsh",
        async || {
            round += 1;
            let latency = notices_cycle(&runtime, &format!("bench-{round}"), 100).await;
            notices.lock().unwrap().push(latency);
        },
    );
    let raw: Arc<Mutex<Vec<(f64, f64)>>> = Arc::default();
    support::bench_runs(
        &mut group,
        &system,
        "raw_tokio_exit_to_wait",
        "notices/raw",
        async || {
            let latency = raw_exit_cycle(100).await;
            raw.lock().unwrap().push(latency);
        },
    );
    group.finish();
    c.final_summary();
    // The same 1,000 tasks started one after another (an agent starting its tasks in turn).
    let sequential = if notices.lock().unwrap().is_empty() || !support::measuring() {
        None
    } else {
        Some(system.block_on(notices_cycle(&runtime, "bench-sequential", 1)))
    };
    // Kills at scale, paired with the raw baseline (a smoke run of 10 in criterion's test mode).
    if !support::listing() {
        if support::measuring() {
            let (_, small) = kills(&system, &runtime, 100, 10);
            let (_, large) = kills(&system, &runtime, 1000, 3);
            println!(
                "RESULT kills, 1,000 against 100 (all gone): {:.1}x the time for 10x the kills",
                large / small
            );
        } else {
            kills(&system, &runtime, 10, 1);
        }
    }
    system.block_on(runtime.shutdown());

    let fleet = fleet.lock().unwrap();
    // Empty when criterion only listed the benches.
    if let Some(&first) = fleet.first() {
        let worst = |f: fn(&FleetMetrics) -> f64| fleet.iter().map(f).fold(0.0, f64::max);
        println!(
            "RESULT fleet: RSS per live task {:.1} KiB (first cycle; target <= 100), bash_output p99 {:.3} ms (worst of {} cycles: {:.3}; target <= 2), kill+join {:.0} ms (worst {:.0}; target <= grace 3000 + 1000)",
            first.rss_per_task_kib,
            first.read_p99_ms,
            fleet.len(),
            worst(|m| m.read_p99_ms),
            first.kill_join_ms,
            worst(|m| m.kill_join_ms),
        );
    }
    let notices = notices.lock().unwrap();
    if notices.is_empty() {
        return;
    }
    let worst_p99 = notices.iter().map(|n| n.1).fold(0.0, f64::max);
    let notices_p99 = median_p99(&notices);
    if let Some((p50, p99)) = sequential {
        println!(
            "RESULT notices, 1,000 tasks started one at a time: exit->notice p50 {p50:.2} ms, p99 {p99:.2} ms (target <= 10)"
        );
    }
    let raw = raw.lock().unwrap();
    if !raw.is_empty() {
        println!(
            "RESULT raw tokio baseline, same bursts of 100: exit->wait p50 {:.2} ms, p99 median {:.2} ms",
            raw[0].0,
            median_p99(&raw)
        );
    }
    println!(
        "RESULT notices, starts in bursts of 100: every notice exactly once over {} cycles of {TASKS}; exit->notice p50 {:.2} ms, p99 median {:.2} ms (worst {:.2}; target <= 10)",
        notices.len(),
        notices[0].0,
        notices_p99,
        worst_p99
    );
}
