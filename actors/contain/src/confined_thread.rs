//! A thread of dsh that is already confined the way one sandbox policy's commands are, for the
//! spawn to start them from.
//!
//! Why: most of what a Landlock command's confinement costs is kernel work made again for every
//! command — 41 credential copies to clear the bounding set, a seccomp program compiled, cached and
//! freed, a listener handed to dsh over a socket pair — about 80 µs of a spawn's 280 (BENCHMARKS.md,
//! "Issue 21: the confined spawning thread"). Credentials, the seccomp filter and namespaces belong
//! to a thread, and a child cloned from a thread inherits that thread's. So one thread per
//! confinement (per policy and agent session: the bash crate caches them) enters the network and
//! mount namespaces, drops every capability, sets `no_new_privs` and installs the gated seccomp
//! filter, once; a command cloned from it (`crate::spawn`) starts with all of that and only restricts
//! itself with its Landlock ruleset. The filter's one listener goes to the socket gate when the
//! thread starts and serves every command of the thread.
//!
//! What stays per command, on purpose: the Landlock domain. A domain scopes signals and `ptrace` to
//! itself and its children, so a thread of dsh inside the commands' domain could be signalled or
//! traced by them. The thread stays outside every domain, where Landlock refuses both to a confined
//! command (and the seccomp filter refuses its limit, priority and affinity calls with an explicit
//! pid, as for any other process).
//!
//! The caller hands a job over and blocks until it has run, as it would block in `CLONE_VFORK`
//! itself, so the job may borrow from the caller's stack (a few microseconds for the two wake-ups).
//! If the thread cannot confine itself it ends (logged, and the handle keeps no thread for good), and
//! every spawn of the confinement falls back to the child confining itself, which applies the same
//! steps (in its own order) and fails the spawn at the step the kernel refuses; so does a spawn
//! whose job panicked on the thread (caught: the thread lives on). The thread never starts another
//! thread (it would inherit the confinement): its listener is registered by the thread that started
//! it. Once the last clone of its [`ConfinedThread`] handle is dropped it stops spawning, waits for
//! the children it cloned to exit (their parent is this thread, and its exit would send them their
//! parent-death signal) and ends.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::{Arc, OnceLock};

use nix::libc;

use crate::mountns::MountNamespace;
use crate::netns::Netns;
use crate::seccomp::Filter;
use crate::sockgate::GatePolicy;

/// The confined spawning thread of one confinement, started by its first use. Clones share it.
#[derive(Debug, Clone, Default)]
pub struct ConfinedThread {
    slot: Arc<OnceLock<Option<Running>>>,
}

/// What a thread confines itself with: the parts of a Landlock confinement every command shares.
#[derive(Clone, Copy)]
pub(crate) struct Parts<'a> {
    pub filter: &'a Filter,
    pub mount_ns: Option<&'a MountNamespace>,
    pub netns: Option<&'a Netns>,
    /// The socket gate's rules; `Some`: the filter's gated form, whose listener the gate serves.
    pub gate: Option<&'a Arc<GatePolicy>>,
}

impl ConfinedThread {
    /// A handle whose thread starts at its first use.
    pub fn new() -> Self {
        Self::default()
    }

    /// The running thread confined with `parts`, started now at the first use; `None` when it
    /// could not confine itself, or when it was started with other parts (one handle shared by
    /// mistake between two confinements).
    pub(crate) fn running(&self, parts: Parts<'_>) -> Option<&Running> {
        let built = Identity::of(parts);
        let running = self
            .slot
            .get_or_init(|| match Running::start(parts, built) {
                Ok(running) => Some(running),
                Err(err) => {
                    tracing::warn!(%err, "no confined spawning thread: each child confines itself");
                    None
                }
            })
            .as_ref()?;
        if running.built != built {
            tracing::warn!(
                "a confined spawning thread asked to spawn for other parts: the child confines itself"
            );
            return None;
        }
        Some(running)
    }
}

