//! The confined spawning thread (`dsh_contain::confined_thread`): what a command spawned from it
//! starts with, what the calling thread keeps, and the thread's end.

use std::io::Read;
use std::os::fd::AsFd;
use std::path::PathBuf;

use dsh_contain::confine::Confinement;
use dsh_contain::confined_thread::ConfinedThread;
use dsh_contain::landlock::{Ruleset, RulesetSpec};
use dsh_contain::seccomp::{Filter, Sockets};
use dsh_contain::spawn::pipe_above_stdio;
use dsh_contain::{Program, Stdio, spawn};

/// `/proc/self/status` as a program spawned under `confinement` prints it.
fn status_of_a_command(confinement: &Confinement) -> String {
    let program = Program::new(
        &PathBuf::from("/bin/cat"),
        ["cat", "/proc/self/status"],
        [("PATH", "/usr/bin:/bin")],
        Some(&PathBuf::from("/")),
    )
    .unwrap()
    .with_confinement(Some(confinement.clone()));
    let (read, write) = pipe_above_stdio().unwrap();
    let null = std::fs::File::open("/dev/null").unwrap();
    let stdio = Stdio {
        stdin: null.as_fd(),
        stdout: write.as_fd(),
        stderr: write.as_fd(),
    };
    let child = spawn(&program, stdio, None).unwrap();
    drop(write);
    let mut printed = String::new();
    std::fs::File::from(read)
        .read_to_string(&mut printed)
        .unwrap();
    nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(child.pid), None).unwrap();
    printed
}

fn field<'a>(status: &'a str, name: &str) -> &'a str {
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in {status}"))
        .trim()
}

/// This process's threads with the spawning thread's name (`comm` keeps 15 bytes).
fn spawning_threads() -> usize {
    dsh_test_support::procfs::threads_named("self", "dsh-confined-sp").len()
}

/// A command spawned through the thread starts filtered, with no capability and no new
/// privileges, while the calling thread keeps its own; a second command reuses the thread; a
/// confinement the thread was not started for (another filter, one handle) is spawned the old way —
/// the child confines itself, just as tightly — and the thread ends with the last handle.
#[test]
fn commands_start_confined_from_the_thread_which_ends_with_its_last_handle() {
    let spec = RulesetSpec {
        read_only: vec![PathBuf::from("/")],
        writable: vec![PathBuf::from("/dev/null")],
        deny_tcp: false,
        scope_signals: true,
        scope_abstract_sockets: false,
    };
    let Ok(landlock) = Ruleset::create(&spec) else {
        eprintln!("skipped: no Landlock here");
        return;
    };
    let thread = ConfinedThread::new();
    let confinement = |sockets| Confinement::InSpawn {
        landlock: landlock.clone(),
        filter: Filter::build(sockets).unwrap(),
        mount_ns: None,
        netns: None,
        gate: None,
        spawner: thread.clone(),
    };
    let first = confinement(Sockets::Any);
    let before = spawning_threads();
    let own_before = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    for _ in 0..2 {
        let status = status_of_a_command(&first);
        assert_eq!(
            spawning_threads(),
            before + 1,
            "one thread for both commands"
        );
        assert_eq!(field(&status, "Seccomp"), "2", "{status}");
        assert_eq!(field(&status, "NoNewPrivs"), "1", "{status}");
        assert_eq!(field(&status, "CapEff"), "0000000000000000", "{status}");
        assert_eq!(field(&status, "CapBnd"), "0000000000000000", "{status}");
    }
    let own = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    for unchanged in ["Seccomp", "NoNewPrivs", "CapEff", "CapBnd"] {
        assert_eq!(
            field(&own, unchanged),
            field(&own_before, unchanged),
            "the caller's {unchanged} changed"
        );
    }
    let other = confinement(Sockets::TcpOnly);
    let status = status_of_a_command(&other);
    assert_eq!(
        spawning_threads(),
        before + 1,
        "a thread for another filter"
    );
    assert_eq!(field(&status, "Seccomp"), "2", "{status}");
    assert_eq!(field(&status, "CapEff"), "0000000000000000", "{status}");
    drop((first, other, thread));
    assert!(
        dsh_test_support::wait::wait_until(std::time::Duration::from_secs(30), || {
            spawning_threads() == before
                && dsh_test_support::procfs::threads_named("self", "dsh-spawner-end").is_empty()
        }),
        "the thread outlived its handles"
    );
}
