//! Helpers shared by the benches (the library's in `benches/`, the binary's in
//! `actors/front/benches/`): a runtime on an actix system, per-iteration timings kept beside
//! criterion's own statistics so each bench can print its ratio to the raw baseline measured in the
//! same run, and memory readings.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion};
use dsh::{ContainmentMode, Runtime, ToolCall, ToolResult};
use serde_json::json;

static SAMPLES: Mutex<BTreeMap<String, Vec<f64>>> = Mutex::new(BTreeMap::new());

/// A criterion group named `name`: `samples` samples after `warm_up` seconds, measured for
/// `measurement` seconds.
pub fn group<'c>(
    c: &'c mut Criterion,
    name: &str,
    samples: usize,
    warm_up: f64,
    measurement: f64,
) -> BenchmarkGroup<'c, WallTime> {
    let mut group = c.benchmark_group(name);
    group
        .sample_size(samples)
        .warm_up_time(Duration::from_secs_f64(warm_up))
        .measurement_time(Duration::from_secs_f64(measurement));
    group
}

/// Benches `one` as `id` in `group`, each run awaited on `system` and its time recorded under
/// `name` (see [`time_runs`]).
pub fn bench_runs(
    group: &mut BenchmarkGroup<'_, WallTime>,
    system: &actix::SystemRunner,
    id: &str,
    name: &str,
    mut one: impl AsyncFnMut(),
) {
    group.bench_function(id, |b| {
        b.iter_custom(|iters| system.block_on(time_runs(name, iters, &mut one)))
    });
}

/// Records that one iteration of `name` took `per_iter`.
pub fn record(name: &str, per_iter: Duration) {
    SAMPLES
        .lock()
        .unwrap()
        .entry(name.to_owned())
        .or_default()
        .push(per_iter.as_secs_f64());
}

/// Runs `one` `iters` times for criterion's `iter_custom` and returns the total; the time per run is
/// also recorded under `name` for the ratio lines.
pub async fn time_runs(name: &str, iters: u64, mut one: impl AsyncFnMut()) -> Duration {
    let start = std::time::Instant::now();
    for _ in 0..iters {
        one().await;
    }
    recorded(name, iters, start.elapsed())
}

/// [`time_runs`] for a blocking `one`.
pub fn time_runs_blocking(name: &str, iters: u64, mut one: impl FnMut()) -> Duration {
    let start = std::time::Instant::now();
    for _ in 0..iters {
        one();
    }
    recorded(name, iters, start.elapsed())
}

fn recorded(name: &str, iters: u64, took: Duration) -> Duration {
    record(name, took / iters as u32);
    took
}

/// The median seconds per iteration of `name`, if it ran (a filtered run skips benches).
pub fn median(name: &str) -> Option<f64> {
    let mut values = SAMPLES
        .lock()
        .unwrap()
        .get(name)
        .cloned()
        .unwrap_or_default();
    values.sort_by(|a, b| a.partial_cmp(b).unwrap());
    values.get(values.len() / 2).copied()
}

/// Prints `dsh / baseline` of the medians (a time ratio: lower is better), if both ran.
pub fn report_ratio(label: &str, dsh: &str, baseline: &str) -> Option<f64> {
    let (ours, raw) = (median(dsh)?, median(baseline)?);
    let ratio = ours / raw;
    println!(
        "RESULT {label}: dsh {:.3} ms, baseline {:.3} ms, time ratio {ratio:.3}",
        ours * 1e3,
        raw * 1e3
    );
    Some(ratio)
}

/// The containment mode to bench: `DSH_BENCH_CONTAINMENT=cgroup|subreaper|group`, else the default
/// (`auto`: the strongest the host gives).
pub fn containment() -> Option<ContainmentMode> {
    match std::env::var("DSH_BENCH_CONTAINMENT").ok()?.as_str() {
        "cgroup" => Some(ContainmentMode::Cgroup),
        "subreaper" => Some(ContainmentMode::Subreaper),
        "group" => Some(ContainmentMode::Group),
        other => panic!("DSH_BENCH_CONTAINMENT={other}: expected cgroup, subreaper or group"),
    }
}

/// A runtime with the default configuration and spills in a temp dir, started in the current system.
pub fn runtime() -> (Runtime, tempfile::TempDir) {
    let spill = tempfile::tempdir().unwrap();
    let runtime = Runtime::builder()
        .spill_dir(spill.path())
        .containment(containment())
        .start_in_current_system()
        .expect("runtime");
    // On stderr: `--list` (nextest asks each bench binary for its list) must print only the list.
    eprintln!("RESULT containment mode: {}", runtime.containment_mode());
    (runtime, spill)
}

/// One foreground `bash` call of `command`.
pub async fn bash(runtime: &Runtime, command: &str) -> ToolResult {
    runtime
        .call(ToolCall::new(
            "bash",
            json!({"command": command, "description": "bench"}),
        ))
        .await
}

/// The task id a background start acknowledged (`started background task <id>`).
pub fn started_task_id(result: &ToolResult) -> String {
    result
        .text
        .strip_prefix("started background task ")
        .expect(&result.text)
        .to_owned()
}

/// Raw baseline: `bash -c <command>` through tokio with piped output, awaited.
pub async fn raw_bash(command: &str) -> std::process::Output {
    tokio::process::Command::new("bash")
        .args(["-c", command])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .output()
        .await
        .expect("raw bash")
}

/// This process's resident set (VmRSS) in KiB.
pub fn rss_kib() -> u64 {
    status_field("VmRSS:")
}

fn status_field(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Whether this run measures (`cargo bench` passes `--bench`), as opposed to criterion's test mode,
/// where each bench runs once to check that it works and the extra paired rounds are skipped.
pub fn measuring() -> bool {
    std::env::args().any(|arg| arg == "--bench")
}

/// Whether criterion was only asked for the list of benches (`--list`, as cargo-nextest asks every
/// bench binary): then nothing may be measured or printed on stdout but the list itself.
pub fn listing() -> bool {
    std::env::args().any(|arg| arg == "--list")
}

/// Runs `rounds` rounds of both arms back to back, alternating which goes first, so both see the same
/// machine (criterion runs its groups a minute apart, and these machines drift 10–25 % in that time).
/// Returns each arm's median, in milliseconds.
pub fn paired(rounds: usize, mut dsh: impl FnMut(), mut raw: impl FnMut()) -> (f64, f64) {
    let mut dsh_times = Vec::with_capacity(rounds);
    let mut raw_times = Vec::with_capacity(rounds);
    for round in 0..rounds {
        for step in 0..2 {
            let start = std::time::Instant::now();
            if (round + step) % 2 == 0 {
                dsh();
                dsh_times.push(start.elapsed());
            } else {
                raw();
                raw_times.push(start.elapsed());
            }
        }
    }
    (median_ms(&mut dsh_times), median_ms(&mut raw_times))
}

/// The median of durations, in milliseconds.
pub fn median_ms(values: &mut [Duration]) -> f64 {
    values.sort();
    values[values.len() / 2].as_secs_f64() * 1e3
}

/// The p-th percentile (0..=100) of durations, in milliseconds.
pub fn percentile_ms(values: &mut [Duration], p: f64) -> f64 {
    values.sort();
    let index = ((values.len() as f64 - 1.0) * p / 100.0).round() as usize;
    values[index].as_secs_f64() * 1e3
}