/// Why a confinement has no thread (logged; its children then confine themselves).
#[derive(Debug, thiserror::Error)]
enum StartError {
    /// The thread could not be created.
    #[error("starting the thread: {0}")]
    Thread(#[source] io::Error),
    /// The thread could not confine itself.
    #[error("{step}: {source}")]
    Confine {
        /// The step it failed at, as the spawn's steps are named.
        step: &'static str,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// The thread ended before it said whether it is ready.
    #[error("the thread ended while it confined itself")]
    Ended,
}

/// What a thread was started with, by identity (the thread holds clones of the parts, so no other
/// namespace can take their descriptor numbers while it lives).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    filter: usize,
    mount_ns: RawFd,
    netns: RawFd,
    gate: usize,
}

impl Identity {
    fn of(parts: Parts<'_>) -> Self {
        Identity {
            filter: parts.filter.id(),
            mount_ns: parts.mount_ns.map_or(-1, MountNamespace::raw_fd),
            netns: parts.netns.map_or(-1, Netns::raw_fd),
            gate: parts.gate.map_or(0, |g| Arc::as_ptr(g) as usize),
        }
    }
}

/// A job handed to the thread: a closure on the caller's stack, and the channel that tells the
/// caller it has run (or was dropped without running).
struct Task {
    call: *mut (dyn FnMut() + Send + 'static),
    done: SyncSender<()>,
}

// SAFETY: `call` is `Send` itself; the pointer stays valid while the task exists, because its caller
// (`Running::run`) blocks until `done` is sent or dropped, which happens only after the thread has
// finished with `call` (a panic in it is caught in `serve`, after the call's frame is gone).
unsafe impl Send for Task {}

/// A started thread. Dropping it ends the thread's loop; the thread then waits for the children it
/// cloned to exit and ends on its own (nobody waits for it: a join on the dropping thread's path, a
/// cache eviction, cost about 0.1 ms).
#[derive(Debug)]
pub(crate) struct Running {
    jobs: Sender<Task>,
    built: Identity,
}

/// Returns once no child of the calling thread runs any more. A child's parent is the thread that
/// cloned it, and when that thread exits the kernel sends the child its parent-death signal
/// (`PR_SET_PDEATHSIG`, which `bwrap --die-with-parent` and `setpriv --pdeathsig` set) although dsh
/// lives on: so a spawning thread outlives its children. `listed` is this thread's
/// `/proc/<pid>/task/<tid>/children`, opened when the thread started: each round blocks, by pidfd,
/// until one of the children it lists exits. The list is a hint, not the authority (the kernel may
/// skip a child when another is reaped during the read): the thread ends only once `waitid` says it
/// has no child at all, or twice in a row that every child it has left has exited (a zombie gets
/// no signal; the runtime reaps it). Nothing is kept per spawn. Without the file (a kernel without
/// `CONFIG_PROC_CHILDREN`) the thread does not wait.
fn outlive_children(listed: Option<&std::fs::File>) {
    let Some(listed) = listed else {
        return;
    };
    let mut quiet_rounds = 0;
    while has_children() {
        let running: Vec<OwnedFd> = read_pids(listed)
            .into_iter()
            .filter_map(pidfd_open)
            .filter(|fd| !exited(fd))
            .collect();
        if running.is_empty() {
            quiet_rounds += 1;
            if quiet_rounds == 2 {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
            continue;
        }
        quiet_rounds = 0;
        let mut polled: Vec<libc::pollfd> = running
            .iter()
            .map(|fd| libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: `polled` holds `len` valid pollfd entries whose descriptors `running` keeps open.
        // Bounded, so a pid reused by another process between the list and `pidfd_open` (this
        // thread's children may also be handed children of a thread that exits) holds the thread
        // ten seconds at most before it asks `waitid` again.
        unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as _, 10_000) };
    }
}

/// Whether the calling thread has any child, exited ones not yet reaped included (`waitid` with
/// `__WNOTHREAD`, reaping nothing). An error other than "no child" counts as having one.
fn has_children() -> bool {
    // SAFETY: an all-zero siginfo_t is a valid out-buffer.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let options = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT | libc::__WNOTHREAD;
    // SAFETY: waitid with a valid out-pointer; WNOWAIT leaves every child as it was.
    let r = unsafe { libc::waitid(libc::P_ALL, 0, &mut info, options) };
    !(r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD))
}

/// The pids `listed` (a `children` file) shows now; none if it cannot be read.
fn read_pids(listed: &std::fs::File) -> Vec<i32> {
    use std::os::unix::fs::FileExt;
    let mut text = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match listed.read_at(&mut chunk, text.len() as u64) {
            Ok(0) => break,
            Ok(n) => text.extend_from_slice(&chunk[..n]),
            Err(_) => return Vec::new(),
        }
    }
    String::from_utf8_lossy(&text)
        .split_whitespace()
        .filter_map(|pid| pid.parse().ok())
        .collect()
}

