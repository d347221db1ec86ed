//! A seeded soak of mixed calls: one `dsh jsonl` server per containment mode answers 480 calls drawn
//! at random (100 of warm-up, then 380 more) from every kind of call and ending an agent produces —
//! plain commands, non-zero exits, timeouts with and without TERM traps, escapees, background tasks
//! read to the end or killed, cancels at random moments, floods past the output cap, bad arguments,
//! unknown task ids, Unix-socket round trips through the socket gate beside a connect it refuses
//! (the server runs under its default sandbox) — with up to 8 in flight (issue 19, point 3).
//!
//! Every reply must arrive and be right. After the warm-up and at the end (both with nothing in
//! flight) the server's descriptors, threads and RSS are sampled: descriptors and threads may not
//! grow, RSS by less than 24 MiB. End of input then shuts the server down with exit 0 within a few
//! seconds, and nothing any call started is left running.
//!
//! The seed is printed; `DSH_SOAK_SEED=<n>` replays a run. Each scenario draws from its own generator
//! (seed + scenario number), so a replay is the same calls whatever order the threads run them in.

use std::collections::HashMap;
use std::io::Write;
use std::process::{Child, ChildStdin, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::{exit_status, start_dsh};
use dsh_test_support::procfs::{Usage, live_with_cmdline, usage};
use dsh_test_support::rng::Rng;
use dsh_test_support::wait::wait_until;
use serde_json::{Value, json};

const WARM_UP: usize = 100;
const SCENARIOS: usize = 480;
const IN_FLIGHT: usize = 8;
/// Generous bound for one reply on a shared, noisy machine.
const REPLY: Duration = Duration::from_secs(60);

/// One server and a reader thread that routes each reply to the caller waiting for its id.
struct Mux {
    child: Mutex<Child>,
    stdin: Mutex<Option<ChildStdin>>,
    waiting: Arc<Mutex<HashMap<String, Sender<Value>>>>,
    next_id: AtomicUsize,
    /// Lines nobody waited for (notices), counted.
    unrouted: Arc<AtomicUsize>,
    reader: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Mux {
    fn start(args: &[&str]) -> Option<Self> {
        let mut child = start_dsh(&[&["jsonl"], args].concat(), Stdio::piped());
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let stdin = child.stdin.take();
        let waiting: Arc<Mutex<HashMap<String, Sender<Value>>>> = Arc::default();
        let unrouted = Arc::new(AtomicUsize::new(0));
        let lines = dsh_test_support::wait::line_channel(stdout, |line| {
            serde_json::from_str::<Value>(&line).ok()
        });
        let (routes, notes) = (waiting.clone(), unrouted.clone());
        let reader = std::thread::spawn(move || {
            while let Ok(line) = lines.recv() {
                let Some(line) = line else { continue };
                let id = line.get("id").and_then(Value::as_str).map(str::to_owned);
                let route = id.and_then(|id| routes.lock().unwrap().remove(&id));
                match route {
                    Some(route) => {
                        let _ = route.send(line);
                    }
                    None => {
                        notes.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
        let mux = Mux {
            child: Mutex::new(child),
            stdin: Mutex::new(stdin),
            waiting,
            next_id: AtomicUsize::new(0),
            unrouted,
            reader: Mutex::new(Some(reader)),
        };
        // A refused start (the documented "not available on this host") exits at once.
        let first = mux.send_call("bash", json!({"command": "true", "description": "x"}));
        if first.1.recv_timeout(REPLY).is_err() {
            let mut said = String::new();
            let _ = std::io::Read::read_to_string(&mut { stderr }, &mut said);
            assert!(
                said.contains("is not available on this host"),
                "the server refused to start for another reason: {said}"
            );
            eprintln!("skipping: {}", said.trim());
            return None;
        }
        std::thread::spawn(move || std::io::copy(&mut { stderr }, &mut std::io::sink()));
        Some(mux)
    }

    fn pid(&self) -> u32 {
        self.child.lock().unwrap().id()
    }

    fn write(&self, line: &Value) {
        let mut stdin = self.stdin.lock().unwrap();
        let stdin = stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").expect("write a request");
        stdin.flush().expect("flush");
    }

    /// Sends a call and returns its id and where its reply will arrive.
    fn send_call(&self, tool: &str, arguments: Value) -> (String, Receiver<Value>) {
        let id = format!("c{}", self.next_id.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = channel();
        self.waiting.lock().unwrap().insert(id.clone(), tx);
        self.write(&json!({"id": id, "session": "soak", "tool": tool, "arguments": arguments}));
        (id, rx)
    }

    fn call(&self, tool: &str, arguments: Value) -> Value {
        let (id, rx) = self.send_call(tool, arguments);
        rx.recv_timeout(REPLY)
            .unwrap_or_else(|_| panic!("no reply to {id} ({tool}) within {REPLY:?}"))
    }

    /// Starts `command` in the background and returns its task id.
    fn start_bg(&self, command: &str) -> String {
        let started = self.call("bash", bash(command, json!({"run_in_background": true})));
        task_id(&started)
    }

    /// Reads background task `task` to its end.
    fn read_to_end(&self, task: &str) -> Value {
        self.call(
            "bash_output",
            json!({"task_id": task, "wait": true, "timeout_ms": 60000}),
        )
    }

    /// Runs `command` in the foreground with a 200 ms timeout.
    fn bash_timing_out(&self, command: &str) -> Value {
        self.call("bash", bash(command, json!({"timeoutMs": 200})))
    }

    fn cancel(&self, id: &str) {
        self.write(&json!({"cancel": id}));
    }
}

impl Drop for Mux {
    fn drop(&mut self) {
        // A failed assertion must not leave the server behind (its watchdog then kills the rest).
        if let Ok(child) = self.child.get_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Asserts that no process with `marker` in its command line is left (bounded); `survived` says
/// which one did.
fn assert_none_left(marker: &str, survived: impl FnOnce() -> String) {
    if !wait_until(REPLY, || live_with_cmdline(marker).is_empty()) {
        panic!("{}", survived());
    }
}

fn text(reply: &Value) -> &str {
    reply["text"].as_str().unwrap_or_else(|| panic!("{reply}"))
}

fn bash(command: &str, extra: Value) -> Value {
    let mut arguments = json!({"command": command, "description": "soak"});
    arguments
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    arguments
}

/// The shared facts of one run: the server, the mode, and every marker a scenario used.
struct Run {
    mux: Mux,
    mode: &'static str,
    seed: u64,
    markers: Mutex<Vec<String>>,
    /// A Unix listener outside every confined command's reach (kind 12 tries it).
    outside: Outside,
}

/// A non-blocking Unix listener in a directory outside `/tmp` and the server's workspace.
struct Outside {
    _dir: tempfile::TempDir,
    listener: std::os::unix::net::UnixListener,
    path: String,
}

impl Outside {
    fn start() -> Self {
        let dir = dsh_test_support::scratch::outside_tmp(
            "dsh-soak-outside-",
            std::path::Path::new(env!("CARGO_TARGET_TMPDIR")),
        );
        let path = dir.path().join("outside.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        listener.set_nonblocking(true).unwrap();
        Outside {
            path: path.to_str().unwrap().to_owned(),
            _dir: dir,
            listener,
        }
    }
}

impl Run {
    fn marker(&self, n: usize) -> String {
        let marker = format!("4200.{}{n:04}", std::process::id());
        self.markers.lock().unwrap().push(marker.clone());
        marker
    }

    /// Scenario `n`: one kind of call drawn from the seed, run and checked.
    fn scenario(&self, n: usize) {
        let mut rng = Rng::new(self.seed ^ (n as u64).wrapping_mul(0x1000_0001));
        let kind = rng.below(13);
        let mux = &self.mux;
        let why = |reply: &Value| format!("{}: scenario {n} (kind {kind}): {reply}", self.mode);
        match kind {
            0 | 1 => {
                let value = rng.next();
                let reply = mux.call("bash", bash(&format!("echo {value}"), json!({})));
                assert_eq!(text(&reply), format!("{value}\n"), "{}", why(&reply));
            }
            2 => {
                let code = 1 + rng.below(200);
                let reply = mux.call("bash", bash(&format!("echo e; exit {code}"), json!({})));
                assert_eq!(
                    text(&reply),
                    format!("e\n[exit code: {code}]"),
                    "{}",
                    why(&reply)
                );
                assert_eq!(reply["structured"]["exit_code"], code, "{}", why(&reply));
            }
            3 | 4 => {
                // A timeout: SIGTERM ends the command, or SIGKILL one that ignores it.
                let (trap, signal) = if kind == 3 {
                    ("", "SIGTERM")
                } else {
                    ("trap '' TERM; ", "SIGKILL")
                };
                let m = self.marker(n);
                let reply = mux.bash_timing_out(&format!("{trap}sleep {m}"));
                let ending = format!("[timed out after 200ms]\n[killed by signal: {signal}]");
                assert!(text(&reply).ends_with(&ending), "{}", why(&reply));
            }
            5 => {
                // An escapee: a new session in cgroup and subreaper modes, which follow it; group
                // mode follows only the group, so there the child stays in it.
                let m = self.marker(n);
                let leave = if self.mode == "group" { "" } else { "setsid " };
                let reply =
                    mux.bash_timing_out(&format!("{leave}sleep {m} >/dev/null 2>&1 & sleep 30"));
                assert!(
                    text(&reply).contains("[timed out after 200ms]"),
                    "{}",
                    why(&reply)
                );
                assert_none_left(&m, || format!("{}: the escapee survived", why(&reply)));
            }
            6 => {
                let value = rng.next();
                let task = mux.start_bg(&format!("echo {value}"));
                let read = mux.read_to_end(&task);
                assert_eq!(
                    text(&read),
                    format!("{value}\n[status: completed, exit code: 0]"),
                    "{}",
                    why(&read)
                );
            }
            7 => {
                let m = self.marker(n);
                let task = mux.start_bg(&format!("sleep {m}"));
                let killed = mux.call("bash_kill", json!({"task_id": task}));
                assert_eq!(
                    text(&killed),
                    format!("killed background task {task}"),
                    "{}",
                    why(&killed)
                );
                let read = mux.read_to_end(&task);
                assert!(
                    text(&read).ends_with("[status: killed by SIGTERM]"),
                    "{}",
                    why(&read)
                );
            }
            8 => {
                let m = self.marker(n);
                let trap = if rng.below(2) == 0 {
                    "trap '' TERM; "
                } else {
                    ""
                };
                let (id, rx) = mux.send_call("bash", bash(&format!("{trap}sleep {m}"), json!({})));
                std::thread::sleep(Duration::from_millis(rng.below(300)));
                mux.cancel(&id);
                let reply = rx.recv_timeout(REPLY).expect("a reply to a cancelled call");
                assert!(
                    matches!(
                        text(&reply),
                        "Error: command aborted" | "Error: tool call aborted before dispatch"
                    ),
                    "{}",
                    why(&reply)
                );
                assert_none_left(&m, || {
                    format!("{}: the cancelled command survived", why(&reply))
                });
            }
            9 => {
                let bytes = 70_000 + rng.below(200_000);
                let command = format!("head -c {bytes} /dev/zero | tr '\\0' a");
                let reply = mux.call("bash", bash(&command, json!({})));
                let out = &reply["structured"]["stdout"];
                assert_eq!(out["bytes"], bytes, "{}", why(&reply));
                assert_eq!(out["truncated"], true, "{}", why(&reply));
                let spill = out["spill_path"].as_str().unwrap_or_default();
                assert!(
                    text(&reply).ends_with(&format!("[output truncated; full output: {spill}]")),
                    "{}",
                    why(&json!(text(&reply).len()))
                );
                let on_disk = std::fs::metadata(spill).map(|m| m.len()).unwrap_or(0);
                assert_eq!(on_disk, bytes, "{}: the spill file holds it all", self.mode);
            }
            10 => {
                let reply = mux.call("bash", json!({"command": 5, "description": "soak"}));
                assert_eq!(reply["is_error"], true, "{}", why(&reply));
                assert!(
                    text(&reply).contains("\"command\" must be a string"),
                    "{}",
                    why(&reply)
                );
            }
            12 => {
                // Through the socket gate: a round trip on a socket in the command's own temp, and
                // a connect to the test's listener outside, which the gate refuses.
                let value = rng.next();
                let m = self.marker(n);
                let command = format!(
                    "python3 -c 'import socket,threading,sys\nl=socket.socket(socket.AF_UNIX); l.bind(\"/tmp/{m}.sock\"); l.listen(1)\nthreading.Thread(target=lambda: l.accept()[0].sendall(b\"{value}\")).start()\nc=socket.socket(socket.AF_UNIX); c.connect(\"/tmp/{m}.sock\"); print(c.recv(32).decode())\no=socket.socket(socket.AF_UNIX)\ntry: o.connect(sys.argv[1]); print(\"OUTSIDE\")\nexcept OSError as e: print(e.strerror)' {outside} # {m}",
                    outside = self.outside.path,
                );
                let reply = mux.call("bash", bash(&command, json!({})));
                assert!(
                    text(&reply).starts_with(&format!("{value}\nPermission denied\n")),
                    "{}",
                    why(&reply)
                );
            }
            _ => {
                let task = format!("bash-{}", 900_000 + rng.below(1000));
                let tool = if rng.below(2) == 0 {
                    "bash_output"
                } else {
                    "bash_kill"
                };
                let reply = mux.call(tool, json!({"task_id": task}));
                assert_eq!(
                    text(&reply),
                    format!("Error: unknown bash task \"{task}\""),
                    "{}",
                    why(&reply)
                );
            }
        }
    }
}

fn task_id(started: &Value) -> String {
    text(started)
        .strip_prefix("started background task ")
        .unwrap_or_else(|| panic!("not started: {started}"))
        .to_owned()
}

/// Runs scenarios `from..to` on `IN_FLIGHT` threads.
fn run_scenarios(run: &Arc<Run>, from: usize, to: usize) {
    let next = Arc::new(AtomicUsize::new(from));
    let workers: Vec<_> = (0..IN_FLIGHT)
        .map(|_| {
            let (run, next) = (run.clone(), next.clone());
            std::thread::spawn(move || {
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= to {
                        break;
                    }
                    run.scenario(n);
                }
            })
        })
        .collect();
    for worker in workers {
        if let Err(panic) = worker.join() {
            std::panic::resume_unwind(panic);
        }
    }
}

fn soak(mode: &'static str) {
    let seed = std::env::var("DSH_SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_1919);
    println!("{mode}: seed {seed} (replay with DSH_SOAK_SEED={seed})");
    let args = [
        "--containment",
        mode,
        "--grace-ms",
        "300",
        "--shutdown-grace-ms",
        "1000",
    ];
    let Some(mux) = Mux::start(&args) else { return };
    let run = Arc::new(Run {
        mux,
        mode,
        seed,
        markers: Mutex::default(),
        outside: Outside::start(),
    });
    let pid = run.mux.pid();
    let began = Instant::now();
    run_scenarios(&run, 0, WARM_UP);
    let warm = settled_usage(pid, None);
    run_scenarios(&run, WARM_UP, SCENARIOS);
    let end = settled_usage(pid, Some(warm));
    let took = began.elapsed();
    println!(
        "{mode}: {SCENARIOS} scenarios in {took:?}; {} notices",
        run.mux.unrouted.load(Ordering::Relaxed)
    );
    // RSS may grow by less than 24 MiB.
    warm.assert_no_growth(end, 24 * 1024 - 1, mode);
    // End of input: the server answers what is running (nothing), kills and joins, and exits 0.
    drop(run.mux.stdin.lock().unwrap().take());
    let closed = Instant::now();
    let status = exit_status(
        &mut run.mux.child.lock().unwrap(),
        Duration::from_secs(10),
        &format!("{mode} (after end of input)"),
    );
    println!(
        "{mode}: exited {status} {:?} after end of input",
        closed.elapsed()
    );
    assert_eq!(status.code(), Some(0), "{mode}");
    if let Some(reader) = run.mux.reader.lock().unwrap().take() {
        reader.join().unwrap();
    }
    assert!(
        run.outside.listener.accept().is_err(),
        "{mode}: a confined command reached the outside listener"
    );
    for marker in run.markers.lock().unwrap().iter() {
        assert!(
            wait_until(REPLY, || live_with_cmdline(marker).is_empty()),
            "{mode}: processes with {marker} are left"
        );
    }
}

/// The server's usage once it is idle: the last command's descriptors close just after its reply is
/// written, so wait (bounded) until they are back to the warm-up figure before judging.
fn settled_usage(pid: u32, warm: Option<Usage>) -> Usage {
    let mut now = usage(pid);
    if let Some(warm) = warm {
        wait_until(Duration::from_secs(10), || {
            now = usage(pid);
            now.plain_fds() <= warm.plain_fds() && now.threads <= warm.threads
        });
    }
    now
}

#[test]
fn a_cgroup_server_soaks_480_mixed_calls() {
    soak("cgroup");
}

#[test]
fn a_subreaper_server_soaks_480_mixed_calls() {
    soak("subreaper");
}

#[test]
fn a_group_server_soaks_480_mixed_calls() {
    soak("group");
}
