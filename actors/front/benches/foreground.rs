//! Foreground benches, each beside its raw baseline in the same run:
//! - spawn latency: one `bash` call of `true` through the runtime handle vs tokio running `bash -c true`;
//! - concurrent foreground: 200 concurrent `echo $i` calls vs 200 concurrent raw tokio commands;
//! - output flood: `head -c 1G /dev/zero` through a foreground call (default caps) vs tokio reading it to
//!   nowhere; plus the peak RSS of `dsh run` doing the same.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a bench, not product code: a failed setup should stop it loudly"
)]

use std::process::Command;
use std::time::{Duration, Instant};

use criterion::Criterion;
use dsh_test_support::bench as support;
use tokio::io::AsyncReadExt;

const FLOOD: &str = "head -c 1073741824 /dev/zero";

fn spawn_latency(c: &mut Criterion, system: &actix::SystemRunner) {
    let (runtime, _spill) = system.block_on(async { support::runtime() });
    let mut group = support::group(c, "spawn_latency", 30, 1.0, 4.0);
    support::bench_runs(
        &mut group,
        system,
        "dsh_bash_true",
        "spawn/dsh",
        async || {
            let result = support::bash(&runtime, "true").await;
            assert_eq!(result.text, "(no output)");
        },
    );
    let manager = system.block_on(async {
        actix::Actor::start(dsh::actors::process::ProcessManager::new(Default::default()))
    });
    group.bench_function("process_manager_true", |b| {
        use dsh::actors::process::{ProcessSpawnSpec, Release, Spawn, Wait};
        let cwd = std::env::current_dir().unwrap();
        b.iter_custom(|iters| {
            system.block_on(support::time_runs("spawn/manager", iters, async || {
                let argv = vec!["bash".to_owned(), "-c".to_owned(), "true".to_owned()];
                let spec =
                    ProcessSpawnSpec::new(argv, &cwd, 64_000, 64 << 20, Duration::from_secs(3));
                let spawned = manager.send(Spawn(spec)).await.unwrap().unwrap();
                let outcome = manager
                    .send(Wait { id: spawned.id })
                    .await
                    .unwrap()
                    .unwrap();
                assert_eq!(outcome.exit_code, Some(0));
                manager.do_send(Release { id: spawned.id });
            }))
        })
    });
    support::bench_runs(
        &mut group,
        system,
        "tokio_bash_true",
        "spawn/raw",
        async || {
            assert!(support::raw_bash("true").await.status.success());
        },
    );
    support::bench_runs(
        &mut group,
        system,
        "tokio_bash_true_setsid",
        "spawn/raw_setsid",
        async || {
            assert!(raw_setsid("true").await.status.success());
        },
    );
    group.finish();
    system.block_on(runtime.shutdown());
}

/// The raw baseline with the same `pre_exec` as dsh (setsid): std must then fork instead of posix_spawn.
async fn raw_setsid(command: &str) -> std::process::Output {
    let mut cmd = tokio::process::Command::new("bash");
    cmd.args(["-c", command])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    // SAFETY: setsid is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid()
                .map(|_| ())
                .map_err(std::io::Error::from)
        });
    }
    cmd.output().await.expect("raw bash")
}

fn concurrent_foreground(c: &mut Criterion, system: &actix::SystemRunner) {
    let (runtime, _spill) = system.block_on(async { support::runtime() });
    let mut group = support::group(c, "concurrent_foreground_200", 10, 1.0, 6.0);
    support::bench_runs(&mut group, system, "dsh", "concurrent/dsh", async || {
        dsh_concurrent(&runtime).await;
    });
    support::bench_runs(&mut group, system, "tokio", "concurrent/raw", async || {
        raw_concurrent().await;
    });
    group.finish();
    system.block_on(runtime.shutdown());
}

/// 200 concurrent `echo $i` calls through the runtime, each checked.
async fn dsh_concurrent(runtime: &dsh::Runtime) {
    let calls = (0..200).map(|i| {
        let runtime = runtime.clone();
        async move { support::bash(&runtime, &format!("echo {i}")).await }
    });
    let results = futures::future::join_all(calls).await;
    assert!(
        results
            .iter()
            .enumerate()
            .all(|(i, r)| r.text == format!("{i}\n"))
    );
}

/// The same 200 commands through raw tokio.
async fn raw_concurrent() {
    let outputs = futures::future::join_all(
        (0..200).map(|i| async move { support::raw_bash(&format!("echo {i}")).await }),
    )
    .await;
    assert!(outputs.iter().all(|o| o.status.success()));
}

/// The 200-way comparison again, in paired rounds (see `support::paired`).
fn paired_concurrent(system: &actix::SystemRunner) {
    const ROUNDS: usize = 40;
    let (runtime, _spill) = system.block_on(async { support::runtime() });
    let (dsh, raw) = support::paired(
        ROUNDS,
        || system.block_on(dsh_concurrent(&runtime)),
        || system.block_on(raw_concurrent()),
    );
    system.block_on(runtime.shutdown());
    println!(
        "RESULT concurrent foreground x200, paired x{ROUNDS}: dsh {dsh:.1} ms, raw tokio {raw:.1} ms; throughput ratio {:.3} (target >= 0.90)",
        raw / dsh
    );
}

