//! Test helper for dsh-contain (not part of dsh): plays the watchdog, or a "runtime" that the
//! watchdog tests kill with SIGKILL. Built only with the `bench-internals` feature, which this
//! crate's own tests turn on (a dev-dependency on itself), so a build of the product never has it.
//!
//! - `dsh-contain-helper __watchdog [tag]`: [`watchdog_main`] on stdin (the tag only makes the
//!   process findable by its command line);
//! - `dsh-contain-helper runtime cgroup|subreaper <sleep-seconds> <spill-dir> <goodbye:yes|no>`:
//!   starts a watchdog, registers the spill directory and either a cgroup tree with one leaf or a
//!   subreaper marker, starts escapees running `sleep <sleep-seconds>`, prints `ready <watchdog-pid>
//!   <cgroup-or-dash> [v1 parents…]` and waits to be killed (or, with goodbye `yes`, cleans up itself and exits).

use std::io::Write;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::path::Path;

use dsh_contain::watchdog::{Registration, Watchdog, watchdog_main};
use dsh_contain::{CgroupTree, HostFacts, Limits, Program, Stdio, subreaper};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("__watchdog") => {
            // SAFETY: fd 0 is the pipe the runtime handed over; nothing else in this process uses it.
            watchdog_main(unsafe { OwnedFd::from_raw_fd(0) })
        }
        Some("runtime") if args.len() == 6 => {
            runtime(&args[2], &args[3], &args[4], &args[5] == "yes")
        }
        _ => {
            eprintln!("usage: dsh-contain-helper __watchdog | runtime MODE SECONDS SPILL GOODBYE");
            std::process::exit(2)
        }
    }
}

fn fail(what: &str, err: impl std::fmt::Display) -> ! {
    eprintln!("helper: {what}: {err}");
    std::process::exit(1)
}

fn runtime(mode: &str, seconds: &str, spill: &str, goodbye: bool) {
    let exe = std::env::current_exe().unwrap_or_else(|e| fail("current_exe", e));
    let tag = format!("wd{seconds}");
    let mut watchdog =
        Watchdog::start(&exe, ["__watchdog", tag.as_str()]).unwrap_or_else(|e| fail("watchdog", e));
    std::fs::create_dir_all(spill).unwrap_or_else(|e| fail("spill", e));
    std::fs::write(Path::new(spill).join("out"), b"spilled").unwrap_or_else(|e| fail("spill", e));
    watchdog
        .register(Registration::Spill(Path::new(spill)))
        .unwrap_or_else(|e| fail("register", e));
    let script = format!(
        "setsid sleep {seconds} & nohup sleep {seconds} >/dev/null 2>&1 & (sleep {seconds} &); \
         (trap '' TERM; exec sleep {seconds}) & exec sleep {seconds}"
    );
    let null: OwnedFd = std::fs::File::options()
        .read(true)
        .write(true)
        .open("/dev/null")
        .unwrap_or_else(|e| fail("/dev/null", e))
        .into();
    let stdio = Stdio {
        stdin: null.as_fd(),
        stdout: null.as_fd(),
        stderr: null.as_fd(),
    };
    let mut env = vec![("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned())];
    let mut tree = None;
    let mut leaf = None;
    let cgroup_path;
    let nonce = dsh_contain::nonce();
    if mode == "cgroup" {
        let facts = HostFacts::discover();
        // A pids limit where the host has one, so v1 parents are registered and removed too.
        let limits = Limits {
            max_pids: facts.pids_limit().ok().map(|_| 100),
            max_memory: None,
        };
        let t = CgroupTree::create(&facts, limits).unwrap_or_else(|e| fail("tree", e));
        watchdog
            .register(Registration::Cgroup(t.path()))
            .unwrap_or_else(|e| fail("register", e));
        for v1 in t.v1_paths() {
            watchdog
                .register(Registration::CgroupV1(&v1))
                .unwrap_or_else(|e| fail("register", e));
        }
        leaf = Some(
            t.create_leaf("p0-0", limits)
                .unwrap_or_else(|e| fail("leaf", e)),
        );
        cgroup_path = std::iter::once(t.path().to_path_buf())
            .chain(t.v1_paths())
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" ");
        tree = Some(t);
    } else {
        subreaper::become_subreaper().unwrap_or_else(|e| fail("subreaper", e));
        watchdog
            .register(Registration::Runtime(&nonce))
            .unwrap_or_else(|e| fail("register", e));
        let marker = subreaper::Marker::task(&nonce, "1");
        let (k, v) = marker
            .env_entry()
            .unwrap_or_else(|| fail("marker", "no entry"));
        env.push((k.to_owned(), v.to_owned()));
        cgroup_path = "-".to_owned();
    }
    let program = Program::new(Path::new("/bin/bash"), ["bash", "-c", &script], env, None)
        .unwrap_or_else(|e| fail("program", e));
    let child = dsh_contain::spawn(&program, stdio, leaf.as_ref().map(|l| l.target()))
        .unwrap_or_else(|e| fail("spawn", e));
    if mode != "cgroup" {
        watchdog
            .register(Registration::Group(child.pid))
            .unwrap_or_else(|e| fail("register", e));
    }
    println!("ready {} {cgroup_path}", watchdog.pid());
    let _ = std::io::stdout().flush();
    if goodbye {
        // A clean shutdown: this process cleans up, then tells the watchdog to stand down.
        let _ = std::io::stdin().read_line(&mut String::new());
        if let Some(mut t) = tree {
            t.destroy().unwrap_or_else(|e| fail("destroy", e));
        } else {
            subreaper::kill_marked(&subreaper::Marker::runtime(&nonce), nix::libc::SIGKILL);
        }
        let _ = std::fs::remove_dir_all(spill);
        watchdog.goodbye().unwrap_or_else(|e| fail("goodbye", e));
        return;
    }
    loop {
        std::thread::park();
    }
}
