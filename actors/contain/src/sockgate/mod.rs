//! The socket gate: every `connect` of a confined command is made by dsh on its behalf, after a
//! check, so no confined command reaches a Unix socket outside its sandbox.
//!
//! ## Why a gate
//!
//! A Unix socket is a way out of any file sandbox: connecting to the user's systemd
//! (`systemd-run --user`), D-Bus, a Docker daemon or any helper that runs what it is asked runs it
//! unconfined. Landlock (ABI 7 on this kernel) mediates creating a socket file, not connecting to
//! one; its abstract-socket scope covers only abstract names, and only for the Landlock backend. A
//! read-only mount does not stop `connect` (sockets are exempt), and no list of socket directories
//! to hide is complete. A plain seccomp filter sees `connect`'s arguments as integers, never the
//! address they point to. What sees the address is **seccomp user notification**: the filter
//! (`filter.rs`) stops the calling thread in `connect` and hands dsh a notification; dsh reads the
//! thread's socket and address (`notify.rs`), decides (`verdict.rs`), and — never letting the kernel
//! re-read memory the program could have changed meanwhile — connects the thread's own socket
//! itself (`relay.rs`), then answers with the result. Both backends: under Landlock the main
//! filter's gated form (`crate::seccomp`) is installed by the confined spawning thread (or by a
//! child confining itself, as its last step); a launcher's child installs the
//! gate's own program (`filter.rs`) before exec'ing bubblewrap, whose sandbox inherits it.
//!
//! ## The rules
//!
//! | socket | connected when |
//! |---|---|
//! | Unix, path | the socket lies below one of the command's writable roots (as its mount namespace shows them), or is an operator-allowed socket (`--allow-unix-socket`, same device and inode); else `EACCES` |
//! | Unix, abstract name | the listening peer is in the command's own sandbox (bubblewrap: its pid namespace; else its session); else the connection is cut at once and the answer is `ECONNREFUSED` |
//! | Internet | [`Inet::Connect`]; [`Inet::Refuse`] (Landlock's `--network deny`, whose TCP rules would not see dsh's connect) answers `EACCES` |
//! | any other family | never (`EACCES`): dsh's own privileges would make the connect |
//!
//! Datagram Unix sockets are not created at all (`crate::seccomp` refuses them): a datagram names
//! its destination in each `sendto`/`sendmsg`, which a filter cannot read. io_uring, which connects
//! without the `connect` call, is refused the same way.
//!
//! The peer of a relayed Unix connection sees dsh's pid and credentials (`SO_PEERCRED`), not the
//! command's. One thread runs the gate for the whole process (`dsh-sockgate`, a single-threaded
//! tokio runtime, started by the first listener it is given). Under Landlock a listener per
//! confined spawning thread (`crate::confined_thread`), shared by every command it spawns and
//! served by the gate thread from the start (`serve_shared`); under bubblewrap a listener per
//! command, watched by the runtime that spawned it until its first `connect` (`first.rs`), then
//! served by the gate thread (`registry.rs`); each until the last process holding its filter is
//! gone (the listener then reports hang-up).

mod filter;
mod first;
mod inflight;
mod notify;
mod registry;
mod relay;
mod verdict;

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::{Arc, OnceLock};

use nix::libc;
use tokio::io::unix::AsyncFd;

pub(crate) use filter::{HandOver, hand_over, install_in_child, program};
use registry::{Registry, Served};
pub use verdict::Reach;
use verdict::UnixAddress;

/// Whether a confined command's Internet sockets may connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inet {
    /// The network policy lets them (or a network namespace confines them).
    Connect,
    /// Refused (`EACCES`).
    Refuse,
}

/// The gate's rules for one command (or one sandbox policy's commands).
#[derive(Debug, Clone)]
pub struct GatePolicy {
    /// Where its Unix sockets may be.
    pub reach: Reach,
    /// Whether its Internet sockets may connect.
    pub inet: Inet,
    /// Whether it runs under a launcher (bubblewrap), whose sandbox's mounts must be the ones the
    /// connecting thread sees (`verdict.rs`).
    pub launcher: bool,
}

/// The gate's program, built once: what the spawn installs.
pub(crate) fn gate_program() -> &'static [libc::sock_filter] {
    static PROGRAM: OnceLock<Vec<libc::sock_filter>> = OnceLock::new();
    PROGRAM.get_or_init(program)
}

/// Serves `listener` (received from the child `spawned`) under `policy` until its command is gone.
/// Called on the spawning thread: the spawning runtime watches it until the command's first
/// `connect` (`first.rs`), then the gate thread serves it; without a runtime, the gate thread at
/// once (`registry.rs`).
pub(crate) fn watch(listener: OwnedFd, policy: Arc<GatePolicy>, spawned: i32) {
    notify::wake_synchronously(listener.as_fd());
    let served = Served::new(listener, policy, spawned);
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => first::watch(&runtime, served, to_gate),
        Err(_) => to_gate(served),
    }
}

/// Serves `listener`, the filter of a confined spawning thread (`crate::confined_thread`, thread
/// `tid`) shared by every command it spawns, under `policy`, on the
/// gate thread from the start: it hangs up only when the thread and all its commands are gone, so
/// a first watch on a command's runtime would gain nothing. Call it on an unconfined thread (the
/// gate thread may be started here, and would inherit the caller's confinement).
pub(crate) fn serve_shared(listener: OwnedFd, policy: Arc<GatePolicy>, tid: i32) {
    notify::wake_synchronously(listener.as_fd());
    to_gate(Served::new(listener, policy, tid));
}