/// A pidfd for `pid`, if it still exists.
fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags; it returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    // SAFETY: the descriptor is new and owned by nobody else.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Whether the process behind `pidfd` has exited (a pidfd reads ready then); no wait.
fn exited(pidfd: &OwnedFd) -> bool {
    let mut polled = libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no wait.
    unsafe { libc::poll(&mut polled, 1, 0) == 1 }
}

/// The thread's first answer: its kernel thread id and the listener of its gated filter (if
/// gated), or the step that failed.
type Ready = Result<(i32, Option<OwnedFd>), StartError>;

impl Running {
    fn start(parts: Parts<'_>, built: Identity) -> Result<Self, StartError> {
        let filter = parts.filter.clone();
        let mount_ns = parts.mount_ns.cloned();
        let netns = parts.netns.cloned();
        let gated = parts.gate.is_some();
        let (ready_tx, ready) = mpsc::sync_channel::<Ready>(1);
        let (jobs, queue) = mpsc::channel::<Task>();
        let thread = std::thread::Builder::new()
            .name("dsh-confined-spawn".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                // Opened while the thread still sees the host's `/proc`; read at its end.
                let children = std::fs::File::open("/proc/thread-self/children")
                    .inspect_err(|err| {
                        tracing::warn!(%err, "no children list: the spawning thread will not outlive its children");
                    })
                    .ok();
                // The filter and namespaces live as long as the thread.
                let fprog = filter.fprog(gated);
                let setup = Setup {
                    mount_ns: mount_ns.as_ref().map(MountNamespace::raw_fd),
                    netns: netns.as_ref().map(Netns::raw_fd),
                    fprog: &fprog,
                    gated,
                };
                let confined = setup.apply();
                let ok = confined.is_ok();
                let _ = ready_tx.send(confined);
                if ok {
                    serve(&queue);
                    // Renamed, so that what still spawns can be told from what only waits.
                    set_thread_name(c"dsh-spawner-end");
                    outlive_children(children.as_ref());
                }
                drop((filter, mount_ns, netns));
            })
            .map_err(StartError::Thread)?;
        let (tid, listener) = match ready.recv() {
            Ok(Ok(ready)) => ready,
            Ok(Err(failed)) => {
                let _ = thread.join();
                return Err(failed);
            }
            Err(_) => {
                let _ = thread.join();
                return Err(StartError::Ended);
            }
        };
        // Registered here, on an unconfined thread: the gate may start its own thread now.
        if let (Some(listener), Some(policy)) = (listener, parts.gate) {
            crate::sockgate::serve_shared(listener, policy.clone(), tid);
        }
        Ok(Running { jobs, built })
    }

    /// Runs `job` on the thread and returns its result once it has run; `None` if the thread is
    /// gone, or the job panicked there.
    pub(crate) fn run<R: Send>(&self, job: impl FnOnce() -> R + Send) -> Option<R> {
        let mut job = Some(job);
        let mut result = None;
        let mut call = || {
            if let Some(job) = job.take() {
                result = Some(job());
            }
        };
        let call: *mut (dyn FnMut() + Send + '_) = &mut call;
        // SAFETY: only the lifetime is erased (same pointer, same vtable). `call` and what it
        // borrows outlive its use: this function waits below until the thread has run it or dropped
        // it unrun (see `Task`).
        let call: *mut (dyn FnMut() + Send + 'static) = unsafe { std::mem::transmute(call) };
        let (done, finished) = mpsc::sync_channel(1);
        self.jobs.send(Task { call, done }).ok()?;
        let _ = finished.recv();
        result
    }
}

/// The thread's loop: one job at a time until every sender is gone.
fn serve(queue: &Receiver<Task>) {
    for task in queue {
        // A job that panics does not end the thread, which must still outlive its children; its
        // caller gets no result (and spawns from its own thread).
        let call = std::panic::AssertUnwindSafe(|| {
            // SAFETY: see `Task`: the closure is valid, and nothing else uses it, until `done`.
            unsafe { (*task.call)() }
        });
        if std::panic::catch_unwind(call).is_err() {
            tracing::error!("a job of the confined spawning thread panicked");
        }
        let _ = task.done.send(());
    }
}

/// The confinement the thread applies to itself: the network namespace, the mount namespace, the
/// capabilities, `no_new_privs`, the filter (a child confining itself enters the mount namespace
/// before its `chdir` and the network namespace after it; the order of the rest is the same).
struct Setup<'a> {
    mount_ns: Option<RawFd>,
    netns: Option<RawFd>,
    fprog: &'a libc::sock_fprog,
    gated: bool,
}

