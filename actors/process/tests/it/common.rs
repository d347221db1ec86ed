//! Helpers shared by the process-layer tests: a manager with a private spill directory, the catalogue's
//! default spec, and event-based waiting (never fixed sleeps).

#![allow(dead_code)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use actix::prelude::*;
use dsh_process::*;

#[allow(unused_imports)] // Not every test file uses every helper.
pub use dsh_test_support::procfs::{assert_gone, cleanup_pid, read_pid_file};
pub use dsh_test_support::{SOON, within};

pub struct Harness {
    pub manager: Addr<ProcessManager>,
    pub spill: tempfile::TempDir,
}

impl Harness {
    pub fn new() -> Self {
        Self::with_policy(Box::new(AdmitAll))
    }

    pub fn with_policy(policy: Box<dyn ProcessPolicy>) -> Self {
        Self::with_config(ManagerConfig {
            policy,
            ..Default::default()
        })
    }

    /// A manager with `config`, spilling into a private temp dir.
    pub fn with_config(config: ManagerConfig) -> Self {
        let spill = tempfile::tempdir().expect("temp dir");
        let config = ManagerConfig {
            spill_dir: Some(spill.path().to_path_buf()),
            ..config
        };
        Self {
            manager: ProcessManager::new(config).start(),
            spill,
        }
    }

    /// The catalogue's "spawn spec(cmd)": bash -c, test cwd, caps 64000, spill 64 MiB, grace 3 s.
    pub fn spec(&self, cmd: &str) -> ProcessSpawnSpec {
        let mut spec = ProcessSpawnSpec::new(
            vec!["bash".into(), "-c".into(), cmd.into()],
            std::env::current_dir().unwrap(),
            64_000,
            64 << 20,
            Duration::from_secs(3),
        );
        spec.spill_dir = Some(self.spill.path().to_path_buf());
        spec
    }

    /// Runs a command (after `prefix`) that prints `done` and exits leaving a background `sleep`
    /// holding its pipes, with a 100 ms grace: its outcome, and the holder's pid.
    pub async fn run_leaving_a_holder(&self, prefix: &str) -> (ProcessOutcome, i32) {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = pid_file(&dir, "holder");
        let mut spec = self.spec(&format!(
            "{prefix}sleep 60 & echo $! > {}; echo done",
            pidfile.display()
        ));
        spec.grace = Duration::from_millis(100);
        let out = self.run(spec).await;
        (out, read_pid_file(&pidfile).await)
    }

    /// Spawns `spec(cmd)` with a drain and kill grace of `grace`.
    pub async fn spawn_with_grace(&self, cmd: &str, grace: Duration) -> SpawnedProcess {
        let mut spec = self.spec(cmd);
        spec.grace = grace;
        self.spawn(spec).await.expect("spawn")
    }

    pub async fn spawn(&self, spec: ProcessSpawnSpec) -> Result<SpawnedProcess, SpawnError> {
        self.manager
            .send(Spawn(spec))
            .await
            .expect("manager mailbox")
    }

    /// What the manager says when it refuses to spawn `spec` (the spawn must fail).
    pub async fn spawn_error(&self, spec: ProcessSpawnSpec) -> String {
        self.spawn(spec)
            .await
            .expect_err("the spawn must fail")
            .to_string()
    }

    pub async fn wait(&self, id: ProcessId) -> ProcessOutcome {
        within(SOON, self.manager.send(Wait { id }))
            .await
            .expect("mailbox")
            .expect("wait")
    }

    pub async fn run(&self, spec: ProcessSpawnSpec) -> ProcessOutcome {
        let spawned = self.spawn(spec).await.expect("spawn");
        self.wait(spawned.id).await
    }

    pub async fn kill(&self, id: ProcessId) -> KillOutcome {
        self.manager
            .send(Kill { id })
            .await
            .expect("mailbox")
            .expect("kill")
    }

    pub async fn read(&self, id: ProcessId, stream: StreamKind, offset: u64) -> ReadResult {
        self.manager
            .send(Read { id, stream, offset })
            .await
            .expect("mailbox")
            .expect("read")
    }

    /// Polls stdout (from 0) until it contains `needle`.
    pub async fn wait_for_stdout(&self, id: ProcessId, needle: &str) {
        let deadline = Instant::now() + SOON;
        loop {
            if self
                .read(id, StreamKind::Stdout, 0)
                .await
                .text
                .contains(needle)
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "stdout never contained {needle:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub async fn shutdown(&self) {
        within(SOON + SOON, self.manager.send(Shutdown))
            .await
            .expect("mailbox");
    }
}

pub fn pid_file(dir: &tempfile::TempDir, name: &str) -> PathBuf {
    dir.path().join(name)
}

impl Harness {
    /// A manager that runs at most `max_terminals` children under a terminal.
    pub fn with_max_terminals(max_terminals: usize) -> Self {
        Self::with_config(ManagerConfig {
            max_terminals,
            ..Default::default()
        })
    }
}
