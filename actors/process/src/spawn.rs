//! Starting a child in its own session, inside its containment, with a clean start.
//!
//! The child is started by `dsh_contain::spawn` (`clone3` with `CLONE_VM | CLONE_VFORK`, the same
//! fast path glibc's `posix_spawn` takes; BENCHMARKS.md, "Spawn methods", has the measurements),
//! which gives it:
//! - a new session and process group (pgid = pid) and no controlling terminal, so prompts for
//!   `/dev/tty` fail fast instead of hanging;
//! - an empty signal mask and default dispositions for every handled signal and for HUP, INT, QUIT,
//!   TERM and PIPE: a blocked or ignored SIGTERM inherited from the spawning thread would make the
//!   kill escalation do nothing;
//! - only descriptors 0–2: stdin is `/dev/null` unless bytes are given (then a pipe that a small task
//!   writes and closes; EPIPE from a child that exits without reading is ignored), stdout and stderr
//!   are pipes, and everything from 3 up is closed on exec, whatever the host left open;
//! - its cgroup leaf from birth (cgroup mode) or its marker variable (subreaper mode);
//! - the working directory (checked beforehand so a missing one gets an error naming it; a failed
//!   `chdir` in the child is reported the same way) and exec errors with their errno.
//!
//! The program is looked up on the child's own `PATH`. The child is reaped through the pidfd the
//! spawn returns (`dsh_contain::reap`), never by tokio.

mod program_cache;

pub(crate) use program_cache::ProgramCache;

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use nix::libc;
use tokio::io::AsyncWriteExt;
use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;
use tokio::task::JoinHandle;

use dsh_contain::confine::Confinement;
use dsh_contain::pty::{Pty, Size};
use dsh_contain::reap::ExitWatcher;
use dsh_contain::spawn::{above_stdio, pipe_above_stdio};
use dsh_contain::{ControllingTerminal, Program, Stdio};

use crate::child_env::ChildEnv;
use crate::containment::Contained;
use crate::errors::SpawnError;
use crate::spec::{InputMode, ProcessSpawnSpec};

/// A child that has just started.
pub(crate) struct Started {
    pub pid: i32,
    pub exit: ExitWatcher,
    /// The read ends, as non-blocking pipe receivers: the driver waits for readability before it
    /// allocates a buffer, so an idle child costs no read buffer at all. `None` under a terminal
    /// (the output comes from its master).
    pub stdout: Option<pipe::Receiver>,
    pub stderr: Option<pipe::Receiver>,
    /// The task writing the given stdin bytes, if any.
    pub stdin_writer: Option<JoinHandle<()>>,
    /// The runtime's end of an open input.
    pub input: StartedInput,
    /// Under a terminal, its slot of the manager's cap, held until the driver settles.
    pub terminal_slot: Option<crate::terminal_slots::TerminalSlot>,
}

/// The runtime's end of a child's input after the start.
pub(crate) enum StartedInput {
    /// No input after the start.
    Closed,
    /// The write end of the stdin pipe.
    Pipe(pipe::Sender),
    /// The pty master (non-blocking) and the slave's device number.
    Terminal {
        master: AsyncFd<OwnedFd>,
        device: libc::dev_t,
    },
}

/// What the child gets on stdin.
#[derive(Debug, Clone)]
pub(crate) enum Stdin {
    /// `/dev/null`.
    Null,
    /// A pipe fed these bytes, then closed.
    Bytes(Vec<u8>),
    /// A pipe kept open for writes.
    Open,
    /// A pseudo-terminal of this size on 0–2, the controlling terminal.
    Terminal(Size),
}

impl Stdin {
    /// What `spec` asks for.
    pub(crate) fn of(spec: &ProcessSpawnSpec) -> Stdin {
        match (spec.input, &spec.stdin) {
            (InputMode::Terminal(size), _) => Stdin::Terminal(size),
            (InputMode::Open, _) => Stdin::Open,
            (InputMode::Closed, Some(bytes)) => Stdin::Bytes(bytes.clone()),
            (InputMode::Closed, None) => Stdin::Null,
        }
    }
}

