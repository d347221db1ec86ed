//! Unix sockets under the sandbox (issue 21, point 3), through the `dsh` binary under each backend
//! (`sandbox_sockets::landlock::…`, `sandbox_sockets::bwrap::…`): a listener the test starts
//! outside the workspace is refused — by path, through a symbolic link, by a relative path, from a
//! namespace of the command's own, and while a second thread swaps the address under the gate —
//! unless `--allow-unix-socket` names it; sockets inside the sandbox, abstract names of the
//! command's own and TCP still connect; datagram Unix sockets and io_uring are refused; and one
//! server lives through a command killed while stopped in the gate. Each test checks that the
//! outside listener took no connection and that nothing it started is left running.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::io::Read;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use dsh_test_support::wait::wait_until;
use serde_json::json;

use crate::jsonl_server::{SOON, Server, bash};
use crate::sandbox_escape::{
    Backend, assert_nothing_left, confined_server, confined_server_without_env, run, setup,
    under_each_backend,
};

/// A listener outside the workspace (and outside `/tmp`, which a sandbox shows as its own), which
/// no confined command may reach; non-blocking, so `accepted` can ask without waiting.
struct Outside {
    _dir: tempfile::TempDir,
    path: PathBuf,
    listener: UnixListener,
}

impl Outside {
    fn start() -> Self {
        let dir = dsh_test_support::scratch::outside_tmp(
            "dsh-gate-outside-",
            Path::new(env!("CARGO_TARGET_TMPDIR")),
        );
        let path = dir.path().join("outside.sock");
        let listener = UnixListener::bind(&path).unwrap();
        listener.set_nonblocking(true).unwrap();
        Outside {
            _dir: dir,
            path,
            listener,
        }
    }

    fn path(&self) -> &str {
        self.path.to_str().unwrap()
    }

    /// How many connections reached it so far.
    fn accepted(&self) -> usize {
        let mut n = 0;
        while let Ok((mut stream, _)) = self.listener.accept() {
            let mut byte = [0u8; 1];
            stream.set_nonblocking(true).unwrap();
            let _ = stream.read(&mut byte);
            n += 1;
        }
        n
    }
}

/// A Python line that connects to `address` and prints `<label> CONNECTED` or `<label> refused:
/// <error>`.
fn connect_line(label: &str, address: &str) -> String {
    format!(
        "python3 -c 'import socket,sys\ns=socket.socket(socket.AF_UNIX)\ntry:\n s.connect(sys.argv[1]); print(\"{label} CONNECTED\")\nexcept OSError as e: print(\"{label} refused:\", e.strerror)' '{address}'"
    )
}

fn a_socket_outside_the_workspace_is_refused_unless_allowed(backend: Backend) {
    let Some((ws, m)) = setup(backend) else {
        return;
    };
    let outside = Outside::start();
    let parent = outside.path.parent().unwrap().to_str().unwrap().to_owned();
    let relative = pathdiff(&outside.path, ws.path());
    let command = format!(
        "{}; ln -s {} link.sock && {}; {}; echo done # {m}",
        connect_line("direct", outside.path()),
        outside.path(),
        connect_line("link", "link.sock"),
        connect_line("relative", &relative),
    );
    let printed = run(backend, ws.path(), &[], &command);
    for label in ["direct", "link", "relative"] {
        assert!(
            printed.contains(&format!("{label} refused: Permission denied")),
            "{label}: {printed}"
        );
    }
    assert_eq!(outside.accepted(), 0, "{printed}");
    // The operator allows it: the same connects reach it.
    let printed = run(
        backend,
        ws.path(),
        &["--allow-unix-socket", outside.path()],
        &format!(
            "{}; echo done # {m}",
            connect_line("direct", outside.path())
        ),
    );
    assert!(printed.contains("direct CONNECTED"), "{printed}");
    assert_eq!(outside.accepted(), 1);
    // Its directory is not allowed by that: a second socket beside it is still refused.
    let beside = UnixListener::bind(Path::new(&parent).join("beside.sock")).unwrap();
    beside.set_nonblocking(true).unwrap();
    let printed = run(
        backend,
        ws.path(),
        &["--allow-unix-socket", outside.path()],
        &connect_line("beside", &format!("{parent}/beside.sock")),
    );
    assert!(printed.contains("beside refused"), "{printed}");
    assert!(beside.accept().is_err());
    assert_nothing_left(&m);
}

