//! Interactive programs (issue 22) through the `dsh jsonl` binary, each beside its baseline in the
//! same run: the prompt-to-reply latency of a `tty: true` start and of a `bash_write` answer (from
//! the program's clock right before it prints its prompt to the reply line read here), 100 MB through
//! a terminal beside a raw pty reader (wall time, and dsh's peak RSS from `/proc`), a terminal spawn
//! beside a pipe spawn (paired rounds), and the memory of 100 idle terminal tasks (RSS and USS
//! deltas of the `dsh` process). `DSH_BENCH_ONLY=flood` runs only the 100 MB part.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a bench, not product code: a failed setup should stop it loudly"
)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use criterion::Criterion;
use dsh_contain::pty::{Pty, Size};
use dsh_test_support::bench as support;
use dsh_test_support::procfs;
use serde_json::{Value, json};

/// `bytes` of text in lines of 100 bytes.
fn flood_command(bytes: u64) -> String {
    format!(
        "yes 'the quick brown fox jumps over the lazy dog; 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJK' | head -c {bytes}"
    )
}

/// A `dsh jsonl` driven one call at a time.
struct Jsonl {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    next: u64,
}

impl Jsonl {
    fn start(args: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_dsh"))
            .arg("jsonl")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("dsh jsonl");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Self {
            child,
            stdin,
            stdout,
            next: 0,
        }
    }

    /// One call of `tool`; its reply line and when it was read.
    fn call(&mut self, tool: &str, arguments: Value) -> (Value, SystemTime) {
        self.next += 1;
        let id = self.next;
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(
            stdin,
            "{}",
            json!({"id": id, "session": "bench", "tool": tool, "arguments": arguments})
        )
        .unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        loop {
            line.clear();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "dsh jsonl ended"
            );
            let read_at = SystemTime::now();
            let reply: Value = serde_json::from_str(&line).unwrap();
            if reply["id"] == json!(id) {
                return (reply, read_at);
            }
        }
    }

    /// The text of one `bash` call of `command` with `extra` arguments.
    fn bash(&mut self, command: &str, extra: Value) -> (String, SystemTime) {
        let mut arguments = json!({"command": command, "description": "bench"});
        arguments
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let (reply, at) = self.call("bash", arguments);
        (reply["text"].as_str().unwrap().to_owned(), at)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn finish(mut self) {
        drop(self.stdin.take());
        assert!(self.child.wait().unwrap().success());
    }
}

/// The task a reply moved to the background at a prompt.
fn moved_task(text: &str) -> String {
    let at = text
        .find("moved to background task ")
        .unwrap_or_else(|| panic!("not at a prompt: {text}"));
    let rest = &text[at + "moved to background task ".len()..];
    rest[..rest.find(';').unwrap()].to_owned()
}

