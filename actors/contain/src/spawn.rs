//! Starting a child inside its cgroup leaf with no window, in a new session, with a clean signal
//! state and only descriptors 0–2.
//!
//! glibc 2.36 has neither `posix_spawnattr_setcgroup_np` nor `pidfd_spawn`, so the child is
//! started with a raw `clone3`:
//! - `CLONE_INTO_CGROUP` puts it in the v2 leaf atomically with its creation (Linux 5.7);
//! - the v1 limit leaves (hybrid hosts) are joined by the child itself, writing `0` to their
//!   pre-opened `cgroup.procs` as its first act, before exec: only the exec'd program can fork, so
//!   no grandchild ever starts outside them;
//! - `CLONE_PIDFD` returns a pidfd, since the process crate reaps through pidfds;
//! - `CLONE_VFORK` suspends the calling thread until the child has exec'd or exited, so exec errors
//!   are known when `spawn` returns, and carry the errno.
//!
//! The argument and environment strings are checked for NUL bytes when a [`Program`] is built,
//! before anything runs. Besides the chosen method, [`Method::Clone3Fork`] (the fallback off
//! x86_64) can be asked for with [`spawn_with`], and with the `bench-internals` feature
//! `Method::SpawnThenJoin` (glibc `posix_spawn`, then a racy move into the cgroup), the baseline
//! the timing harness (`tests/it/spawn_timing.rs`) measures against.
//!
//! ## The choice
//!
//! **(c) `Clone3Vm` with recycled leaves** ([`crate::LeafPool`]): it is the only window-free method
//! that costs no more than `posix_spawn` itself (BENCHMARKS.md, "Spawn methods: why `clone3` with
//! `CLONE_VM`", has the figures). (a) `posix_spawn` and a move is racy and pays a cgroup migration
//! in the parent; (b) `clone3` with fork semantics copies the parent's page tables, which grows
//! with the runtime's resident memory. (c) is what glibc's `posix_spawn` does internally
//! (`CLONE_VM | CLONE_VFORK` on a separate stack), so its soundness argument is the same: the
//! calling thread is suspended until the child execs or exits, every signal is blocked across the
//! clone and the child resets all handlers before unblocking, and the child code makes only
//! async-signal-safe calls on data prepared beforehand. It needs a few lines of assembly per
//! architecture (x86_64 here; elsewhere [`Method::Clone3Vm`] falls back to (b)). The first process
//! to enter a fresh cgroup costs about 1 ms more in the kernel (see `pool.rs`), hence the pool.

mod child;
mod clone;
#[cfg(feature = "bench-internals")]
mod posix;

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::libc::{self, c_char};

pub use child::Step;

use crate::cgroup::CgroupTarget;
use crate::confine::{Confinement, Prepared};
use crate::confined_thread::Running;

/// Why a spawn failed.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// An argument, variable or path contains a NUL byte (or a variable name contains `=`).
    #[error("argument or variable contains a NUL byte, or a variable name contains '='")]
    InvalidString,
    /// Preparing the spawn failed (pipes, descriptors, stack).
    #[error("preparing the spawn: {0}")]
    Setup(#[source] io::Error),
    /// The kernel refused to create the child (`EAGAIN` at a pids limit, `ENOSYS` without clone3,
    /// `EOPNOTSUPP`/`EBUSY` for an unusable cgroup).
    #[error("clone3: {0}")]
    Clone(#[source] io::Error),
    /// Writing the pid into a cgroup after `posix_spawn` failed ([`Method::SpawnThenJoin`] only).
    #[cfg(feature = "bench-internals")]
    #[error("moving the child into its cgroup: {0}")]
    Join(#[source] io::Error),
    /// The child failed at `step` before running the program (the child has been reaped).
    #[error("{step}: {source}")]
    Child {
        /// Which step failed.
        step: Step,
        /// The errno, e.g. ENOENT or EACCES from exec.
        #[source]
        source: io::Error,
    },
}

impl SpawnError {
    /// The errno behind the failure, if any.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            SpawnError::InvalidString => None,
            SpawnError::Setup(e) | SpawnError::Clone(e) | SpawnError::Child { source: e, .. } => {
                e.raw_os_error()
            }
            #[cfg(feature = "bench-internals")]
            SpawnError::Join(e) => e.raw_os_error(),
        }
    }
}

