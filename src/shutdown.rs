//! The shutdown sequencer: shuts a runtime down once, however many callers ask, in order — the
//! tasks first, so no notice is sent for work the shutdown kills, then every process group, then the
//! sandbox provider's own leftovers (its private temp) (docs/ARCHITECTURE.md, "Shutdown").

use std::sync::Arc;

use actix::prelude::*;
use dsh_bash::SandboxProvider;
use dsh_process::ProcessManager;
use dsh_tasks::TaskRegistry;
use tokio::sync::oneshot;

/// Sequences shutdown once, however many callers ask.
pub(crate) struct ShutdownSequencer {
    manager: Addr<ProcessManager>,
    registry: Addr<TaskRegistry>,
    provider: Option<Arc<dyn SandboxProvider>>,
    state: ShutdownState,
    /// Stop the actix system afterwards (the runtime started its own thread).
    owns_system: bool,
}

impl ShutdownSequencer {
    /// A sequencer for these actors; `owns_system` stops the actix system after them.
    pub(crate) fn new(
        manager: Addr<ProcessManager>,
        registry: Addr<TaskRegistry>,
        provider: Option<Arc<dyn SandboxProvider>>,
        owns_system: bool,
    ) -> Self {
        Self {
            manager,
            registry,
            provider,
            state: ShutdownState::Running,
            owns_system,
        }
    }
}

enum ShutdownState {
    Running,
    /// Those waiting for the end.
    InProgress(Vec<oneshot::Sender<()>>),
    Done,
}

/// Shut the runtime down; answered once everything is killed and joined.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct ShutdownRuntime;

impl Actor for ShutdownSequencer {
    type Context = Context<Self>;
}

impl Handler<ShutdownRuntime> for ShutdownSequencer {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: ShutdownRuntime, ctx: &mut Self::Context) -> Self::Result {
        let (tx, rx) = oneshot::channel();
        match &mut self.state {
            ShutdownState::Done => return Box::pin(async {}),
            ShutdownState::InProgress(waiters) => waiters.push(tx),
            ShutdownState::Running => {
                self.state = ShutdownState::InProgress(vec![tx]);
                let (registry, manager) = (self.registry.clone(), self.manager.clone());
                let provider = self.provider.clone();
                let sequence = async move {
                    let _ = registry.send(dsh_tasks::ShutdownTasks).await;
                    let _ = manager.send(dsh_process::Shutdown).await;
                    if let Some(provider) = provider {
                        provider.shutdown();
                    }
                };
                ctx.spawn(sequence.into_actor(self).map(|(), sequencer, _| {
                    tracing::debug!("dsh runtime shut down");
                    if let ShutdownState::InProgress(waiters) =
                        std::mem::replace(&mut sequencer.state, ShutdownState::Done)
                    {
                        for waiter in waiters {
                            let _ = waiter.send(());
                        }
                    }
                    if sequencer.owns_system {
                        System::current().stop();
                    }
                }));
            }
        }
        Box::pin(async move {
            let _ = rx.await;
        })
    }
}
