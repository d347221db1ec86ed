//! What Landlock does not mediate, tried through the `dsh` binary under each backend
//! (`sandbox_metadata::landlock::…`, `sandbox_metadata::bwrap::…`): metadata of a file outside the
//! workspace (`chmod`, `touch -d`, xattrs, hard links, renames, truncation) in `workspace-write` and
//! `read-only`; the same operations inside the workspace; the private temp (`/tmp`, `/var/tmp`,
//! `mktemp`, `TMPDIR`, removed at shutdown); and the spill directory: read-only and unlistable to every command.
//! Under Landlock these need the read-only mount namespace, which needs root or `CAP_SYS_ADMIN`:
//! where dsh cannot make one, the case is skipped, saying why (`dsh doctor` says so too).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde_json::json;

use crate::jsonl_server::bash;
use crate::sandbox_escape::{Backend, assert_nothing_left, confined_server, run_in, setup};

/// A workspace and marker when `backend` confines here and refuses metadata changes.
fn setup_metadata(backend: Backend) -> Option<(tempfile::TempDir, String)> {
    let (ws, m) = setup(backend)?;
    let provider = dsh::LocalSandboxProvider::new(dsh::LocalSandboxConfig {
        backend: backend.choice(),
        ..Default::default()
    })
    .unwrap();
    if !provider.metadata_enforced() {
        eprintln!("skipped: {backend:?} cannot refuse metadata changes here (no mount namespace)");
        return None;
    }
    Some((ws, m))
}

/// A file's mode, modification time, size and `user.dsh` xattr.
fn facts(path: &Path) -> (u32, i64, u64, Option<Vec<u8>>) {
    let meta = std::fs::metadata(path).unwrap();
    (
        meta.permissions().mode(),
        meta.mtime(),
        meta.len(),
        xattr(path),
    )
}

fn xattr(path: &Path) -> Option<Vec<u8>> {
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg("import os,sys; sys.stdout.buffer.write(os.getxattr(sys.argv[1], 'user.dsh'))")
        .arg(path)
        .output()
        .unwrap();
    out.status.success().then_some(out.stdout)
}

/// Every metadata operation on `file`, hard-linked and renamed into `dir`; each prints its name
/// when it succeeds.
fn operations(file: &Path, dir: &Path, m: &str) -> String {
    let (f, d) = (file.display(), dir.display());
    format!(
        "chmod 4777 {f} && echo DID-CHMOD; touch -d 2001-01-01 {f} && echo DID-TOUCH; \
         python3 -c 'import os,sys; os.setxattr(sys.argv[1], \"user.dsh\", b\"planted\")' {f} \
           && echo DID-XATTR; \
         ln {f} {d}/hard && echo DID-LINK; truncate -s 0 {f} && echo DID-TRUNCATE; \
         mv {f} {d}/moved && echo DID-RENAME; echo done # {m}"
    )
}

pub(crate) fn metadata_outside_the_workspace_is_refused_in_both_modes(backend: Backend) {
    let Some((ws, m)) = setup_metadata(backend) else {
        return;
    };
    // A directory of the test's own, outside the workspace and outside /tmp.
    let outside = dsh_test_support::scratch::outside_tmp(
        "dsh-metadata-",
        Path::new(env!("CARGO_TARGET_TMPDIR")),
    );
    let victim = outside.path().join("victim");
    std::fs::write(&victim, "victim\n").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
    let before = facts(&victim);
    for mode in ["workspace-write", "read-only"] {
        let printed = run_in(
            backend,
            mode,
            ws.path(),
            &[],
            &operations(&victim, outside.path(), &m),
        );
        assert!(printed.contains("done"), "{mode}: {printed}");
        assert!(!printed.contains("DID-"), "{mode}: {printed}");
        assert_eq!(facts(&victim), before, "{mode}: {printed}");
        assert!(!outside.path().join("hard").exists(), "{mode}");
        assert!(!outside.path().join("moved").exists(), "{mode}");
    }
    assert_nothing_left(&m);
}

pub(crate) fn metadata_inside_the_workspace_still_changes(backend: Backend) {
    if let Some((ws, m)) = setup_metadata(backend) {
        metadata_inside(backend, ws.path(), &m);
    }
}