/// How the child is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// glibc `posix_spawn`, then the parent writes the pid into `cgroup.procs`. Racy: the child may
    /// fork before it is moved. A baseline for measurement only (the `bench-internals` feature).
    #[cfg(feature = "bench-internals")]
    SpawnThenJoin,
    /// `clone3(CLONE_INTO_CGROUP | CLONE_VFORK | CLONE_PIDFD)` without `CLONE_VM`: the child is a
    /// copy-on-write copy of the parent (page tables are copied).
    Clone3Fork,
    /// The same with `CLONE_VM` and a separate child stack (no page-table copy), like glibc's own
    /// `posix_spawn`. x86_64 only; elsewhere it falls back to [`Method::Clone3Fork`].
    Clone3Vm,
}

impl Method {
    /// The method [`spawn`] uses.
    pub const DEFAULT: Method = Method::Clone3Vm;
}

/// A program with its arguments, environment and working directory, checked and converted for exec.
#[derive(Debug, Clone)]
pub struct Program {
    program: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    cwd: Option<CString>,
    nofile_soft: Option<u64>,
    confinement: Option<Confinement>,
    terminal: ControllingTerminal,
}

fn c_string(bytes: &[u8]) -> Result<CString, SpawnError> {
    CString::new(bytes).map_err(|_| SpawnError::InvalidString)
}

impl Program {
    /// `program` is the path to execute (no `PATH` search); `argv` includes `argv[0]`; `env` is the
    /// complete environment; `cwd` `None` keeps the parent's.
    pub fn new<A, K, V>(
        program: &Path,
        argv: impl IntoIterator<Item = A>,
        env: impl IntoIterator<Item = (K, V)>,
        cwd: Option<&Path>,
    ) -> Result<Self, SpawnError>
    where
        A: AsRef<OsStr>,
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        let argv = argv
            .into_iter()
            .map(|a| c_string(a.as_ref().as_bytes()))
            .collect::<Result<Vec<_>, _>>()?;
        let envp = env
            .into_iter()
            .map(|(k, v)| {
                let k = k.as_ref().as_bytes();
                if k.is_empty() || k.contains(&b'=') {
                    return Err(SpawnError::InvalidString);
                }
                let mut entry = k.to_vec();
                entry.push(b'=');
                entry.extend_from_slice(v.as_ref().as_bytes());
                c_string(&entry)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Program {
            program: c_string(program.as_os_str().as_bytes())?,
            argv,
            envp,
            cwd: cwd
                .map(|c| c_string(c.as_os_str().as_bytes()))
                .transpose()?,
            nofile_soft: None,
            confinement: None,
            terminal: ControllingTerminal::None,
        })
    }
}

impl Program {
    /// A program from strings already converted for exec: `envp` entries are `NAME=value`. For
    /// callers that keep their environment rendered as C strings (the process manager renders the
    /// ambient part once), so a spawn does not convert it again.
    pub fn from_c_strings(
        program: CString,
        argv: Vec<CString>,
        envp: Vec<CString>,
        cwd: Option<CString>,
    ) -> Self {
        Program {
            program,
            argv,
            envp,
            cwd,
            nofile_soft: None,
            confinement: None,
            terminal: ControllingTerminal::None,
        }
    }

    /// The soft open-files limit the program starts with (capped at the hard limit), set in the
    /// child before exec; `None` keeps the parent's. Not applied by `Method::SpawnThenJoin` (a
    /// `bench-internals` baseline).
    pub fn with_nofile_soft_limit(mut self, soft: Option<u64>) -> Self {
        self.nofile_soft = soft;
        self
    }

