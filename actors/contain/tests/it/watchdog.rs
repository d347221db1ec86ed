//! The watchdog: a "runtime" (the helper binary) starts escapees and a watchdog, then is killed
//! with SIGKILL; the watchdog must kill every escapee, remove the spill directory and the cgroup
//! parent, and exit. With a goodbye it must exit without acting.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::*;

struct Started {
    runtime: std::process::Child,
    marker: String,
    spill: PathBuf,
    cgroups: Vec<PathBuf>,
}

fn start_runtime(mode: &str, goodbye: bool) -> Started {
    let marker = sleep_marker();
    let spill = std::env::temp_dir().join(format!("dsh-proc-contain-test-{marker}"));
    let mut runtime = Command::new(env!("CARGO_BIN_EXE_dsh-contain-helper"))
        .args(["runtime", mode, &marker])
        .arg(&spill)
        .arg(if goodbye { "yes" } else { "no" })
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("helper");
    let mut line = String::new();
    BufReader::new(runtime.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("ready line");
    let fields: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(fields.first(), Some(&"ready"), "helper said {line:?}");
    let cgroups: Vec<PathBuf> = fields[2..]
        .iter()
        .filter(|c| **c != "-")
        .map(PathBuf::from)
        .collect();
    // Five sleeps: setsid, nohup, double fork, TERM-trapping, and the shell exec'd into one. The
    // NUL keeps the helper (whose arguments hold the marker) out of the count.
    let sleeps = format!("sleep\0{marker}");
    assert!(
        wait_until(Duration::from_secs(10), || with_marker(&sleeps).len() == 5),
        "escapees: {:?}",
        with_marker(&sleeps)
    );
    assert_eq!(
        with_marker(&format!("wd{marker}")).len(),
        1,
        "watchdog running"
    );
    assert!(spill.exists());
    Started {
        runtime,
        marker,
        spill,
        cgroups,
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        // On a failed assertion: SIGKILL the runtime so its watchdog cleans up.
        let _ = self.runtime.kill();
        let _ = self.runtime.wait();
    }
}

fn assert_all_cleaned(started: &Started) {
    assert_none_left(&started.marker);
    assert!(
        wait_until(Duration::from_secs(10), || !started.spill.exists()),
        "spill dir left"
    );
    for cgroup in &started.cgroups {
        assert!(
            wait_until(Duration::from_secs(10), || !cgroup.exists()),
            "cgroup {} left",
            cgroup.display()
        );
    }
    assert_none_left(&format!("wd{}", started.marker));
}

fn killed_runtime(mode: &str) {
    let mut started = start_runtime(mode, false);
    if mode == "cgroup" {
        assert!(started.cgroups.iter().all(|c| c.exists()) && !started.cgroups.is_empty());
    }
    started.runtime.kill().expect("SIGKILL the runtime");
    started.runtime.wait().expect("reap the runtime");
    let status = started.runtime.wait().expect("runtime status");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );
    assert_all_cleaned(&started);
}

#[test]
fn a_killed_runtime_in_cgroup_mode_leaves_nothing() {
    if cgroup_host().is_none() {
        return;
    }
    killed_runtime("cgroup");
}

#[test]
fn a_killed_runtime_in_subreaper_mode_leaves_nothing() {
    killed_runtime("subreaper");
}

#[test]
fn goodbye_makes_the_watchdog_exit_quietly() {
    let mut started = start_runtime("subreaper", true);
    let mut stdin = started.runtime.stdin.take().expect("stdin");
    stdin
        .write_all(b"\n")
        .expect("tell the runtime to shut down");
    let status = started.runtime.wait().expect("runtime exit");
    assert!(status.success(), "{status}");
    // The runtime cleaned up itself and reaped the watchdog.
    assert!(with_marker(&format!("wd{}", started.marker)).is_empty());
    assert_all_cleaned(&started);
}
