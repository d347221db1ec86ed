//! `--network loopback` through the `dsh` binary, under each backend (`sandbox_network::landlock::…`
//! and `sandbox_network::bwrap::…`; a backend this host lacks is skipped, saying why): a server a
//! background call starts on 127.0.0.1 is reached by the next call of the same runtime, and not from
//! the host; an address of a network namespace the test makes itself (a veth pair with private
//! addresses, a listener inside) is reached under `--network allow` and refused under `loopback`,
//! and so is DNS; the host's own loopback is out of reach under `loopback` and, as before, under
//! `deny`. Plus the startup refusals. Every command carries a unique marker, each test checks that
//! nothing it started is left running, and the test's namespace is removed.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use dsh_test_support::wait::wait_until;
use serde_json::json;

use crate::common::run_dsh;
use crate::jsonl_server::{SOON, Server, bash};
use crate::sandbox_escape::{
    Backend, assert_nothing_left, run, setup, under_each_backend, workspace,
};

/// `dsh jsonl --network loopback` under `backend` in `ws`.
fn loopback_server(backend: Backend, ws: &Path) -> Server {
    Server::start(&[
        "--sandbox",
        "workspace-write",
        "--sandbox-backend",
        backend.name(),
        "--network",
        "loopback",
        "--cwd",
        ws.to_str().unwrap(),
    ])
    .unwrap_or_else(|said| panic!("dsh refused --network loopback: {said}"))
}

/// Whether this host lets dsh make a network namespace; prints why not.
fn loopback_possible() -> bool {
    match dsh::LocalSandboxProvider::new(dsh::LocalSandboxConfig {
        network: dsh::NetworkPolicy::Loopback,
        ..Default::default()
    }) {
        Ok(_) => true,
        Err(reason) => {
            eprintln!("skipped: {reason}");
            false
        }
    }
}

