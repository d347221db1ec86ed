//! Supervisor policies under load, each beside its raw baseline in the same run:
//! - load: 4 sessions × 250 background tasks of mixed length (0–40 ms of sleep) under
//!   `max_concurrent(8)`, session A's 250 submitted first, then B's, C's, D's; every task awaited with
//!   `bash_output wait`. Raw baseline: the same commands in the same order through tokio behind a FIFO
//!   semaphore of 8. Reports the throughput ratio (raw time / dsh time), Jain's fairness index over
//!   completions per session in each second (both arms: FIFO shows what round-robin avoids), and the
//!   manager's admission cost per call.
//! - until: a task prints the time and sleeps; `bash_output until` must wake on that write. Raw
//!   baseline: the same command through tokio, its stdout read line by line. Reports p50/p99 from the
//!   printed time to the wake.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a bench, not product code: a failed setup should stop it loudly"
)]

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use criterion::Criterion;
use dsh::{AgentRef, Inject, Runtime, ToolCall};
use dsh_test_support::actors::Recorder;
use dsh_test_support::bench as support;
use serde_json::json;
use tokio::io::AsyncBufReadExt;

const SESSIONS: usize = 4;
const PER_SESSION: usize = 250;
const LIMIT: usize = 8;
const WAKES: usize = 100;

/// An agent that drops its notices (the bench waits with `bash_output wait`).
type Sink = Recorder<Inject>;

/// The `i`-th task's command: 0, 10, 20 or 40 ms of sleep.
fn command(i: usize) -> String {
    match i % 4 {
        0 => "true".to_owned(),
        1 => "sleep 0.01".to_owned(),
        2 => "sleep 0.02".to_owned(),
        _ => "sleep 0.04".to_owned(),
    }
}

/// One cycle's wall time and each completion's (session, time since the start).
struct Cycle {
    wall: Duration,
    completions: Vec<(usize, Duration)>,
}

async fn dsh_cycle(runtime: &Runtime, agents: &[AgentRef]) -> Cycle {
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(SESSIONS * PER_SESSION);
    for (session, agent) in agents.iter().enumerate() {
        let calls = (0..PER_SESSION).map(|i| {
            runtime.call(
                ToolCall::new(
                    "bash",
                    json!({"command": command(i), "description": "bench", "run_in_background": true}),
                )
                .with_caller(agent.clone()),
            )
        });
        for result in futures::future::join_all(calls).await {
            tasks.push((session, support::started_task_id(&result)));
        }
    }
    let waits = tasks.into_iter().map(|(session, id)| {
        let call = ToolCall::new(
            "bash_output",
            json!({"task_id": id, "wait": true, "timeout_ms": 600000}),
        )
        .with_caller(agents[session].clone());
        async move {
            let result = runtime.call(call).await;
            assert!(
                result.text.ends_with("[status: completed, exit code: 0]"),
                "{}",
                result.text
            );
            (session, start.elapsed())
        }
    });
    let completions = futures::future::join_all(waits).await;
    Cycle {
        wall: start.elapsed(),
        completions,
    }
}

async fn raw_cycle() -> Cycle {
    let start = Instant::now();
    let permits = Arc::new(tokio::sync::Semaphore::new(LIMIT));
    let mut waiters = Vec::with_capacity(SESSIONS * PER_SESSION);
    for session in 0..SESSIONS {
        for i in 0..PER_SESSION {
            let permits = permits.clone();
            waiters.push(actix::spawn(async move {
                let _permit = permits.acquire_owned().await.unwrap();
                let output = support::raw_bash(&command(i)).await;
                assert!(output.status.success());
                (session, start.elapsed())
            }));
        }
    }
    let mut completions = Vec::with_capacity(waiters.len());
    for waiter in waiters {
        completions.push(waiter.await.unwrap());
    }
    Cycle {
        wall: start.elapsed(),
        completions,
    }
}

