//! The executor seam as the tool sees it: the executor's resolver, its two messages as recipients,
//! and the settings it applies (workspace, default and maximum timeout), read from the executor's
//! own config so the schema quotes what the executor does and nothing is copied by hand.

use std::path::PathBuf;

use actix::prelude::*;
use dsh_bash::{BashConfig, LocalBashExecutor, Resolver, Run, Start};

/// The executor seam: its resolver, called in place, and the two messages as recipients, so any
/// actor handling [`Run`] and [`Start`] can stand in.
#[derive(Clone)]
pub struct ExecutorRef {
    /// Turns a request into a spec with the executor's defaults and caps.
    pub resolve: Resolver,
    /// Where foreground runs go.
    pub run: Recipient<Run>,
    /// Where background starts go.
    pub start: Recipient<Start>,
    /// Whether the executor confines commands (a sandbox executor): the tool then advertises the
    /// escalation parameters and needs a sandbox policy resolver.
    pub confines: bool,
    /// The executor's workspace: a relative `workdir` resolves against it. `None`: the runtime
    /// process's cwd.
    pub cwd: Option<PathBuf>,
    /// The executor's default timeout, quoted in the schema.
    pub timeout_ms: u64,
    /// The executor's maximum timeout, quoted in the schema.
    pub max_timeout_ms: u64,
    /// What a `workspace-write` command may write besides the workspace, listed in the `bash`
    /// description (empty: not listed).
    pub writable: Vec<PathBuf>,
}

impl ExecutorRef {
    /// An executor actor at `addr`, started with `config`, that resolves requests with `resolve`.
    pub fn new<A>(config: &BashConfig, resolve: Resolver, addr: Addr<A>) -> Self
    where
        A: Actor<Context = Context<A>> + Handler<Run> + Handler<Start>,
    {
        Self {
            resolve,
            run: addr.clone().recipient(),
            start: addr.recipient(),
            confines: false,
            cwd: config.cwd.clone(),
            timeout_ms: config.timeout_ms,
            max_timeout_ms: config.max_timeout_ms,
            writable: Vec::new(),
        }
    }

    /// An executor that confines commands (see [`ExecutorRef::confines`]).
    pub fn confining(mut self) -> Self {
        self.confines = true;
        self
    }

    /// An executor whose `workspace-write` commands may also write `writable`.
    pub fn with_writable(mut self, writable: Vec<PathBuf>) -> Self {
        self.writable = writable;
        self
    }

    /// The local executor, resolving with the same config it was started with.
    pub fn local(addr: Addr<LocalBashExecutor>, config: &BashConfig) -> Self {
        Self::new(config, config.resolver(), addr)
    }
}