/// `target` relative to `from` (both absolute, `from` a directory), with `..` steps.
fn pathdiff(target: &Path, from: &Path) -> String {
    let ups = from.components().count() - 1;
    format!(
        "{}{}",
        "../".repeat(ups),
        target.to_str().unwrap().trim_start_matches('/')
    )
}

fn sockets_inside_the_sandbox_and_tcp_still_connect(backend: Backend) {
    let Some((ws, m)) = setup(backend) else {
        return;
    };
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = tcp.local_addr().unwrap().port();
    let script = format!(
        r#"
import socket, threading, os
def serve(listener, reply):
    c, _ = listener.accept(); c.sendall(reply); c.close()
def round_trip(family, address):
    l = socket.socket(family); l.bind(address); l.listen(1)
    threading.Thread(target=serve, args=(l, b"pong")).start()
    c = socket.socket(family); c.connect(address if family != socket.AF_INET else l.getsockname())
    return c.recv(10).decode()
print("workspace", round_trip(socket.AF_UNIX, "ws.sock"))
print("tmp", round_trip(socket.AF_UNIX, "/tmp/{m}.sock"))
print("abstract", round_trip(socket.AF_UNIX, "\0{m}-own"))
print("loopback", round_trip(socket.AF_INET, ("127.0.0.1", 0)))
t = socket.create_connection(("127.0.0.1", {port})); print("tcp-out", t.recv(10).decode())
a, b = socket.socketpair(); a.sendall(b"pair"); print("pair", b.recv(10).decode())
for kind in ("SOCK_DGRAM", "SOCK_RAW"):
    try: socket.socket(socket.AF_UNIX, getattr(socket, kind)); print(kind, "OPENED")
    except OSError as e: print(kind, "refused:", e.strerror)
    try: socket.socketpair(socket.AF_UNIX, getattr(socket, kind)); print(kind, "pair OPENED")
    except OSError as e: print(kind, "pair refused:", e.strerror)
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)
fd = libc.syscall(425, 4, params)
print("io_uring", "OPENED" if fd >= 0 else "refused: " + os.strerror(ctypes.get_errno()))
"#
    );
    std::fs::write(ws.path().join("inside.py"), script).unwrap();
    let server = std::thread::spawn(move || {
        let (mut stream, _) = tcp.accept().unwrap();
        std::io::Write::write_all(&mut stream, b"tcp-ok").unwrap();
    });
    let printed = run(backend, ws.path(), &[], &format!("python3 inside.py # {m}"));
    for line in [
        "workspace pong",
        "tmp pong",
        "abstract pong",
        "loopback pong",
        "tcp-out tcp-ok",
        "pair pair",
        "SOCK_DGRAM refused: Operation not permitted",
        "SOCK_DGRAM pair refused: Operation not permitted",
        "SOCK_RAW refused: Operation not permitted",
        "SOCK_RAW pair refused: Operation not permitted",
        "io_uring refused: Operation not permitted",
    ] {
        assert!(printed.contains(line), "{line}: {printed}");
    }
    server.join().unwrap();
    assert_nothing_left(&m);
}

