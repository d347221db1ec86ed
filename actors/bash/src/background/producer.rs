//! The task registry's view of a background handle: reads, kills, waits, what it retains, and
//! scans of its output for a wait's condition.

use std::sync::Arc;

use dsh_process::{
    Discard, InputError, InputItem, InputState, KeyInput, Live, PipeKey, StreamKind, StreamScan,
    Wait,
};
use dsh_tasks::{
    LeftBehind, OutputCondition, OutputScan, TaskInput, TaskInputItem, TaskOutput, TaskPipeKey,
    TaskProducer, TaskStatus, WriteRefusal,
};
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

    fn input(&self) -> TaskInput {
        let Some(process) = self.inner.process.get() else {
            return TaskInput::None;
        };
        match process.output.input().map(|input| input.state()) {
            None => TaskInput::None,
            Some(InputState::Busy) => TaskInput::Busy,
            Some(InputState::Waiting) => TaskInput::Waiting,
            Some(InputState::WaitingHidden) => TaskInput::WaitingHidden,
            Some(InputState::Closed) => TaskInput::Closed,
        }
    }

    fn write(&self, items: Vec<TaskInputItem>) -> Result<(), WriteRefusal> {
        let process = self.inner.process.get().ok_or(WriteRefusal::NoInput)?;
        let items = items
            .into_iter()
            .map(|item| match item {
                TaskInputItem::Bytes(bytes) => InputItem::Bytes(bytes),
                TaskInputItem::Key(key) => InputItem::Key(KeyInput {
                    normal: key.normal,
                    application: key.application,
                    on_pipe: match key.on_pipe {
                        TaskPipeKey::Bytes(bytes) => PipeKey::Bytes(bytes),
                        TaskPipeKey::Interrupt => PipeKey::Interrupt,
                        TaskPipeKey::EndOfInput => PipeKey::EndOfInput,
                    },
                }),
            })
            .collect();
        process.output.write(items).map_err(|err| match err {
            InputError::NoInput => WriteRefusal::NoInput,
            InputError::Closed => WriteRefusal::Closed,
            InputError::Full => WriteRefusal::Full,
        })
    }

    fn glance(&self) -> Option<Arc<dyn dsh_tasks::OutputGlance>> {
        let process = self.inner.process.get()?;
        Some(Arc::new(crate::peek::Glance(process.output.clone())))
    }

    /// Subscribes now, so a wait that starts after a write sees the next prompt, not the last.
    fn input_waiting(&self) -> BoxFuture<'static, ()> {
        let Some(input) = self.inner.process.get().and_then(|p| p.output.input()) else {
            return Box::pin(std::future::pending());
        };
        let mut states = input.subscribe();
        Box::pin(async move {
            if states.wait_for(|state| state.is_waiting()).await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    }

    fn finished(&self) -> BoxFuture<'static, TaskStatus> {
        let handle = self.clone();
        Box::pin(async move {
            let status = handle.done().await;
            // What it left running is remembered by the manager once it has heard of the end (in
            // subreaper mode after a `/proc` scan): wait for that, so the task made of it finds
            // its processes at its first look and a prompt `bash_kill` reaches them.
            if let Some(process) = handle.inner.process.get()
                && process
                    .output
                    .outcome()
                    .is_some_and(|outcome| !outcome.left_running.is_empty())
            {
                let _ = handle.inner.manager.send(Wait { id: process.id }).await;
            }
            status
        })
    }

    /// A daemon the command started and that outlived it (`nohup server > log 2>&1 &`, or one
    /// still holding the pipes at the end of the drain grace): a task of its own, so a later call
    /// can stop it with `bash_kill` (a confined command may not signal another call's processes).
    fn left_behind(&self) -> Option<LeftBehind> {
        let process = self.inner.process.get()?;
        let processes = process.output.outcome()?.left_running.clone();
        if processes.is_empty() {
            return None;
        }
        Some(LeftBehind {
            description: crate::leftovers::describe(&processes),
            pids: processes.iter().map(|p| p.pid).collect(),
            producer: Box::new(crate::Leftovers::new(
                self.inner.manager.clone(),
                process.pid,
                processes,
                self.inner.grace,
            )),
        })
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
        let live = process
            .output
            .live_changes()
            .map(|changes| live_matches(changes, condition.clone()));
        Box::pin(async move {
            let streams = futures::future::select(stdout, stderr);
            match live {
                Some(live) => {
                    futures::future::select(streams, live).await;
                }
                None => {
                    streams.await;
                }
            }
        })
    }
}

/// Resolves once `condition` holds on a terminal's live text (the prompt line the program waits at,
/// or the screen) as it changes from now on; the stream has that text only once its line completes.
fn live_matches(
    mut changes: tokio::sync::watch::Receiver<Live>,
    condition: Arc<dyn OutputCondition>,
) -> BoxFuture<'static, ()> {
    Box::pin(async move {
        while changes.changed().await.is_ok() {
            // A copy, so the driver is never held up while the text is matched.
            let live = changes.borrow_and_update().clone();
            let holds = match &live {
                Live::Empty => false,
                Live::Line(text) | Live::Screen(text) => condition.scan().feed(text.as_bytes()),
            };
            if holds {
                return;
            }
        }
        std::future::pending::<()>().await;
    })
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
