//! The PM-* cases and the manager's own guarantees: admission policies, stale ids, shutdown that
//! kills and joins everything, bounded memory under a flood, no leaked descriptors or zombies.

use std::time::{Duration, Instant};

use crate::common::*;
use crate::spawn::{run_once, spawn_error_once};
use dsh_process::signal::pid_is_live;
use dsh_process::*;
use dsh_test_support::own_process;
use dsh_test_support::procfs::{open_fds, status_field, zombie_children};

/// Releases process `id`'s record, which must succeed.
async fn release(h: &Harness, id: ProcessId) {
    h.manager.send(Release { id }).await.unwrap().unwrap();
}

/// Asserts that the manager holds no live process and `settled` settled ones.
async fn assert_none_live_and_settled(h: &Harness, settled: usize) {
    let stats = h.manager.send(Stats).await.unwrap();
    assert_eq!((stats.live, stats.settled), (0, settled));
}

/// Catalogue: PM-01.
#[actix_rt::test]
async fn registers_and_spawns() {
    let out = run_once("echo managed", |_| {}).await;
    assert_eq!(
        (out.exit_code, out.stdout.text.as_str()),
        (Some(0), "managed\n")
    );
}

/// Catalogue: PM-02.
#[actix_rt::test]
async fn shutdown_kills_running_processes_and_awaits_exit() {
    let h = Harness::new();
    let spawned = h
        .spawn_with_grace("sleep 60", Duration::from_millis(200))
        .await;
    h.shutdown().await;
    assert!(
        !pid_is_live(spawned.pid),
        "shutdown resolved only after the exit"
    );
    let out = h.wait(spawned.id).await;
    assert_eq!(out.signal.as_deref(), Some("SIGTERM"));
}

/// Catalogue: PM-03.
#[actix_rt::test]
async fn settled_process_leaves_the_live_set() {
    let h = Harness::new();
    assert_eq!(h.run(h.spec("true")).await.exit_code, Some(0));
    assert_none_live_and_settled(&h, 1).await;
    h.shutdown().await;
}

#[actix_rt::test]
async fn settled_outcome_comes_from_the_driver_and_matches_wait() {
    let h = Harness::new();
    let spawned = h.spawn(h.spec("echo direct; exit 3")).await.unwrap();
    let direct = within(SOON, spawned.output.settled())
        .await
        .expect("the driver settles");
    assert_eq!(
        (direct.exit_code, direct.stdout.text.as_str()),
        (Some(3), "direct\n")
    );
    let waited = h.wait(spawned.id).await;
    assert_eq!(
        (waited.exit_code, waited.stdout.text),
        (direct.exit_code, direct.stdout.text)
    );
    h.shutdown().await;
}

#[actix_rt::test]
async fn a_nul_byte_in_the_command_or_environment_is_a_clear_spawn_error() {
    let h = Harness::new();
    let mut in_env = h.spec("true");
    in_env.env.insert("X".into(), "a\0b".into());
    let mut in_command = h.spec("echo a\0b");
    in_command.env.clear();
    for spec in [in_env, in_command] {
        let err = h.spawn_error(spec).await;
        assert!(err.contains("NUL byte"), "{err}");
    }
    let stats = h.manager.send(Stats).await.unwrap();
    assert_eq!(stats.live, 0);
    assert_eq!(h.run(h.spec("echo fine")).await.stdout.text, "fine\n");
    h.shutdown().await;
}

/// Catalogue: PM-04.
#[actix_rt::test]
async fn shutdown_tolerates_a_failed_spawn() {
    let missing = "/nonexistent-dir-dsh-manager-test";
    let err = spawn_error_once("true", |spec| spec.cwd = missing.into()).await;
    assert!(err.contains("ENOENT"));
}

/// Catalogue: PM-05.
#[actix_rt::test]
async fn spawn_failure_racing_shutdown() {
    let h = Harness::new();
    let mut spec = h.spec("true");
    spec.cwd = "/nonexistent-dir-dsh-manager-test".into();
    let spawn = h.manager.send(Spawn(spec));
    let shutdown = h.manager.send(Shutdown);
    let (spawned, shut) = futures::join!(spawn, shutdown);
    assert!(spawned.unwrap().is_err());
    shut.unwrap();
}

#[actix_rt::test]
async fn spawns_after_shutdown_are_refused() {
    let h = Harness::new();
    h.shutdown().await;
    let err = h.spawn_error(h.spec("true")).await;
    assert_eq!(err, "process manager is shut down");
    h.shutdown().await; // idempotent
}