/// Seconds since the epoch that a shell wrote (`$EPOCHREALTIME`) into `path`.
fn written_at(path: &std::path::Path) -> f64 {
    std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn epoch(at: SystemTime) -> f64 {
    at.duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

fn since(prompted: f64, replied: SystemTime) -> Duration {
    Duration::from_secs_f64((epoch(replied) - prompted).max(0.0))
}

fn report_latency(what: &str, times: &mut [Duration]) {
    println!(
        "RESULT prompt-to-reply, {what} x{}: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (target p50 and p99 <= 150)",
        times.len(),
        support::percentile_ms(times, 50.0),
        support::percentile_ms(times, 99.0),
        support::percentile_ms(times, 100.0),
    );
}

/// From the program's clock right before its prompt to the reply: `starts` starts that end at a
/// prompt (each task killed after), and `writes` answers that each get the next prompt.
fn prompt_to_reply(server: &mut Jsonl, starts: usize, writes: usize) {
    // Below the working directory: the binary's default sandbox (`workspace-write`) gives commands
    // a private `/tmp`, where the stamp would be out of the bench's sight.
    let dir = tempfile::tempdir_in(std::env::current_dir().unwrap()).unwrap();
    let stamp = dir.path().join("t");
    let prompt = format!(
        "echo $EPOCHREALTIME > {}; read -p 'name? ' x",
        stamp.display()
    );
    let mut start_times = Vec::new();
    for _ in 0..starts {
        let (text, at) = server.bash(&prompt, json!({"tty": true}));
        start_times.push(since(written_at(&stamp), at));
        let task = moved_task(&text);
        server.call("bash_kill", json!({"task_id": task}));
    }
    let (text, _) = server.bash(&format!("while :; do {prompt}; done"), json!({"tty": true}));
    let task = moved_task(&text);
    let mut write_times = Vec::new();
    let mut call_times = Vec::new();
    for _ in 0..writes {
        let called = Instant::now();
        let (reply, at) = server.call(
            "bash_write",
            json!({"task_id": task, "input": "bob", "keys": ["Enter"]}),
        );
        call_times.push(called.elapsed());
        let text = reply["text"].as_str().unwrap();
        assert!(text.ends_with("[status: waiting for input]"), "{text}");
        write_times.push(since(written_at(&stamp), at));
    }
    server.call("bash_kill", json!({"task_id": task}));
    report_latency("tty start", &mut start_times);
    report_latency("bash_write", &mut write_times);
    report_latency("bash_write (call to reply)", &mut call_times);
}

/// The raw baseline: `bash -c <flood>` on a pty's slave, its master read here until `EIO`.
fn raw_pty_flood(flood: &str, tokio_rt: &tokio::runtime::Runtime) -> u64 {
    let mut pty = Pty::open(Size {
        rows: 40,
        cols: 120,
    })
    .unwrap();
    let slave = pty.take_slave().unwrap();
    let mut child = Command::new("bash")
        .args(["-c", flood])
        .stdin(Stdio::from(slave.try_clone().unwrap()))
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave))
        .spawn()
        .unwrap();
    let master = pty.into_master();
    let total = tokio_rt.block_on(async move {
        let master = dsh_contain::pty::watch_master(master).unwrap();
        let mut buf = vec![0u8; 64 * 1024];
        let mut total = 0u64;
        loop {
            let mut guard = master.readable().await.unwrap();
            let read = guard.try_io(|fd| match nix::unistd::read(fd.get_ref(), &mut buf) {
                Err(nix::errno::Errno::EAGAIN) => Err(std::io::ErrorKind::WouldBlock.into()),
                other => Ok(other),
            });
            match read {
                Ok(Ok(Ok(0) | Err(nix::errno::Errno::EIO))) => break,
                Ok(Ok(Ok(n))) => total += n as u64,
                Ok(Ok(Err(err))) => panic!("{err}"),
                Ok(Err(err)) => panic!("{err}"),
                Err(_would_block) => continue,
            }
        }
        total
    });
    assert!(child.wait().unwrap().success());
    total
}

/// `mb` MB through a terminal: dsh's call beside the raw pty reader, in paired rounds; dsh's peak
/// RSS (VmHWM, reset through `clear_refs` first) over its rounds.
fn flood(server: &mut Jsonl, tokio_rt: &tokio::runtime::Runtime, mb: u64, rounds: usize) {
    let command = flood_command(mb * 1_000_000);
    std::fs::write(format!("/proc/{}/clear_refs", server.pid()), "5").unwrap();
    let mut raw_bytes = 0;
    let (dsh, raw) = support::paired(
        rounds,
        || {
            let (text, _) = server.bash(&command, json!({"tty": true, "timeout_ms": 600_000}));
            assert!(
                text.contains("abcdefghijklmnopqrstuvwxyz ABCDEFGHIJK\n"),
                "{text}"
            );
        },
        || raw_bytes = raw_pty_flood(&command, tokio_rt),
    );
    let peak = procfs::status_field(server.pid(), "VmHWM:");
    println!(
        "RESULT {mb} MB through a terminal, paired x{rounds}: dsh {dsh:.0} ms ({:.1} MB/s), raw pty reader {raw:.0} ms ({raw_bytes} bytes); throughput ratio {:.3} (target >= 0.5)",
        mb as f64 / dsh * 1e3,
        raw / dsh
    );
    println!(
        "RESULT {mb} MB through a terminal: dsh peak RSS (VmHWM) {:.1} MiB (target < 32)",
        peak as f64 / 1024.0
    );
}

/// A terminal spawn beside a pipe spawn, `true` through `dsh jsonl`, in paired rounds.
fn spawn_paired(server: &mut Jsonl, rounds: usize) {
    let server = std::cell::RefCell::new(server);
    let spawn = |extra: Value| assert_eq!(server.borrow_mut().bash("true", extra).0, "(no output)");
    let (tty, pipe) = support::paired(rounds, || spawn(json!({"tty": true})), || spawn(json!({})));
    println!(
        "RESULT terminal spawn, paired x{rounds}: tty {tty:.3} ms, pipe {pipe:.3} ms; time ratio {:.3} (target <= 1.3)",
        tty / pipe
    );
}

/// Resident and unique (private) KiB of process `pid` (`smaps_rollup`).
fn rss_and_uss_kib(pid: u32) -> (u64, u64) {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap();
    let field = |name: &str| -> u64 {
        rollup
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .unwrap()
            .parse()
            .unwrap()
    };
    (
        field("Rss:"),
        field("Private_Clean:") + field("Private_Dirty:"),
    )
}