/// Hands `served` to the gate thread, starting it if needed.
fn to_gate(served: Served) {
    let spawned = served.spawned;
    match GATE.get_or_init(start) {
        Some(registry) => {
            if let Err(err) = registry.add(served) {
                // The listener closes here: the command's connects fail (`ENOSYS`) rather than
                // pass unchecked.
                tracing::error!(spawned, %err, "the socket gate could not take a listener");
            }
        }
        None => tracing::error!("the socket gate is not running: confined connects will fail"),
    }
}

/// The gate, once started.
static GATE: OnceLock<Option<&'static Registry>> = OnceLock::new();

/// Starts the gate thread, once per process; its registry lives as long as the process.
fn start() -> Option<&'static Registry> {
    let registry: &'static Registry = Box::leak(Box::new(Registry::new().ok()?));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .ok()?;
    std::thread::Builder::new()
        .name("dsh-sockgate".into())
        .spawn(move || runtime.block_on(serve(registry)))
        .ok()?;
    Some(registry)
}

/// Answers every listener's notifications, one per listener in turn, for as long as dsh runs.
async fn serve(registry: &'static Registry) {
    // SAFETY: the registry is never freed, so its epoll descriptor stays open and unchanged for
    // as long as the `AsyncFd` exists.
    let watched =
        unsafe { AsyncFd::register_with_interest(registry.epoll(), tokio::io::Interest::READABLE) };
    let Ok(epoll) = watched else {
        tracing::error!("the socket gate cannot watch its epoll set: confined connects will fail");
        return;
    };
    loop {
        let Ok(mut guard) = epoll.readable().await else {
            return;
        };
        let pending = match registry.pending() {
            Ok(pending) => pending,
            Err(err) => {
                tracing::error!(%err, "the socket gate's epoll set failed");
                return;
            }
        };
        if pending.is_empty() {
            guard.clear_ready();
            continue;
        }
        // One notification per listener, then the settling tasks run: one command flooding its
        // listener must not hold the thread every command's gate runs on. A listener with more
        // pending is reported again (level-triggered).
        for served in pending {
            // Still pending: receiving blocks when nothing is.
            if !notify::pending(served.listener()) {
                continue;
            }
            match notify::receive(served.listener()) {
                Ok(Some(notif)) => {
                    tokio::spawn(settle(served, notif));
                }
                // Its thread is gone since.
                Ok(None) => {}
                Err(err) => {
                    tracing::error!(spawned = served.spawned, %err, "a socket-gate listener failed");
                    registry.forget(&served);
                }
            }
        }
        tokio::task::yield_now().await;
    }
}

/// Decides and carries out one `connect`, then answers it; a second notification for a socket the
/// gate is still connecting gets the first's result (`inflight.rs`).
async fn settle(served: Arc<Served>, notif: libc::seccomp_notif) {
    let fd = || served.listener();
    let (policy, spawned, in_flight) = (&served.policy, served.spawned, &served.in_flight);
    let request = match notify::Request::read(&notif) {
        Ok(request) => request,
        Err(errno) => {
            notify::answer(fd(), notif.id, errno);
            return;
        }
    };
    if !notify::still_waiting(fd(), request.id) {
        return;
    }
    let deliver = |socket: u64, errno: i32| {
        if !notify::answer(fd(), notif.id, errno) {
            in_flight.undelivered(socket, errno);
        }
    };
    let (lead, socket) = match in_flight.turn(request.socket.as_fd()) {
        (inflight::Turn::Done(errno), socket) => return deliver(socket, errno),
        (inflight::Turn::Follow(result), socket) => {
            return deliver(socket, inflight::follow(result).await);
        }
        (inflight::Turn::Lead(lead), socket) => (lead, socket),
    };
    // Someone still wants the result: this notification's thread, or a restarted call's.
    let waiting = || notify::still_waiting(fd(), request.id) || lead.followed();
    let errno = match relay::int_option(request.socket.as_fd(), libc::SO_DOMAIN) {
        Err(errno) => errno,
        Ok(libc::AF_UNIX) => unix(&request, policy, spawned, waiting).await,
        Ok(libc::AF_INET | libc::AF_INET6) => match policy.inet {
            Inet::Refuse => libc::EACCES,
            Inet::Connect => relay::connect_inet(request.socket, &request.address, waiting).await,
        },
        Ok(_) => libc::EACCES,
    };
    lead.finish(errno);
    deliver(socket, errno);
}

/// A Unix socket's connect: the errno to answer.
async fn unix(
    request: &notify::Request,
    policy: &GatePolicy,
    spawned: i32,
    waiting: impl Fn() -> bool,
) -> i32 {
    let socket = request.socket.as_fd();
    match verdict::classify(&request.address) {
        UnixAddress::Path(path) => {
            if policy.launcher && !verdict::sees_sandbox_mounts(request.tid, spawned) {
                return libc::EACCES;
            }
            let target = match verdict::resolve(request.tid, path) {
                Ok(target) => target,
                Err(errno) => return errno,
            };
            if !policy.reach.permits(&target) {
                return libc::EACCES;
            }
            let via = relay::unix_address(&format!("/proc/self/fd/{}", target.as_raw_fd()));
            relay::connect_unix(socket, &via, waiting).await
        }
        UnixAddress::Abstract => {
            let name = &request.address[3..];
            if !verdict::listened_in_sandbox(request.tid, name) {
                return libc::ECONNREFUSED;
            }
            let errno = relay::connect_unix(socket, &request.address, waiting).await;
            if errno != 0 {
                return errno;
            }
            let peer = relay::peer_pid(socket);
            if peer > 0 && verdict::same_sandbox(peer, request.tid) {
                0
            } else {
                relay::sever(socket);
                libc::ECONNREFUSED
            }
        }
        UnixAddress::TooLong => libc::EINVAL,
        UnixAddress::Other => relay::connect_unix(socket, &request.address, waiting).await,
    }
}