#[actix_rt::test]
async fn stale_and_unknown_ids_are_errors_never_another_process() {
    let h = Harness::new();
    let first = h.spawn(h.spec("true")).await.unwrap();
    h.wait(first.id).await;
    release(&h, first.id).await;
    // The slab reuses the slot at once; the old id must not reach the new process.
    let second = h.spawn(h.spec("sleep 60")).await.unwrap();
    let unknown = ProcessError::Unknown(first.id);
    let read = Read {
        id: first.id,
        stream: StreamKind::Stdout,
        offset: 0,
    };
    assert_eq!(h.manager.send(read).await.unwrap(), Err(unknown.clone()));
    assert_eq!(
        h.manager.send(Kill { id: first.id }).await.unwrap(),
        Err(unknown.clone())
    );
    assert_eq!(
        h.manager.send(Wait { id: first.id }).await.unwrap(),
        Err(unknown.clone())
    );
    assert_eq!(
        h.manager.send(Release { id: first.id }).await.unwrap(),
        Err(unknown)
    );
    assert!(pid_is_live(second.pid), "the new process was not touched");
    h.shutdown().await;
    assert!(!pid_is_live(second.pid));
}

#[actix_rt::test]
async fn releasing_a_live_process_kills_it() {
    let h = Harness::new();
    let spawned = h.spawn(h.spec("sleep 60")).await.unwrap();
    release(&h, spawned.id).await;
    assert_gone(spawned.pid).await;
    h.shutdown().await;
}

#[actix_rt::test]
async fn max_concurrent_2_queues_and_finishes_all_six_in_order() {
    let h = Harness::with_policy(Box::new(MaxConcurrent(2)));
    let spawns: Vec<_> = (0..6)
        .map(|i| {
            h.manager
                .send(Spawn(h.spec(&format!("sleep 0.3; echo {i}"))))
        })
        .collect();
    let mut waits = Vec::new();
    for spawn in spawns {
        let spawned = within(SOON, spawn).await.unwrap().unwrap();
        let stats = h.manager.send(Stats).await.unwrap();
        assert!(stats.live <= 2, "{stats:?}");
        let wait = h.manager.send(Wait { id: spawned.id });
        waits.push((spawned, wait));
    }
    for (i, (spawned, wait)) in waits.into_iter().enumerate() {
        let out = within(SOON, wait).await.unwrap().unwrap();
        assert_eq!(out.stdout.text, format!("{i}\n"));
        assert!(
            spawned.id.generation() as usize == i + 1,
            "started in order"
        );
    }
    let stats = h.manager.send(Stats).await.unwrap();
    assert_eq!(stats.peak_live, 2);
    assert_eq!((stats.live, stats.queued), (0, 0));
    h.shutdown().await;
}

#[actix_rt::test]
async fn max_concurrent_0_refuses_with_a_clear_error() {
    let h = Harness::with_policy(Box::new(MaxConcurrent(0)));
    let err = h.spawn(h.spec("true")).await.unwrap_err().to_string();
    assert_eq!(
        err,
        "spawn refused by supervisor policy: MaxConcurrent(0) admits no process"
    );
    h.shutdown().await;
}

#[actix_rt::test]
async fn shutdown_refuses_queued_spawns() {
    let h = Harness::with_policy(Box::new(MaxConcurrent(1)));
    let running = h.spawn(h.spec("sleep 60")).await.unwrap();
    let queued = h.manager.send(Spawn(h.spec("echo never")));
    let shutdown = h.manager.send(Shutdown);
    let (queued, _) = futures::join!(queued, shutdown);
    assert_eq!(
        queued.unwrap().unwrap_err().to_string(),
        "process manager is shut down"
    );
    assert!(!pid_is_live(running.pid));
}

#[actix_rt::test]
async fn shutdown_kills_a_descendant_left_holding_the_pipes() {
    let h = Harness::new();
    let (out, holder) = h.run_leaving_a_holder("trap '' TERM; ").await;
    assert_eq!(out.settlement, Settlement::DrainGrace);
    assert!(pid_is_live(holder));
    assert_eq!(h.manager.send(Stats).await.unwrap().stragglers, 1);
    h.shutdown().await;
    assert!(!pid_is_live(holder), "nothing outlives the runtime");
}

struct KillStragglers;
impl ProcessPolicy for KillStragglers {
    fn on_settled(&mut self, settled: &SettledProcess<'_>) -> StragglerAction {
        if settled.group_remains {
            StragglerAction::KillNow
        } else {
            StragglerAction::KeepUntilShutdown
        }
    }
}

#[actix_rt::test]
async fn a_policy_can_kill_stragglers_at_settlement() {
    let h = Harness::with_policy(Box::new(KillStragglers));
    let (_, holder) = h.run_leaving_a_holder("").await;
    assert_gone(holder).await;
    h.shutdown().await;
}

