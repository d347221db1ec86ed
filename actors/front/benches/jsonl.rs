//! The front ends under load. jsonl: 2,000 requests of `true` over `dsh jsonl` with 32 in flight,
//! beside the same 2,000 commands run by raw tokio with 32 in flight. `dsh serve` over HTTP beside
//! `dsh mcp` on stdio, and with 200 agents: `serve/mod.rs` (in this binary, not a target of its own).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a bench, not product code: a failed setup should stop it loudly"
)]

mod serve;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use criterion::Criterion;
use dsh_test_support::bench as support;
use futures::StreamExt;

const REQUESTS: usize = 2000;
const IN_FLIGHT: usize = 32;

struct Server {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Server {
    fn start() -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_dsh"))
            .arg("jsonl")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("dsh jsonl");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Self {
            child,
            stdin,
            stdout,
        }
    }

    fn send(&mut self, id: usize) {
        writeln!(
            self.stdin,
            r#"{{"id":{id},"tool":"bash","arguments":{{"command":"true","description":"bench"}}}}"#
        )
        .unwrap();
    }

    /// 2,000 requests, never more than 32 unanswered.
    fn run_batch(&mut self) {
        let mut sent = 0;
        while sent < IN_FLIGHT {
            self.send(sent);
            sent += 1;
        }
        self.stdin.flush().unwrap();
        let mut line = String::new();
        for _ in 0..REQUESTS {
            line.clear();
            self.stdout.read_line(&mut line).unwrap();
            assert!(
                line.contains(r#""text":"(no output)","is_error":false"#),
                "{line}"
            );
            if sent < REQUESTS {
                self.send(sent);
                self.stdin.flush().unwrap();
                sent += 1;
            }
        }
    }
}

/// The same 2,000 commands through raw tokio, never more than 32 unfinished.
async fn raw_batch() {
    let done = futures::stream::iter(0..REQUESTS)
        .map(|_| support::raw_bash("true"))
        .buffer_unordered(IN_FLIGHT)
        .filter(|o| std::future::ready(o.status.success()))
        .count()
        .await;
    assert_eq!(done, REQUESTS);
}

/// dsh and raw batches in paired rounds (see `support::paired`).
fn paired(server: &mut Server, tokio_rt: &tokio::runtime::Runtime) {
    const ROUNDS: usize = 6;
    let (dsh, raw) = support::paired(
        ROUNDS,
        || server.run_batch(),
        || tokio_rt.block_on(raw_batch()),
    );
    println!(
        "RESULT jsonl, paired x{ROUNDS}: dsh {dsh:.0} ms, raw tokio {raw:.0} ms; throughput ratio {:.3} (target >= 0.85)",
        raw / dsh
    );
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let mut server = Server::start();
    let tokio_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut group = support::group(&mut c, "jsonl_2000_true_32_in_flight", 10, 1.0, 10.0);
    group.bench_function("dsh_jsonl", |b| {
        b.iter_custom(|iters| {
            support::time_runs_blocking("jsonl/dsh", iters, || server.run_batch())
        })
    });
    group.bench_function("tokio", |b| {
        b.iter_custom(|iters| {
            tokio_rt.block_on(support::time_runs("jsonl/raw", iters, async || {
                raw_batch().await;
            }))
        })
    });
    group.finish();
    let setup = serve::Setup::new();
    let clients = serve::latency(&mut c, &setup);
    c.final_summary();
    if support::measuring() && support::median("jsonl/dsh").is_some() {
        paired(&mut server, &tokio_rt);
    }
    serve::measure(&setup, clients);
    drop(server.stdin);
    assert!(server.child.wait().unwrap().success());
    if let Some(ratio) =
        support::report_ratio("jsonl 2000 x true, 32 in flight", "jsonl/dsh", "jsonl/raw")
    {
        println!(
            "RESULT jsonl (criterion medians): throughput ratio {:.3} (target >= 0.85)",
            1.0 / ratio
        );
    }
    support::report_ratio("serve echo, HTTP vs stdio MCP", "serve/http", "serve/stdio");
}
