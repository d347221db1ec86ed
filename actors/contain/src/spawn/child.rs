//! The code that runs in the new child between `clone3` and `execve`.
//!
//! It runs either in a copy-on-write copy of a multi-threaded parent (fork semantics) or in the
//! parent's own memory on a separate stack (`CLONE_VM`, vfork semantics), so it may only make
//! async-signal-safe libc calls on data prepared beforehand: no allocation, no locks, no panics
//! (no indexing that could fail, no formatting). Failure is reported as a step and an errno, through
//! a close-on-exec pipe (fork semantics) or a slot in shared memory (`CLONE_VM`), then `_exit(127)`.

use nix::libc::{self, c_char, c_int};

use crate::confine::{ChildConfinement, ConfineFailure};

/// The step of the child's setup that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Step {
    /// Writing `0` to a v1 leaf's `cgroup.procs`.
    JoinCgroup = 1,
    /// `setsid`.
    Setsid = 2,
    /// Putting the given descriptors on 0, 1 and 2.
    Stdio = 3,
    /// Marking descriptors 3 and up close-on-exec.
    CloseFds = 4,
    /// `chdir` to the working directory.
    Chdir = 5,
    /// `execve` itself (ENOENT, EACCES, E2BIG, ENOEXEC…).
    Exec = 6,
    /// Setting the soft `RLIMIT_NOFILE` the program starts with.
    Rlimit = 7,
    /// `PR_SET_NO_NEW_PRIVS` and `landlock_restrict_self` (the sandbox executor's confinement).
    Confine = 8,
    /// `ioctl(0, TIOCSCTTY)`: making the pty slave on stdin the controlling terminal.
    Terminal = 9,
    /// Clearing every capability set before confinement (`crate::caps`).
    DropCaps = 16,
    /// Installing the seccomp filter (`crate::seccomp`).
    Seccomp = 17,
    /// Handing the seccomp filter to a launcher (bubblewrap's `--seccomp FD`).
    LauncherFilter = 18,
    /// `setns` into the sandbox's read-only mount namespace (`crate::mountns`).
    MountNamespace = 19,
    /// `setns` into the runtime's network namespace (`--network loopback`, `crate::netns`).
    JoinNetns = 20,
    /// Installing the socket gate and handing its listener to dsh (`crate::sockgate`).
    SocketGate = 21,
}

impl Step {
    pub(crate) fn from_u8(value: u8) -> Option<Self> {
        Some(match value {
            1 => Step::JoinCgroup,
            2 => Step::Setsid,
            3 => Step::Stdio,
            4 => Step::CloseFds,
            5 => Step::Chdir,
            6 => Step::Exec,
            7 => Step::Rlimit,
            8 => Step::Confine,
            9 => Step::Terminal,
            16 => Step::DropCaps,
            17 => Step::Seccomp,
            18 => Step::LauncherFilter,
            19 => Step::MountNamespace,
            20 => Step::JoinNetns,
            21 => Step::SocketGate,
            _ => return None,
        })
    }
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Step::JoinCgroup => "joining the v1 limit cgroups",
            Step::Setsid => "setsid",
            Step::Stdio => "setting up stdio",
            Step::CloseFds => "closing inherited descriptors",
            Step::Chdir => "changing to the working directory",
            Step::Exec => "exec",
            Step::Rlimit => "setting the open-files limit",
            Step::Confine => "applying the Landlock sandbox",
            Step::Terminal => "acquiring the controlling terminal",
            Step::DropCaps => "dropping capabilities",
            Step::Seccomp => "installing the seccomp filter",
            Step::LauncherFilter => "handing the seccomp filter to the sandbox launcher",
            Step::MountNamespace => "entering the sandbox's mount namespace",
            Step::JoinNetns => "joining the runtime's network namespace",
            Step::SocketGate => "installing the socket gate",
        })
    }
}

/// Where a failing child reports.
#[repr(C)]
pub(crate) enum Report {
    /// Write `[step, errno (4 bytes, native endian)]` to this pipe (fork semantics).
    Pipe(c_int),
    /// Store into this slot (vfork semantics: the parent reads it after the child exec'd or exited).
    Slot(*mut Failure),
}

/// A failure reported through shared memory.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Failure {
    pub step: u8,
    pub errno: c_int,
}

/// Everything the child needs, as raw pointers into memory the parent keeps alive and unchanged
/// until the child has exec'd or exited (`CLONE_VFORK` guarantees the parent thread waits).
#[repr(C)]
pub(crate) struct ChildContext {
    pub program: *const c_char,
    pub argv: *const *const c_char,
    pub envp: *const *const c_char,
    /// Null for "stay in the parent's working directory".
    pub cwd: *const c_char,
    /// Descriptors for 0, 1, 2; each is either already its target or above 2.
    pub stdio: [c_int; 3],
    pub v1_procs: *const c_int,
    pub v1_count: usize,
    /// The soft `RLIMIT_NOFILE` to start the program with, when `set_nofile`.
    pub nofile_soft: u64,
    pub set_nofile: bool,
    /// What to do to confine the program before exec.
    pub confinement: ChildConfinement,
    /// Whether fd 0 (after the stdio step) is a pty slave to make the controlling terminal.
    pub terminal: bool,
    pub report: Report,
}

