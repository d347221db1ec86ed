//! dsh-process: the process layer of dsh.
//!
//! Starts commands as their own session and process group, captures their output with bounded memory
//! (tail in memory, whole stream in a spill file), kills whole groups (SIGTERM, then SIGKILL after a
//! grace), and decides when a process has settled even if a descendant keeps the pipes open.
//!
//! Layout:
//! - [`spec`], [`env`](mod@env), [`abort`]: what a spawn is given; the credential scrub and `DSH_*` channels.
//! - `spawn`, `child_env`, `reap`, `driver`: plain tokio + nix code that starts one child (`posix_spawn`
//!   into a new session, with the ambient environment rendered once per manager), reaps it through its
//!   pidfd, and supervises it to settlement.
//! - [`collector`], [`spill`]: per-stream bounded output and spill files.
//! - [`signal`]: group signalling and `/proc` liveness probes.
//! - [`manager`], [`group`]: the two actors, thin owners around the code above.
//! - [`policy`]: admission (concurrency limits, queueing) and what happens to stragglers.
//!
//! The actors run on an actix arbiter; nothing else here depends on actix.

pub mod abort;
mod child_env;
pub mod collector;
mod driver;
pub mod env;
pub mod errors;
pub mod group;
mod ids;
pub mod manager;
pub mod outcome;
pub mod policy;
mod reap;
pub mod rlimit;
pub mod signal;
mod spawn;
pub mod spec;
pub mod spill;

pub use abort::AbortSignal;
pub use driver::SharedOutput;
pub use env::{DSH_ENV_PREFIX, build_child_env, is_scrubbed_name};
pub use errors::{ProcessError, SpawnError, os_error_text};
pub use ids::ProcessId;
pub use manager::{
    Kill, KillAllNow, KillOutcome, ManagerConfig, ManagerStats, ProcessManager, Read, Release,
    Shutdown, Spawn, SpawnedProcess, Stats, Wait,
};
pub use outcome::{CollectedOutput, ProcessOutcome, ReadResult, Settlement, StreamKind};
pub use policy::{
    Admission, AdmitAll, Load, MaxConcurrent, Settled, StragglerAction, SupervisorPolicy,
};
pub use spec::ProcessSpawnSpec;