fn swapping_the_address_under_the_gate_never_reaches_outside(backend: Backend) {
    let Some((ws, m)) = setup(backend) else {
        return;
    };
    let outside = Outside::start();
    // The swapping thread copies whole 110-byte addresses; a connect that reads one half-copied
    // names a file that does not exist.
    let long_inside = format!("{}/{}", ws.path().display(), "i".repeat(8));
    let target = outside.path().to_owned();
    assert!(long_inside.len() < 100 && target.len() < 100);
    let script = format!(
        r#"
import ctypes, socket, struct, threading
libc = ctypes.CDLL(None, use_errno=True)
def address(path): return struct.pack("H", socket.AF_UNIX) + path.encode().ljust(108, b"\0")
good, bad = address("{good}"), address("{bad}")
l = socket.socket(socket.AF_UNIX); l.bind("{good}"); l.listen(4096)
buf = ctypes.create_string_buffer(good, 110)
stop = False
def swap():
    while not stop:
        ctypes.memmove(buf, bad, 110); ctypes.memmove(buf, good, 110)
threading.Thread(target=swap).start()
ok = 0
for _ in range(1500):
    s = socket.socket(socket.AF_UNIX)
    if libc.connect(s.fileno(), buf, 110) == 0: ok += 1
    s.close()
    try:
        while True:
            l.setblocking(False); l.accept()[0].close()
    except BlockingIOError: pass
stop = True
print("inside connects", ok)
"#,
        good = long_inside,
        bad = target,
    );
    std::fs::write(ws.path().join("swap.py"), script).unwrap();
    let printed = run(backend, ws.path(), &[], &format!("python3 swap.py # {m}"));
    let inside: usize = printed
        .lines()
        .find_map(|l| l.strip_prefix("inside connects "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{printed}"));
    eprintln!(
        "{}: {inside} of 1500 swapped connects reached the inside listener",
        backend.name()
    );
    assert!(
        inside > 0,
        "the race never let the inside address through: {printed}"
    );
    assert_eq!(
        outside.accepted(),
        0,
        "a swapped address reached the outside listener: {printed}"
    );
    assert_nothing_left(&m);
}

fn a_namespace_of_the_commands_own_does_not_rename_an_outside_socket(backend: Backend) {
    let Some((ws, m)) = setup(backend) else {
        return;
    };
    let outside = Outside::start();
    std::fs::write(ws.path().join("x.sock"), b"").unwrap();
    let command = format!(
        "unshare -Urm sh -c 'mount --bind {} x.sock && echo BOUND; {}'; echo done # {m}",
        outside.path(),
        connect_line("bound", "x.sock").replace('\'', "'\\''"),
    );
    let printed = run(backend, ws.path(), &[], &command);
    assert!(!printed.contains("bound CONNECTED"), "{printed}");
    assert_eq!(outside.accepted(), 0, "{printed}");
    assert_nothing_left(&m);
}

/// A user namespace of the command's own binds the outside socket below the workspace in a mount
/// namespace of its own; a second process, still in the sandbox's mount namespace, `chroot`s into
/// that namespace's root (through a descriptor passed over a socket pair) and connects there
/// (bubblewrap: no nested user namespace is refused; Landlock refuses the mount itself).
fn a_chroot_into_a_namespace_of_its_own_does_not_reach_outside(backend: Backend) {
    let Some((ws, m)) = setup(backend) else {
        return;
    };
    let outside = Outside::start();
    let script = r#"
import ctypes, os, socket, sys, time
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS, CLONE_NEWUSER, MS_BIND, MS_REC, MS_PRIVATE = 0x20000, 0x10000000, 4096, 16384, 1 << 18
def check(ret, what):
    if ret != 0:
        print(what, "refused:", os.strerror(ctypes.get_errno())); sys.exit(0)
outside, inside = sys.argv[1], os.path.abspath("x.sock")
open(inside, "w").close()
a, b = socket.socketpair()
pid = os.fork()
if pid == 0:
    check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare")
    check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "private")
    check(libc.mount(outside.encode(), inside.encode(), None, MS_BIND, None), "bind")
    socket.send_fds(b, [b"x"], [os.open("/", os.O_RDONLY | os.O_DIRECTORY)])
    time.sleep(3); os._exit(0)
msg, fds, _, _ = socket.recv_fds(a, 1, 1)
if not fds: print("no namespace"); sys.exit(0)
check(libc.unshare(CLONE_NEWUSER), "unshare user")
os.fchdir(fds[0]); check(libc.chroot(b"."), "chroot")
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(inside); s.sendall(b"ESCAPED"); print("CONNECTED")
except OSError as e: print("refused:", e.strerror)
"#;
    std::fs::write(ws.path().join("nest.py"), script).unwrap();
    let printed = run(
        backend,
        ws.path(),
        &[],
        &format!("timeout 20 python3 nest.py {} # {m}", outside.path()),
    );
    assert!(!printed.contains("CONNECTED"), "{printed}");
    assert!(printed.contains("refused"), "{printed}");
    assert_eq!(outside.accepted(), 0, "{printed}");
    assert_nothing_left(&m);
}

/// A second thread sends on the socket while the gate handles its `connect` to an abstract name
/// outside: the outside listener sees no connection at all (the gate asks who listens first).
fn a_racing_sender_gets_nothing_to_an_outside_abstract_listener(backend: Backend) {
    use std::os::linux::net::SocketAddrExt;
    let Some((ws, m)) = setup(backend) else {
        return;
    };
    let name = format!("{m}-abstract");
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let listener = UnixListener::bind_addr(&addr).unwrap();
    listener.set_nonblocking(true).unwrap();
    let script = format!(
        r#"
import socket, threading
ok = 0
for _ in range(30):
    s = socket.socket(socket.AF_UNIX); stop = False
    def spin():
        while not stop:
            try: s.send(b"RACED", socket.MSG_DONTWAIT)
            except OSError: pass
    t = threading.Thread(target=spin); t.start()
    try: s.connect("\0{name}"); ok += 1
    except OSError: pass
    stop = True; t.join(); s.close()
print("connected", ok)
"#
    );
    std::fs::write(ws.path().join("race.py"), script).unwrap();
    let printed = run(backend, ws.path(), &[], &format!("python3 race.py # {m}"));
    assert!(printed.contains("connected 0"), "{printed}");
    assert!(
        listener.accept().is_err(),
        "the outside listener saw a connection: {printed}"
    );
    assert_nothing_left(&m);
}

/// A blocking connect interrupted by signals (a full backlog freed after 300 ms, a timer firing
/// every 2 ms) ends connected, as unconfined: the restarted call waits for the gate's first.
fn a_connect_interrupted_by_signals_ends_connected(backend: Backend) {
    let Some((ws, m)) = setup(backend) else {
        return;
    };
    let script = r#"
import ctypes, errno, os, signal, socket, struct, sys, time
libc = ctypes.CDLL(None, use_errno=True)
signal.signal(signal.SIGALRM, lambda *_: None)
# Restarted by the kernel (SA_RESTART), or returned as EINTR and called again, as C programs do.
signal.siginterrupt(signal.SIGALRM, sys.argv[1] == "eintr")
l = socket.socket(socket.AF_UNIX); l.bind("sig.sock"); l.listen(0)
fill = [socket.socket(socket.AF_UNIX) for _ in range(2)]
for f in fill:
    f.setblocking(False)
    try: f.connect("sig.sock")
    except OSError: pass
if os.fork() == 0:
    time.sleep(0.3)
    l.settimeout(2)
    try:
        while True: l.accept()
    except OSError: os._exit(0)
address = struct.pack("H", socket.AF_UNIX) + os.path.abspath("sig.sock").encode() + b"\0"
s = socket.socket(socket.AF_UNIX)
signal.setitimer(signal.ITIMER_REAL, 0.002, 0.002)
while True:
    ret = libc.connect(s.fileno(), address, len(address))
    err = ctypes.get_errno()
    if ret == 0 or err != errno.EINTR: break
signal.setitimer(signal.ITIMER_REAL, 0, 0)
print("connected" if ret == 0 else "failed: " + os.strerror(err))
os.wait()
"#;
    std::fs::write(ws.path().join("sig.py"), script).unwrap();
    for round in 0..4 {
        let asked = Instant::now();
        let how = if round % 2 == 0 { "restart" } else { "eintr" };
        let printed = run(
            backend,
            ws.path(),
            &[],
            &format!("rm -f sig.sock; python3 sig.py {how} # {m}"),
        );
        assert_eq!(printed, "connected\n", "round {round} ({how})");
        assert!(
            asked.elapsed() < Duration::from_secs(30),
            "round {round} was slow"
        );
    }
    assert_nothing_left(&m);
}

/// `systemd-run --user` would run anything outside the sandbox: refused where the host has a
/// user manager to ask.
fn systemd_run_user_is_refused(backend: Backend) {
    let Some((ws, m)) = setup(backend) else {
        return;
    };
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { nix::libc::getuid() };
    let private = format!("/run/user/{uid}/systemd/private");
    let has_systemd_run = std::process::Command::new("systemd-run")
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success());
    if !has_systemd_run || !Path::new(&private).exists() {
        eprintln!("skipped: no systemd-run or no user manager ({private}) on this host");
        return;
    }
    let printed = run(
        backend,
        ws.path(),
        &[],
        &format!("systemd-run --user --wait touch /tmp/{m}-escaped; echo rc=$?"),
    );
    assert!(!printed.contains("rc=0"), "{printed}");
    assert!(!Path::new(&format!("/tmp/{m}-escaped")).exists());
    assert_nothing_left(&m);
}

