//! Starting a child in its own session, with a clean signal state and explicit stdio.
//!
//! The child is started with glibc's `posix_spawn` (a CLONE_VFORK fast path that does not copy the
//! parent's page tables), asking it for everything a `pre_exec` would otherwise do after a full fork:
//! - `POSIX_SPAWN_SETSID`: the child leads a new session and process group (pgid = pid) and has no
//!   controlling terminal, so prompts for `/dev/tty` fail fast instead of hanging;
//! - `POSIX_SPAWN_SETSIGMASK` with an empty mask, and `POSIX_SPAWN_SETSIGDEF` for HUP, INT, QUIT, TERM
//!   and PIPE: a blocked or ignored SIGTERM inherited from the spawning thread would make the kill
//!   escalation do nothing;
//! - stdin is `/dev/null` unless bytes are given; then it is a pipe that a small task writes and closes
//!   (EPIPE from a child that exits without reading is ignored). stdout and stderr are pipes;
//! - the working directory is set by `posix_spawn_file_actions_addchdir_np` (checked beforehand so a
//!   missing one gets an error naming it).
//!
//! The program is looked up on the child's own `PATH`. The child is reaped through its pidfd
//! (`reap.rs`), never by tokio.

use std::collections::HashMap;
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::libc;
use tokio::io::AsyncWriteExt;
use tokio::net::unix::pipe;
use tokio::task::JoinHandle;

use crate::child_env::{ChildEnv, EnvBlock};
use crate::errors::SpawnError;
use crate::reap::ExitWatcher;

/// A child that has just started.
pub(crate) struct Started {
    pub pid: i32,
    pub exit: ExitWatcher,
    /// The read ends, as non-blocking pipe receivers: the driver waits for readability before it
    /// allocates a buffer, so an idle child costs no read buffer at all.
    pub stdout: pipe::Receiver,
    pub stderr: pipe::Receiver,
    /// The task writing the given stdin bytes, if any.
    pub stdin_writer: Option<JoinHandle<()>>,
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

/// Where each program name was found, per `PATH` value. An entry is dropped when spawning from it
/// fails, so a program that moved is looked up afresh.
#[derive(Debug, Default)]
pub(crate) struct ProgramCache {
    found: HashMap<(Option<OsString>, String), PathBuf>,
}

impl ProgramCache {
    fn key(name: &str, env: &ChildEnv) -> (Option<OsString>, String) {
        (env.get("PATH").map(OsStr::to_os_string), name.to_owned())
    }

    /// Looks `argv[0]` up on the child's `PATH` (cached). `ENOENT` when it is not there.
    pub(crate) fn program_for(
        &mut self,
        name: &str,
        env: &ChildEnv,
    ) -> Result<PathBuf, SpawnError> {
        let key = Self::key(name, env);
        if let Some(found) = self.found.get(&key) {
            return Ok(found.clone());
        }
        let found = find_program(name, key.0.as_deref()).ok_or_else(|| SpawnError::Os {
            program: name.to_owned(),
            source: io::Error::from_raw_os_error(libc::ENOENT),
        })?;
        self.found.insert(key, found.clone());
        Ok(found)
    }