    /// Confines the program (see [`crate::confine`]): the child confines itself, or hands a
    /// launcher its filter, as its last step before exec, and a refusal fails the spawn. Not
    /// supported by `Method::SpawnThenJoin` (a `bench-internals` baseline), which then refuses to
    /// spawn.
    pub fn with_confinement(mut self, confinement: Option<Confinement>) -> Self {
        self.confinement = confinement;
        self
    }

    /// Whether the child takes its stdin as its controlling terminal (stdin must then be a pty
    /// slave, see [`crate::pty`]): after `setsid` and the stdio step the child runs
    /// `ioctl(0, TIOCSCTTY)`, so the program's process group is the terminal's foreground group.
    /// Not supported by `Method::SpawnThenJoin` (a `bench-internals` baseline), which refuses.
    pub fn with_controlling_terminal(mut self, terminal: ControllingTerminal) -> Self {
        self.terminal = terminal;
        self
    }
}

/// Whether a spawned program gets a controlling terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ControllingTerminal {
    /// None: a new session without a terminal (pipes or `/dev/null` on 0–2).
    #[default]
    None,
    /// The pty slave passed as stdin becomes the new session's controlling terminal.
    Stdin,
}

/// The descriptors that become the child's 0, 1 and 2.
#[derive(Debug, Clone, Copy)]
pub struct Stdio<'a> {
    /// Becomes fd 0.
    pub stdin: BorrowedFd<'a>,
    /// Becomes fd 1.
    pub stdout: BorrowedFd<'a>,
    /// Becomes fd 2.
    pub stderr: BorrowedFd<'a>,
}

/// A started child: its pid (leader of its own session and group) and a pidfd to wait on. The
/// caller reaps it (`waitpid(pid)` once the pidfd is readable).
#[derive(Debug)]
pub struct Child {
    /// The child's pid, also its process group and session id.
    pub pid: i32,
    /// A pidfd for the child (`None` only for the `bench-internals` baseline
    /// `Method::SpawnThenJoin`, when `pidfd_open` failed).
    pub pidfd: Option<OwnedFd>,
}

/// Starts `program` with [`Method::DEFAULT`]; inside `cgroup` when given.
pub fn spawn(
    program: &Program,
    stdio: Stdio<'_>,
    cgroup: Option<CgroupTarget<'_>>,
) -> Result<Child, SpawnError> {
    spawn_with(Method::DEFAULT, program, stdio, cgroup)
}

