//! The watchdog process of the `dsh` binary: it runs the very file the server runs, it carries no
//! task marker inherited from an outer dsh (so the outer runtime's kill of the inner server leaves
//! it to kill the inner server's tasks), and with `--keep-spill` it does not remove the outputs the
//! operator asked to keep when the server dies.

use crate::jsonl_server;

use std::time::Duration;

use dsh_test_support::procfs::{is_live, state_and_parent};
use dsh_test_support::wait::wait_until;
use jsonl_server::{SOON, Server};

/// The pid of `server`'s watchdog: its child running `__watchdog`.
fn watchdog_of(server: u32) -> i32 {
    let mut found = None;
    let seen = wait_until(SOON, || {
        found = dsh_test_support::procfs::live_with_cmdline("__watchdog")
            .into_iter()
            .find(|pid| state_and_parent(*pid).is_some_and(|(_, ppid)| ppid == server as i32));
        found.is_some()
    });
    assert!(seen, "no watchdog child of {server}");
    found.unwrap()
}

#[test]
fn the_watchdog_runs_the_servers_own_binary_without_an_inherited_task_marker() {
    let Some(server) = Server::start_with_env(
        &["--containment", "subreaper"],
        &[("DSH_TASK", "outer-runtime:7")],
    )
    .map_err(|said| panic!("start: {said}"))
    .ok() else {
        return;
    };
    let pid = server.child.id();
    let watchdog = watchdog_of(pid);
    let environ = std::fs::read(format!("/proc/{watchdog}/environ")).unwrap();
    let marked = environ
        .split(|b| *b == 0)
        .any(|entry| entry.starts_with(b"DSH_TASK="));
    let exe = |p: String| std::fs::read_link(format!("/proc/{p}/exe")).unwrap();
    let same_binary = exe(pid.to_string()) == exe(watchdog.to_string());
    server.finish();
    assert!(
        wait_until(SOON, || !is_live(watchdog)),
        "the watchdog outlived a clean shutdown"
    );
    assert!(!marked, "the watchdog carries an inherited DSH_TASK");
    assert!(same_binary, "the watchdog runs another binary");
}

#[test]
fn a_killed_server_with_keep_spill_keeps_its_spilled_outputs() {
    let mut server = Server::start(&["--keep-spill", "--max-output-bytes", "1000"]).unwrap();
    let watchdog = watchdog_of(server.child.id());
    let spill = server.spill_file();
    assert!(spill.is_file(), "{} missing", spill.display());
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    let watchdog_done = wait_until(Duration::from_secs(30), || !is_live(watchdog));
    let kept = spill.is_file();
    if let Some(dir) = spill.parent() {
        let _ = std::fs::remove_dir_all(dir);
    }
    assert!(watchdog_done, "the watchdog outlived its server");
    assert!(kept, "the watchdog removed the kept spill file");
}