/// Checks that `cwd` is a directory we can name in an error before spawning.
pub(crate) fn check_workdir(cwd: &Path) -> Result<(), SpawnError> {
    match std::fs::metadata(cwd) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(SpawnError::Workdir {
            path: cwd.to_path_buf(),
            source: io::Error::from_raw_os_error(libc::ENOTDIR),
        }),
        Err(source) => Err(SpawnError::Workdir {
            path: cwd.to_path_buf(),
            source,
        }),
    }
}

/// Starts `program` (already found on the child's `PATH`) with `argv`, in `cwd`, with `env`, as the
/// leader of a new session inside `contained`, and attaches its pipes and exit to the async runtime;
/// `stdin` bytes, if any, are written to its stdin and then closed; an open stdin or a terminal is
/// handed to the driver. This is the whole spawn path of the manager.
pub(crate) fn start_child(
    program: &Path,
    argv: &[String],
    cwd: &Path,
    env: &ChildEnv,
    stdin: Stdin,
    contained: &Contained,
    confinement: Option<&dsh_contain::confine::Confinement>,
) -> Result<Started, SpawnError> {
    spawn_raw(program, argv, cwd, env, &stdin, contained, confinement)
        .and_then(|raw| raw.attach(&argv[0], stdin))
}

/// A child just started, before its pipes and exit are attached to the async runtime.
#[derive(Debug)]
pub(crate) struct RawChild {
    pid: i32,
    pidfd: Option<OwnedFd>,
    streams: RawStreams,
}

/// The parent's ends of a just-started child's descriptors.
#[derive(Debug)]
enum RawStreams {
    /// Output pipes, and the stdin pipe's write end when bytes are given or input stays open.
    Pipes {
        stdout: OwnedFd,
        stderr: OwnedFd,
        stdin: Option<OwnedFd>,
    },
    /// The pty master (the slave is the child's 0–2).
    Terminal {
        master: OwnedFd,
        device: libc::dev_t,
    },
}

/// The blocking half of a start: pipes and the spawn of the resolved `program`. Blocks until the
/// child has exec'd, which is why the manager spawns one child per scheduler turn.
fn spawn_raw(
    program: &Path,
    argv: &[String],
    cwd: &Path,
    env: &ChildEnv,
    stdin: &Stdin,
    contained: &Contained,
    confinement: Option<&dsh_contain::confine::Confinement>,
) -> Result<RawChild, SpawnError> {
    let os = |source: io::Error| SpawnError::Os {
        program: argv[0].clone(),
        source,
    };
    let argv_c = argv
        .iter()
        .map(|a| c_string(a.as_bytes()))
        .collect::<io::Result<Vec<_>>>()
        .map_err(os)?;
    let marker = match contained {
        Contained::Marker(marker) => marker.env_entry(),
        Contained::Group | Contained::Leaf(_) => None,
    };
    let envp = env.c_entries(marker).ok_or_else(|| os(nul_byte_error()))?;
    let cwd_c = c_string(cwd.as_os_str().as_bytes()).map_err(os)?;
    let program_c = c_string(program.as_os_str().as_bytes()).map_err(os)?;
    let terminal = match stdin {
        Stdin::Terminal(_) => ControllingTerminal::Stdin,
        Stdin::Null | Stdin::Bytes(_) | Stdin::Open => ControllingTerminal::None,
    };
    let child = Program::from_c_strings(program_c, argv_c, envp, Some(cwd_c))
        .with_nofile_soft_limit(dsh_contain::rlimit::child_soft_limit())
        .with_confinement(confinement.cloned())
        .with_controlling_terminal(terminal);
    let cgroup = match contained {
        Contained::Leaf(leaf) => Some(leaf.target()),
        Contained::Group | Contained::Marker(_) => None,
    };
    // The parent's ends, and the child's (dropped right after the spawn: the child has its
    // copies, and ours must close so that end of file, or `EIO` on a master, can be seen).
    let (streams, child_ends) = match stdin {
        Stdin::Terminal(size) => {
            // In the sandbox's own terminals, if it has them: one the command can see.
            let devpts = confinement.and_then(Confinement::devpts);
            let mut pty =
                Pty::open_in(*size, devpts).map_err(|err| os(io::Error::other(err.to_string())))?;
            let slave = pty
                .take_slave()
                .ok_or_else(|| os(io::Error::from_raw_os_error(libc::EBADF)))?;
            let slave = above_stdio(slave).map_err(os)?;
            let device = pty.device();
            let master = above_stdio(pty.into_master()).map_err(os)?;
            (
                RawStreams::Terminal { master, device },
                (
                    ChildIn::Own(slave.try_clone().map_err(os)?),
                    slave.try_clone().map_err(os)?,
                    slave,
                ),
            )
        }
        Stdin::Null | Stdin::Bytes(_) | Stdin::Open => {
            let (out_r, out_w) = pipe_above_stdio().map_err(os)?;
            let (err_r, err_w) = pipe_above_stdio().map_err(os)?;
            let (stdin_read, stdin_write) = match stdin {
                Stdin::Null => (ChildIn::Shared(dev_null().map_err(os)?), None),
                _ => {
                    let (read, write) = pipe_above_stdio().map_err(os)?;
                    (ChildIn::Own(read), Some(write))
                }
            };
            let streams = RawStreams::Pipes {
                stdout: out_r,
                stderr: err_r,
                stdin: stdin_write,
            };
            (streams, (stdin_read, out_w, err_w))
        }
    };
    let (child_in, child_out, child_err) = &child_ends;
    let stdio = Stdio {
        stdin: child_in.as_fd(),
        stdout: child_out.as_fd(),
        stderr: child_err.as_fd(),
    };
    // Held from before the spawn until the pid is recorded, so the orphan reaper never takes it.
    let registration = dsh_contain::orphans::registry().spawning();
    let spawned = dsh_contain::spawn(&child, stdio, cgroup);
    drop(child_ends);
    let spawned = match spawned {
        Ok(spawned) => spawned,
        Err(err) => return Err(spawn_error(&argv[0], cwd, err)),
    };
    registration.register(spawned.pid);
    Ok(RawChild {
        pid: spawned.pid,
        pidfd: spawned.pidfd,
        streams,
    })
}

