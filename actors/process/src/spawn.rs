//! Starting a child in its own session, with a clean signal state and explicit stdio.
//!
//! - `setsid()` in `pre_exec`: the child leads a new session and process group (pgid = pid) and has no
//!   controlling terminal, so prompts for `/dev/tty` fail fast instead of hanging. Never combined with
//!   `process_group(0)`, which makes `setsid` fail with EPERM.
//! - Every signal is unblocked and the termination signals get their default action back: a blocked or
//!   ignored SIGTERM inherited from the spawning thread would make the kill escalation do nothing.
//! - stdin is `/dev/null` unless bytes are given; then it is a pipe that a small task writes and closes
//!   (EPIPE from a child that exits without reading is ignored). stdout and stderr are pipes.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io;
use std::path::Path;
use std::process::Stdio;

use nix::sys::signal::{
    SaFlags, SigAction, SigHandler, SigSet, SigmaskHow, Signal, sigaction, sigprocmask,
};
use tokio::io::AsyncWriteExt;
use tokio::net::unix::pipe;
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

use crate::errors::SpawnError;

/// A child that has just started.
pub(crate) struct Started {
    pub child: Child,
    pub pid: i32,
    /// The read ends, as non-blocking pipe receivers: the driver waits for readability before it
    /// allocates a buffer, so an idle child costs no read buffer at all.
    pub stdout: pipe::Receiver,
    pub stderr: pipe::Receiver,
    /// The task writing the given stdin bytes, if any.
    pub stdin_writer: Option<JoinHandle<()>>,
}

/// Checks that `cwd` is a directory we can name in an error before forking.
pub(crate) fn check_workdir(cwd: &Path) -> Result<(), SpawnError> {
    match std::fs::metadata(cwd) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(SpawnError::Workdir {
            path: cwd.to_path_buf(),
            source: io::Error::from_raw_os_error(nix::libc::ENOTDIR),
        }),
        Err(source) => Err(SpawnError::Workdir {
            path: cwd.to_path_buf(),
            source,
        }),
    }
}

/// Starts `argv` in `cwd` with exactly `env`. Must be called inside a tokio runtime.
pub(crate) fn start_child(
    argv: &[String],
    cwd: &Path,
    env: BTreeMap<OsString, OsString>,
    stdin: Option<Vec<u8>>,
) -> Result<Started, SpawnError> {
    check_workdir(cwd)?;
    let mut command = Command::new(&argv[0]);
    command
        .args(&argv[1..])
        .current_dir(cwd)
        .env_clear()
        .envs(env)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(false);
    // SAFETY: the closure runs in the forked child before exec and only makes async-signal-safe
    // system calls (setsid, sigprocmask, sigaction) on stack values; it allocates nothing and logs nothing.
    unsafe {
        command.pre_exec(prepare_child);
    }
    let mut child = command.spawn().map_err(|source| SpawnError::Os {
        program: argv[0].clone(),
        source,
    })?;
    let pid = child.id().map(|p| p as i32).unwrap_or(-1);
    let pipes = match (child.stdout.take(), child.stderr.take()) {
        (Some(stdout), Some(stderr)) => receiver(stdout.into_owned_fd())
            .and_then(|out| Ok((out, receiver(stderr.into_owned_fd())?))),
        _ => Err(io::Error::other("stdio pipes missing")),
    };
    let (stdout, stderr) = match pipes {
        Ok(pair) => pair,
        Err(source) => {
            // Cannot happen with piped stdio; fail closed rather than supervise a half-wired child.
            kill_unsupervised(pid);
            return Err(SpawnError::Os {
                program: argv[0].clone(),
                source,
            });
        }
    };
    let stdin_writer = match (stdin, child.stdin.take()) {
        (Some(bytes), Some(mut pipe)) => Some(tokio::spawn(async move {
            // EPIPE (the child exited without reading) and other write errors do not matter: the
            // outcome is decided by the exit and the output alone.
            let _ = pipe.write_all(&bytes).await;
            let _ = pipe.shutdown().await;
        })),
        _ => None,
    };
    Ok(Started {
        child,
        pid,
        stdout,
        stderr,
        stdin_writer,
    })
}

fn receiver(fd: io::Result<std::os::fd::OwnedFd>) -> io::Result<pipe::Receiver> {
    pipe::Receiver::from_owned_fd(fd?)
}

/// Kills the group of a child we are not going to supervise.
fn kill_unsupervised(pid: i32) {
    crate::signal::signal_group(pid, Signal::SIGKILL);
}

/// Runs in the child between fork and exec.
fn prepare_child() -> io::Result<()> {
    nix::unistd::setsid()?;
    sigprocmask(SigmaskHow::SIG_UNBLOCK, Some(&SigSet::all()), None)?;
    let default = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
    for signal in [
        Signal::SIGHUP,
        Signal::SIGINT,
        Signal::SIGQUIT,
        Signal::SIGTERM,
        Signal::SIGPIPE,
    ] {
        // SAFETY: installing the default disposition is always sound.
        unsafe { sigaction(signal, &default) }?;
    }
    Ok(())
}