/// `count` terminal tasks waiting at a prompt in a fresh server: its memory before, once all wait,
/// and once they have been idle past the emulator's hibernation; then all are killed.
fn idle_terminals(count: usize) {
    let marker = format!("2299.{}", std::process::id());
    let max_ttys = (count + 8).to_string();
    let mut server = Jsonl::start(&["--max-ttys", &max_ttys]);
    // Warm up the terminal path once, so the baseline has its code and allocator arenas.
    let (text, _) = server.bash("read -p 'warm? ' x", json!({"tty": true}));
    server.call("bash_kill", json!({"task_id": moved_task(&text)}));
    let before = rss_and_uss_kib(server.pid());
    let command = format!("read -p 'idle? ' x; sleep {marker}");
    let tasks: Vec<String> = (0..count)
        .map(|_| {
            let (reply, _) = server.call(
                "bash",
                json!({"command": command, "description": "bench", "tty": true, "run_in_background": true}),
            );
            let text = reply["text"].as_str().unwrap();
            text.strip_prefix("started background task ")
                .unwrap_or_else(|| panic!("{text}"))
                .to_owned()
        })
        .collect();
    for task in &tasks {
        let (reply, _) = server.call(
            "bash_output",
            json!({"task_id": task, "wait": true, "timeout_ms": 60_000}),
        );
        let text = reply["text"].as_str().unwrap();
        assert!(text.ends_with("[status: waiting for input]"), "{text}");
    }
    let waiting = rss_and_uss_kib(server.pid());
    // Past the emulator's hibernation (2 s without output while waiting), with a margin.
    std::thread::sleep(Duration::from_secs(3));
    let idle = rss_and_uss_kib(server.pid());
    let per_task = |(rss, uss): (u64, u64)| {
        (
            (rss.saturating_sub(before.0)) as f64 / count as f64,
            (uss.saturating_sub(before.1)) as f64 / count as f64,
        )
    };
    let (rss_waiting, uss_waiting) = per_task(waiting);
    let (rss_idle, uss_idle) = per_task(idle);
    println!(
        "RESULT {count} idle terminal tasks: dsh memory per task, RSS delta {rss_idle:.1} KiB, USS delta {uss_idle:.1} KiB after 3 s idle ({rss_waiting:.1} / {uss_waiting:.1} KiB as they first waited; before {} / {} KiB) (target <= 64 KiB)",
        before.0, before.1
    );
    for task in &tasks {
        server.call("bash_kill", json!({"task_id": task}));
    }
    server.finish();
    let gone = dsh_test_support::wait::wait_until(Duration::from_secs(30), || {
        procfs::live_with_cmdline(&marker).is_empty()
    });
    assert!(gone, "idle terminal tasks were left running");
}

fn main() {
    // `DSH_BENCH_ONLY=flood`: only the 100 MB part (paired x3), for work on the terminal's output
    // path; the other parts and criterion's groups are skipped.
    if std::env::var("DSH_BENCH_ONLY").is_ok_and(|only| only == "flood") {
        let tokio_rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut server = Jsonl::start(&[]);
        flood(&mut server, &tokio_rt, 100, 3);
        server.finish();
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    // Started at the first bench run: listing the benches (`--list`) starts nothing.
    let mut server: Option<Jsonl> = None;
    let mut group = support::group(&mut c, "true_through_dsh_jsonl", 20, 1.0, 5.0);
    for (id, extra) in [("tty", json!({"tty": true})), ("pipe", json!({}))] {
        group.bench_function(id, |b| {
            b.iter_custom(|iters| {
                let server = server.get_or_insert_with(|| Jsonl::start(&[]));
                support::time_runs_blocking(&format!("spawn/{id}"), iters, || {
                    server.bash("true", extra.clone());
                })
            })
        });
    }
    group.finish();
    c.final_summary();
    let Some(mut server) = server else {
        return;
    };
    if support::listing() || support::median("spawn/tty").is_none() {
        server.finish();
        return;
    }
    let tokio_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // criterion's test mode runs each part once, small, to check that it works.
    let full = support::measuring();
    let scale = |measured: usize, checked: usize| if full { measured } else { checked };
    spawn_paired(&mut server, scale(300, 3));
    prompt_to_reply(&mut server, scale(100, 3), scale(200, 3));
    flood(&mut server, &tokio_rt, scale(100, 1) as u64, scale(3, 1));
    server.finish();
    idle_terminals(scale(100, 5));
    support::report_ratio(
        "terminal spawn (criterion medians)",
        "spawn/tty",
        "spawn/pipe",
    );
}