/// A command that serves itself on a Unix socket in the workspace (`<name>-<marker>.sock`),
/// connects and prints the `ok` it gets back.
fn round_trip(name: &str, marker: &str) -> String {
    format!(
        "python3 -c 'import socket,threading\nl=socket.socket(socket.AF_UNIX); l.bind(\"{name}-{marker}.sock\"); l.listen(1)\nthreading.Thread(target=lambda: l.accept()[0].sendall(b\"ok\")).start()\nc=socket.socket(socket.AF_UNIX); c.connect(\"{name}-{marker}.sock\"); print(c.recv(2).decode())'"
    )
}

/// How often dsh's (`pid`) socket-gate thread has been switched out (voluntarily or not), `None`
/// while it does not run: a thread asleep in its wait does not count up, every wake-up does.
fn gate_thread_wakes(pid: u32) -> Option<u64> {
    let tid = *dsh_test_support::procfs::threads_named(pid, "dsh-sockgate").first()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).ok()?;
    let switches = status
        .lines()
        .filter(|line| line.contains("ctxt_switches:"))
        .filter_map(|line| line.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum();
    Some(switches)
}

/// Commands that never `connect` never wake the gate thread (under bubblewrap, the runtime that
/// spawns a command watches its listener until the first `connect`, and the gate thread does not
/// even start; under Landlock, one listener serves all the commands of a confined spawning thread
/// and no command's end reports on it); a connect made by what the command left behind, after its
/// leader is gone, is still served, by the gate thread.
///
/// The server runs without `SHELL` (as CI jobs and containers do): a bash started without it asks
/// NSS for the user's shell, whose first step is a `connect` to nscd's socket, so every command
/// would connect; dsh gives commands the login shell as `SHELL` instead.
fn a_late_connect_after_the_leader_is_gone_is_served(backend: Backend) {
    let Some((ws, m)) = setup(backend) else {
        return;
    };
    let mut server = confined_server_without_env(backend, ws.path(), &[], &["SHELL"]);
    let pid = server.child.id();
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { nix::libc::getuid() }.to_string();
    let login_shell = std::fs::read_to_string("/etc/passwd")
        .unwrap()
        .lines()
        .map(|line| line.split(':').map(str::to_owned).collect::<Vec<_>>())
        .find(|fields| fields.get(2) == Some(&uid))
        .and_then(|fields| fields.get(6).cloned())
        .unwrap();
    // A shell `/etc/shells` does not list (`nologin`) is given as `/bin/sh`.
    let shells = std::fs::read_to_string("/etc/shells").unwrap_or_default();
    let login_shell = if shells.lines().any(|line| line.trim() == login_shell) {
        login_shell
    } else {
        "/bin/sh".to_owned()
    };
    // The first command may start the gate thread (Landlock); none after it wakes it.
    let mut settled = None;
    for round in 0..6 {
        let id = format!("quiet-{round}");
        server.call(
            &id,
            "bash",
            bash(&format!("echo quiet {round} $SHELL"), json!({})),
        );
        assert_eq!(server.text(&id), format!("quiet {round} {login_shell}\n"));
        if round == 1 {
            settled = gate_thread_wakes(pid);
        }
    }
    assert_eq!(
        gate_thread_wakes(pid),
        settled,
        "commands that never connect woke the gate thread"
    );
    // Under bubblewrap the command's pid namespace ends with its leader, and what it left behind
    // with it: no late connect there.
    if !matches!(backend, Backend::Bwrap) {
        late_connect(&mut server, ws.path(), &m, pid);
    }
    // Ordinary connects are served by the gate thread.
    let before = gate_thread_wakes(pid);
    server.call("after", "bash", bash(&round_trip("after", &m), json!({})));
    assert_eq!(server.text("after"), "ok\n");
    assert!(
        gate_thread_wakes(pid) > before,
        "a connect was not served by the gate thread"
    );
    server.finish();
    assert_nothing_left(&m);
}