/// A `python3 -c` program that prints what the server at `host:port` sends, or `refused: <why>`.
fn connect_and_print(host: &str, port: u16, marker: &str) -> String {
    format!(
        "python3 -c '
import socket
try:
    s = socket.create_connection((\"{host}\", {port}), timeout=10)
    print(\"got\", s.recv(100).decode())
except OSError as e:
    print(\"refused:\", e)
# {marker}
'"
    )
}

pub(crate) fn a_server_one_call_starts_is_reached_by_the_next(backend: Backend) {
    let Some((ws, m)) = setup(backend) else {
        return;
    };
    if !loopback_possible() {
        return;
    }
    std::fs::write(ws.path().join("hello"), &m).unwrap();
    let mut server = loopback_server(backend, ws.path());
    // A dev server in the background, on a port the kernel picks, written where the test reads it.
    let serve = format!(
        "python3 -c '
import http.server, os
s = http.server.HTTPServer((\"127.0.0.1\", 0), http.server.SimpleHTTPRequestHandler)
open(\"port.tmp\", \"w\").write(str(s.server_port))
os.rename(\"port.tmp\", \"port\")
s.serve_forever()
# {m}
'"
    );
    let task = server.start_background("serve", &serve);
    let port_file = ws.path().join("port");
    assert!(
        wait_until(SOON, || port_file.exists()),
        "the server never listened"
    );
    let port: u16 = std::fs::read_to_string(&port_file)
        .unwrap()
        .parse()
        .unwrap();
    // The next call, a foreground one, reaches it.
    let fetch = format!(
        "python3 -c 'import urllib.request; print(urllib.request.urlopen(\"http://127.0.0.1:{port}/hello\", timeout=10).read().decode())  # {m}'"
    );
    server.call("fetch", "bash", bash(&fetch, json!({})));
    let fetched = server.text("fetch");
    assert!(fetched.contains(&m), "{fetched}");
    // The host's loopback is another one: the server is not there.
    assert!(
        !host_reaches(port, &m),
        "the confined server is on the host's loopback"
    );
    server.call("kill", "bash_kill", json!({"task_id": task}));
    assert_eq!(
        server.text("kill"),
        format!("killed background task {task}")
    );
    server.finish();
    assert_nothing_left(&m);
}

/// Whether an HTTP GET of `/hello` on the host's 127.0.0.1:`port` answers with `marker`.
fn host_reaches(port: u16, marker: &str) -> bool {
    let Ok(mut stream) =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(5))
    else {
        return false;
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let _ = stream.write_all(b"GET /hello HTTP/1.0\r\n\r\n");
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.contains(marker)
}

pub(crate) fn an_outside_address_and_dns_are_refused(backend: Backend) {
    let Some((ws, m)) = setup(backend) else {
        return;
    };
    if !loopback_possible() {
        return;
    }
    let Some(outside) = Outside::create(&m) else {
        return;
    };
    let probe = connect_and_print(&outside.address, Outside::PORT, &m);
    // The positive control: with the network allowed, the same command reaches the listener.
    let allowed = run(backend, ws.path(), &["--network", "allow"], &probe);
    assert_eq!(allowed, format!("got {m}\n"));
    let confined = run(backend, ws.path(), &["--network", "loopback"], &probe);
    assert!(
        confined.starts_with("refused:") && !confined.contains(&m),
        "{confined}"
    );
    // DNS: a query to a name server outside (the test's, on UDP port 53, which echoes it) is
    // answered with the network allowed and cannot be sent under `loopback`; nor does a name resolve.
    let dns = format!(
        "python3 -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(10)
try:
    s.sendto(b\"query\", (\"{}\", 53))
    print(\"answered\", s.recv(100).decode())
except OSError as e:
    print(\"no dns:\", e)
try:
    socket.getaddrinfo(\"example.com\", 80)
    print(\"resolved\")
except OSError as e:
    print(\"no name:\", e)
# {m}
'",
        outside.address
    );
    let allowed = run(backend, ws.path(), &["--network", "allow"], &dns);
    assert!(allowed.starts_with("answered query\n"), "{allowed}");
    let confined = run(backend, ws.path(), &["--network", "loopback"], &dns);
    assert!(
        confined.starts_with("no dns:") && confined.contains("\nno name:"),
        "{confined}"
    );
    let name = outside.name.clone();
    drop(outside);
    assert!(!netns_listed(&name), "the test's namespace {name} is left");
    assert_nothing_left(&m);
}

pub(crate) fn the_hosts_loopback_is_out_of_reach_under_loopback_and_deny(backend: Backend) {
    let Some((ws, m)) = setup(backend) else {
        return;
    };
    if !loopback_possible() {
        return;
    }
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let command = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected # {m}");
    for network in ["loopback", "deny"] {
        let printed = run(backend, ws.path(), &["--network", network], &command);
        assert!(!printed.contains("connected"), "{network}: {printed}");
        assert!(
            listener.accept().is_err(),
            "{network}: the connection reached the host's listener"
        );
    }
    // The positive control.
    let printed = run(backend, ws.path(), &["--network", "allow"], &command);
    assert!(printed.contains("connected"), "{printed}");
    assert!(wait_until(SOON, || listener.accept().is_ok()));
    assert_nothing_left(&m);
}

#[test]
fn loopback_without_confinement_or_without_cap_sys_admin_is_a_startup_error() {
    let ws = workspace();
    let cwd = ws.path().to_str().unwrap();
    let out = run_dsh(&[
        "run",
        "--sandbox",
        "danger-full-access",
        "--network",
        "loopback",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains(
            "--network loopback needs a confined --sandbox mode (read-only or workspace-write)"
        ),
        "{said}"
    );
    if !loopback_possible() {
        return;
    }
    let doctor = run_dsh(&["doctor"]);
    let report = String::from_utf8_lossy(&doctor.stdout);
    assert!(
        report.contains("sandbox network loopback: yes, by a network namespace"),
        "{report}"
    );
    // Without CAP_SYS_ADMIN (dropped from the bounding set, so root's exec of dsh lacks it).
    if Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("skipped the CAP_SYS_ADMIN half: no setpriv here");
        return;
    }
    let without = |args: &[&str]| {
        Command::new("setpriv")
            .args([
                "--bounding-set",
                "-sys_admin",
                "--inh-caps",
                "-sys_admin",
                "--",
            ])
            .arg(env!("CARGO_BIN_EXE_dsh"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let refused = "--network loopback: creating a network namespace was refused (Operation not \
                   permitted (os error 1)): dsh needs CAP_SYS_ADMIN for it (run dsh as root, or \
                   give its container CAP_SYS_ADMIN), or use --network deny or allow";
    let out = without(&[
        "run",
        "--sandbox",
        "workspace-write",
        "--network",
        "loopback",
        "--cwd",
        cwd,
        "--",
        "true",
    ]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains(refused), "{said}");
    let report = without(&["doctor"]);
    let report = String::from_utf8_lossy(&report.stdout);
    assert!(
        report.contains(&format!(
            "sandbox network loopback: unavailable ({refused})"
        )),
        "{report}"
    );
}

/// A network namespace of the test's own, joined to the host's by a veth pair with private
/// addresses, with a listener inside that sends the marker to whoever connects (TCP) and echoes
/// datagrams on the DNS port (UDP 53). Dropping it kills
/// the listener and removes the namespace (and with it both ends of the pair).
struct Outside {
    name: String,
    host_end: String,
    address: String,
    listener: Option<Child>,
}

impl Outside {
    const PORT: u16 = 8080;

    /// `None`, saying why, when this host cannot make one (no `ip`, no privilege).
    fn create(marker: &str) -> Option<Self> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed) % 60;
        let pid = std::process::id();
        // A /30 of 10.213.0.0/16 per test: the host's end is .1 of it, the namespace's .2.
        let subnet = |last: u32| format!("10.213.{}.{}", pid % 250, 4 * n + last);
        let mut outside = Self {
            name: format!("{marker}-ns"),
            host_end: format!("dsh{}{n}h", pid % 100_000),
            address: subnet(2),
            listener: None,
        };
        let host_address = format!("{}/30", subnet(1));
        let inner_address = format!("{}/30", outside.address);
        let inner_end = format!("dsh{}{n}i", pid % 100_000);
        let steps: [&[&str]; 7] = [
            &["netns", "add", &outside.name],
            &[
                "link",
                "add",
                &outside.host_end,
                "type",
                "veth",
                "peer",
                "name",
                &inner_end,
            ],
            &["link", "set", &inner_end, "netns", &outside.name],
            &["addr", "add", &host_address, "dev", &outside.host_end],
            &["link", "set", &outside.host_end, "up"],
            &[
                "-n",
                &outside.name,
                "addr",
                "add",
                &inner_address,
                "dev",
                &inner_end,
            ],
            &["-n", &outside.name, "link", "set", &inner_end, "up"],
        ];
        for step in steps {
            match Command::new("ip").args(step).output() {
                Ok(out) if out.status.success() => {}
                Ok(out) => {
                    eprintln!(
                        "skipped: `ip {}` failed: {}",
                        step.join(" "),
                        String::from_utf8_lossy(&out.stderr).trim()
                    );
                    return None;
                }
                Err(err) => {
                    eprintln!("skipped: no `ip` command here: {err}");
                    return None;
                }
            }
        }
        let serve = format!(
            "import select, socket
t = socket.socket()
t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.bind((\"{address}\", {port}))
t.listen(8)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind((\"{address}\", 53))
print(\"ready\", flush=True)
while True:
    ready, _, _ = select.select([t, u], [], [])
    if t in ready:
        c, _ = t.accept()
        c.sendall(b\"{marker}\")
        c.close()
    if u in ready:
        data, peer = u.recvfrom(512)
        u.sendto(data, peer)
# {marker}",
            address = outside.address,
            port = Self::PORT
        );
        let mut child = Command::new("ip")
            .args(["netns", "exec", &outside.name, "python3", "-c", &serve])
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the outside listener");
        let mut ready = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut ready)
            .unwrap();
        outside.listener = Some(child);
        assert_eq!(ready, "ready\n", "the outside listener did not start");
        Some(outside)
    }
}

/// Whether `ip netns list` names `name`.
fn netns_listed(name: &str) -> bool {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|line| line.split_whitespace().next() == Some(name))
}

impl Drop for Outside {
    fn drop(&mut self) {
        if let Some(mut child) = self.listener.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_end])
            .output();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

under_each_backend!(
    a_server_one_call_starts_is_reached_by_the_next,
    an_outside_address_and_dns_are_refused,
    the_hosts_loopback_is_out_of_reach_under_loopback_and_deny,
);