/// Jain's index over completions per session in each whole second: (mean, lowest).
fn jain(completions: &[(usize, Duration)]) -> (f64, f64) {
    let seconds = completions
        .iter()
        .map(|(_, at)| at.as_secs() as usize)
        .max()
        .unwrap_or(0);
    let mut indices = Vec::new();
    // The last second is partial (the tail of the run); whole seconds only, unless there is just one.
    for second in 0..seconds.max(1) {
        let mut counts = [0f64; SESSIONS];
        for (session, at) in completions {
            if at.as_secs() as usize == second {
                counts[*session] += 1.0;
            }
        }
        let sum: f64 = counts.iter().sum();
        let squares: f64 = counts.iter().map(|c| c * c).sum();
        if sum > 0.0 {
            indices.push(sum * sum / (SESSIONS as f64 * squares));
        }
    }
    let mean = indices.iter().sum::<f64>() / indices.len().max(1) as f64;
    let lowest = indices.iter().cloned().fold(1.0, f64::min);
    (mean, lowest)
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

const WAKE_COMMAND: &str = "sleep 0.03; date +%s%N; exec sleep 30";

/// One `until` wake: from the printed time to the call's return.
async fn dsh_wake(runtime: &Runtime) -> Duration {
    let started = runtime
        .call(ToolCall::new(
            "bash",
            json!({"command": WAKE_COMMAND, "description": "bench", "run_in_background": true}),
        ))
        .await;
    let id = support::started_task_id(&started);
    let result = runtime
        .call(ToolCall::new(
            "bash_output",
            json!({"task_id": id, "until": "(?m)^[0-9]{19}$", "timeout_ms": 30000}),
        ))
        .await;
    let woke = now_ns();
    let printed: u128 = result
        .text
        .lines()
        .next()
        .unwrap()
        .parse()
        .expect(&result.text);
    runtime
        .call(ToolCall::new("bash_kill", json!({"task_id": id})))
        .await;
    Duration::from_nanos(woke.saturating_sub(printed) as u64)
}

/// The raw baseline of [`dsh_wake`]: the same command's stdout read line by line.
async fn raw_wake() -> Duration {
    let mut child = tokio::process::Command::new("bash")
        .args(["-c", WAKE_COMMAND])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("raw bash");
    let stdout = child.stdout.take().unwrap();
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let line = lines.next_line().await.unwrap().unwrap();
    let woke = now_ns();
    let printed: u128 = line.trim().parse().unwrap();
    child.kill().await.unwrap();
    Duration::from_nanos(woke.saturating_sub(printed) as u64)
}

fn agents() -> Vec<AgentRef> {
    (0..SESSIONS)
        .map(|s| AgentRef::new(format!("session-{s}"), Sink::start_discarding().recipient()))
        .collect()
}

fn main() {
    let system = actix::System::new();
    let mut c = Criterion::default().configure_from_args();
    let spill = tempfile::tempdir().unwrap();
    let runtime = system.block_on(async {
        Runtime::builder()
            .spill_dir(spill.path())
            .containment(support::containment())
            .max_concurrent(LIMIT)
            .start_in_current_system()
            .expect("runtime")
    });
    let agents = system.block_on(async { agents() });
    let dsh_cycles = std::cell::RefCell::new(Vec::new());
    let raw_cycles = std::cell::RefCell::new(Vec::new());
    {
        let mut group = support::group(&mut c, "load", 10, 0.1, 1.0);
        group.bench_function("dsh 4x250 max-concurrent 8", |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let cycle = system.block_on(dsh_cycle(&runtime, &agents));
                    total += cycle.wall;
                    support::record("load/dsh", cycle.wall);
                    dsh_cycles.borrow_mut().push(cycle);
                }
                total
            })
        });
        group.bench_function("raw tokio 1000, FIFO semaphore 8", |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let cycle = system.block_on(raw_cycle());
                    total += cycle.wall;
                    support::record("load/raw", cycle.wall);
                    raw_cycles.borrow_mut().push(cycle);
                }
                total
            })
        });
        group.finish();
    }
    if support::listing() {
        system.block_on(runtime.shutdown());
        return;
    }
    if let Some(ratio) =
        support::report_ratio("load 4x250, max-concurrent 8", "load/dsh", "load/raw")
    {
        println!(
            "RESULT load throughput ratio (raw time / dsh time): {:.3}",
            1.0 / ratio
        );
    }
    if support::measuring() {
        let mut ratios = Vec::new();
        for round in 0..4 {
            let (dsh, raw) = if round % 2 == 0 {
                let dsh = system.block_on(dsh_cycle(&runtime, &agents));
                (dsh, system.block_on(raw_cycle()))
            } else {
                let raw = system.block_on(raw_cycle());
                (system.block_on(dsh_cycle(&runtime, &agents)), raw)
            };
            ratios.push(raw.wall.as_secs_f64() / dsh.wall.as_secs_f64());
            dsh_cycles.borrow_mut().push(dsh);
            raw_cycles.borrow_mut().push(raw);
        }
        ratios.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!(
            "RESULT load throughput ratio, paired x{}: median {:.3} (all {:?})",
            ratios.len(),
            ratios[ratios.len() / 2],
            ratios.iter().map(|r| format!("{r:.3}")).collect::<Vec<_>>()
        );
    }
    for (arm, cycles) in [("dsh", &dsh_cycles), ("raw FIFO", &raw_cycles)] {
        let cycles = cycles.borrow();
        let mut means: Vec<f64> = cycles.iter().map(|c| jain(&c.completions).0).collect();
        let lowest = cycles
            .iter()
            .map(|c| jain(&c.completions).1)
            .fold(1.0, f64::min);
        means.sort_by(|a, b| a.partial_cmp(b).unwrap());
        if let Some(median) = means.get(means.len() / 2) {
            println!(
                "RESULT load fairness ({arm}): Jain per second, median over {} cycles {median:.3}, \
                 lowest cycle mean {:.3}, lowest single second {lowest:.3}",
                means.len(),
                means.first().unwrap()
            );
        }
    }
    let cost = system.block_on(runtime.admission_cost());
    println!(
        "RESULT admission cost: {} submitted, {} decisions, {:.2} us per submitted call ({:.2} us per decision)",
        cost.submitted,
        cost.decisions,
        cost.nanos as f64 / 1e3 / cost.submitted.max(1) as f64,
        cost.nanos as f64 / 1e3 / cost.decisions.max(1) as f64
    );
    system.block_on(runtime.shutdown());

    let (runtime, _spill) = system.block_on(async { support::runtime() });
    let wakes = if support::measuring() { WAKES } else { 3 };
    let mut dsh_wakes = Vec::with_capacity(wakes);
    let mut raw_wakes = Vec::with_capacity(wakes);
    for round in 0..wakes {
        if round % 2 == 0 {
            dsh_wakes.push(system.block_on(dsh_wake(&runtime)));
            raw_wakes.push(system.block_on(raw_wake()));
        } else {
            raw_wakes.push(system.block_on(raw_wake()));
            dsh_wakes.push(system.block_on(dsh_wake(&runtime)));
        }
    }
    println!(
        "RESULT until wake (printed time -> bash_output returns), {wakes} rounds: p50 {:.3} ms, p99 {:.3} ms; \
         raw pipe read: p50 {:.3} ms, p99 {:.3} ms",
        support::percentile_ms(&mut dsh_wakes.clone(), 50.0),
        support::percentile_ms(&mut dsh_wakes, 99.0),
        support::percentile_ms(&mut raw_wakes.clone(), 50.0),
        support::percentile_ms(&mut raw_wakes, 99.0),
    );
    system.block_on(runtime.shutdown());
    c.final_summary();
}