#[actix_rt::test]
async fn a_gibibyte_of_output_keeps_memory_bounded_and_drops_the_oversize_spill() {
    // Measures this process (peak memory, descriptors, zombie children): it needs one to itself.
    own_process!(a_gibibyte_of_output_keeps_memory_bounded_and_drops_the_oversize_spill);
    let h = Harness::new();
    let out = h.run(h.spec("head -c 1073741824 /dev/zero")).await;
    let peak_mib = status_field("self", "VmHWM:") / 1024;
    assert_eq!(out.exit_code, Some(0));
    assert!(out.stdout.truncated);
    assert_eq!(out.stdout.text.len(), 64_000);
    assert_eq!(
        out.stdout.spill_path, None,
        "over the 64 MiB spill cap: no path is advertised"
    );
    assert_eq!(
        std::fs::read_dir(h.spill.path()).unwrap().count(),
        0,
        "the oversize spill was deleted"
    );
    assert!(peak_mib < 64, "peak RSS {peak_mib} MiB");
    h.shutdown().await;
}

#[actix_rt::test]
async fn a_thousand_spawns_leak_no_descriptor_and_no_zombie() {
    // Measures this process (peak memory, descriptors, zombie children): it needs one to itself.
    own_process!(a_thousand_spawns_leak_no_descriptor_and_no_zombie);
    let h = Harness::new();
    // Warm up the lazily created pieces (reaper, signal driver, spill directory).
    for _ in 0..3 {
        let spawned = h.spawn(h.spec("echo warm")).await.unwrap();
        h.wait(spawned.id).await;
        release(&h, spawned.id).await;
    }
    let before = open_fds("self");
    for i in 0..1000 {
        let spawned = h.spawn(h.spec("echo x")).await.unwrap();
        let out = h.wait(spawned.id).await;
        assert_eq!(out.stdout.text, "x\n", "spawn {i}");
        release(&h, spawned.id).await;
    }
    assert_eq!(open_fds("self"), before, "file descriptors leaked");
    let deadline = Instant::now() + SOON;
    while !zombie_children().is_empty() {
        assert!(
            Instant::now() < deadline,
            "zombie children: {:?}",
            zombie_children()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_none_live_and_settled(&h, 0).await;
    h.shutdown().await;
}

#[actix_rt::test]
async fn shutdown_with_fifty_live_groups_returns_within_grace_plus_two_seconds() {
    let h = Harness::new();
    let dir = tempfile::tempdir().unwrap();
    let grace = Duration::from_millis(1000);
    let mut spawned = Vec::new();
    for i in 0..50 {
        let pidfile = pid_file(&dir, &format!("grandchild-{i}"));
        let trap = if i % 3 == 0 { "trap '' TERM; " } else { "" };
        let mut spec = h.spec(&format!(
            "{trap}sleep 300 & echo $! > {}; echo up; wait; sleep 300",
            pidfile.display()
        ));
        spec.grace = grace;
        let process = h.spawn(spec).await.unwrap();
        spawned.push((process, pidfile));
    }
    let mut pids = Vec::new();
    for (process, pidfile) in &spawned {
        h.wait_for_stdout(process.id, "up").await;
        pids.push(process.pid);
        pids.push(read_pid_file(pidfile).await);
    }
    let started = Instant::now();
    h.manager.send(Shutdown).await.unwrap();
    let took = started.elapsed();
    assert!(
        took < grace + Duration::from_secs(2),
        "shutdown took {took:?}"
    );
    let alive: Vec<i32> = pids.into_iter().filter(|pid| pid_is_live(*pid)).collect();
    assert!(alive.is_empty(), "still alive after shutdown: {alive:?}");
}

/// The leader stays a zombie until its process has settled: its pid is its group's number, and a
/// number still held cannot be handed to another process, so the group kill sent while a descendant
/// still holds the pipes reaches our group and never a stranger's. Settlement reaps it.
#[actix_rt::test]
async fn the_leader_is_reaped_only_once_its_process_has_settled() {
    let h = Harness::new();
    // The drain grace: the sleep holds the pipes, so the process does not settle on its own soon.
    let grace = Duration::from_secs(30);
    let spawned = h.spawn_with_grace("sleep 60 & echo started", grace).await;
    h.wait_for_stdout(spawned.id, "started").await;
    let state = || dsh_process::signal::proc_stat(spawned.pid).map(|s| s.state);
    let deadline = Instant::now() + Duration::from_secs(20);
    while state() != Some('Z') {
        assert!(
            Instant::now() < deadline,
            "the exited leader was not left a zombie: {:?}",
            state()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    h.kill(spawned.id).await;
    let outcome = h.wait(spawned.id).await;
    assert!(!outcome.signals_sent.is_empty());
    assert_eq!(state(), None, "settled, and the leader still not reaped");
    assert!(dsh_process::signal::live_group_members(spawned.pid).is_empty());
    h.shutdown().await;
}
