//! The errors of the process layer. Messages are lowercase, without a trailing period, and the ones a
//! model sees are exactly as docs/CONTRACT.md, "Errors", states them.

use std::io;
use std::path::PathBuf;

use crate::ids::ProcessId;

/// Why a spawn did not produce a running process. Nothing is left running when one is returned.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The spec's abort signal had already fired.
    #[error("aborted before spawn: {0}")]
    AbortedBeforeSpawn(String),
    /// `argv` was empty or `argv[0]` was an empty string.
    #[error("invalid argv: expected a non-empty program name at argv[0]")]
    EmptyArgv,
    /// A `DSH_*` name was passed on the ordinary `env` channel.
    #[error("ordinary child env cannot set reserved variable \"{0}\"; use dshEnv")]
    ReservedOnOrdinaryChannel(String),
    /// A non-`DSH_*` name was passed on the managed `dsh_env` channel.
    #[error("managed child env cannot set ordinary variable \"{0}\"; use env")]
    OrdinaryOnManagedChannel(String),
    /// The working directory does not exist or is not a directory.
    #[error("workdir {path:?} is not usable: {}", os_error_text(.source))]
    Workdir {
        /// The working directory the spec asked for.
        path: PathBuf,
        /// Why it could not be used.
        source: io::Error,
    },
    /// The operating system refused to start the program.
    #[error("spawn {program:?} failed: {}", os_error_text(.source))]
    Os {
        /// The program that was to run (`argv[0]`).
        program: String,
        /// What the operating system said.
        source: io::Error,
    },
    /// The process policy refused admission (the text is docs/CONTRACT.md's, "Errors").
    #[error("spawn refused by supervisor policy: {0}")]
    Refused(String),
    /// The runtime's terminals are all in use (issue 22, `--max-ttys`).
    #[error(
        "too many terminals: at most {0} tty tasks run at once (--max-ttys); wait for one to finish or stop one with bash_kill"
    )]
    TooManyTerminals(usize),
    /// The manager is shutting down or has shut down.
    #[error("process manager is shut down")]
    ShutDown,
    /// The process's containment (its cgroup leaf) could not be prepared.
    #[error("cannot contain the process: {0}")]
    Containment(String),
    /// The child could not confine itself before exec (drop its capabilities, apply its Landlock
    /// ruleset, install its seccomp filter, or hand a launcher the filter); nothing ran. `step`
    /// names which, e.g. "applying the Landlock sandbox".
    #[error("{step} failed: {}", os_error_text(.source))]
    Confine {
        /// The confinement step that failed.
        step: dsh_contain::spawn::Step,
        /// The kernel's answer.
        source: io::Error,
    },
    /// The private spill directory could not be created.
    #[error("cannot create the spill directory: {}", os_error_text(.0))]
    SpillDir(io::Error),
}

/// Errors of operations on an existing process id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProcessError {
    /// The id was never issued by this manager, or its record was released.
    #[error("unknown or released {0}")]
    Unknown(ProcessId),
    /// The manager shut down before the operation could complete.
    #[error("process manager is shut down")]
    ShutDown,
}

/// `ENOENT: No such file or directory (os error 2)`: the errno name first, so callers and models can
/// match on it, then the OS text.
pub fn os_error_text(err: &io::Error) -> String {
    match err.raw_os_error() {
        Some(code) => format!("{:?}: {}", nix::errno::Errno::from_raw(code), err),
        None => err.to_string(),
    }
}
