//! The parent's side of each spawn method: blocking signals, `clone3` (or `posix_spawn`), and
//! collecting the child's setup failure.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use nix::libc::{self, c_char, c_int};

use super::child::{self, ChildContext, Failure, Report, Step};
use super::{Child, SpawnError};

/// Raw pointers into the caller's [`super::Program`] and descriptors, valid for the call.
pub(crate) struct Request<'a> {
    pub program: *const c_char,
    pub argv: *const *const c_char,
    pub envp: *const *const c_char,
    pub cwd: *const c_char,
    pub stdio: [RawFd; 3],
    pub v1_procs: &'a [RawFd],
    pub cgroup: Option<RawFd>,
    pub nofile_soft: Option<u64>,
    /// A Landlock ruleset the child restricts itself with, right before exec.
    pub landlock: Option<RawFd>,
}

impl Request<'_> {
    fn context(&self, report: Report) -> ChildContext {
        ChildContext {
            program: self.program,
            argv: self.argv,
            envp: self.envp,
            cwd: self.cwd,
            stdio: self.stdio,
            v1_procs: self.v1_procs.as_ptr(),
            v1_count: self.v1_procs.len(),
            nofile_soft: self.nofile_soft.unwrap_or(0),
            set_nofile: self.nofile_soft.is_some(),
            landlock: self.landlock.unwrap_or(-1),
            report,
        }
    }
}

/// `struct clone_args` (CLONE_ARGS_SIZE_VER2, with `cgroup`).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

impl CloneArgs {
    fn new(cgroup: Option<RawFd>, pidfd: &mut c_int) -> Self {
        let mut flags = (libc::CLONE_VFORK | libc::CLONE_PIDFD) as u64;
        if cgroup.is_some() {
            flags |= CLONE_INTO_CGROUP;
        }
        CloneArgs {
            flags,
            pidfd: pidfd as *mut c_int as u64,
            exit_signal: libc::SIGCHLD as u64,
            cgroup: cgroup.map_or(0, |fd| fd as u64),
            ..Default::default()
        }
    }
}

/// Every signal (including glibc's internal ones) blocked on this thread until dropped, so no
/// handler of the parent ever runs in the child.
struct SignalsBlocked {
    old: libc::sigset_t,
}

impl SignalsBlocked {
    fn new() -> Self {
        // SAFETY: both sets are valid; rt_sigprocmask takes the kernel's 8-byte set size, which is a
        // prefix of glibc's sigset_t. Blocking cannot fail with valid arguments.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::syscall(
                libc::SYS_rt_sigprocmask,
                libc::SIG_SETMASK,
                &all,
                &mut old,
                8usize,
            );
            SignalsBlocked { old }
        }
    }
}

impl Drop for SignalsBlocked {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved above, a valid set.
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigprocmask,
                libc::SIG_SETMASK,
                &self.old,
                std::ptr::null_mut::<libc::sigset_t>(),
                8usize,
            )
        };
    }
}

/// Turns the kernel's answer and the child's report into a [`Child`] or an error; a child that
/// failed is reaped here.
fn finish(pid: i32, pidfd: c_int, failure: Option<Failure>) -> Result<Child, SpawnError> {
    // SAFETY: CLONE_PIDFD stored a new descriptor that nobody else owns.
    let pidfd = (pidfd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(pidfd) });
    let Some(failure) = failure else {
        return Ok(Child { pid, pidfd });
    };
    let mut status = 0;
    // SAFETY: the child is ours and has exited (CLONE_VFORK returned after its _exit).
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
        && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
    {}
    Err(SpawnError::Child {
        step: Step::from_u8(failure.step).unwrap_or(Step::Exec),
        source: io::Error::from_raw_os_error(failure.errno),
    })
}

