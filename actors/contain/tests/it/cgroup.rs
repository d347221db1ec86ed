//! Cgroup mode with real processes: every escape route dies on `cgroup.kill`, `populated 0` then
//! fires, and v1/v2 limits hold. Each test skips with a printed reason where the host lacks the
//! feature, and removes the cgroups it created.

use std::time::Duration;

use crate::common::*;
use dsh_contain::{CgroupTree, Leaf, Limits, Released, Spent};
use dsh_test_support::own_process;
use dsh_test_support::procfs::open_fds;

#[tokio::test]
async fn every_escapee_dies_on_cgroup_kill_and_the_leaf_empties() {
    let Some(facts) = cgroup_host() else { return };
    let mut tree = CgroupTree::create(&facts, Limits::default()).expect("tree");
    let leaf = tree.create_leaf("p0-0", Limits::default()).expect("leaf");
    let m = sleep_marker();
    let child = spawn_script(&escapees_script(&m), &[], Some(leaf.target()));
    reap(&child);
    assert!(
        wait_until(Duration::from_secs(10), || with_marker(&m).len()
            == ESCAPEES),
        "escapees started: {:?}",
        with_marker(&m)
    );
    assert!(leaf.is_populated().expect("events"));
    // The shell has exited, so only the escapees keep the leaf populated.
    leaf.kill().expect("kill");
    tokio::time::timeout(Duration::from_secs(30), leaf.wait_empty())
        .await
        .expect("populated 0 within 30 s")
        .expect("wait_empty");
    assert!(with_marker(&m).is_empty(), "left: {:?}", with_marker(&m));
    let path = leaf.path().to_path_buf();
    leaf.remove().expect("remove");
    assert!(!path.exists());
    tree.destroy().expect("destroy");
    assert!(!tree.path().exists());
    assert_none_left(&m);
}

#[test]
fn destroying_the_tree_kills_every_leaf() {
    let Some(facts) = cgroup_host() else { return };
    let mut tree = CgroupTree::create(&facts, Limits::default()).expect("tree");
    let m = sleep_marker();
    let mut children = Vec::new();
    for i in 0..3 {
        let leaf = tree
            .create_leaf(&format!("p{i}-0"), Limits::default())
            .expect("leaf");
        children.push(spawn_script(
            &format!("trap '' TERM; sleep {m} & sleep {m}; :"),
            &[],
            Some(leaf.target()),
        ));
        // The leaf handle is dropped; the tree still removes its directory.
    }
    // Three shells (the script is in their command line) and six sleeps.
    assert!(wait_until(Duration::from_secs(10), || with_marker(&m)
        .len()
        == 9));
    tree.destroy().expect("destroy");
    for child in &children {
        assert!(nix::libc::WIFSIGNALED(reap(child)));
    }
    assert!(!tree.path().exists());
    assert_none_left(&m);
}

/// A tree and one leaf limited to `max_pids` processes, or `None` (after saying why) where the host
/// has no cgroups or no pids limit.
fn pids_limited(max_pids: u64) -> Option<(CgroupTree, Leaf)> {
    let facts = cgroup_host()?;
    if let Err(why) = facts.pids_limit() {
        eprintln!("SKIP: no pids limit here: {why}");
        return None;
    }
    let limits = Limits {
        max_pids: Some(max_pids),
        max_memory: None,
    };
    let tree = CgroupTree::create(&facts, limits).expect("tree");
    let leaf = tree.create_leaf("p0-0", limits).expect("leaf");
    Some((tree, leaf))
}

