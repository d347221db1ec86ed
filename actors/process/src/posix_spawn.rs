//! `posix_spawn` of one child as the leader of a new session, through small safe wrappers.
//!
//! Each libc object gets a wrapper that initialises it, destroys it on drop, and offers only the calls
//! the spawn needs, each with its own SAFETY comment:
//! - [`FileActions`]: the child's stdio (`dup2` of our pipe ends, or `/dev/null`) and working directory;
//! - [`SpawnAttrs`]: a new session, an empty signal mask, and default dispositions for the signals the
//!   kill escalation and the shell rely on;
//! - [`spawn_in_session`] puts them together.
//!
//! Both objects live in a heap box so they never move after `*_init` (glibc does not promise they
//! may).

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::RawFd;

use nix::libc;
use nix::sys::signal::{SigSet, Signal};

use crate::child_env::EnvBlock;

/// Signals reset to their default action in the child: a blocked or ignored SIGTERM inherited from the
/// spawning thread would make the kill escalation do nothing.
const DEFAULT_SIGNALS: [Signal; 5] = [
    Signal::SIGHUP,
    Signal::SIGINT,
    Signal::SIGQUIT,
    Signal::SIGTERM,
    Signal::SIGPIPE,
];

/// A libc return code (0 or an errno) as a result.
fn check(code: libc::c_int) -> io::Result<()> {
    if code == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(code))
    }
}

/// An initialised `posix_spawn_file_actions_t`, destroyed on drop.
struct FileActions(Box<libc::posix_spawn_file_actions_t>);

impl FileActions {
    fn new() -> io::Result<Self> {
        // SAFETY: an all-zero `posix_spawn_file_actions_t` is a valid bit pattern (integers and a null
        // pointer); `posix_spawn_file_actions_init` then makes it a proper, empty action list.
        let mut raw: Box<libc::posix_spawn_file_actions_t> =
            Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: `raw` points at writable memory for one object, which stays put inside its box.
        check(unsafe { libc::posix_spawn_file_actions_init(&mut *raw) })?;
        Ok(Self(raw))
    }

    /// In the child: make `target` a copy of `fd`.
    fn dup2(&mut self, fd: RawFd, target: RawFd) -> io::Result<()> {
        // SAFETY: the object was initialised in `new`; this only records two descriptor numbers.
        check(unsafe { libc::posix_spawn_file_actions_adddup2(&mut *self.0, fd, target) })
    }

    /// In the child: open `path` as `target`.
    fn open(&mut self, target: RawFd, path: &CStr, flags: libc::c_int) -> io::Result<()> {
        // SAFETY: the object was initialised in `new`; `path` is a valid C string, and the call copies
        // it (POSIX requires that), so it need not outlive this call.
        check(unsafe {
            libc::posix_spawn_file_actions_addopen(&mut *self.0, target, path.as_ptr(), flags, 0)
        })
    }

    /// In the child: change to `dir` before exec.
    fn chdir(&mut self, dir: &CStr) -> io::Result<()> {
        // SAFETY: the object was initialised in `new`; `dir` is a valid C string, which glibc copies.
        check(unsafe { libc::posix_spawn_file_actions_addchdir_np(&mut *self.0, dir.as_ptr()) })
    }
}

impl Drop for FileActions {
    fn drop(&mut self) {
        // SAFETY: initialised in `new` (a failed init never builds a `FileActions`), destroyed once.
        unsafe {
            libc::posix_spawn_file_actions_destroy(&mut *self.0);
        }
    }
}

/// An initialised `posix_spawnattr_t`, destroyed on drop.
struct SpawnAttrs(Box<libc::posix_spawnattr_t>);

impl SpawnAttrs {
    fn new() -> io::Result<Self> {
        // SAFETY: an all-zero `posix_spawnattr_t` is a valid bit pattern (integers and signal sets);
        // `posix_spawnattr_init` then sets every attribute to its default.
        let mut raw: Box<libc::posix_spawnattr_t> = Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: `raw` points at writable memory for one object, which stays put inside its box.
        check(unsafe { libc::posix_spawnattr_init(&mut *raw) })?;
        Ok(Self(raw))
    }