/// Method (b): `clone3` with fork semantics; failures come back through a close-on-exec pipe.
pub(crate) fn clone3_fork(req: &Request<'_>) -> Result<Child, SpawnError> {
    let mut pipe = [0 as c_int; 2];
    // SAFETY: `pipe` has room for the two descriptors.
    if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(SpawnError::Setup(io::Error::last_os_error()));
    }
    // SAFETY: pipe2 just created both descriptors; these are their only owners.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(pipe[0]), OwnedFd::from_raw_fd(pipe[1])) };
    let ctx = req.context(Report::Pipe(pipe[1]));
    let mut pidfd: c_int = -1;
    let args = CloneArgs::new(req.cgroup, &mut pidfd);
    let blocked = SignalsBlocked::new();
    // SAFETY: `args` is a valid clone_args of the size given. Without CLONE_VM the child runs on a
    // copy of this stack and memory; it only calls `child_main`, which never returns, and makes
    // only async-signal-safe calls (see child.rs). Signals are blocked, so no handler runs there.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &args as *const CloneArgs,
            size_of::<CloneArgs>(),
        )
    };
    if ret == 0 {
        // SAFETY: we are the child; `ctx` lives in our copy of the parent's stack.
        unsafe { child::child_main(&ctx) }
    }
    let clone_error = io::Error::last_os_error();
    drop(blocked);
    if ret < 0 {
        return Err(SpawnError::Clone(clone_error));
    }
    drop(write);
    let mut msg = [0u8; 5];
    let mut got = 0;
    while got < msg.len() {
        // SAFETY: the buffer is valid for the remaining length.
        let n = unsafe {
            libc::read(
                std::os::fd::AsRawFd::as_raw_fd(&read),
                msg[got..].as_mut_ptr().cast(),
                msg.len() - got,
            )
        };
        if n > 0 {
            got += n as usize;
        } else if n == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            break;
        }
    }
    let failure = (got == msg.len()).then(|| Failure {
        step: msg[0],
        errno: c_int::from_ne_bytes([msg[1], msg[2], msg[3], msg[4]]),
    });
    finish(ret as i32, pidfd, failure)
}

/// A child stack: anonymous memory with a guard page at its low end.
struct Stack {
    base: *mut libc::c_void,
    len: usize,
}

const STACK_SIZE: usize = 128 * 1024;

