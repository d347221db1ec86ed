//! The parent's side of each spawn method: blocking signals, `clone3`, and collecting the child's
//! setup failure. (The `posix_spawn` baseline, measurement only, is `posix.rs`.)

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use nix::libc::{self, c_char, c_int};

use super::child::{self, ChildContext, Failure, Report, Step};
use super::{Child, SpawnError};
use crate::confine::ChildConfinement;

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
    /// What the child does to confine itself, right before exec.
    pub confinement: ChildConfinement,
    /// Whether stdin is a pty slave the child makes its controlling terminal.
    pub terminal: bool,
}

// SAFETY: the pointers are into strings, arrays and descriptors the spawn's caller keeps alive and
// unchanged until the spawn returns, and nothing writes through them; any thread may read them
// meanwhile (the confined spawning thread does, `crate::confined_thread`, while the caller waits).
unsafe impl Sync for Request<'_> {}

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
            confinement: self.confinement,
            terminal: self.terminal,
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
pub(super) fn finish(
    pid: i32,
    pidfd: c_int,
    failure: Option<Failure>,
) -> Result<Child, SpawnError> {
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
///
/// Each spawning thread keeps one ([`Stack::take`], [`Stack::give_back`]) instead of mapping and
/// unmapping 128 KiB per spawn: the `munmap` of a multi-threaded process costs every other CPU
/// running one of its threads a TLB shootdown, on the spawn path of every command. Reuse is safe
/// because `CLONE_VFORK` suspends the spawning thread until the child has exec'd or exited, so no
/// child still runs on a stack once it is given back; what a child left on it is never read.
struct Stack {
    base: *mut libc::c_void,
    len: usize,
}

const STACK_SIZE: usize = 128 * 1024;

thread_local! {
    /// The spawning thread's idle stack, if it has spawned before.
    static IDLE_STACK: std::cell::Cell<Option<Stack>> = const { std::cell::Cell::new(None) };
}

impl Stack {
    /// This thread's idle stack, or a new one.
    fn take() -> io::Result<Self> {
        match IDLE_STACK.with(std::cell::Cell::take) {
            Some(stack) => Ok(stack),
            None => Stack::new(),
        }
    }

    /// Keeps the stack for this thread's next spawn (its child has exec'd or exited).
    fn give_back(self) {
        IDLE_STACK.with(|idle| idle.set(Some(self)));
    }

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
    let stack = Stack::take().map_err(SpawnError::Setup)?;
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
    // The child has exec'd or exited (or was never created): the stack is free again.
    stack.give_back();
    if ret < 0 {
        return Err(SpawnError::Clone(io::Error::from_raw_os_error(-ret as i32)));
    }
    // SAFETY: the child has exec'd or exited; the slot is ours again.
    let failure = unsafe { std::ptr::read_volatile(&failure) };
    finish(ret as i32, pidfd, (failure.step != 0).then_some(failure))
}

/// Method (c) needs per-architecture assembly; elsewhere use (b).
#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn clone3_vm(req: &Request<'_>) -> Result<Child, SpawnError> {
    clone3_fork(req)
}