/// Starts `program` with a given method (for measurement).
pub fn spawn_with(
    method: Method,
    program: &Program,
    stdio: Stdio<'_>,
    cgroup: Option<CgroupTarget<'_>>,
) -> Result<Child, SpawnError> {
    // Sources that sit on another stdio slot would be clobbered by an earlier dup2: move them up.
    let mut moved: Vec<OwnedFd> = Vec::new();
    let mut fds = [0 as RawFd; 3];
    for (target, fd) in [stdio.stdin, stdio.stdout, stdio.stderr].iter().enumerate() {
        let raw = fd.as_raw_fd();
        fds[target] = if raw <= 2 && raw != target as RawFd {
            let up = dup_above_stdio(raw).map_err(SpawnError::Setup)?;
            let r = up.as_raw_fd();
            moved.push(up);
            r
        } else {
            raw
        };
    }
    let mut argv: Vec<*const c_char> = program.argv.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const c_char> = program.envp.iter().map(|e| e.as_ptr()).collect();
    envp.push(std::ptr::null());
    let v1: Vec<RawFd> = cgroup
        .map(|c| c.v1_procs.iter().map(AsRawFd::as_raw_fd).collect())
        .unwrap_or_default();
    // Entering a mount namespace resets the working directory (the spawning thread's too): "stay in
    // the parent's" must be named.
    let in_namespace = program
        .confinement
        .as_ref()
        .is_some_and(Confinement::enters_mount_namespace);
    let kept_cwd = match (&program.cwd, in_namespace) {
        (None, true) => {
            let here = std::env::current_dir().map_err(SpawnError::Setup)?;
            Some(c_string(here.as_os_str().as_bytes())?)
        }
        _ => None,
    };
    let cwd = program
        .cwd
        .as_ref()
        .or(kept_cwd.as_ref())
        .map_or(std::ptr::null(), |c| c.as_ptr());
    // One attempt, from `thread` or from this one; `None`: the thread is gone.
    let attempt =
        |thread: Option<&Running>| -> Result<Option<Result<Child, SpawnError>>, SpawnError> {
            let confinement = Prepared::new(program.confinement.as_ref(), thread.is_some())
                .map_err(SpawnError::Setup)?;
            let request = clone::Request {
                program: program.program.as_ptr(),
                argv: argv.as_ptr(),
                envp: envp.as_ptr(),
                cwd,
                stdio: fds,
                v1_procs: &v1,
                cgroup: cgroup.map(|c| c.v2_dir.as_raw_fd()),
                nofile_soft: program.nofile_soft,
                confinement: confinement.child(),
                terminal: program.terminal == ControllingTerminal::Stdin,
            };
            let result = match (method, thread) {
                #[cfg(feature = "bench-internals")]
                (Method::SpawnThenJoin, _) => Some(posix::posix_spawn_then_join(&request)),
                (Method::Clone3Fork, Some(thread)) => thread.run(|| clone::clone3_fork(&request)),
                (Method::Clone3Vm, Some(thread)) => thread.run(|| clone::clone3_vm(&request)),
                (Method::Clone3Fork, None) => Some(clone::clone3_fork(&request)),
                (Method::Clone3Vm, None) => Some(clone::clone3_vm(&request)),
            };
            if let Some(Ok(child)) = &result {
                confinement.start_gate(child.pid);
            }
            Ok(result)
        };
    // A Landlock confinement's commands are spawned by its confined thread
    // (`crate::confined_thread`), except by the measurement baseline, which refuses confinement.
    let thread = match method {
        #[cfg(feature = "bench-internals")]
        Method::SpawnThenJoin => None,
        Method::Clone3Fork | Method::Clone3Vm => program
            .confinement
            .as_ref()
            .and_then(Confinement::spawning_thread),
    };
    let result = match attempt(thread)? {
        Some(result) => result,
        // The thread gave no result (a job that panicked): the child confines itself instead.
        None => {
            tracing::warn!("the confined spawning thread is gone: the child confines itself");
            attempt(None)?.unwrap_or_else(|| Err(thread_gone()))
        }
    };
    drop(moved);
    result
}

/// The spawn's error when no spawn could be made at all (not reached: the second attempt, from this
/// thread, always answers).
fn thread_gone() -> SpawnError {
    SpawnError::Setup(io::Error::other("the confined spawning thread is gone"))
}

/// A close-on-exec pipe (read end, write end) whose descriptors are both above 2, so `dup2` onto
/// 0–2 in the child always makes a fresh, inheritable descriptor (a host that closed its own stdio
/// could otherwise get fd 1).
pub fn pipe_above_stdio() -> io::Result<(OwnedFd, OwnedFd)> {
    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    Ok((above_stdio(read)?, above_stdio(write)?))
}

/// `fd` itself when it is above 2, else a close-on-exec duplicate above 2 (`fd` is closed).
pub fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    dup_above_stdio(fd.as_raw_fd())
}

/// `F_DUPFD_CLOEXEC` onto the lowest free descriptor above 2.
fn dup_above_stdio(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: fcntl with F_DUPFD_CLOEXEC returns a new descriptor or -1.
    let up = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if up < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptor is new and owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(up) })
}