impl Stack {
    fn new() -> io::Result<Self> {
        // SAFETY: an anonymous private mapping; the result is checked.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                STACK_SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = Stack {
            base,
            len: STACK_SIZE,
        };
        // SAFETY: the first page lies inside the mapping we own.
        if unsafe { libc::mprotect(base, 4096, libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping created in `new`, no longer used by any child.
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// Method (c): `clone3` with `CLONE_VM` on a separate stack; failures come back in shared memory.
#[cfg(target_arch = "x86_64")]
pub(crate) fn clone3_vm(req: &Request<'_>) -> Result<Child, SpawnError> {
    let stack = Stack::new().map_err(SpawnError::Setup)?;
    let mut failure = Failure::default();
    let ctx = req.context(Report::Slot(&mut failure));
    let mut pidfd: c_int = -1;
    let mut args = CloneArgs::new(req.cgroup, &mut pidfd);
    args.flags |= libc::CLONE_VM as u64;
    args.stack = stack.base as u64;
    args.stack_size = stack.len as u64;
    let blocked = SignalsBlocked::new();
    let ret: isize;
    // SAFETY: `args` is a valid clone_args. In the child (rax = 0) the kernel has switched to the top
    // of `stack` (16-byte aligned), and the asm calls `child_main(ctx)`, which never returns, so no
    // Rust frame of this function is used there. The child shares our memory but this thread is
    // suspended (CLONE_VFORK) until it exec'd or exited, `ctx`/`failure`/`stack` outlive that, the
    // child writes only its own stack, errno and `failure`, and every signal is blocked until it
    // has reset the handlers. rcx and r11 are clobbered by `syscall`.
    unsafe {
        core::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "xor ebp, ebp",
            "mov rdi, r12",
            "call r13",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone3 as isize => ret,
            in("rdi") &args as *const CloneArgs,
            in("rsi") size_of::<CloneArgs>(),
            in("r12") &ctx as *const ChildContext,
            in("r13") child::child_main as *const (),
            lateout("rcx") _,
            lateout("r11") _,
        );
    }
    drop(blocked);
    if ret < 0 {
        return Err(SpawnError::Clone(io::Error::from_raw_os_error(-ret as i32)));
    }
    drop(stack);
    // SAFETY: the child has exec'd or exited; the slot is ours again.
    let failure = unsafe { std::ptr::read_volatile(&failure) };
    finish(ret as i32, pidfd, (failure.step != 0).then_some(failure))
}

/// Method (c) needs per-architecture assembly; elsewhere use (b).
#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn clone3_vm(req: &Request<'_>) -> Result<Child, SpawnError> {
    clone3_fork(req)
}

unsafe extern "C" {
    /// glibc 2.34+.
    fn posix_spawn_file_actions_addclosefrom_np(
        actions: *mut libc::posix_spawn_file_actions_t,
        from: c_int,
    ) -> c_int;
}

/// Method (a): glibc `posix_spawn`, then the parent moves the child (racy; measurement only).
pub(crate) fn posix_spawn_then_join(req: &Request<'_>) -> Result<Child, SpawnError> {
    if req.landlock.is_some() {
        // posix_spawn has no hook to restrict the child before exec: never start it unconfined.
        return Err(SpawnError::Setup(io::Error::from_raw_os_error(
            libc::EOPNOTSUPP,
        )));
    }
    let pid = posix_spawn(req).map_err(|e| SpawnError::Child {
        step: Step::Exec,
        source: e,
    })?;
    let pid_text = pid.to_string();
    let join = || -> io::Result<()> {
        if let Some(dir) = req.cgroup {
            // SAFETY: openat on a directory descriptor we were lent, with a literal path.
            let fd = unsafe {
                libc::openat(
                    dir,
                    c"cgroup.procs".as_ptr(),
                    libc::O_WRONLY | libc::O_CLOEXEC,
                )
            };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: openat just returned it.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            write_all(std::os::fd::AsRawFd::as_raw_fd(&fd), pid_text.as_bytes())?;
        }
        for fd in req.v1_procs {
            write_all(*fd, pid_text.as_bytes())?;
        }
        Ok(())
    };
    if let Err(e) = join() {
        // SAFETY: killing and reaping our own child.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
        return Err(SpawnError::Join(e));
    }
    // SAFETY: pidfd_open takes a pid and flags.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    finish(pid, pidfd as c_int, None)
}

fn write_all(fd: RawFd, bytes: &[u8]) -> io::Result<()> {
    // SAFETY: `bytes` is valid for its length.
    let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
    if n == bytes.len() as isize {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn check(code: c_int) -> io::Result<()> {
    if code == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(code))
    }
}

fn posix_spawn(req: &Request<'_>) -> io::Result<i32> {
    // SAFETY: the actions and attributes are initialised before use and destroyed on every path;
    // every pointer handed to glibc is valid for the call.
    unsafe {
        let mut actions: libc::posix_spawn_file_actions_t = std::mem::zeroed();
        let mut attr: libc::posix_spawnattr_t = std::mem::zeroed();
        check(libc::posix_spawn_file_actions_init(&mut actions))?;
        check(libc::posix_spawnattr_init(&mut attr))?;
        let result = (|| {
            for (target, fd) in req.stdio.iter().enumerate() {
                check(libc::posix_spawn_file_actions_adddup2(
                    &mut actions,
                    *fd,
                    target as c_int,
                ))?;
            }
            check(posix_spawn_file_actions_addclosefrom_np(&mut actions, 3))?;
            if !req.cwd.is_null() {
                check(libc::posix_spawn_file_actions_addchdir_np(
                    &mut actions,
                    req.cwd,
                ))?;
            }
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            check(libc::posix_spawnattr_setsigmask(&mut attr, &empty))?;
            let mut defaults: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut defaults);
            for sig in [
                libc::SIGHUP,
                libc::SIGINT,
                libc::SIGQUIT,
                libc::SIGTERM,
                libc::SIGPIPE,
            ] {
                libc::sigaddset(&mut defaults, sig);
            }
            check(libc::posix_spawnattr_setsigdefault(&mut attr, &defaults))?;
            let flags = libc::POSIX_SPAWN_SETSID as c_int
                | libc::POSIX_SPAWN_SETSIGMASK
                | libc::POSIX_SPAWN_SETSIGDEF;
            check(libc::posix_spawnattr_setflags(
                &mut attr,
                flags as libc::c_short,
            ))?;
            let mut pid: libc::pid_t = 0;
            check(libc::posix_spawn(
                &mut pid,
                req.program,
                &actions,
                &attr,
                req.argv.cast(),
                req.envp.cast(),
            ))?;
            Ok(pid)
        })();
        libc::posix_spawn_file_actions_destroy(&mut actions);
        libc::posix_spawnattr_destroy(&mut attr);
        result
    }
}
