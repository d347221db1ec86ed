//! Spawn latency per method, paired against plain `posix_spawn` in alternating rounds.
//!
//! Not a correctness test: run it on purpose with
//! `cargo nextest run -p dsh-contain --release --run-ignored only spawn_timing --no-capture`
//! (`DSH_TIMING_SPAWNS` per round, default 200; `DSH_TIMING_ROUNDS`, default 10; medians of the
//! rounds are reported). Each case spawns `bash -c true`, waits
//! for it and reaps it; the `+leaf` cases also create the leaf before and remove it after, which is
//! the whole per-process cost of containment.

use std::time::Instant;

use crate::common::*;
use dsh_contain::{CgroupTree, Limits, Method, spawn_with};

/// The count in environment variable `name`, or `default`.
fn setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[derive(Clone, Copy, Debug)]
enum Case {
    Raw,
    Clone3VmNoCgroup,
    JoinAfter,
    Clone3Fork,
    Clone3Vm,
    Clone3VmLimits,
    Clone3VmLeafLifecycle,
    Clone3VmLimitsLeafLifecycle,
    Clone3VmPooledLeaf,
    Clone3VmLimitsPooledLeaf,
}

#[test]
#[ignore = "timing harness, run on purpose"]
fn spawn_timing() {
    let Some(facts) = cgroup_host() else { return };
    let n = setting("DSH_TIMING_SPAWNS", 200);
    let limits = Limits {
        max_pids: facts.pids_limit().ok().map(|_| 1000),
        max_memory: facts.memory_limit().ok().map(|_| 1 << 30),
    };
    let tree = CgroupTree::create(&facts, limits).expect("tree");
    let plain = tree.create_leaf("plain", Limits::default()).expect("leaf");
    let limited = tree.create_leaf("limited", limits).expect("leaf");
    let null = dev_null();
    let stdio = null_stdio(&null);
    let program = bash("true");
    let cases = [
        Case::Raw,
        Case::Clone3VmNoCgroup,
        Case::JoinAfter,
        Case::Clone3Fork,
        Case::Clone3Vm,
        Case::Clone3VmLimits,
        Case::Clone3VmLeafLifecycle,
        Case::Clone3VmLimitsLeafLifecycle,
        Case::Clone3VmPooledLeaf,
        Case::Clone3VmLimitsPooledLeaf,
    ];
    let pool = dsh_contain::LeafPool::new(4);
    let rounds = setting("DSH_TIMING_ROUNDS", 10);
    let mut per_round: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    // Time inside the spawn call alone (clone to exec done), where the methods differ.
    let mut call_round: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    let mut serial = 0u64;
    for round in 0..rounds {
        for k in 0..cases.len() {
            // Rotate the order each round so no case always runs first.
            let i = (k + round) % cases.len();
            let start = Instant::now();
            let mut in_call = std::time::Duration::ZERO;
            for _ in 0..n {
                serial += 1;
                let pooled = match cases[i] {
                    Case::Clone3VmPooledLeaf => Some(Limits::default()),
                    Case::Clone3VmLimitsPooledLeaf => Some(limits),
                    _ => None,
                };
                if let Some(l) = pooled {
                    let leaf = pool.acquire(&tree, l).expect("leaf");
                    let t = Instant::now();
                    let child = spawn_with(Method::Clone3Vm, &program, stdio, Some(leaf.target()))
                        .expect("spawn");
                    in_call += t.elapsed();
                    reap(&child);
                    while leaf.is_populated().expect("events") {
                        std::thread::yield_now();
                    }
                    pool.release(leaf).expect("release");
                    continue;
                }
                let (method, target, lifecycle) = match cases[i] {
                    Case::Raw => (Method::SpawnThenJoin, None, None),
                    Case::Clone3VmNoCgroup => (Method::Clone3Vm, None, None),
                    Case::JoinAfter => (Method::SpawnThenJoin, Some(plain.target()), None),
                    Case::Clone3Fork => (Method::Clone3Fork, Some(plain.target()), None),
                    Case::Clone3Vm => (Method::Clone3Vm, Some(plain.target()), None),
                    Case::Clone3VmLimits => (Method::Clone3Vm, Some(limited.target()), None),
                    Case::Clone3VmLeafLifecycle => {
                        (Method::Clone3Vm, None, Some(Limits::default()))
                    }
                    Case::Clone3VmLimitsLeafLifecycle => (Method::Clone3Vm, None, Some(limits)),
                    Case::Clone3VmPooledLeaf | Case::Clone3VmLimitsPooledLeaf => continue,
                };
                match lifecycle {
                    None => {
                        let t = Instant::now();
                        let child = spawn_with(method, &program, stdio, target).expect("spawn");
                        in_call += t.elapsed();
                        reap(&child);
                    }
                    Some(l) => {
                        let leaf = tree.create_leaf(&format!("p{serial}-0"), l).expect("leaf");
                        let t = Instant::now();
                        let child = spawn_with(method, &program, stdio, Some(leaf.target()))
                            .expect("spawn");
                        in_call += t.elapsed();
                        reap(&child);
                        leaf.remove().expect("remove");
                    }
                }
            }
            per_round[i].push(start.elapsed().as_secs_f64() * 1e6 / n as f64);
            call_round[i].push(in_call.as_secs_f64() * 1e6 / n as f64);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let medians: Vec<f64> = per_round.iter_mut().map(median).collect();
    let mins: Vec<f64> = per_round.iter().map(|v| v[0]).collect();
    let calls: Vec<f64> = call_round.iter_mut().map(median).collect();
    println!(
        "spawn + wait of `bash -c true`: {n} per round, {rounds} alternating rounds; per spawn"
    );
    println!(
        "{:<30} {:>10} {:>10} {:>9}",
        "case", "median us", "best us", "vs raw"
    );
    for (i, case) in cases.iter().enumerate() {
        println!(
            "{:<30} {:>10.0} {:>10.0} {:>8.3}x {:>12.0} {:>8.3}x",
            format!("{case:?}"),
            medians[i],
            mins[i],
            medians[i] / medians[0],
            calls[i],
            calls[i] / calls[0]
        );
    }
    pool.clear().expect("clear pool");
    drop((plain, limited));
}

/// Where the time of one contained process goes: leaf creation, spawn, run + reap, wait for
/// `populated 0`, leaf removal (medians over `DSH_TIMING_SPAWNS`).
#[test]
#[ignore = "timing harness, run on purpose"]
fn leaf_lifecycle_breakdown() {
    let Some(facts) = cgroup_host() else { return };
    let n = setting("DSH_TIMING_SPAWNS", 200);
    let tree = CgroupTree::create(&facts, Limits::default()).expect("tree");
    let null = dev_null();
    let stdio = null_stdio(&null);
    let program = bash("true");
    let mut phases: Vec<Vec<f64>> = vec![Vec::new(); 5];
    for i in 0..n {
        let mut lap = Instant::now();
        let mut mark = |phase: usize, phases: &mut Vec<Vec<f64>>| {
            phases[phase].push(lap.elapsed().as_secs_f64() * 1e6);
            lap = Instant::now();
        };
        let leaf = tree
            .create_leaf(&format!("p{i}-0"), Limits::default())
            .expect("leaf");
        mark(0, &mut phases);
        let child =
            spawn_with(Method::Clone3Vm, &program, stdio, Some(leaf.target())).expect("spawn");
        mark(1, &mut phases);
        reap(&child);
        mark(2, &mut phases);
        while leaf.is_populated().expect("events") {
            std::thread::yield_now();
        }
        mark(3, &mut phases);
        leaf.remove().expect("remove");
        mark(4, &mut phases);
    }
    for (name, v) in [
        "mkdir leaf",
        "spawn",
        "run + reap",
        "populated 0",
        "rmdir leaf",
    ]
    .iter()
    .zip(phases.iter_mut())
    {
        v.sort_by(f64::total_cmp);
        println!(
            "{name:<12} median {:>7.0} us   p90 {:>7.0} us",
            v[v.len() / 2],
            v[v.len() * 9 / 10]
        );
    }
}

/// Is it the fresh cgroup or the removal of the previous one that makes the spawn slow?
#[test]
#[ignore = "timing harness, run on purpose"]
fn fresh_leaf_spawn_cost() {
    let Some(facts) = cgroup_host() else { return };
    let n = 200;
    let tree = CgroupTree::create(&facts, Limits::default()).expect("tree");
    let null = dev_null();
    let stdio = null_stdio(&null);
    let program = bash("true");
    let leaves: Vec<_> = (0..n)
        .map(|i| {
            tree.create_leaf(&format!("q{i}"), Limits::default())
                .expect("leaf")
        })
        .collect();
    let mut first = Vec::new();
    let mut second = Vec::new();
    for leaf in &leaves {
        for times in [&mut first, &mut second] {
            let t = Instant::now();
            let child =
                spawn_with(Method::Clone3Vm, &program, stdio, Some(leaf.target())).expect("spawn");
            times.push(t.elapsed().as_secs_f64() * 1e6);
            reap(&child);
        }
    }
    for (name, v) in [
        ("first spawn into a leaf made earlier", &mut first),
        ("second spawn into it", &mut second),
    ] {
        v.sort_by(f64::total_cmp);
        println!(
            "{name:<40} median {:>7.0} us   p90 {:>7.0} us",
            v[v.len() / 2],
            v[v.len() * 9 / 10]
        );
    }
}