/// The operations on a file of the workspace `ws`, each of which must succeed.
fn metadata_inside(backend: Backend, ws: &Path, m: &str) {
    let own = ws.join("own");
    std::fs::write(&own, "own\n").unwrap();
    std::fs::create_dir(ws.join("sub")).unwrap();
    let printed = run_in(
        backend,
        "workspace-write",
        ws,
        &[],
        &operations(&own, &ws.join("sub"), m),
    );
    for op in ["CHMOD", "TOUCH", "XATTR", "LINK", "TRUNCATE", "RENAME"] {
        assert!(printed.contains(&format!("DID-{op}")), "{op}: {printed}");
    }
    let moved = ws.join("sub/moved");
    // The truncation that followed cleared the set-user-ID bit and set the time again, as any write
    // does.
    let (mode, _, len, xattr) = facts(&moved);
    assert_eq!(mode & 0o777, 0o777, "{printed}");
    assert_eq!(len, 0, "{printed}");
    assert_eq!(xattr.as_deref(), Some(&b"planted"[..]), "{printed}");
    assert!(ws.join("sub/hard").exists());
    assert_nothing_left(m);
}

/// The private temps of the dsh process `pid` (`dsh-tmp-<pid>-…` in the host's temp directory).
fn private_temps(pid: u32) -> Vec<PathBuf> {
    let prefix = format!("dsh-tmp-{pid}-");
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect()
}

pub(crate) fn temp_is_private_and_gone_after_shutdown(backend: Backend) {
    let Some((ws, m)) = setup_metadata(backend) else {
        return;
    };
    let mut server = confined_server(backend, ws.path(), &[]);
    let pid = server.child.id();
    let command = format!(
        "echo TMPDIR=$TMPDIR; ln -s x /tmp/{m} && echo LINKED; echo v > /var/tmp/{m} && echo VAR; \
         t=$(mktemp) && echo ok > $t && echo MKTEMP=$t; echo done # {m}"
    );
    server.call("temp", "bash", bash(&command, json!({})));
    let printed = server.text("temp");
    assert!(printed.contains("TMPDIR=/"), "{printed}");
    for word in ["LINKED", "VAR", "MKTEMP=/", "done"] {
        assert!(printed.contains(word), "{word}: {printed}");
    }
    let made = printed
        .lines()
        .find_map(|l| l.strip_prefix("MKTEMP="))
        .unwrap()
        .to_owned();
    // None of it is in the host's temps.
    for host in [format!("/tmp/{m}"), format!("/var/tmp/{m}"), made.clone()] {
        assert!(
            std::fs::symlink_metadata(&host).is_err(),
            "{host} is visible on the host: {printed}"
        );
    }
    let temps = private_temps(pid);
    if let Backend::Landlock = backend {
        // One private temp, mode 0700, holding the session's own (a caller with no session is
        // `anonymous`), mode 0700 too, which holds what the command made there.
        assert_eq!(temps.len(), 1, "{temps:?}");
        let own = temps[0].join("anonymous");
        for dir in [&temps[0], &own] {
            let meta = std::fs::metadata(dir).unwrap();
            assert_eq!(
                meta.permissions().mode() & 0o777,
                0o700,
                "{}",
                dir.display()
            );
        }
        assert!(std::fs::symlink_metadata(own.join(&m)).is_ok());
    }
    server.finish();
    assert!(private_temps(pid).is_empty(), "{:?}", private_temps(pid));
    assert_nothing_left(&m);
}