/// Signals whose disposition is reset to default even when the parent ignores them.
const RESET_ALWAYS: [c_int; 5] = [
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGTERM,
    libc::SIGPIPE,
];

fn errno() -> c_int {
    // SAFETY: __errno_location returns the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() }
}

/// Reports `step` with the current errno and exits with 127.
///
/// # Safety
/// Only called in the child, with `ctx` valid.
unsafe fn fail(ctx: &ChildContext, step: Step) -> ! {
    let code = errno();
    match ctx.report {
        Report::Pipe(fd) => {
            let mut msg = [0u8; 5];
            msg[0] = step as u8;
            let bytes = code.to_ne_bytes();
            msg[1] = bytes[0];
            msg[2] = bytes[1];
            msg[3] = bytes[2];
            msg[4] = bytes[3];
            // SAFETY: `msg` is valid for 5 bytes; a short or failed write only loses the detail.
            unsafe { libc::write(fd, msg.as_ptr().cast(), msg.len()) };
        }
        Report::Slot(slot) => {
            // SAFETY: the parent keeps the slot alive and does not touch it until we exit or exec.
            unsafe {
                slot.write_volatile(Failure {
                    step: step as u8,
                    errno: code,
                })
            };
        }
    }
    // SAFETY: _exit ends only this process (no CLONE_THREAD) without running any user-space cleanup.
    unsafe { libc::_exit(127) }
}

/// The child's whole life: join, reset, redirect, exec.
///
/// # Safety
/// Only called in a freshly cloned child whose parent blocked every signal before cloning, with
/// `ctx` pointing to a valid context whose pointers stay valid until the child execs or exits.
pub(crate) unsafe extern "C" fn child_main(ctx: *const ChildContext) -> ! {
    // SAFETY: the caller passes a valid context that outlives the child's use of it.
    let ctx = unsafe { &*ctx };
    // 1. Limits first: nothing below forks, and the exec'd program can only fork once it is in.
    for i in 0..ctx.v1_count {
        // SAFETY: `v1_procs` points to `v1_count` descriptors the parent keeps open.
        let fd = unsafe { *ctx.v1_procs.add(i) };
        // SAFETY: writing one byte from a static buffer to an open descriptor.
        if unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) } != 1 {
            // SAFETY: in the child, with a valid context.
            unsafe { fail(ctx, Step::JoinCgroup) }
        }
    }
    // 2. Default dispositions for every caught signal (handlers belong to the parent's code) and for
    //    the termination signals even if ignored. Errors (SIGKILL, SIGSTOP, glibc-reserved signals)
    //    are expected and harmless.
    reset_signal_handlers();
    // 3. A new session and process group.
    // SAFETY: setsid takes no arguments.
    if unsafe { libc::setsid() } < 0 {
        // SAFETY: in the child, with a valid context.
        unsafe { fail(ctx, Step::Setsid) }
    }
    // 4. stdio. The parent moved every source that is not its own target above 2.
    for target in 0..3 {
        let source = ctx.stdio[target as usize];
        let ok = if source == target {
            // SAFETY: clearing close-on-exec on a descriptor of ours.
            unsafe { libc::fcntl(target, libc::F_SETFD, 0) == 0 }
        } else {
            // SAFETY: dup2 between two descriptor numbers.
            unsafe { libc::dup2(source, target) == target }
        };
        if !ok {
            // SAFETY: in the child, with a valid context.
            unsafe { fail(ctx, Step::Stdio) }
        }
    }
    // 4b. The pty slave on fd 0 becomes the controlling terminal of the new session (the child is
    //     its leader since step 3 and has none yet); its process group is the terminal's
    //     foreground group, so `C-c` on the master reaches it.
    // SAFETY: TIOCSCTTY takes an integer argument (0: do not steal a terminal another session
    // holds); fd 0 is the slave the parent passed.
    if ctx.terminal && unsafe { libc::ioctl(0, libc::TIOCSCTTY, 0) } != 0 {
        // SAFETY: in the child, with a valid context.
        unsafe { fail(ctx, Step::Terminal) }
    }
    // 5. Only 0–2 survive exec. Marking (not closing) keeps a report pipe usable until exec.
    if !mark_close_on_exec_from_3() {
        // SAFETY: in the child, with a valid context.
        unsafe { fail(ctx, Step::CloseFds) }
    }
    // 5b. The sandbox's read-only mount namespace, before the chdir (setns resets cwd and root) and
    //     before confinement drops the capabilities setns needs.
    if let Some(fd) = ctx.confinement.mount_namespace()
        && !crate::mountns::enter(fd)
    {
        // SAFETY: in the child, with a valid context.
        unsafe { fail(ctx, Step::MountNamespace) }
    }
    // 6. Working directory.
    // SAFETY: `cwd` is null or a NUL-terminated string the parent keeps alive.
    if !ctx.cwd.is_null() && unsafe { libc::chdir(ctx.cwd) } != 0 {
        // SAFETY: in the child, with a valid context.
        unsafe { fail(ctx, Step::Chdir) }
    }
    // 6a. The runtime's network namespace (`--network loopback`), while the child still holds
    //     CAP_SYS_ADMIN: before confinement drops it, and before a launcher (bubblewrap) execs.
    if !crate::netns::join_in_child(ctx.confinement.netns()) {
        // SAFETY: in the child, with a valid context.
        unsafe { fail(ctx, Step::JoinNetns) }
    }
    // 6b. Confinement (`crate::confine`), after every step that writes (the v1 cgroup joins) and
    //     before exec: credentials, Landlock domain and seccomp filter are this task's alone
    //     (CLONE_VM shares memory, not credentials), so the parent stays unconfined. A refusal
    //     fails the spawn; nothing runs unconfined.
    if let Err(failure) = ctx.confinement.apply() {
        let step = match failure {
            ConfineFailure::DropCaps => Step::DropCaps,
            ConfineFailure::Landlock => Step::Confine,
            ConfineFailure::Seccomp => Step::Seccomp,
            ConfineFailure::Launcher => Step::LauncherFilter,
            ConfineFailure::Gate => Step::SocketGate,
        };
        // SAFETY: in the child, with a valid context.
        unsafe { fail(ctx, step) }
    }
    // 6c. The open-files limit the program should see (the parent may run with a raised one). Set
    //     here, not around the clone in the parent, where a lowered limit would make the parent's
    //     own descriptor allocations (the pidfd) fail; and after confinement, whose socket gate
    //     allocates a descriptor in this copy of the parent's table, above the lowered limit once
    //     the parent holds many. (`setrlimit` names the caller as 0: the seccomp filter allows it.)
    if ctx.set_nofile && !set_nofile_soft(ctx.nofile_soft) {
        // SAFETY: in the child, with a valid context.
        unsafe { fail(ctx, Step::Rlimit) }
    }
    // 7. An empty signal mask, last: the parent blocked everything before cloning.
    // SAFETY: a zeroed sigset_t is a valid argument for sigemptyset, and both calls take valid
    // pointers (or null for the old mask).
    unsafe {
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    }
    // SAFETY: NUL-terminated program path and null-terminated argv/envp arrays kept alive by the
    // parent; execve only returns on failure.
    unsafe { libc::execve(ctx.program, ctx.argv, ctx.envp) };
    // SAFETY: in the child, with a valid context.
    unsafe { fail(ctx, Step::Exec) }
}