/// The manager's error for a failed spawn: a working directory the child could not enter names the
/// directory; a confinement the kernel refused (capabilities, Landlock, seccomp) is [`SpawnError::Confine`]; everything else
/// names the program, with the errno first.
///
/// A restriction that failed with `ENOMEM` or `EAGAIN` was not refused: the command's own memory or
/// process limit (its cgroup is joined before the restriction) left no room to apply it, and the
/// same command would fail unconfined too. That is the program failing to start for lack of
/// resources, never the sandbox being unusable (which the tool reports as `SANDBOX_UNAVAILABLE` and
/// a model reads as "this host cannot sandbox").
fn spawn_error(program: &str, cwd: &Path, err: dsh_contain::SpawnError) -> SpawnError {
    use dsh_contain::spawn::Step;
    let source = || {
        err.raw_os_error()
            .map(io::Error::from_raw_os_error)
            .unwrap_or_else(|| io::Error::other(err.to_string()))
    };
    match &err {
        dsh_contain::SpawnError::Child {
            step: Step::Chdir, ..
        } => SpawnError::Workdir {
            path: cwd.to_path_buf(),
            source: source(),
        },
        dsh_contain::SpawnError::Child {
            step:
                step @ (Step::Confine
                | Step::DropCaps
                | Step::Seccomp
                | Step::LauncherFilter
                | Step::MountNamespace
                | Step::JoinNetns),
            ..
        } if !out_of_resources(err.raw_os_error()) => SpawnError::Confine {
            step: *step,
            source: source(),
        },
        dsh_contain::SpawnError::InvalidString => SpawnError::Os {
            program: program.to_owned(),
            source: nul_byte_error(),
        },
        _ => SpawnError::Os {
            program: program.to_owned(),
            source: source(),
        },
    }
}

/// `ENOMEM` or `EAGAIN`: the kernel ran out of memory or processes for the child, not a refusal.
fn out_of_resources(errno: Option<i32>) -> bool {
    use nix::errno::Errno;
    errno.is_some_and(|code| matches!(Errno::from_raw(code), Errno::ENOMEM | Errno::EAGAIN))
}