/// The spill directory is shown to a confined command read-only and unlistable: it reads the file
/// its result named (`sandbox_workflows` reads one whole), but cannot list the directory, remove or
/// change a file, plant one or fill the disk there.
pub(crate) fn the_spill_directory_is_out_of_reach(backend: Backend) {
    let Some((ws, m)) = setup_metadata(backend) else {
        return;
    };
    let mut server = confined_server(backend, ws.path(), &["--max-output-bytes", "1000"]);
    let spill = server.spill_file();
    let dir = spill.parent().unwrap().to_path_buf();
    let before = std::fs::read(&spill).unwrap();
    let (s, d) = (spill.display(), dir.display());
    let command = format!(
        "ls {d} && echo LISTED; head -c 10 {s} && echo READ; rm -f {s}; echo x > {d}/planted && echo PLANTED; \
         head -c 100000 /dev/zero > {d}/filler && echo FILLED; echo done # {m}"
    );
    server.call("spill", "bash", bash(&command, json!({})));
    let printed = server.text("spill");
    assert!(printed.contains("done"), "{printed}");
    for word in ["LISTED", "PLANTED", "FILLED"] {
        assert!(!printed.contains(word), "{word}: {printed}");
    }
    assert!(printed.contains("xxxxxxxxxxREAD"), "{printed}");
    assert_eq!(std::fs::read(&spill).unwrap(), before, "{printed}");
    assert!(!dir.join("planted").exists() && !dir.join("filler").exists());
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o300);
    server.finish();
    assert_nothing_left(&m);
}

/// A pseudo-terminal of the host's (this test's own, master held open): its slave's path.
fn host_pty() -> (std::fs::File, String) {
    use std::os::fd::AsRawFd;
    let master = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/ptmx")
        .unwrap();
    let (mut unlock, mut number): (nix::libc::c_int, nix::libc::c_uint) = (0, 0);
    // SAFETY: TIOCSPTLCK and TIOCGPTN on a ptmx descriptor, each with a pointer to an int of the
    // size the kernel reads or writes.
    unsafe {
        assert_eq!(
            nix::libc::ioctl(master.as_raw_fd(), nix::libc::TIOCSPTLCK, &mut unlock),
            0
        );
        assert_eq!(
            nix::libc::ioctl(master.as_raw_fd(), nix::libc::TIOCGPTN, &mut number),
            0
        );
    }
    (master, format!("/dev/pts/{number}"))
}

/// A command has terminals of its own: `/dev/pts` in its sandbox is a private instance, where it
/// makes pseudo-terminals (`script`, `tmux`, pty-based tests) and a `tty: true` command's terminal
/// lives; no terminal outside (the host's hold the user's own: reading one steals its input) can be
/// opened, by its path or by its number.
fn terminals_are_the_sandboxs_own(backend: Backend) {
    let Some((ws, m)) = setup_metadata(backend) else {
        return;
    };
    let (_master, slave) = host_pty();
    let mut server = confined_server(backend, ws.path(), &[]);
    let probes = format!(
        "exec 3<>{slave} && echo OPENED; exec 4<{slave} && echo READABLE; \
         ls /dev/pts | grep -vx ptmx | grep . && echo LISTED; \
         python3 -c 'import os, pty; m, s = pty.openpty(); print(\"own\", os.ttyname(s))'; \
         script -qc 'echo via script' /dev/null; echo done # {m}"
    );
    server.call("probe", "bash", bash(&probes, json!({})));
    let printed = server.text("probe");
    assert!(printed.contains("done"), "{printed}");
    assert!(!printed.contains("OPENED"), "{slave} was opened: {printed}");
    assert!(
        !printed.contains("READABLE"),
        "{slave} was opened to read: {printed}"
    );
    assert!(
        !printed.contains("LISTED"),
        "other terminals show: {printed}"
    );
    assert!(printed.contains("own /dev/pts/"), "{printed}");
    assert!(printed.contains("via script"), "{printed}");
    // A `tty: true` command's terminal is one its sandbox shows (bubblewrap binds it on
    // `/dev/console`).
    server.call(
        "tty",
        "bash",
        bash(
            "tty && test -c \"$(tty)\" && echo shown",
            json!({"tty": true}),
        ),
    );
    let tty = server.text("tty");
    assert!(tty.starts_with("/dev/") && tty.contains("shown"), "{tty}");
    server.finish();
    assert_nothing_left(&m);
}

