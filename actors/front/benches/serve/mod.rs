//! `dsh serve` (issue 24) under load, in the `jsonl` bench binary (the front ends share one target):
//! - per-call latency of an `echo` over HTTP (one kept-alive connection) beside the same call over
//!   stdio MCP (`dsh mcp`), in criterion and in paired rounds;
//! - 200 concurrent agents (one identity each) × 20 `echo` calls: throughput, p50/p99, server RSS;
//! - server memory per idle session: RSS delta over 1,000 more sessions that each made one call,
//!   each of its own identity, and all of one;
//! - Jain's fairness between the 200 agents under `--max-concurrent 8`: each agent's completed calls
//!   when half of all calls are done.
//!
//! Everything past criterion's group runs only under `cargo bench` (not in criterion's test mode).
//! `DSH_BENCH_SERVE_IDLE_ONLY=1` skips the paired latency rounds and the 200 agents there, leaving
//! the idle-session measurement (to iterate on a session's memory in a minute instead of three).

mod clients;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::Criterion;
use dsh_test_support::bench as support;

use clients::{HttpClient, HttpServer, StdioClient, tokens};

const AGENTS: usize = 200;
const CALLS: usize = 20;
const IDLE_SESSIONS: usize = 1000;
const ECHO: &str = "echo bench";

/// A temp dir for the servers' workspace and their token file.
pub struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn server(&self, identities: usize, extra: &[&str]) -> HttpServer {
        let tokens = tokens(self.dir.path(), identities);
        HttpServer::start(self.dir.path(), &tokens, extra)
    }
}

/// The criterion group: one call over HTTP and over stdio. Returns the two clients for the paired
/// rounds.
pub fn latency(c: &mut Criterion, setup: &Setup) -> (HttpServer, HttpClient, StdioClient) {
    let server = setup.server(1, &[]);
    let mut http = HttpClient::open(&server.url, "token-0");
    let mut stdio = StdioClient::start(setup.dir.path());
    let mut group = support::group(c, "serve_echo_latency", 30, 1.0, 4.0);
    group.bench_function("http_keep_alive", |b| {
        b.iter_custom(|iters| {
            support::time_runs_blocking("serve/http", iters, || {
                assert_eq!(http.bash(ECHO), "bench\n");
            })
        })
    });
    group.bench_function("stdio_mcp", |b| {
        b.iter_custom(|iters| {
            support::time_runs_blocking("serve/stdio", iters, || {
                assert_eq!(stdio.bash(ECHO), "bench\n");
            })
        })
    });
    group.finish();
    (server, http, stdio)
}

/// The measurements beyond criterion, if its serve group ran under `cargo bench`.
pub fn measure(setup: &Setup, clients: (HttpServer, HttpClient, StdioClient)) {
    if !support::measuring() || support::median("serve/http").is_none() {
        return;
    }
    if std::env::var_os("DSH_BENCH_SERVE_IDLE_ONLY").is_some() {
        drop(clients);
        idle_sessions(setup, true);
        idle_sessions(setup, false);
        return;
    }
    let (server, mut http, mut stdio) = clients;
    const ROUNDS: usize = 30;
    const PER_ROUND: usize = 50;
    let (over_http, over_stdio) = support::paired(
        ROUNDS,
        || (0..PER_ROUND).for_each(|_| drop(http.bash(ECHO))),
        || (0..PER_ROUND).for_each(|_| drop(stdio.bash(ECHO))),
    );
    println!(
        "RESULT serve latency, paired x{ROUNDS} of {PER_ROUND} calls: http {:.3} ms, stdio {:.3} ms \
         per call; ratio {:.3} (target <= 1.2)",
        over_http / PER_ROUND as f64,
        over_stdio / PER_ROUND as f64,
        over_http / over_stdio
    );
    drop((server, http, stdio));
    agents(setup, &[], "unbounded");
    agents(setup, &["--max-concurrent", "8"], "--max-concurrent 8");
    idle_sessions(setup, true);
    idle_sessions(setup, false);
}

