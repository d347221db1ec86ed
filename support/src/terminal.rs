//! Starting a program on a pseudo-terminal by hand, for the tests of the pty and of the terminal
//! emulator (dsh-contain's and dsh-process's), which drive a real program before the runtime's own
//! spawn is involved. The terminal itself comes from dsh-contain, which this crate cannot name (see
//! the crate's layers), so the caller passes the slave end and the step that attaches it.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

/// Starts `argv` with `TERM=xterm-256color` and the variables in `env`, its own stdio closed, and
/// runs `attach(slave)` in the child between fork and exec to make the terminal its controlling
/// terminal and fds 0–2. The parent's copy of `slave` is closed once the child runs.
///
/// # Safety
///
/// `attach` runs in the forked child of a possibly multi-threaded process, just before exec: it
/// must be async-signal-safe and sound to call there.
pub unsafe fn spawn_on_terminal(
    argv: &[&str],
    env: &[(&str, &str)],
    slave: OwnedFd,
    attach: unsafe fn(RawFd) -> std::io::Result<()>,
) -> Child {
    let raw = slave.as_raw_fd();
    let mut command = Command::new(argv[0]);
    command
        .args(&argv[1..])
        .env("TERM", "xterm-256color")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: the caller promises `attach` is async-signal-safe and sound in a fresh child about
    // to exec, which is where pre_exec runs it.
    unsafe {
        command.pre_exec(move || attach(raw));
    }
    let child = command.spawn().expect("spawn a program on the terminal");
    drop(slave);
    child
}