fn output_flood(c: &mut Criterion, system: &actix::SystemRunner) {
    let (runtime, _spill) = system.block_on(async { support::runtime() });
    let mut group = support::group(c, "output_flood_1GiB", 10, 1.0, 10.0);
    support::bench_runs(&mut group, system, "dsh", "flood/dsh", async || {
        let result = support::bash(&runtime, FLOOD).await;
        assert!(
            result.text.contains("[output truncated"),
            "{}",
            &result.text[result.text.len() - 100..]
        );
    });
    support::bench_runs(
        &mut group,
        system,
        "tokio_read_to_nowhere",
        "flood/raw",
        async || {
            let mut child = tokio::process::Command::new("bash")
                .args(["-c", FLOOD])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let mut stdout = child.stdout.take().unwrap();
            let mut buf = vec![0u8; 64 * 1024];
            let mut total = 0u64;
            loop {
                let n = stdout.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                total += n as u64;
            }
            assert_eq!(total, 1 << 30);
            assert!(child.wait().await.unwrap().success());
        },
    );
    group.finish();
    system.block_on(runtime.shutdown());
}

/// Peak RSS (VmHWM) of the `dsh` process — the whole runtime — while it floods 1 GiB, read from
/// `/proc/<pid>/status` until it exits (VmHWM only grows, so the last reading is the peak).
fn flood_peak_rss_mib() -> f64 {
    let mut child = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .args(["run", "--", FLOOD])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let status_path = format!("/proc/{}/status", child.id());
    let mut peak_kib = 0u64;
    loop {
        if let Ok(status) = std::fs::read_to_string(&status_path)
            && let Some(hwm) = status.lines().find(|l| l.starts_with("VmHWM:"))
        {
            peak_kib = peak_kib.max(hwm.split_whitespace().nth(1).unwrap().parse().unwrap());
        }
        if let Some(exit) = child.try_wait().unwrap() {
            assert!(exit.success());
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    peak_kib as f64 / 1024.0
}

/// Spawn latency measured in pairs: each round runs one dsh call, one raw tokio command and one direct
/// process-manager spawn back to back (rotating the order), so load from other tenants of this shared
/// machine hits all three alike. The ratio of medians is the figure to trust; criterion's separate
/// runs above drift by ±10% between groups.
fn paired_spawn_latency(system: &actix::SystemRunner) {
    use dsh::actors::process::{ProcessManager, ProcessSpawnSpec, Release, Spawn, Wait};
    const ROUNDS: usize = 600;
    let (runtime, _spill) = system.block_on(async { support::runtime() });
    let manager =
        system.block_on(async { actix::Actor::start(ProcessManager::new(Default::default())) });
    let cwd = std::env::current_dir().unwrap();
    let mut times: [Vec<Duration>; 3] = Default::default();
    system.block_on(async {
        for round in 0..ROUNDS {
            for k in 0..3 {
                let which = (round + k) % 3;
                let start = Instant::now();
                match which {
                    0 => assert_eq!(support::bash(&runtime, "true").await.text, "(no output)"),
                    1 => assert!(support::raw_bash("true").await.status.success()),
                    _ => {
                        let argv = vec!["bash".to_owned(), "-c".to_owned(), "true".to_owned()];
                        let spec = ProcessSpawnSpec::new(
                            argv,
                            &cwd,
                            64_000,
                            64 << 20,
                            Duration::from_secs(3),
                        );
                        let spawned = manager.send(Spawn(spec)).await.unwrap().unwrap();
                        manager
                            .send(Wait { id: spawned.id })
                            .await
                            .unwrap()
                            .unwrap();
                        manager.do_send(Release { id: spawned.id });
                    }
                }
                times[which].push(start.elapsed());
            }
        }
        runtime.shutdown().await;
    });
    let [dsh, raw, mgr] = times.map(|mut t| support::median_ms(&mut t));
    println!(
        "RESULT spawn latency, paired x{ROUNDS}: dsh {dsh:.3} ms, process manager alone {mgr:.3} ms, raw tokio {raw:.3} ms; \
         dsh/raw {:.3} (target <= 1.10), manager/raw {:.3}",
        dsh / raw,
        mgr / raw
    );
}

fn main() {
    let system = actix::System::new();
    let mut c = Criterion::default().configure_from_args();
    spawn_latency(&mut c, &system);
    concurrent_foreground(&mut c, &system);
    output_flood(&mut c, &system);
    c.final_summary();
    if support::report_ratio(
        "spawn latency (criterion medians)",
        "spawn/dsh",
        "spawn/raw",
    )
    .is_some()
    {
        support::report_ratio(
            "spawn latency vs a fork+setsid baseline",
            "spawn/dsh",
            "spawn/raw_setsid",
        );
        support::report_ratio("process manager alone", "spawn/manager", "spawn/raw");
        if support::measuring() {
            paired_spawn_latency(&system);
        }
    }
    if let Some(ratio) = support::report_ratio(
        "concurrent foreground x200",
        "concurrent/dsh",
        "concurrent/raw",
    ) {
        println!(
            "RESULT concurrent foreground x200 (criterion medians): throughput ratio {:.3} (target >= 0.90)",
            1.0 / ratio
        );
        if support::measuring() {
            paired_concurrent(&system);
        }
    }
    if support::report_ratio(
        "output flood 1 GiB (target <= 1.25)",
        "flood/dsh",
        "flood/raw",
    )
    .is_some()
    {
        println!(
            "RESULT output flood peak RSS of dsh: {:.1} MiB (target < 64)",
            flood_peak_rss_mib()
        );
    }
}
