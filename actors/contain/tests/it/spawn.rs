//! The spawn primitive: session, stdio, descriptors, exec errors, and cgroup placement, for every
//! method.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use crate::common::*;
use dsh_contain::{Limits, Method, Program, SpawnError, spawn_with};

const METHODS: [Method; 3] = [Method::SpawnThenJoin, Method::Clone3Fork, Method::Clone3Vm];

#[test]
fn runs_in_a_new_session_with_stdout_and_exit_status() {
    for method in METHODS {
        let (out, status) = run_capture(method, "echo hi; ps -o sid= -o pgid= -p $$; exit 3", None);
        let mut lines = out.lines();
        assert_eq!(lines.next(), Some("hi"), "{method:?}");
        let ids: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
        assert_eq!(ids.len(), 2, "{method:?}: {out}");
        assert_eq!(ids[0], ids[1], "{method:?}: session = group");
        assert!(
            libc_wifexited(status) && libc_exitstatus(status) == 3,
            "{method:?}"
        );
    }
}

fn libc_wifexited(status: i32) -> bool {
    nix::libc::WIFEXITED(status)
}

fn libc_exitstatus(status: i32) -> i32 {
    nix::libc::WEXITSTATUS(status)
}

#[test]
fn only_descriptors_0_to_2_are_inherited() {
    // A descriptor without CLOEXEC, as a careless host might hold.
    // SAFETY: F_DUPFD (no CLOEXEC) of our stdin-independent /dev/null; the result is owned below.
    let leaky = unsafe {
        OwnedFd::from_raw_fd(nix::libc::fcntl(
            dev_null().as_raw_fd(),
            nix::libc::F_DUPFD,
            10,
        ))
    };
    assert!(leaky.as_raw_fd() >= 10);
    for method in METHODS {
        // `ls` runs as bash's child (the `exit` stops bash from exec'ing it), so it lists bash's fds.
        let (out, _) = run_capture(method, "ls /proc/$$/fd; exit 0", None);
        let fds: Vec<&str> = out.lines().collect();
        assert_eq!(fds, ["0", "1", "2"], "{method:?}");
    }
}

#[test]
fn signal_state_is_clean() {
    // Ignore SIGTERM and block SIGINT in this thread: the child must have neither.
    // SAFETY: changing this test thread's own signal state.
    unsafe {
        nix::libc::signal(nix::libc::SIGTERM, nix::libc::SIG_IGN);
    }
    for method in METHODS {
        let (out, _) = run_capture(method, "grep -E '^(SigBlk|SigIgn)' /proc/$$/status", None);
        for line in out.lines() {
            let mask = line.split_whitespace().nth(1).unwrap_or("");
            let value = u64::from_str_radix(mask, 16).unwrap_or(u64::MAX);
            // bash itself ignores nothing relevant at start; SIGTERM is bit 14.
            assert_eq!(value & (1 << 14), 0, "{method:?}: {line}");
        }
    }
    // SAFETY: restoring the default.
    unsafe {
        nix::libc::signal(nix::libc::SIGTERM, nix::libc::SIG_DFL);
    }
}

fn spawn_error(method: Method, program: &Program) -> SpawnError {
    let null = dev_null();
    let stdio = null_stdio(&null);
    match spawn_with(method, program, stdio, None) {
        Ok(child) => panic!("{method:?}: spawned {}", reap(&child)),
        Err(e) => e,
    }
}

#[test]
fn exec_errors_carry_the_errno() {
    let dir = std::env::temp_dir().join(format!("dsh-contain-noexec-{}", dsh_contain::nonce()));
    std::fs::write(&dir, b"not a program").unwrap();
    let huge = "x".repeat(200 * 1024);
    for method in METHODS {
        let missing =
            Program::new(Path::new("/nonexistent/prog"), ["prog"], [("A", "b")], None).unwrap();
        assert_eq!(
            spawn_error(method, &missing).raw_os_error(),
            Some(nix::libc::ENOENT),
            "{method:?}"
        );
        let noexec = Program::new(&dir, ["prog"], [("A", "b")], None).unwrap();
        assert_eq!(
            spawn_error(method, &noexec).raw_os_error(),
            Some(nix::libc::EACCES),
            "{method:?}"
        );
        let big =
            Program::new(Path::new("/bin/true"), ["true", &huge], [("A", "b")], None).unwrap();
        assert_eq!(
            spawn_error(method, &big).raw_os_error(),
            Some(nix::libc::E2BIG),
            "{method:?}"
        );
        let nocwd = Program::new(
            Path::new("/bin/true"),
            ["true"],
            [("A", "b")],
            Some(Path::new("/nonexistent")),
        )
        .unwrap();
        let err = spawn_error(method, &nocwd);
        assert_eq!(
            err.raw_os_error(),
            Some(nix::libc::ENOENT),
            "{method:?}: {err}"
        );
    }
    std::fs::remove_file(&dir).unwrap();
}

#[test]
fn nul_bytes_are_rejected_before_spawning() {
    let bad_arg = Program::new(Path::new("/bin/true"), ["a\0b"], [("A", "b")], None);
    assert!(matches!(bad_arg, Err(SpawnError::InvalidString)));
    let bad_env = Program::new(Path::new("/bin/true"), ["true"], [("A", "b\0c")], None);
    assert!(matches!(bad_env, Err(SpawnError::InvalidString)));
    let bad_key = Program::new(Path::new("/bin/true"), ["true"], [("A=B", "c")], None);
    assert!(matches!(bad_key, Err(SpawnError::InvalidString)));
}

#[test]
fn the_child_starts_inside_its_leaves() {
    let Some(facts) = cgroup_host() else { return };
    let limits = Limits {
        max_pids: facts.pids_limit().ok().map(|_| 100),
        max_memory: facts.memory_limit().ok().map(|_| 1 << 30),
    };
    let tree = dsh_contain::CgroupTree::create(&facts, limits).expect("tree");
    // SpawnThenJoin is left out: it is racy by design (the join follows the exec).
    for (i, method) in [Method::Clone3Fork, Method::Clone3Vm].iter().enumerate() {
        let leaf = tree.create_leaf(&format!("p{i}-0"), limits).expect("leaf");
        let (out, status) = run_capture(*method, "cat /proc/$$/cgroup", Some(leaf.target()));
        assert!(libc_wifexited(status), "{method:?}");
        let leaf_name = format!("/p{i}-0");
        let v2 = out.lines().find(|l| l.starts_with("0::")).unwrap_or("");
        assert!(v2.ends_with(&leaf_name), "{method:?}: {out}");
        if limits.max_pids.is_some() && facts.pids_limit() == Ok(dsh_contain::LimitSource::V1) {
            let pids = out.lines().find(|l| l.contains(":pids:")).unwrap_or("");
            assert!(pids.ends_with(&leaf_name), "{method:?}: {out}");
        }
        if limits.max_memory.is_some() && facts.memory_limit() == Ok(dsh_contain::LimitSource::V1) {
            let memory = out.lines().find(|l| l.contains(":memory:")).unwrap_or("");
            assert!(memory.ends_with(&leaf_name), "{method:?}: {out}");
        }
        leaf.remove().expect("remove leaf");
    }
    let path = tree.path().to_path_buf();
    drop(tree);
    assert!(!path.exists());
}