/// `setrlimit(RLIMIT_NOFILE)` with `soft` (capped at the hard limit) and the hard limit unchanged.
fn set_nofile_soft(soft: u64) -> bool {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit with valid pointers to a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return false;
        }
        limit.rlim_cur = soft.min(limit.rlim_max);
        libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0
    }
}

fn reset_signal_handlers() {
    // SAFETY: an all-zero sigaction with SIG_DFL is a valid disposition.
    let mut default: libc::sigaction = unsafe { std::mem::zeroed() };
    default.sa_sigaction = libc::SIG_DFL;
    // Reads a value glibc set at start-up (async-signal-safe).
    let last = libc::SIGRTMAX();
    for sig in 1..=last {
        // SAFETY: as above.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: querying a disposition into a valid out-pointer.
        if unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } != 0 {
            continue;
        }
        let reset = old.sa_sigaction != libc::SIG_DFL
            && (old.sa_sigaction != libc::SIG_IGN || RESET_ALWAYS.contains(&sig));
        if reset {
            // SAFETY: installing the default disposition from a valid sigaction.
            unsafe { libc::sigaction(sig, &default, std::ptr::null_mut()) };
        }
    }
}

/// `close_range(3, ~0, CLOSE_RANGE_CLOEXEC)` (Linux 5.11); before that, `FD_CLOEXEC` on every
/// descriptor below the `RLIMIT_NOFILE` soft limit (capped at 65536).
fn mark_close_on_exec_from_3() -> bool {
    // SAFETY: close_range takes two descriptor numbers and flags.
    let r = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if r == 0 {
        return true;
    }
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit with a valid out-pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return false;
    }
    let end = limit.rlim_cur.min(65536) as c_int;
    for fd in 3..end {
        // SAFETY: fcntl on a descriptor number; EBADF for unused numbers is ignored.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    true
}