/// The leader prints and exits at once; its child connects a second later, detached from the
/// call's pipes, and is served.
fn late_connect(server: &mut Server, ws: &Path, m: &str, pid: u32) {
    let late = ws.join("late.txt");
    let before = gate_thread_wakes(pid);
    let command = format!(
        "(sleep 1; {} > late.txt 2>&1) > /dev/null 2>&1 < /dev/null & echo started",
        round_trip("late", m)
    );
    server.call("late", "bash", bash(&command, json!({})));
    assert!(
        server.text("late").contains("started"),
        "{}",
        server.text("late")
    );
    assert!(
        wait_until(Duration::from_secs(30), || std::fs::read_to_string(&late)
            .is_ok_and(|text| text == "ok\n")),
        "the late connect: {:?}",
        std::fs::read_to_string(&late)
    );
    assert!(
        gate_thread_wakes(pid) > before,
        "the late connect was not served by the gate thread"
    );
}

/// One server, many calls: a command killed while it is stopped in the gate (its connect waits on
/// a full backlog), a timeout of another, one killed by the kernel for memory while a thread of it
/// is stopped there, then ordinary socket work is right and quick.
fn a_server_serves_after_commands_die_in_the_gate(backend: Backend) {
    let Some((ws, m)) = setup(backend) else {
        return;
    };
    let mut server = confined_server(
        backend,
        ws.path(),
        &["--grace-ms", "300", "--task-max-memory", "128MiB"],
    );
    // A listener in the workspace with a backlog of 0 that never accepts: the second connect
    // blocks, stopped in the gate, which tries again until the command is gone.
    let full = format!(
        "python3 -c 'import socket,time\nl=socket.socket(socket.AF_UNIX); l.bind(\"full-{m}.sock\"); l.listen(0)\nfor i in range(3):\n c=socket.socket(socket.AF_UNIX); c.connect(\"full-{m}.sock\"); print(\"connected\", i, flush=True)\ntime.sleep(600)' {m}"
    );
    // dsh's descriptors but its parked cgroup leaves (the pool keeps up to 8 warm, each two
    // descriptors, however many commands have run).
    let fds = |pid: u32| {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.unwrap().path()).ok())
            .filter(|link| !link.starts_with("/sys/fs/cgroup"))
            .count()
    };
    let pid = server.child.id();
    // One call with a connect first, so the gate thread (started by the first command that
    // connects) and the runtime's descriptors are all made.
    server.call("first", "bash", bash(&round_trip("first", &m), json!({})));
    assert_eq!(server.text("first"), "ok\n");
    let before = fds(pid);
    let task = server.start_background("blocked", &full);
    let id = "blocked-read";
    server.call(
        id,
        "bash_output",
        json!({"task_id": task, "wait": true, "until": "connected 0", "timeout_ms": 30000}),
    );
    let read = server.text(id);
    assert!(read.contains("connected 0"), "{read}");
    server.call("kill", "bash_kill", json!({"task_id": task}));
    let killed = server.text("kill");
    assert!(killed.contains(&task), "{killed}");
    // The gate let go of the killed command's socket and listener.
    assert!(
        wait_until(SOON, || fds(pid) <= before),
        "dsh holds {} descriptors, {before} before the blocked connect: {:?}",
        fds(pid),
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.unwrap().path()).ok())
            .collect::<Vec<_>>()
    );
    // A foreground call that times out while stopped in the gate.
    let stuck = full.replace("full-", "full2-");
    server.call("stuck", "bash", bash(&stuck, json!({"timeoutMs": 1500})));
    let timed_out = server.text("stuck");
    assert!(timed_out.contains("timed out"), "{timed_out}");
    // A thread stopped in the gate while another thread of its process grows past the memory
    // limit: the kernel kills the whole process, the stopped thread with it.
    let oom = format!(
        "python3 -c 'import socket,threading\nl=socket.socket(socket.AF_UNIX); l.bind(\"full3-{m}.sock\"); l.listen(0)\nfirst=threading.Event()\ndef hold():\n for i in range(3):\n  c=socket.socket(socket.AF_UNIX); c.connect(\"full3-{m}.sock\"); print(\"connected\", i, flush=True); first.set()\nthreading.Thread(target=hold, daemon=True).start()\nfirst.wait()\nheld=[]\nwhile True: held.append(bytearray(8<<20))' {m}"
    );
    server.call("oom", "bash", bash(&oom, json!({})));
    let killed = server.text("oom");
    assert!(killed.contains("connected 0"), "{killed}");
    assert!(killed.ends_with("[killed: out of memory]"), "{killed}");
    assert!(
        wait_until(SOON, || fds(pid) <= before),
        "dsh holds {} descriptors after the out-of-memory kill, {before} before",
        fds(pid)
    );
    for round in 0..5 {
        let asked = Instant::now();
        let printed = {
            let id = format!("echo-{round}");
            server.call(
                &id,
                "bash",
                bash(&round_trip(&format!("r{round}"), &m), json!({})),
            );
            server.text(&id)
        };
        assert_eq!(printed, "ok\n", "round {round}");
        assert!(
            asked.elapsed() < Duration::from_secs(10),
            "round {round} was slow"
        );
    }
    server.finish();
    assert!(
        wait_until(SOON, || dsh_test_support::procfs::live_with_cmdline(&m)
            .is_empty()),
        "left running: {:?}",
        dsh_test_support::procfs::live_with_cmdline(&m)
    );
    assert_nothing_left(&m);
}

