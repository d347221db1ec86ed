//! dsh-process: the process layer of dsh.
//!
//! Starts commands as their own session and process group inside their containment (a cgroup leaf,
//! a subreaper marker, or the group alone), captures their output with bounded memory (tail in memory,
//! whole stream in a spill file), kills all of a command's descendants (SIGTERM, then SIGKILL after a
//! grace; a killed process settles only when all of it is gone), and decides when a process has
//! settled even if a descendant keeps the pipes open.
//!
//! Words, each with one meaning: the *manager* supervises every process; a *policy* decides admission
//! and stragglers; a *driver* runs one child; a process *settles* once, when its driver has decided it
//! is over and stored its outcome ([`Settlement`] says how).
//!
//! Layout:
//! - `spec`, `env`, `abort`: what a spawn is given; the credential scrub and `DSH_*` channels.
//! - `spawn`, `child_env`: starting one child (through `dsh_contain::spawn`, into a new session and
//!   its containment, with the ambient environment rendered once per manager); it is reaped through
//!   its pidfd by `dsh_contain::reap`.
//! - `containment`, `liveness`: how a process is kept together with all its descendants (cgroup
//!   leaf, subreaper marker or process group), the watchdog, and the `/proc` questions asked off the
//!   runtime's thread; `dsh_contain::orphans` reaps the orphans a subreaper adopts.
//! - `watchdog_link`: the watchdog kept alive: everything registered is booked, and a watchdog that
//!   dies is replaced and told it all again (bounded restarts).
//! - `driver`, `shared_output`, `scan`: the task that drives one child to settlement, the output and
//!   outcome it shares with readers, and the conditions matched against a stream as it is written.
//! - `input`, `input_driver`, [`terminal`]: an interactive child's input (a bounded queue and the
//!   published "waiting for input" state), the driver's side that writes it, reads a pty master
//!   through the terminal emulator and asks the kernel whether the program waits (issue 22).
//! - `collector`, `tail`, `spill`: per-stream bounded output (the kept tail in one buffer,
//!   page-backed when large through `dsh_contain::pages`) and spill files.
//! - [`signal`], `stragglers`: group signalling, `/proc` liveness probes, and killing groups that
//!   outlived their leader.
//! - `table`: the plain process table (records, generation ids, admission queue, stragglers, spill
//!   directory) and every decision about it.
//! - `manager`, `messages`, `config`: the one actor, a thin owner of the table, and its protocol.
//! - `policy`: the policy the manager asks about admission and stragglers.
//!
//! Hosts use the items re-exported here; of the modules only [`signal`] is public (its `/proc` probes
//! serve tests and health checks), and [`rlimit`] is `dsh_contain`'s, re-exported. This crate has no
//! `unsafe` (`forbid(unsafe_code)`): the raw syscalls it needs are `dsh_contain`'s. The manager
//! runs on an actix arbiter; nothing else here depends on actix. Linux only: the layer relies on
//! `clone3`, pidfds, cgroups or `PR_SET_CHILD_SUBREAPER`, and `/proc`.

#![forbid(unsafe_code)]

#[cfg(not(target_os = "linux"))]
compile_error!(
    "dsh-process supports Linux only: it relies on clone3, pidfd_open, cgroups or \
     PR_SET_CHILD_SUBREAPER, and /proc"
);

mod abort;
mod child_env;
mod collector;
mod config;
mod containment;
mod driver;
mod env;
mod errors;
mod ids;
mod input;
mod input_driver;
mod liveness;
mod lock;
mod manager;
mod messages;
mod outcome;
mod policy;
mod scan;
mod shared_output;
pub mod signal;
mod spawn;
mod spec;
mod spill;
mod stragglers;
mod table;
mod tail;
pub mod terminal;
mod terminal_slots;
mod watchdog_link;

pub use abort::{AbortSignal, ensure_not_aborted, wait_abort};
pub use config::ManagerConfig;
pub use containment::{ContainmentConfig, ContainmentError};
pub use dsh_contain::pages::page_backed_bytes;
pub use dsh_contain::pty::Size as TerminalSize;
pub use dsh_contain::rlimit;
pub use dsh_contain::{Limits as TaskLimits, Mode as ContainmentMode};
pub use env::DSH_ENV_PREFIX;
pub use errors::{ProcessError, SpawnError, os_error_text};
pub use ids::ProcessId;
pub use input::{
    INPUT_QUEUE_BYTES, InputChannel, InputError, InputItem, InputState, KeyInput, PipeKey,
};
pub use input_driver::{AFTER_WRITE, CHECK_BACKED_OFF, CHECK_EVERY, HIBERNATE_AFTER, SETTLE};
pub use lock::lock_unpoisoned;
pub use manager::ProcessManager;
pub use messages::{
    AdmissionCost, Discard, GetAdmissionCost, Kill, KillAllNow, KillLeftovers, KillOutcome,
    LeftoversAlive, ManagerStats, Read, Release, Shutdown, Spawn, SpawnedProcess, Stats, Wait,
    Write,
};
pub use outcome::{
    CollectedOutput, LeftProcess, ProcessOutcome, ReadResult, Settlement, StreamKind,
};
pub use policy::{
    Admission, AdmissionRequest, AdmitAll, Load, MaxConcurrent, MaxPerSession, PolicyStack,
    ProcessPolicy, SettledProcess, StragglerAction,
};
pub use scan::{ScanWatch, StreamScan};
pub use shared_output::{Live, SharedOutput};
pub use spec::{InputMode, ProcessSpawnSpec, QueuedNotice};
pub use terminal_slots::DEFAULT_MAX_TERMINALS;
pub use watchdog_link::{
    MAX_RESTARTS_IN_A_ROW as WATCHDOG_RESTARTS_IN_A_ROW, WatchdogCommand, WatchdogStatus,
};
