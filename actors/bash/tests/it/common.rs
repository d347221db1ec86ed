//! What every executor test sets up: a process manager whose spills go to a temp dir of its own, the
//! tests' executor config, a bounded run, and a bounded shutdown; and [`Harness`], an executor under
//! test beside its manager.

use actix::prelude::*;
use dsh_bash::*;
use dsh_process::{ManagerConfig, ProcessManager, Shutdown};
use dsh_test_support::SOON;

/// A started process manager, spilling into the returned temp dir (keep it while the manager runs).
pub fn manager() -> (Addr<ProcessManager>, tempfile::TempDir) {
    let spill = tempfile::tempdir().unwrap();
    let manager = ProcessManager::new(ManagerConfig {
        spill_dir: Some(spill.path().into()),
        ..Default::default()
    })
    .start();
    (manager, spill)
}

/// The default executor config with a 200 ms grace.
pub fn config() -> BashConfig {
    BashConfig {
        grace_ms: 200,
        ..BashConfig::default()
    }
}

/// Runs `spec` on `executor` in the foreground, bounded by two [`SOON`]s.
pub async fn run<E>(executor: &Addr<E>, spec: BashExecSpec) -> Result<BashRunResult, ExecError>
where
    E: Actor<Context = Context<E>> + Handler<Run>,
{
    tokio::time::timeout(SOON * 2, executor.send(Run(spec)))
        .await
        .expect("run timed out")
        .unwrap()
}

/// Shuts the manager down (killing what is left), bounded by [`SOON`].
pub async fn shutdown(manager: &Addr<ProcessManager>) {
    tokio::time::timeout(SOON, manager.send(Shutdown))
        .await
        .unwrap()
        .unwrap();
}

/// An executor under test beside its manager: a request is resolved by the executor's resolver,
/// then run or started on it.
pub struct Harness<E: Actor> {
    pub manager: Addr<ProcessManager>,
    pub executor: Addr<E>,
    pub resolver: Resolver,
    /// The manager's spill dir, kept while it runs.
    pub spill: tempfile::TempDir,
}

impl<E> Harness<E>
where
    E: Actor<Context = Context<E>> + Handler<Run> + Handler<Start>,
{
    /// The harness around `executor`, whose manager (with its spill dir) is `manager`.
    pub fn assemble(
        (manager, spill): (Addr<ProcessManager>, tempfile::TempDir),
        executor: Addr<E>,
        resolver: Resolver,
    ) -> Self {
        Self {
            manager,
            executor,
            resolver,
            spill,
        }
    }

    /// Resolves `request` and runs it in the foreground, bounded.
    pub async fn run(&self, request: BashExecRequest) -> Result<BashRunResult, ExecError> {
        let spec = (self.resolver)(request)?;
        run(&self.executor, spec).await
    }

    /// Resolves `request` and starts it in the background.
    pub async fn try_start(&self, request: BashExecRequest) -> Result<BashProcess, ExecError> {
        let spec = (self.resolver)(request)?;
        self.executor.send(Start(spec)).await.unwrap()
    }

    /// Shuts the manager down, bounded.
    pub async fn shutdown(&self) {
        shutdown(&self.manager).await;
    }
}