    /// The signal mask the child starts with.
    fn set_signal_mask(&mut self, mask: &SigSet) -> io::Result<()> {
        // SAFETY: the object was initialised in `new`; the set is copied into it.
        check(unsafe { libc::posix_spawnattr_setsigmask(&mut *self.0, mask.as_ref()) })
    }

    /// Signals whose disposition is reset to the default in the child.
    fn set_default_signals(&mut self, signals: &SigSet) -> io::Result<()> {
        // SAFETY: the object was initialised in `new`; the set is copied into it.
        check(unsafe { libc::posix_spawnattr_setsigdefault(&mut *self.0, signals.as_ref()) })
    }

    /// Which of the attributes above (and `SETSID`) apply.
    fn set_flags(&mut self, flags: libc::c_int) -> io::Result<()> {
        // SAFETY: the object was initialised in `new`; flags are plain bits (they fit a c_short).
        check(unsafe { libc::posix_spawnattr_setflags(&mut *self.0, flags as libc::c_short) })
    }
}

impl Drop for SpawnAttrs {
    fn drop(&mut self) {
        // SAFETY: initialised in `new` (a failed init never builds a `SpawnAttrs`), destroyed once.
        unsafe {
            libc::posix_spawnattr_destroy(&mut *self.0);
        }
    }
}

/// `posix_spawn` of `program` as the leader of a new session (pgid = pid, no controlling terminal),
/// with a clean signal state, the given stdio (`None` stdin: `/dev/null`) and working directory.
pub(crate) fn spawn_in_session(
    program: &CString,
    argv: &[CString],
    env: &EnvBlock<'_>,
    cwd: &CString,
    stdin: Option<RawFd>,
    stdout: RawFd,
    stderr: RawFd,
) -> io::Result<i32> {
    let mut actions = FileActions::new()?;
    match stdin {
        Some(fd) => actions.dup2(fd, 0)?,
        None => actions.open(0, c"/dev/null", libc::O_RDONLY)?,
    }
    actions.dup2(stdout, 1)?;
    actions.dup2(stderr, 2)?;
    actions.chdir(cwd)?;

    let mut attrs = SpawnAttrs::new()?;
    attrs.set_signal_mask(&SigSet::empty())?;
    let mut defaults = SigSet::empty();
    for signal in DEFAULT_SIGNALS {
        defaults.add(signal);
    }
    attrs.set_default_signals(&defaults)?;
    attrs.set_flags(
        libc::POSIX_SPAWN_SETSID as libc::c_int
            | libc::POSIX_SPAWN_SETSIGMASK
            | libc::POSIX_SPAWN_SETSIGDEF,
    )?;

    let mut argv_ptrs: Vec<*mut libc::c_char> = argv
        .iter()
        .map(|arg| arg.as_ptr() as *mut libc::c_char)
        .collect();
    argv_ptrs.push(std::ptr::null_mut());
    let mut pid: libc::pid_t = 0;
    // SAFETY: `program` and every `argv_ptrs` entry point into C strings borrowed for this call, and
    // `argv_ptrs` ends with a null pointer; `env.envp()` is a null-terminated array valid while `env`
    // lives; `actions` and `attrs` are initialised. posix_spawn only reads them (the child gets copies).
    // The soft open-files limit is the original one only around the call itself, so the child
    // inherits it while the runtime keeps the raised one (see `rlimit`).
    check(crate::rlimit::with_child_limit(|| unsafe {
        libc::posix_spawn(
            &mut pid,
            program.as_ptr(),
            &*actions.0,
            &*attrs.0,
            argv_ptrs.as_ptr(),
            env.envp(),
        )
    }))?;
    Ok(pid)
}