/// A pipe's read end as tokio's receiver. The pipe is this spawn's own (`pipe_above_stdio`), so
/// tokio's checks that a descriptor is a readable pipe (`fstat`, `F_GETFL`) are skipped: one
/// `F_SETFL` makes it non-blocking, two syscalls fewer per stream on every spawn.
fn receiver(read_end: OwnedFd) -> io::Result<pipe::Receiver> {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    fcntl(&read_end, FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
    pipe::Receiver::from_owned_fd_unchecked(read_end)
}

/// `/dev/null` (read-only, close-on-exec, above 2) for closed stdin, opened once for the whole
/// process: every such spawn hands the child the same descriptor instead of opening and closing one
/// of its own.
fn dev_null() -> io::Result<BorrowedFd<'static>> {
    static DEV_NULL: OnceLock<OwnedFd> = OnceLock::new();
    if let Some(fd) = DEV_NULL.get() {
        return Ok(fd.as_fd());
    }
    let file = std::fs::File::options().read(true).open("/dev/null")?;
    let fd = above_stdio(file.into())?;
    // Two first spawns may race; the loser's descriptor is closed.
    Ok(DEV_NULL.get_or_init(|| fd).as_fd())
}

/// The child's stdin source: a descriptor of this spawn (a pipe's read end, a pty slave), closed
/// right after it, or the process-wide `/dev/null`.
enum ChildIn {
    Own(OwnedFd),
    Shared(BorrowedFd<'static>),
}

impl ChildIn {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            ChildIn::Own(fd) => fd.as_fd(),
            ChildIn::Shared(fd) => *fd,
        }
    }
}

impl RawChild {
    /// The async half: watch the exit, register the pipes, start writing stdin. Must run inside the
    /// tokio runtime that will drive the child.
    fn attach(self, program: &str, stdin: Stdin) -> Result<Started, SpawnError> {
        let exit = ExitWatcher::new(self.pid, self.pidfd);
        let os = |source: io::Error| {
            // Cannot happen for our own pipes; fail closed rather than drive a half-wired child
            // (`exit` reaps it once it dies).
            crate::signal::signal_group(self.pid, nix::sys::signal::Signal::SIGKILL);
            SpawnError::Os {
                program: program.to_owned(),
                source,
            }
        };
        let (stdout, stderr, stdin_writer, input) = match self.streams {
            RawStreams::Terminal { master, device } => {
                let master = dsh_contain::pty::watch_master(master).map_err(os)?;
                (None, None, None, StartedInput::Terminal { master, device })
            }
            RawStreams::Pipes {
                stdout,
                stderr,
                stdin: write,
            } => {
                let stdout = receiver(stdout).map_err(os)?;
                let stderr = receiver(stderr).map_err(os)?;
                match (stdin, write) {
                    (Stdin::Bytes(bytes), Some(write)) => {
                        let mut sender = pipe::Sender::from_owned_fd(write).map_err(os)?;
                        let writer = tokio::spawn(async move {
                            // EPIPE (the child exited without reading) and other write errors do
                            // not matter: the outcome is decided by the exit and the output alone.
                            let _ = sender.write_all(&bytes).await;
                        });
                        (
                            Some(stdout),
                            Some(stderr),
                            Some(writer),
                            StartedInput::Closed,
                        )
                    }
                    (Stdin::Open, Some(write)) => {
                        let sender = pipe::Sender::from_owned_fd(write).map_err(os)?;
                        (Some(stdout), Some(stderr), None, StartedInput::Pipe(sender))
                    }
                    _ => (Some(stdout), Some(stderr), None, StartedInput::Closed),
                }
            }
        };
        Ok(Started {
            pid: self.pid,
            exit,
            stdout,
            stderr,
            stdin_writer,
            input,
            terminal_slot: None,
        })
    }
}

fn c_string(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| nul_byte_error())
}

fn nul_byte_error() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "argument or variable contains a NUL byte",
    )
}

/// Resolves `name` like `execvp` would, on the child's `PATH` (default `/usr/local/bin:/usr/bin:/bin`).
fn find_program(name: &str, path: Option<&OsStr>) -> Option<PathBuf> {
    if name.contains('/') {
        return Some(PathBuf::from(name));
    }
    let path = path.unwrap_or(OsStr::new("/usr/local/bin:/usr/bin:/bin"));
    std::env::split_paths(path)
        .map(|dir| {
            if dir.as_os_str().is_empty() {
                PathBuf::from(".").join(name)
            } else {
                dir.join(name)
            }
        })
        .find(|candidate| is_executable_file(candidate))
}

fn is_executable_file(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file())
        && nix::unistd::access(path, nix::unistd::AccessFlags::X_OK).is_ok()
}
