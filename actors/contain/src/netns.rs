//! The runtime's own network namespace, for `--network loopback`: confined commands see only a
//! loopback interface, and every command of one runtime sees the same one.
//!
//! Why a namespace: Landlock's network rules name ports, never addresses, and a seccomp filter
//! cannot read the address a `connect` points to; a network namespace holding nothing but `lo` gives
//! "loopback only" by construction (TCP, UDP, abstract UNIX socket names — which belong to a network
//! namespace — and DNS, which has no route). One namespace per runtime, not per command: a dev server
//! started by one call (a background task) listens where the next call's `curl` connects.
//!
//! How: [`Netns::create`] runs once, in the unconfined parent, on a short-lived thread of its own
//! (`unshare(CLONE_NEWNET)` moves only the calling thread, so dsh itself stays in the host's
//! namespace), brings `lo` up there with `ioctl(SIOCSIFFLAGS)` on a datagram socket made in the new
//! namespace, and keeps the namespace by a descriptor of `/proc/thread-self/ns/net`; the thread then
//! ends. Each confined spawn's child joins it with `setns(fd, CLONE_NEWNET)` (`join_in_child`),
//! before it drops its capabilities (Landlock in the spawn) or before it execs bubblewrap, which then
//! runs without `--unshare-net`. Creating and joining need `CAP_SYS_ADMIN` (dsh as root); without
//! it the runtime refuses to start ([`NetnsError`] names the cause and the fix). The namespace goes
//! when the last descriptor and the last process in it are gone.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;

use nix::libc::{self, c_int};

/// The namespace file of the calling thread.
const THREAD_NETNS: &CStr = c"/proc/thread-self/ns/net";
/// The loopback interface's name.
const LOOPBACK: &[u8] = b"lo";

/// Why the runtime's network namespace could not be made. The text names the cause, then the fix.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    /// `unshare(CLONE_NEWNET)` answered `EPERM`: dsh lacks `CAP_SYS_ADMIN`.
    #[error(
        "creating a network namespace was refused ({0}): dsh needs CAP_SYS_ADMIN for it (run dsh \
         as root, or give its container CAP_SYS_ADMIN), or use --network deny or allow"
    )]
    Refused(#[source] io::Error),
    /// `unshare(CLONE_NEWNET)` failed otherwise (no `CONFIG_NET_NS`, `user.max_net_namespaces`).
    #[error(
        "creating a network namespace failed ({0}): the kernel needs network namespaces \
         (CONFIG_NET_NS) with room for one more (sysctl user.max_net_namespaces), or use \
         --network deny or allow"
    )]
    Unshare(#[source] io::Error),
    /// `lo` could not be brought up in the new namespace.
    #[error(
        "bringing up the loopback interface of the new network namespace failed ({0}); use \
         --network deny or allow"
    )]
    Loopback(#[source] io::Error),
    /// The namespace's descriptor could not be opened, or the thread that makes it did not start.
    #[error("keeping the new network namespace failed ({0}); use --network deny or allow")]
    Keep(#[source] io::Error),
}

/// A network namespace with only `lo`, up. Cheap to clone: every clone holds the same descriptor.
#[derive(Debug, Clone)]
pub struct Netns {
    fd: Arc<OwnedFd>,
}

impl Netns {
    /// Makes the namespace on a thread of its own and keeps it by a descriptor.
    pub fn create() -> Result<Self, NetnsError> {
        let thread = std::thread::Builder::new()
            .name("dsh-netns".into())
            .spawn(make_on_this_thread)
            .map_err(NetnsError::Keep)?;
        let fd = thread
            .join()
            .map_err(|_| NetnsError::Keep(io::Error::other("its thread panicked")))??;
        Ok(Self { fd: Arc::new(fd) })
    }

    /// The descriptor a spawned child joins (close-on-exec; valid while `self` lives).
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The namespace's inode number (what `/proc/<pid>/ns/net` links to as `net:[<inode>]`), to
    /// tell it from the host's.
    pub fn inode(&self) -> io::Result<u64> {
        let mut stat = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: fstat on a descriptor we own, into a valid out-pointer.
        if unsafe { libc::fstat(self.raw_fd(), stat.as_mut_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fstat succeeded, so it filled the struct.
        Ok(unsafe { stat.assume_init() }.st_ino)
    }
}

/// Moves the calling thread into a new network namespace, brings `lo` up, and returns a descriptor
/// of the namespace. Run on a thread that ends right after.
fn make_on_this_thread() -> Result<OwnedFd, NetnsError> {
    // SAFETY: unshare takes flags only; CLONE_NEWNET changes only this thread's namespace.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        let err = io::Error::last_os_error();
        return Err(if err.raw_os_error() == Some(libc::EPERM) {
            NetnsError::Refused(err)
        } else {
            NetnsError::Unshare(err)
        });
    }
    loopback_up().map_err(NetnsError::Loopback)?;
    // SAFETY: a NUL-terminated path; the result is checked and then owned.
    let fd = unsafe { libc::open(THREAD_NETNS.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(NetnsError::Keep(io::Error::last_os_error()));
    }
    // SAFETY: open just returned it and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sets `IFF_UP` on `lo` of the calling thread's network namespace.
fn loopback_up() -> io::Result<()> {
    // SAFETY: socket takes integers; the result is checked and then owned.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: socket just returned it and nothing else owns it.
    let socket = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: an all-zero ifreq is valid (an empty name, zero flags).
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in request.ifr_name.iter_mut().zip(LOOPBACK) {
        *slot = *byte as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS fills the flags of the named interface in a valid ifreq.
    if unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCGIFFLAGS, &mut request) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFFLAGS set the union's flags member, which is the one read and written here.
    unsafe { request.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short };
    // SAFETY: SIOCSIFFLAGS reads a valid ifreq naming `lo` with its flags.
    if unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCSIFFLAGS, &request) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Joins the namespace `fd` (a [`Netns`] descriptor, or negative for none) in the spawned child.
/// Async-signal-safe: one syscall. `false` with errno set when the kernel refused.
pub(crate) fn join_in_child(fd: c_int) -> bool {
    // SAFETY: setns on a descriptor number the parent keeps open; it moves only the calling task.
    fd < 0 || unsafe { libc::setns(fd, libc::CLONE_NEWNET) } == 0
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    /// The inode of the calling thread's network namespace.
    fn own_inode() -> u64 {
        std::fs::metadata("/proc/thread-self/ns/net")
            .map(|m| m.ino())
            .unwrap_or_default()
    }

    /// On a host that allows it, the namespace is not the host's and the caller stays where it was.
    #[test]
    fn the_namespace_is_new_and_the_caller_stays_in_its_own() {
        let own = own_inode();
        match Netns::create() {
            Ok(ns) => {
                assert_eq!(own_inode(), own);
                assert_ne!(ns.inode().ok(), Some(own));
            }
            Err(NetnsError::Refused(_)) => eprintln!("skipped: no CAP_SYS_ADMIN here"),
            Err(err) => panic!("{err}"),
        }
    }
}