#[test]
fn pids_max_stops_a_fork_loop() {
    let Some((tree, leaf)) = pids_limited(40) else {
        return;
    };
    let m = sleep_marker();
    // 100 forks; each child sleeps. Perl reports the first failed fork instead of retrying as bash
    // does. The marker is perl's argument, so the children carry it in their command line too.
    let script = format!(
        "perl -e 'my $n = 0; for (1..100) {{ my $p = fork(); if (!defined $p) {{ print \"fork failed: $!\\n\"; last }} \
         if ($p == 0) {{ sleep 300; exit 0 }} $n++ }} print \"forked $n\\n\"; exit 0' {m} > {out}",
        out = std::env::temp_dir()
            .join(format!("dsh-contain-pids-{m}"))
            .display()
    );
    let child = spawn_script(&script, &[], Some(leaf.target()));
    reap(&child);
    let out_path = std::env::temp_dir().join(format!("dsh-contain-pids-{m}"));
    let out = std::fs::read_to_string(&out_path).unwrap_or_default();
    let _ = std::fs::remove_file(&out_path);
    leaf.kill().expect("kill");
    assert!(out.contains("fork failed"), "output: {out}");
    let forked: usize = out
        .lines()
        .find_map(|l| l.strip_prefix("forked "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(usize::MAX);
    assert!(forked < 40, "forked {forked}");
    assert_none_left(&m);
    drop(leaf);
    drop(tree);
}

/// 64 MiB of memory, no pids limit.
const MEMORY_64_MIB: Limits = Limits {
    max_pids: None,
    max_memory: Some(64 << 20),
};

/// A tree with `limits`, or `None` (after saying why) where the host has no cgroups or no memory
/// limit.
fn memory_limited_tree(limits: Limits) -> Option<CgroupTree> {
    let facts = cgroup_host()?;
    if let Err(why) = facts.memory_limit() {
        eprintln!("SKIP: no memory limit here: {why}");
        return None;
    }
    Some(CgroupTree::create(&facts, limits).expect("tree"))
}

#[tokio::test]
async fn a_memory_limit_oom_kills_and_is_detected() {
    let limits = MEMORY_64_MIB;
    let Some(tree) = memory_limited_tree(limits) else {
        return;
    };
    let leaf = tree.create_leaf("p0-0", limits).expect("leaf");
    let m = sleep_marker();
    let child = spawn_script(
        &format!("perl -e 'my $x = \"a\" x (300 * 1024 * 1024); sleep 1' {m}"),
        &[],
        Some(leaf.target()),
    );
    let status = reap(&child);
    assert!(
        nix::libc::WIFSIGNALED(status) && nix::libc::WTERMSIG(status) == nix::libc::SIGKILL,
        "status {status:#x}"
    );
    tokio::time::timeout(Duration::from_secs(30), leaf.wait_empty())
        .await
        .expect("populated 0")
        .expect("wait_empty");
    let kills = leaf
        .oom_kills()
        .expect("read oom")
        .expect("memory limit on");
    assert!(kills >= 1, "oom_kill {kills}");
    assert_none_left(&m);
    leaf.remove().expect("remove");
}

#[tokio::test]
async fn an_oom_killed_leaf_is_spent_and_its_successor_counts_from_zero() {
    let limits = MEMORY_64_MIB;
    let Some(tree) = memory_limited_tree(limits) else {
        return;
    };
    let pool = dsh_contain::LeafPool::new(2);
    let m = sleep_marker();
    let leaf = pool.acquire(&tree, limits).expect("leaf");
    let first = leaf.path().to_path_buf();
    let child = spawn_script(
        &format!("perl -e 'my $x = \"a\" x (300 * 1024 * 1024)' {m}"),
        &[],
        Some(leaf.target()),
    );
    reap(&child);
    leaf.wait_empty().await.expect("empty");
    assert!(leaf.oom_kills().expect("oom").unwrap_or(0) >= 1);
    assert_eq!(leaf.check_reusable(), Err(Spent::OomKilled));
    assert_eq!(
        pool.release(leaf).expect("release"),
        Released::Spent(Spent::OomKilled)
    );
    assert_eq!(pool.idle_count(), 0);
    assert!(!first.exists(), "a spent leaf is removed");
    let leaf = pool.acquire(&tree, limits).expect("fresh leaf");
    assert_ne!(leaf.path(), first, "an OOM-killed leaf is never reused");
    assert_eq!(leaf.oom_kills().expect("oom"), Some(0));
    let child = spawn_script("exit 0", &[], Some(leaf.target()));
    assert_eq!(nix::libc::WEXITSTATUS(reap(&child)), 0);
    leaf.wait_empty().await.expect("empty");
    assert_eq!(
        pool.release(leaf).expect("release"),
        Released::Parked,
        "a leaf whose command ended by itself is recycled"
    );
    pool.clear().expect("clear");
    // A populated leaf is refused; the tree still kills and removes it.
    let busy = pool.acquire(&tree, Limits::default()).expect("leaf");
    let sleeper = spawn_script(&format!("exec sleep {m}"), &[], Some(busy.target()));
    assert_eq!(busy.check_reusable(), Err(Spent::Populated));
    assert!(pool.release(busy).is_err());
    assert_eq!(pool.idle_count(), 0);
    drop(tree);
    assert!(nix::libc::WIFSIGNALED(reap(&sleeper)));
    assert_none_left(&m);
}

/// The kernel behaviour the pool guards against (issue 19): a process created into a cgroup that
/// was ever written `cgroup.kill` is SIGKILLed at birth. Twenty rounds of run, kill, release, and
/// every command after a kill still runs to its own exit, in a leaf that was never killed.
#[test]
fn only_the_first_parked_leaves_keep_their_descriptors() {
    // Counts this process's descriptors: it needs one to itself.
    own_process!(only_the_first_parked_leaves_keep_their_descriptors);
    let Some(facts) = cgroup_host() else { return };
    let tree = CgroupTree::create(&facts, Limits::default()).expect("tree");
    let pool = dsh_contain::LeafPool::new(64);
    let warm = dsh_contain::pool::WARM_LEAVES;
    let before = open_fds("self");
    let leaves: Vec<Leaf> = (0..warm + 4)
        .map(|_| pool.acquire(&tree, Limits::default()).expect("leaf"))
        .collect();
    let paths: Vec<_> = leaves.iter().map(|l| l.path().to_path_buf()).collect();
    for leaf in leaves {
        assert_eq!(pool.release(leaf).expect("release"), Released::Parked);
    }
    assert_eq!(pool.idle_count(), warm + 4);
    // Each warm leaf keeps its directory and its `cgroup.events`; the four cold ones keep none.
    assert_eq!(
        open_fds("self"),
        before + 2 * warm,
        "descriptors of parked leaves"
    );
    // A warm leaf is issued first, and issuing it opens nothing.
    let leaf = pool.acquire(&tree, Limits::default()).expect("leaf");
    assert_eq!(open_fds("self"), before + 2 * warm);
    assert_eq!(pool.release(leaf).expect("release"), Released::Parked);
    pool.clear().expect("clear");
    assert_eq!(
        open_fds("self"),
        before,
        "cleared leaves keep no descriptor"
    );
    assert!(
        paths.iter().all(|p| !p.exists()),
        "cleared leaves are removed"
    );
}

#[tokio::test]
async fn a_killed_leaf_is_never_issued_again() {
    let Some(facts) = cgroup_host() else { return };
    let tree = CgroupTree::create(&facts, Limits::default()).expect("tree");
    let pool = dsh_contain::LeafPool::new(4);
    let m = sleep_marker();
    let mut killed = Vec::new();
    for round in 0..20 {
        let leaf = pool.acquire(&tree, Limits::default()).expect("leaf");
        assert!(
            !killed.contains(&leaf.path().to_path_buf()),
            "round {round}: a killed leaf was issued again"
        );
        assert_eq!(leaf.check_reusable(), Ok(()));
        let child = spawn_script("exit 3", &[], Some(leaf.target()));
        assert_eq!(
            reap(&child),
            3 << 8,
            "round {round}: a command in an issued leaf ran to its own exit"
        );
        leaf.wait_empty().await.expect("empty");
        // The same leaf, recycled, now holds a sleeper that is killed.
        assert_eq!(pool.release(leaf).expect("release"), Released::Parked);
        let leaf = pool.acquire(&tree, Limits::default()).expect("leaf");
        let sleeper = spawn_script(&format!("exec sleep {m}"), &[], Some(leaf.target()));
        leaf.kill().expect("kill");
        assert!(nix::libc::WIFSIGNALED(reap(&sleeper)));
        leaf.wait_empty().await.expect("empty");
        assert_eq!(leaf.check_reusable(), Err(Spent::Killed));
        killed.push(leaf.path().to_path_buf());
        assert_eq!(
            pool.release(leaf).expect("release"),
            Released::Spent(Spent::Killed)
        );
        assert!(!killed[round].exists(), "a spent leaf is removed");
    }
    // A kill of the whole tree spends the parked leaves too: the pool recycles nothing after it.
    let leaf = pool.acquire(&tree, Limits::default()).expect("leaf");
    let parked = leaf.path().to_path_buf();
    assert_eq!(pool.release(leaf).expect("release"), Released::Parked);
    pool.retire().expect("retire");
    assert!(!parked.exists());
    let leaf = pool.acquire(&tree, Limits::default()).expect("leaf");
    let child = spawn_script("exit 0", &[], Some(leaf.target()));
    assert_eq!(reap(&child), 0);
    leaf.wait_empty().await.expect("empty");
    assert_eq!(pool.release(leaf).expect("release"), Released::Removed);
    assert_eq!(pool.idle_count(), 0);
    drop(tree);
    assert_none_left(&m);
}

#[tokio::test]
async fn two_hundred_sleeps_die_together() {
    let Some(facts) = cgroup_host() else { return };
    let tree = CgroupTree::create(&facts, Limits::default()).expect("tree");
    let leaf = tree.create_leaf("p0-0", Limits::default()).expect("leaf");
    let m = sleep_marker();
    let sleeps = format!("sleep\0{m}");
    let child = spawn_script(
        &format!("for i in $(seq 200); do sleep {m} & done; exec sleep {m}"),
        &[],
        Some(leaf.target()),
    );
    assert!(
        wait_until(Duration::from_secs(30), || with_marker(&sleeps).len()
            == 201),
        "started {}",
        with_marker(&sleeps).len()
    );
    leaf.kill().expect("kill");
    tokio::time::timeout(Duration::from_secs(30), leaf.wait_empty())
        .await
        .expect("populated 0")
        .expect("wait_empty");
    assert!(nix::libc::WIFSIGNALED(reap(&child)));
    assert!(with_marker(&m).is_empty());
    leaf.remove().expect("remove");
    drop(tree);
}

#[test]
fn a_fork_in_a_full_pids_leaf_fails() {
    let Some((_tree, leaf)) = pids_limited(1) else {
        return;
    };
    let m = sleep_marker();
    let first = spawn_script(&format!("exec sleep {m}"), &[], Some(leaf.target()));
    // Joining a v1 pids leaf is allowed past its limit, so the second child starts; its own fork
    // fails (perl reports it at once instead of retrying with back-off like bash).
    let script = "exec perl -e '$p = fork(); if (!defined $p) { print qq(fail $!) } \
                  elsif ($p == 0) { exit 0 } else { wait; print qq(ok) }'";
    let (out, status) = run_capture(dsh_contain::Method::Clone3Vm, script, Some(leaf.target()));
    assert!(nix::libc::WIFEXITED(status));
    assert!(out.starts_with("fail"), "a fork inside a full leaf: {out}");
    leaf.kill().expect("kill");
    assert!(nix::libc::WIFSIGNALED(reap(&first)));
    assert_none_left(&m);
}

/// A child killed and reaped when the test lets go of it, failed assertions included.
struct KilledOnDrop(std::process::Child);

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A runtime killed with SIGKILL and no watchdog leaves its tree: the next tree created beside it
/// removes it when empty, and leaves it (with its process) when not.
#[test]
fn a_dead_runtimes_empty_tree_is_swept_and_a_populated_one_kept() {
    let Some(facts) = cgroup_host() else { return };
    let own = facts
        .v2
        .as_ref()
        .and_then(|p| p.dir.clone())
        .expect("own v2 dir");
    // The "runtime" whose trees these are lives while they are made: trees created by the other
    // tests of this binary (and by concurrent test processes) sweep the same parent, and would
    // remove the busy one in the moment between its mkdir and its first process. A cgroup v2
    // directory cannot be renamed, so it cannot be populated under another name first.
    let mut runtime = KilledOnDrop(
        std::process::Command::new("sleep")
            .arg("300")
            .spawn()
            .unwrap(),
    );
    let pid = runtime.0.id();
    let empty = own.join(format!("dsh-{pid}-stale{}", dsh_contain::nonce()));
    std::fs::create_dir(&empty).unwrap();
    std::fs::create_dir(empty.join("l0")).unwrap();
    std::fs::create_dir(empty.join("l1")).unwrap();
    let busy = own.join(format!("dsh-{pid}-busy{}", dsh_contain::nonce()));
    std::fs::create_dir(&busy).unwrap();
    std::fs::create_dir(busy.join("l0")).unwrap();
    let m = sleep_marker();
    let mut sleeper = KilledOnDrop(std::process::Command::new("sleep").arg(&m).spawn().unwrap());
    std::fs::write(busy.join("l0/cgroup.procs"), sleeper.0.id().to_string()).unwrap();
    runtime.0.kill().unwrap();
    runtime.0.wait().unwrap();
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());

    let mut tree = CgroupTree::create(&facts, Limits::default()).expect("tree");
    let swept = !empty.exists();
    let kept = busy.join("l0").exists();

    sleeper.0.kill().unwrap();
    sleeper.0.wait().unwrap();
    assert!(wait_until(Duration::from_secs(10), || {
        std::fs::remove_dir(busy.join("l0")).is_ok() || !busy.join("l0").exists()
    }));
    std::fs::remove_dir(&busy).unwrap();
    let _ = std::fs::remove_dir_all(&empty);
    tree.destroy().expect("destroy");
    assert!(swept, "the empty tree of a dead runtime was left");
    assert!(kept, "a populated tree was removed");
    assert_none_left(&m);
}

/// SIGTERM reaches every member of a leaf, whatever group or session it moved to; a member that
/// ignores SIGTERM stays (until `cgroup.kill`).
#[test]
fn signal_members_reaches_every_escapee() {
    let Some(facts) = cgroup_host() else { return };
    let mut tree = CgroupTree::create(&facts, Limits::default()).expect("tree");
    let leaf = tree.create_leaf("p0-0", Limits::default()).expect("leaf");
    let m = sleep_marker();
    let script =
        format!("setsid sleep {m} & (sleep {m} &); (trap '' TERM; exec sleep {m}) & exit 0");
    let child = spawn_script(&script, &[], Some(leaf.target()));
    reap(&child);
    // Three sleeps, each already exec'd (a subshell that has not yet set its trap would die of the
    // SIGTERM; its command line carries the marker too).
    let sleeping = || {
        let pids = with_marker(&m);
        pids.len() == 3
            && pids.iter().all(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|c| c.trim() == "sleep")
            })
    };
    assert!(
        wait_until(Duration::from_secs(10), sleeping),
        "{:?}",
        with_marker(&m)
    );
    let signalled = leaf.signal_members(nix::libc::SIGTERM).expect("signal");
    assert_eq!(signalled, 3);
    let one_left = wait_until(Duration::from_secs(10), || with_marker(&m).len() == 1);
    leaf.kill().expect("kill");
    assert!(one_left, "left after SIGTERM: {:?}", with_marker(&m));
    tree.destroy().expect("destroy");
    assert_none_left(&m);
}
