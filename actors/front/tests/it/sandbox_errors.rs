//! Sandbox failures that say their cause first and the fix second, through the `dsh` binary: a
//! server started in `/` with no `--cwd` (its startup warning, once, and every call's answer), a
//! workspace swapped for a symbolic link, a `--writable-root` that is not usable, and the warning
//! about a dead runtime's cgroup tree that still holds processes, given once per tree. (`dsh run`'s
//! person's hint is `sandbox_cli::read_only_denies_touch_in_the_workspace_with_the_marker`.)

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use dsh_test_support::wait::wait_until;
use serde_json::{Value, json};

use crate::jsonl_server::{SOON, Server, bash, unique_marker};
use crate::sandbox_escape::{Backend, assert_nothing_left, setup};

/// The start of every answer of a server whose workspace is `/`.
const NO_WORKSPACE: &str =
    "no usable workspace: the server runs in /; pass --cwd DIR or let the client offer a root";

#[test]
fn a_server_in_the_root_directory_says_to_pass_cwd_once_at_start_and_on_every_call() {
    if !Backend::Landlock.usable() {
        return;
    }
    let m = unique_marker(11);
    let mut child = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .arg("jsonl")
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut stdin = child.stdin.take().unwrap();
        for id in ["a", "b"] {
            let line = json!({"id": id, "tool": "bash", "arguments": bash(&format!("touch /etc/x-{m}"), json!({}))});
            writeln!(stdin, "{line}").unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    let replies: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    let texts: Vec<&str> = replies
        .iter()
        .filter_map(|reply| reply["text"].as_str())
        .collect();
    assert_eq!(texts.len(), 2, "{replies:?}");
    for text in texts {
        assert!(
            text.starts_with(&format!(
                "Error: {NO_WORKSPACE} (workspace-write in / would let"
            )),
            "{text}"
        );
        assert!(!text.contains("bubblewrap"), "{text}");
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches(NO_WORKSPACE).count(), 1, "{stderr}");
    assert!(!Path::new(&format!("/etc/x-{m}")).exists());
}

pub(crate) fn a_workspace_swapped_for_a_link_says_so(backend: Backend) {
    let Some((ws, m)) = setup(backend) else {
        return;
    };
    let root = ws.path().join("ws");
    let elsewhere = ws.path().join("elsewhere");
    std::fs::create_dir(&root).unwrap();
    std::fs::create_dir(&elsewhere).unwrap();
    let mut server = Server::start(&[
        "--sandbox-backend",
        backend.name(),
        "--cwd",
        root.to_str().unwrap(),
    ])
    .unwrap();
    server.call(
        "before",
        "bash",
        bash(&format!("echo fine # {m}"), json!({})),
    );
    assert_eq!(server.text("before"), "fine\n");
    std::fs::rename(&root, ws.path().join("ws.away")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &root).unwrap();
    server.call(
        "after",
        "bash",
        bash(&format!("touch made # {m}"), json!({})),
    );
    assert_eq!(
        server.text("after"),
        format!(
            "Error: the workspace {} was replaced by a symbolic link (it now resolves to {}), so \
             writes through it are refused; restore the directory, or give a new workspace (--cwd \
             DIR, or the client's root)",
            root.display(),
            elsewhere.display()
        )
    );
    assert!(!elsewhere.join("made").exists());
    server.finish();
    assert_nothing_left(&m);
}

crate::sandbox_escape::under_each_backend!(a_workspace_swapped_for_a_link_says_so);

#[test]
fn a_writable_root_that_cannot_be_granted_is_refused_at_start() {
    let ws = crate::sandbox_escape::workspace();
    let dotted = format!(
        "{}/../{}",
        ws.path().display(),
        ws.path().file_name().unwrap().to_str().unwrap()
    );
    for (root, said) in [
        ("relative/dir".to_owned(), "--writable-root relative/dir: not an absolute path; give the directory's full path".to_owned()),
        ("/no/such/dsh-root".to_owned(), "--writable-root /no/such/dsh-root: no such file or directory; create it first".to_owned()),
        (dotted.clone(), format!("--writable-root {dotted}: not canonical (it resolves to {0}); pass {0}", ws.path().display())),
        ("/".to_owned(), "--writable-root /: would let commands write everywhere; use --sandbox danger-full-access for that".to_owned()),
    ] {
        let out = crate::common::run_dsh(&["run", "--writable-root", &root, "--", "true"]);
        assert_eq!(out.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(&said), "{stderr}");
    }
}

/// A cgroup v2 directory of this test's own, below its own cgroup, or `None` (said why).
fn own_cgroup(name: &str) -> Option<std::path::PathBuf> {
    let facts = dsh_contain::HostFacts::discover();
    if let Err(why) = facts.cgroup_ready() {
        eprintln!("skipped: no cgroup containment here: {why}");
        return None;
    }
    let dir = facts.v2.as_ref()?.dir.as_ref()?.join(name);
    match std::fs::create_dir(&dir) {
        Ok(()) => Some(dir),
        Err(err) => {
            eprintln!("skipped: cannot make {}: {err}", dir.display());
            None
        }
    }
}

#[test]
fn a_dead_runtimes_busy_cgroup_tree_is_reported_once() {
    let m = unique_marker(12);
    let Some(parent) = own_cgroup(&format!("dsh-test-{}", m.replace('.', "-"))) else {
        return;
    };
    // A tree named as a runtime that is gone would name it, holding a process.
    let mut gone = Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let tree = parent.join(format!("dsh-{dead}-{}", dsh_contain::nonce()));
    std::fs::create_dir_all(tree.join("l0")).unwrap();
    let mut sleeper = Command::new("sleep").arg(&m).spawn().unwrap();
    std::fs::write(tree.join("l0/cgroup.procs"), sleeper.id().to_string()).unwrap();
    // Two runtimes started in `parent`, one after the other: the first warns, the second does not.
    let start_in_parent = |_: usize| {
        Command::new("bash")
            .args([
                "-c",
                &format!(
                    "echo $$ > {}/cgroup.procs && exec \"$0\" run --containment cgroup -- true",
                    parent.display()
                ),
                env!("CARGO_BIN_EXE_dsh"),
            ])
            .output()
            .unwrap()
    };
    let said: Vec<String> = (0..2)
        .map(start_in_parent)
        .map(|out| {
            assert_eq!(out.status.code(), Some(0));
            String::from_utf8_lossy(&out.stderr).into_owned()
        })
        .collect();
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    let removed = wait_until(SOON, || {
        let _ = std::fs::remove_dir(tree.join("l0"));
        let _ = std::fs::remove_dir(&tree);
        std::fs::remove_dir(&parent).is_ok()
    });
    let warning = "a dead runtime's cgroup tree still holds processes; left in place";
    assert_eq!(said[0].matches(warning).count(), 1, "{said:?}");
    assert!(!said[1].contains(warning), "{said:?}");
    assert!(removed, "{} was left", parent.display());
    assert_nothing_left(&m);
}
