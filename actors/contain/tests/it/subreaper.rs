//! Subreaper mode: escapees are attributed by their inherited marker, killed, and reaped without
//! stealing the status of a registered direct child. Each test runs in a process of its own
//! (`own_process!`, under cargo test and nextest alike): becoming a subreaper and reaping orphans
//! there touches no other test's children.

use std::time::Duration;

use crate::common::*;
use dsh_contain::subreaper::{ChildRegistry, Marker, become_subreaper, find_marked, kill_marked};
use dsh_test_support::own_process;

/// Makes this process a subreaper and returns its registry, which knows one runtime: that
/// runtime's nonce, for its tasks' markers.
fn subreaper_with_a_runtime() -> (ChildRegistry, String) {
    become_subreaper().expect("subreaper");
    let registry = ChildRegistry::new();
    let runtime = dsh_contain::nonce();
    registry.add_runtime(Marker::runtime(&runtime));
    (registry, runtime)
}

#[test]
fn escapees_are_found_by_marker_killed_and_reaped() {
    own_process!(escapees_are_found_by_marker_killed_and_reaped);
    let (registry, runtime) = subreaper_with_a_runtime();
    let marker = Marker::task(&runtime, "1");
    let (name, value) = marker.env_entry().expect("task marker");
    let m = sleep_marker();
    // A bystander with another task's marker must survive.
    let other = Marker::task(&runtime, "2");
    let (oname, ovalue) = other.env_entry().expect("task marker");
    let om = sleep_marker();
    let bystander = spawn_script(&format!("exec sleep {om}"), &[(oname, ovalue)], None);

    let guard = registry.spawning();
    let child = spawn_script(&escapees_script(&m), &[(name, value)], None);
    guard.register(child.pid);
    reap(&child);
    registry.forget(child.pid);
    assert!(
        wait_until(Duration::from_secs(10), || with_marker(&m).len()
            == ESCAPEES),
        "escapees started: {:?}",
        with_marker(&m)
    );
    // The reaper's periodic pass sees them alive and adopted (some left the task's session).
    assert!(registry.reap_orphans().is_empty(), "nothing has died yet");
    let found = find_marked(&marker);
    for pid in with_marker(&m) {
        assert!(
            found.contains(&pid),
            "{pid} not attributed; found {found:?}"
        );
    }
    assert!(kill_marked(&marker, nix::libc::SIGKILL) >= ESCAPEES);
    assert_none_left(&m);
    // All of them were re-parented to us; reap them.
    let mut reaped = 0;
    assert!(
        wait_until(Duration::from_secs(10), || {
            reaped += registry.reap_orphans().len();
            reaped >= ESCAPEES
        }),
        "reaped {reaped}"
    );
    assert_eq!(with_marker(&om).len(), 1, "the bystander was killed");
    assert!(find_marked(&marker).is_empty());
    kill_marked(&other, nix::libc::SIGKILL);
    reap(&bystander);
    assert_none_left(&om);
}

#[test]
fn the_reaper_leaves_registered_children_alone() {
    own_process!(the_reaper_leaves_registered_children_alone);
    become_subreaper().expect("subreaper");
    let registry = ChildRegistry::new();
    let guard = registry.spawning();
    let child = spawn_script("exit 7", &[], None);
    guard.register(child.pid);
    // Wait (without reaping) until it is a zombie.
    assert!(wait_until(Duration::from_secs(10), || {
        std::fs::read_to_string(format!("/proc/{}/stat", child.pid)).is_ok_and(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        })
    }));
    assert!(registry.reap_orphans().is_empty());
    let status = reap(&child);
    assert_eq!(nix::libc::WEXITSTATUS(status), 7);
}

#[tokio::test]
async fn two_hundred_setsid_sleeps_are_all_attributed_and_killed() {
    own_process!(two_hundred_setsid_sleeps_are_all_attributed_and_killed);
    let (registry, runtime) = subreaper_with_a_runtime();
    let marker = Marker::task(&runtime, "200");
    let (name, value) = marker.env_entry().expect("task marker");
    let m = sleep_marker();
    let sleeps = format!("sleep\0{m}");
    let guard = registry.spawning();
    let child = spawn_script(
        &format!("for i in $(seq 200); do setsid sleep {m} & done; exit 0"),
        &[(name, value)],
        None,
    );
    guard.register(child.pid);
    reap(&child);
    registry.forget(child.pid);
    assert!(
        wait_until(Duration::from_secs(30), || with_marker(&sleeps).len()
            == 200),
        "started {}",
        with_marker(&sleeps).len()
    );
    // The reaper's periodic pass sees the 200 (each in a session of its own) alive and adopted.
    assert!(registry.reap_orphans().is_empty(), "nothing has died yet");
    assert_eq!(find_marked(&marker).len(), 200);
    kill_marked(&marker, nix::libc::SIGKILL);
    tokio::time::timeout(
        Duration::from_secs(30),
        dsh_contain::subreaper::wait_unmarked(&marker, Duration::from_millis(20)),
    )
    .await
    .expect("all gone within 30 s");
    assert_none_left(&m);
    let mut reaped = 0;
    assert!(
        wait_until(Duration::from_secs(10), || {
            reaped += registry.reap_orphans().len();
            reaped >= 200
        }),
        "reaped {reaped}"
    );
}
