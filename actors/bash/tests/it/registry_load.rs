//! 200 background tasks through the executor and the task registry, read concurrently by several
//! callers while they print, then killed: every line each task printed is delivered exactly once
//! across all reads, and no process is left.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common;
use actix::prelude::*;
use dsh_bash::*;
use dsh_process::Shutdown;
use dsh_process::signal::pid_is_live;
use dsh_tasks::{KillTask, ReadReply, ReadTask, Register, RegistryConfig, TaskRegistry};

const TASKS: usize = 200;
const LINES: usize = 300;
const READERS: usize = 4;

/// Reads task `id` with no caller.
async fn read(registry: &Addr<TaskRegistry>, id: &str) -> ReadReply {
    registry
        .send(ReadTask {
            id: id.into(),
            caller: None,
        })
        .await
        .unwrap()
        .unwrap()
}

#[actix_rt::test]
async fn two_hundred_tasks_read_concurrently_deliver_every_line_exactly_once() {
    let (manager, _spill) = common::manager();
    let config = BashConfig {
        grace_ms: 500,
        ..Default::default()
    };
    let resolve = config.resolver();
    let executor = LocalBashExecutor::new(config, manager.clone())
        .unwrap()
        .start();
    let registry = TaskRegistry::new(RegistryConfig::default()).start();

    // Each task prints its pid, then numbered lines in bursts, then waits to be killed.
    let command = format!(
        "echo pid:$$; for i in $(seq 1 {LINES}); do echo $i; if [ $((i % 50)) = 0 ]; then sleep 0.05; fi; done; echo end; sleep 600"
    );
    let mut ids = Vec::new();
    for _ in 0..TASKS {
        let spec = resolve(BashExecRequest::new(&command)).unwrap();
        let handle = executor.send(Start(spec)).await.unwrap().unwrap();
        let id = registry
            .send(Register {
                kind: "bash".into(),
                label: command.clone(),
                owner: None,
                producer: Box::new(handle),
            })
            .await
            .unwrap()
            .unwrap();
        ids.push(id);
    }

    // Several callers read every task concurrently until each has printed its `end` line.
    let received: Arc<Mutex<HashMap<String, Vec<String>>>> = Arc::default();
    let deadline = Instant::now() + Duration::from_secs(120);
    let readers: Vec<_> = (0..READERS)
        .map(|reader| {
            let (registry, ids, received) = (registry.clone(), ids.clone(), received.clone());
            actix_rt::spawn(async move {
                loop {
                    let mut all_ended = true;
                    for id in ids.iter().skip(reader).chain(ids.iter().take(reader)) {
                        let reply = read(&registry, id).await;
                        assert!(!reply.output.lossy);
                        let mut map = received.lock().unwrap();
                        let deltas = map.entry(id.clone()).or_default();
                        if !reply.output.delta.is_empty() {
                            deltas.push(reply.output.delta);
                        }
                        all_ended &= deltas.iter().any(|d| d.contains("end\n"));
                    }
                    if all_ended {
                        return;
                    }
                    assert!(Instant::now() < deadline, "tasks never finished printing");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        })
        .collect();
    for reader in readers {
        reader.await.unwrap();
    }

    // Kill every task, wait for the ends, then take one final read each.
    let mut handles_done = Vec::new();
    for id in &ids {
        let reply = registry
            .send(KillTask {
                id: id.clone(),
                caller: None,
            })
            .await
            .unwrap()
            .unwrap();
        handles_done.push(reply);
    }
    let mut pids = Vec::new();
    for id in &ids {
        let settle_deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let reply = read(&registry, id).await;
            if !reply.output.delta.is_empty() {
                received
                    .lock()
                    .unwrap()
                    .entry(id.clone())
                    .or_default()
                    .push(reply.output.delta);
            }
            if reply.snapshot.settled {
                assert_eq!(
                    reply.snapshot.status,
                    TaskStatus::Killed {
                        signal: Some("SIGTERM".into())
                    }
                );
                break;
            }
            assert!(
                Instant::now() < settle_deadline,
                "{id} never settled after the kill"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Every line exactly once: count each line across all deltas, whoever read them.
        let deltas = received.lock().unwrap()[id].clone();
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for line in deltas.iter().flat_map(|d| d.lines()) {
            *counts.entry(line).or_default() += 1;
        }
        let pid_line = counts
            .keys()
            .find(|l| l.starts_with("pid:"))
            .expect("pid line")
            .to_string();
        pids.push(pid_line.trim_start_matches("pid:").parse::<i32>().unwrap());
        for n in 1..=LINES {
            assert_eq!(
                counts.get(n.to_string().as_str()),
                Some(&1),
                "{id}: line {n}"
            );
        }
        assert_eq!(counts.get("end"), Some(&1), "{id}");
        assert_eq!(counts.len(), LINES + 2, "{id}: unexpected lines");
    }

    manager.send(Shutdown).await.unwrap();
    let alive: Vec<i32> = pids.into_iter().filter(|pid| pid_is_live(*pid)).collect();
    assert!(alive.is_empty(), "left running: {alive:?}");
}