impl Setup<'_> {
    fn apply(&self) -> Ready {
        let failed = |step| {
            Err(StartError::Confine {
                step,
                source: io::Error::last_os_error(),
            })
        };
        block_signals();
        if let Some(fd) = self.netns
            && !crate::netns::join_in_child(fd)
        {
            return failed("joining the runtime's network namespace");
        }
        if let Some(fd) = self.mount_ns {
            // A thread shares its root and working directory with the process until it unshares
            // them, and the kernel lets only a task that owns its own enter a mount namespace.
            // SAFETY: unshare with flags only; CLONE_FS gives this thread its own copy.
            if unsafe { libc::unshare(libc::CLONE_FS) } != 0 || !crate::mountns::enter(fd) {
                return failed("entering the sandbox's mount namespace");
            }
        }
        if !crate::caps::drop_all() {
            return failed("dropping capabilities");
        }
        // SAFETY: prctl with PR_SET_NO_NEW_PRIVS takes plain integer arguments; this thread only.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return failed("setting no_new_privs");
        }
        let installed = crate::seccomp::install(self.fprog, self.gated);
        if installed < 0 {
            return failed("installing the seccomp filter");
        }
        // SAFETY: with a listener, seccomp returned a new descriptor that nobody else owns.
        let listener = self
            .gated
            .then(|| unsafe { OwnedFd::from_raw_fd(installed as RawFd) });
        // SAFETY: gettid takes no arguments.
        let tid = unsafe { libc::gettid() };
        Ok((tid, listener))
    }
}

/// Names the calling thread (`comm`, 15 bytes at most).
fn set_thread_name(name: &std::ffi::CStr) {
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes; `name` is one.
    unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr(), 0, 0, 0) };
}

/// Blocks, on this thread for good, every signal glibc lets a thread block — all but its two
/// internal ones (thread cancellation, and the broadcast by which `setuid`, `setgid` and
/// `setgroups` change every thread's credentials): no handler of dsh runs here, and each child sets
/// its own (empty) mask before exec. A set-id call made anywhere in dsh would fail on this thread,
/// which holds no capability, and glibc would abort the process; dsh makes none.
fn block_signals() {
    // SAFETY: a filled set is a valid argument; only this thread's mask changes.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, std::ptr::null_mut());
    }
}