/// A command that takes every terminal of its session's instance (`max=64`) does not stop a
/// `tty: true` call: dsh then gives that one a host terminal, which the command uses unnamed.
/// Another session's terminals are its own instance's, untouched by the hog.
#[test]
fn a_command_holding_every_terminal_does_not_stop_a_tty_call() {
    let Some((ws, m)) = setup_metadata(Backend::Landlock) else {
        return;
    };
    let mut server = confined_server(Backend::Landlock, ws.path(), &[]);
    let hog = format!(
        "python3 -c 'import os, time\nheld = []\ntry:\n    while True: held.append(os.openpty())\nexcept OSError as e: print(\"full %d %d\" % (len(held), e.errno), flush=True)\ntime.sleep(600)' {m}"
    );
    let task = server.start_background("hog", &hog);
    server.call(
        "full",
        "bash_output",
        json!({"task_id": task, "wait": true, "until": "full \\d+ \\d+", "timeout_ms": 60000}),
    );
    let full = server.text("full");
    assert!(full.contains("full 64 28"), "{full}");
    server.call(
        "tty",
        "bash",
        bash("echo ok; test -t 0 && echo terminal", json!({"tty": true})),
    );
    assert_eq!(server.text("tty"), "ok\nterminal\n");
    server.call_as("other", "other", "bash", bash("tty", json!({"tty": true})));
    assert_eq!(
        server.text("other"),
        "/dev/pts/0\n",
        "another session's own first"
    );
    server.call("stop", "bash_kill", json!({"task_id": task}));
    assert!(server.text("stop").contains(&task));
    // Once the hog is gone, its terminals are free again: the next one is the sandbox's own.
    server.call(
        "gone",
        "bash_output",
        json!({"task_id": task, "wait": true, "timeout_ms": 60000}),
    );
    let gone = server.text("gone");
    assert!(gone.contains("[status: killed"), "{gone}");
    server.call("again", "bash", bash("tty", json!({"tty": true})));
    assert!(server.text("again").starts_with("/dev/pts/"));
    server.finish();
    assert_nothing_left(&m);
}

/// Each agent session has terminals and a temp of its own (one namespace per session): a command of
/// another session cannot open, list or read the terminal a `tty: true` task waits on (reading it
/// would take what the agent types there, a password among it), nor see the session's `/tmp` or
/// reach a socket there (a tmux server's is how its panes would be read and typed into), while a
/// later command of the same session still can (`tmux attach`, `screen -r`).
#[test]
fn a_session_cannot_reach_another_sessions_terminal_or_temp() {
    let Some((ws, m)) = setup_metadata(Backend::Landlock) else {
        return;
    };
    let mut server = confined_server(Backend::Landlock, ws.path(), &[]);
    let waits = format!("tty; read -r line; echo \"alice read $line\" # {m}");
    server.call_as("alice", "ask", "bash", bash(&waits, json!({"tty": true})));
    let asked = server.text("ask");
    let path = asked.lines().next().unwrap_or_default().trim().to_owned();
    assert!(path.starts_with("/dev/pts/"), "{asked}");
    assert!(asked.contains("moved to background task bash-1"), "{asked}");
    // A file and a listening socket in alice's /tmp (what a tmux server keeps there).
    let listen = format!(
        "echo secret > /tmp/{m}-note; echo shared > /dev/shm/{m}-shm; python3 -c 'import socket, time\ns = socket.socket(socket.AF_UNIX)\ns.bind(\"/tmp/{m}.sock\")\ns.listen()\nprint(\"listening\", flush=True)\ntime.sleep(600)' # {m}"
    );
    server.call_as(
        "alice",
        "listen",
        "bash",
        bash(&listen, json!({"run_in_background": true})),
    );
    let listener = server
        .text("listen")
        .strip_prefix("started background task ")
        .expect("started")
        .to_owned();
    server.call_as(
        "alice",
        "listening",
        "bash_output",
        json!({"task_id": listener, "until": "listening\n", "timeout_ms": 60000}),
    );
    assert!(server.text("listening").contains("listening"));
    let connect = format!(
        "python3 -c 'import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect(\"/tmp/{m}.sock\")\nprint(\"CONNECTED\")'"
    );
    let probe = format!(
        "exec 3<>{path} && echo OPENED; exec 4<{path} && echo READABLE; \
         ls /dev/pts | grep -vx ptmx | grep . && echo LISTED; \
         cat /tmp/{m}-note && echo NOTE; ls /tmp | grep -F {m} && echo TMP_LISTED; {connect}; \
         cat /dev/shm/{m}-shm && echo SHM; echo done"
    );
    server.call_as("bob", "bob", "bash", bash(&probe, json!({})));
    let bob = server.text("bob");
    assert!(bob.contains("done"), "{bob}");
    assert!(!bob.contains("OPENED"), "bob opened alice's {path}: {bob}");
    assert!(
        !bob.contains("READABLE"),
        "bob can read alice's {path}: {bob}"
    );
    assert!(
        !bob.contains("LISTED"),
        "bob sees alice's terminals or temp: {bob}"
    );
    assert!(
        !bob.contains("NOTE") && !bob.contains("secret"),
        "bob read alice's /tmp: {bob}"
    );
    assert!(
        !bob.contains("CONNECTED"),
        "bob reached alice's socket: {bob}"
    );
    assert!(!bob.contains("SHM"), "bob read alice's /dev/shm: {bob}");
    // Nor is alice's shared memory the host's.
    assert!(std::fs::symlink_metadata(format!("/dev/shm/{m}-shm")).is_err());
    let same =
        format!("exec 3<>{path} && echo OPENED; cat /tmp/{m}-note /dev/shm/{m}-shm; {connect}");
    server.call_as("alice", "same", "bash", bash(&same, json!({})));
    let alice = server.text("same");
    for word in ["OPENED", "secret", "shared", "CONNECTED"] {
        assert!(alice.contains(word), "{word}: {alice}");
    }
    server.call_as("alice", "stop", "bash_kill", json!({"task_id": listener}));
    assert!(server.text("stop").contains(&listener));
    // What alice types reaches her task, whole.
    server.call_as(
        "alice",
        "answer",
        "bash_write",
        json!({"task_id": "bash-1", "input": "hello", "keys": ["Enter"]}),
    );
    let answered = server.text("answer");
    assert!(answered.contains("alice read hello"), "{answered}");
    server.finish();
    assert_nothing_left(&m);
}