/// 200 agents × 20 calls on a fresh server with `extra` flags.
fn agents(setup: &Setup, extra: &[&str], label: &str) {
    let server = setup.server(AGENTS, extra);
    let (rss_before, _) = server.rss_kib();
    let done = Arc::new(AtomicUsize::new(0));
    let each: Arc<Vec<AtomicUsize>> = Arc::new((0..AGENTS).map(|_| AtomicUsize::new(0)).collect());
    let midpoint: Arc<std::sync::Mutex<Vec<usize>>> = Arc::default();
    let start = Arc::new(Barrier::new(AGENTS + 1));
    let threads: Vec<_> = (0..AGENTS)
        .map(|agent| {
            let (url, done, each, midpoint, start) = (
                server.url.clone(),
                done.clone(),
                each.clone(),
                midpoint.clone(),
                start.clone(),
            );
            std::thread::spawn(move || {
                let mut client = HttpClient::open(&url, &format!("token-{agent}"));
                start.wait();
                let mut latencies = Vec::with_capacity(CALLS);
                for _ in 0..CALLS {
                    let began = Instant::now();
                    assert_eq!(client.bash(ECHO), "bench\n");
                    latencies.push(began.elapsed());
                    each[agent].fetch_add(1, Ordering::SeqCst);
                    if done.fetch_add(1, Ordering::SeqCst) + 1 == AGENTS * CALLS / 2 {
                        *midpoint.lock().unwrap() =
                            each.iter().map(|n| n.load(Ordering::SeqCst)).collect();
                    }
                }
                latencies
            })
        })
        .collect();
    start.wait();
    let began = Instant::now();
    let mut latencies: Vec<Duration> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    let wall = began.elapsed();
    let (rss, peak) = server.rss_kib();
    let shares = midpoint.lock().unwrap().clone();
    println!(
        "RESULT serve {AGENTS} agents x {CALLS} echo ({label}): {:.0} calls/s ({:.0} ms), \
         p50 {:.2} ms, p99 {:.2} ms; server RSS {:.1} MiB before, {:.1} MiB after (peak {:.1}); \
         Jain's index at half-way {:.4}",
        latencies.len() as f64 / wall.as_secs_f64(),
        wall.as_secs_f64() * 1e3,
        support::percentile_ms(&mut latencies, 50.0),
        support::percentile_ms(&mut latencies, 99.0),
        rss_before as f64 / 1024.0,
        rss as f64 / 1024.0,
        peak as f64 / 1024.0,
        jain(&shares),
    );
}

/// Jain's fairness index of `shares`: 1 when all are equal, 1/n when one has everything.
fn jain(shares: &[usize]) -> f64 {
    let sum: f64 = shares.iter().map(|&x| x as f64).sum();
    let squares: f64 = shares.iter().map(|&x| (x as f64).powi(2)).sum();
    sum * sum / (shares.len() as f64 * squares)
}

/// The server's RSS growth per idle session, each made one call: each of its own identity
/// (`distinct`), or all of one.
fn idle_sessions(setup: &Setup, distinct: bool) {
    const WARM: usize = 50;
    let server = setup.server(WARM + IDLE_SESSIONS, &[]);
    // One pool of connections for all: a session is not a connection.
    let shared = clients::agent();
    let open = |from: usize, count: usize| -> Vec<HttpClient> {
        (from..from + count)
            .map(|i| {
                let token = format!("token-{}", if distinct { i } else { 0 });
                let mut client = HttpClient::open_with(shared.clone(), &server.url, &token);
                assert_eq!(client.bash(ECHO), "bench\n");
                client
            })
            .collect()
    };
    let warm = open(0, WARM);
    std::thread::sleep(Duration::from_millis(500));
    let (before, _) = server.rss_kib();
    let idle = open(WARM, IDLE_SESSIONS);
    std::thread::sleep(Duration::from_millis(500));
    let (after, _) = server.rss_kib();
    let whose = if distinct {
        "one identity each"
    } else {
        "all one identity"
    };
    println!(
        "RESULT serve idle sessions ({whose}): {IDLE_SESSIONS} more sessions, one call each, grew \
         the server from {:.1} to {:.1} MiB: {:.1} KiB per idle session (target <= 64)",
        before as f64 / 1024.0,
        after as f64 / 1024.0,
        after.saturating_sub(before) as f64 / IDLE_SESSIONS as f64
    );
    drop((warm, idle));
}