under_each_backend!(
    a_chroot_into_a_namespace_of_its_own_does_not_reach_outside,
    a_racing_sender_gets_nothing_to_an_outside_abstract_listener,
    a_connect_interrupted_by_signals_ends_connected,
    a_socket_outside_the_workspace_is_refused_unless_allowed,
    sockets_inside_the_sandbox_and_tcp_still_connect,
    swapping_the_address_under_the_gate_never_reaches_outside,
    a_namespace_of_the_commands_own_does_not_rename_an_outside_socket,
    systemd_run_user_is_refused,
    a_server_serves_after_commands_die_in_the_gate,
    a_late_connect_after_the_leader_is_gone_is_served,
);

/// Under Landlock's `--network deny` a TCP Fast Open send (which connects without `connect`) is
/// refused like a connect.
#[test]
fn tcp_fast_open_is_refused_under_network_deny() {
    let Some((ws, m)) = setup(Backend::Landlock) else {
        return;
    };
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    let port = tcp.local_addr().unwrap().port();
    let command = format!(
        "python3 -c 'import socket\ns=socket.socket()\ntry: s.sendto(b\"x\", socket.MSG_FASTOPEN, (\"127.0.0.1\", {port})); print(\"SENT\")\nexcept OSError as e: print(\"refused:\", e.strerror)' # {m}"
    );
    let printed = run(
        Backend::Landlock,
        ws.path(),
        &["--network", "deny"],
        &command,
    );
    assert!(
        printed.contains("refused: Operation not permitted"),
        "{printed}"
    );
    assert!(tcp.accept().is_err(), "the listener saw a connection");
    assert_nothing_left(&m);
}

#[test]
fn a_relative_allowed_socket_is_refused_at_start() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dsh"))
        .args(["run", "--allow-unix-socket", "agent.sock", "--", "true"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("agent.sock: give the socket's absolute path"),
        "{err}"
    );
}