/// A workspace below `/tmp` has its mount point in the private temp, which commands write. A
/// command that swaps a parent of that mount point for a link (`/tmp/<dir> → /tmp/<elsewhere>`)
/// must not make dsh, when it builds the namespace again (the workspace made anew at the same path),
/// create directories where the link leads, nor stop the runtime from working.
#[test]
fn a_link_planted_in_the_private_temp_is_not_followed_when_the_namespace_is_rebuilt() {
    let Some((_unused, m)) = setup_metadata(Backend::Landlock) else {
        return;
    };
    let base = tempfile::Builder::new()
        .prefix(&format!("{m}-base"))
        .tempdir_in("/tmp")
        .unwrap();
    let ws = base.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let evil = format!("/tmp/{m}-evil");
    let mut server = confined_server(Backend::Landlock, &ws, &[]);
    let base_path = base.path().display();
    server.call(
        "plant",
        "bash",
        bash(
            &format!("cd / && mv {base_path} {base_path}-moved && ln -s {evil} {base_path} && echo planted"),
            json!({}),
        ),
    );
    assert!(server.text("plant").contains("planted"));
    // The same path, another directory: the namespace is built again at the next call.
    std::fs::remove_dir(&ws).unwrap();
    std::fs::create_dir(&ws).unwrap();
    for round in 0..3 {
        let id = format!("after-{round}");
        server.call(&id, "bash", bash("pwd", json!({})));
        assert_eq!(
            server.text(&id),
            format!("{}\n", ws.display()),
            "round {round}"
        );
    }
    assert!(
        std::fs::symlink_metadata(&evil).is_err(),
        "dsh made {evil} by following the planted link"
    );
    server.finish();
    assert_nothing_left(&m);
}

crate::sandbox_escape::under_each_backend!(
    metadata_outside_the_workspace_is_refused_in_both_modes,
    metadata_inside_the_workspace_still_changes,
    temp_is_private_and_gone_after_shutdown,
    the_spill_directory_is_out_of_reach,
    terminals_are_the_sandboxs_own,
);
