//! The task registry's view of a background handle: reads, kills, waits, what it retains, and
//! scans of its output for a wait's condition.

use std::sync::Arc;

use dsh_process::{Discard, StreamKind, StreamScan};
use dsh_tasks::{OutputCondition, OutputScan, TaskOutput, TaskProducer, TaskStatus};
use futures::future::BoxFuture;

use super::{BashProcess, PROCESS_BYTES};

impl TaskProducer for BashProcess {
    fn read(&self) -> TaskOutput {
        self.read_output()
    }

    fn queued(&self) -> bool {
        self.state().phase.queued()
    }

    fn retained_bytes(&self) -> usize {
        let output = self
            .inner
            .process
            .get()
            .map_or(0, |process| process.output.retained_bytes());
        output + PROCESS_BYTES
    }

    fn spill_bytes(&self) -> u64 {
        self.inner
            .process
            .get()
            .map_or(0, |process| process.output.spill_bytes())
    }

    fn discard(&self) {
        if let Some(process) = self.inner.process.get() {
            self.inner.manager.do_send(Discard { id: process.id });
        }
    }

    fn kill(&self) {
        BashProcess::kill(self);
    }

    fn finished(&self) -> BoxFuture<'static, TaskStatus> {
        let handle = self.clone();
        Box::pin(async move { handle.done().await })
    }

    /// Registers a scan on each stream from the read cursors now (`SharedOutput::watch`): each
    /// chunk is fed to it as the driver stores it. A queued command is watched from its start.
    fn output_matches(&self, condition: Arc<dyn OutputCondition>) -> BoxFuture<'static, ()> {
        if self.inner.process.get().is_some() {
            return self.watch_streams(&condition);
        }
        // Queued: nothing is written before the start; a spawn that failed has only its note.
        let mut decided = self.inner.decided.clone();
        let handle = self.clone();
        Box::pin(async move {
            if decided.wait_for(|decided| *decided).await.is_err() {
                std::future::pending::<()>().await;
            }
            if handle.inner.process.get().is_some() {
                return handle.watch_streams(&condition).await;
            }
            let note = handle
                .state()
                .phase
                .settled()
                .and_then(|settled| settled.note.clone())
                .unwrap_or_default();
            if !condition.scan().feed(note.as_bytes()) {
                std::future::pending::<()>().await;
            }
        })
    }
}

impl BashProcess {
    /// Resolves once `condition` holds on stdout's or stderr's text since the previous read; the
    /// scans are registered before this returns.
    fn watch_streams(&self, condition: &Arc<dyn OutputCondition>) -> BoxFuture<'static, ()> {
        let Some(process) = self.inner.process.get() else {
            return Box::pin(std::future::pending());
        };
        let state = self.state();
        let [stdout, stderr] = [
            (StreamKind::Stdout, state.stdout_offset),
            (StreamKind::Stderr, state.stderr_offset),
        ]
        .map(|(stream, from)| {
            process
                .output
                .watch(stream, from, Box::new(Scan(condition.scan())))
        });
        Box::pin(async move {
            futures::future::select(stdout, stderr).await;
        })
    }
}

/// A task's output scan, fed by the process layer's collector.
struct Scan(Box<dyn OutputScan>);

impl StreamScan for Scan {
    fn feed(&mut self, bytes: &[u8]) -> bool {
        self.0.feed(bytes)
    }

    fn gap(&mut self) {
        self.0.gap();
    }
}