    /// Drops the cached location of `name` after a spawn from it failed.
    pub(crate) fn forget_program(&mut self, name: &str, env: &ChildEnv) {
        self.found.remove(&Self::key(name, env));
    }
}

/// A child started by `posix_spawn`, before its pipes and exit are attached to the async runtime.
#[derive(Debug)]
pub(crate) struct RawChild {
    pid: i32,
    stdout: OwnedFd,
    stderr: OwnedFd,
    stdin: Option<OwnedFd>,
}

/// The blocking half of a start: pipes and `posix_spawn` of the resolved `program`. Blocks until the
/// child has exec'd, which is why the manager spawns one child per scheduler turn.
pub(crate) fn spawn_raw(
    program: &Path,
    argv: &[String],
    cwd: &Path,
    env: &ChildEnv,
    with_stdin: bool,
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
    let env_block = env.block().ok_or_else(|| os(nul_byte_error()))?;
    let cwd_c = c_string(cwd.as_os_str().as_bytes()).map_err(os)?;
    let program_c = c_string(program.as_os_str().as_bytes()).map_err(os)?;
    let (out_r, out_w) = pipe_above_stdio().map_err(os)?;
    let (err_r, err_w) = pipe_above_stdio().map_err(os)?;
    let stdin_pipe = if with_stdin {
        Some(pipe_above_stdio().map_err(os)?)
    } else {
        None
    };
    let child_stdin = stdin_pipe.as_ref().map(|(read, _)| read.as_raw_fd());
    let pid = spawn_in_session(
        &program_c,
        &argv_c,
        &env_block,
        &cwd_c,
        child_stdin,
        out_w.as_raw_fd(),
        err_w.as_raw_fd(),
    )
    .map_err(os)?;
    // The child has its copies; ours must close so end of file can be seen.
    Ok(RawChild {
        pid,
        stdout: out_r,
        stderr: err_r,
        stdin: stdin_pipe.map(|(_read, write)| write),
    })
}

impl RawChild {
    /// The async half: watch the exit, register the pipes, start writing stdin. Must run inside the
    /// tokio runtime that will supervise the child.
    pub(crate) fn attach(
        self,
        program: &str,
        stdin: Option<Vec<u8>>,
    ) -> Result<Started, SpawnError> {
        let exit = ExitWatcher::new(self.pid);
        let os = |source: io::Error| {
            // Cannot happen for our own pipes; fail closed rather than supervise a half-wired child
            // (`exit` reaps it once it dies).
            crate::signal::signal_group(self.pid, nix::sys::signal::Signal::SIGKILL);
            SpawnError::Os {
                program: program.to_owned(),
                source,
            }
        };
        let stdout = pipe::Receiver::from_owned_fd(self.stdout).map_err(os)?;
        let stderr = pipe::Receiver::from_owned_fd(self.stderr).map_err(os)?;
        let stdin_writer = match (stdin, self.stdin) {
            (Some(bytes), Some(write)) => {
                let mut sender = pipe::Sender::from_owned_fd(write).map_err(os)?;
                Some(tokio::spawn(async move {
                    // EPIPE (the child exited without reading) and other write errors do not matter:
                    // the outcome is decided by the exit and the output alone.
                    let _ = sender.write_all(&bytes).await;
                }))
            }
            _ => None,
        };
        Ok(Started {
            pid: self.pid,
            exit,
            stdout,
            stderr,
            stdin_writer,
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

/// A close-on-exec pipe whose descriptors are both above 2, so `dup2` onto 0–2 in the child always
/// makes a fresh, inheritable descriptor (a host that closed its own stdio could otherwise get fd 1).
fn pipe_above_stdio() -> io::Result<(OwnedFd, OwnedFd)> {
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
    Ok((above_stdio(read)?, above_stdio(write)?))
}

fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    let moved = fcntl(&fd, FcntlArg::F_DUPFD_CLOEXEC(3))?;
    // SAFETY: F_DUPFD_CLOEXEC returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(moved) })
}

/// Owns a `posix_spawn_file_actions_t` / `posix_spawnattr_t` and destroys it on every path.
struct SpawnState {
    actions: libc::posix_spawn_file_actions_t,
    attr: libc::posix_spawnattr_t,
}

impl Drop for SpawnState {
    fn drop(&mut self) {
        // SAFETY: both were initialised before this guard was created.
        unsafe {
            libc::posix_spawn_file_actions_destroy(&mut self.actions);
            libc::posix_spawnattr_destroy(&mut self.attr);
        }
    }
}

fn check(code: libc::c_int) -> io::Result<()> {
    if code == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(code))
    }
}

/// `posix_spawn` of `program` as the leader of a new session, with the given stdio and cwd.
fn spawn_in_session(
    program: &CString,
    argv: &[CString],
    env: &EnvBlock<'_>,
    cwd: &CString,
    stdin: Option<RawFd>,
    stdout: RawFd,
    stderr: RawFd,
) -> io::Result<i32> {
    let mut argv_ptrs: Vec<*mut libc::c_char> = argv
        .iter()
        .map(|a| a.as_ptr() as *mut libc::c_char)
        .collect();
    argv_ptrs.push(std::ptr::null_mut());
    let dev_null = c"/dev/null";
    // SAFETY: every pointer handed to libc points into a CString or Vec that outlives the calls; the
    // actions and attributes are initialised before use and destroyed by `SpawnState`'s drop.
    unsafe {
        let mut state = SpawnState {
            actions: std::mem::zeroed(),
            attr: std::mem::zeroed(),
        };
        check(libc::posix_spawn_file_actions_init(&mut state.actions))?;
        if let Err(err) = check(libc::posix_spawnattr_init(&mut state.attr)) {
            libc::posix_spawn_file_actions_destroy(&mut state.actions);
            std::mem::forget(state);
            return Err(err);
        }
        let actions = &mut state.actions;
        match stdin {
            Some(fd) => check(libc::posix_spawn_file_actions_adddup2(actions, fd, 0))?,
            None => check(libc::posix_spawn_file_actions_addopen(
                actions,
                0,
                dev_null.as_ptr(),
                libc::O_RDONLY,
                0,
            ))?,
        }
        check(libc::posix_spawn_file_actions_adddup2(actions, stdout, 1))?;
        check(libc::posix_spawn_file_actions_adddup2(actions, stderr, 2))?;
        check(libc::posix_spawn_file_actions_addchdir_np(
            actions,
            cwd.as_ptr(),
        ))?;

        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        check(libc::posix_spawnattr_setsigmask(&mut state.attr, &empty))?;
        let mut defaults: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut defaults);
        for signal in [
            libc::SIGHUP,
            libc::SIGINT,
            libc::SIGQUIT,
            libc::SIGTERM,
            libc::SIGPIPE,
        ] {
            libc::sigaddset(&mut defaults, signal);
        }
        check(libc::posix_spawnattr_setsigdefault(
            &mut state.attr,
            &defaults,
        ))?;
        let flags = libc::POSIX_SPAWN_SETSID as libc::c_int
            | libc::POSIX_SPAWN_SETSIGMASK
            | libc::POSIX_SPAWN_SETSIGDEF;
        check(libc::posix_spawnattr_setflags(
            &mut state.attr,
            flags as libc::c_short,
        ))?;

        let mut pid: libc::pid_t = 0;
        // Only the call itself: glibc checks descriptors against the limit when actions are added.
        check(crate::rlimit::with_child_limit(|| {
            libc::posix_spawn(
                &mut pid,
                program.as_ptr(),
                &state.actions,
                &state.attr,
                argv_ptrs.as_ptr(),
                env.envp(),
            )
        }))?;
        Ok(pid)
    }
}
