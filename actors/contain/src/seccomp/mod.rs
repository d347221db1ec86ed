//! A seccomp filter for confined commands: the calls that act on *other* processes' limits,
//! priority, affinity, scheduling and I/O class, and (under `--network deny`) the sockets Landlock
//! does not see.
//!
//! Why a filter: none of these goes through a file, and their permission check is "same uid or a
//! capability". A confined command runs as dsh's user, so without a filter it could
//! `prlimit --pid <dsh> --cpu=0:0` (the kernel kills dsh), lower dsh's open-files limit, renice,
//! pin or starve it — without sending a signal, so the Landlock signal scope does not apply. A
//! seccomp filter sees the call and its integer arguments, which is all these checks need:
//!
//! | call | refused (`EPERM`) when |
//! |---|---|
//! | `prlimit64` | it sets a limit (`new != NULL`) of a pid other than 0 (reading is allowed) |
//! | `setpriority` | `who != 0`, or `which == PRIO_USER` (every process of the user) |
//! | `ioprio_set` | `who != 0`, or `which == IOPRIO_WHO_USER` |
//! | `sched_setaffinity`, `sched_setscheduler`, `sched_setparam`, `sched_setattr` | `pid != 0` |
//! | `socket` (with [`Sockets::TcpOnly`]) | `AF_INET`/`AF_INET6` of any type but `SOCK_STREAM` (type flags masked), or a protocol other than 0 and TCP |
//! | `socket`, `socketpair` | `AF_UNIX` with `SOCK_DGRAM` or `SOCK_RAW` (which the kernel makes a datagram socket): a datagram names its destination in each send, which the socket gate (`crate::sockgate`) cannot see |
//! | `sendto`, `sendmsg`, `sendmmsg` (with [`Sockets::TcpOnly`]) | `MSG_FASTOPEN`: TCP Fast Open connects without `connect`, where neither Landlock's TCP rules nor the socket gate look |
//! | `io_uring_setup` | always: io_uring creates and connects sockets without the `socket` and `connect` calls the filters and the gate see |
//!
//! A filter compares arguments with constants, never with the caller's own pid (it is not among
//! the data the kernel hands the filter), so "0, meaning myself" is the only way a command may name
//! itself: `setrlimit`, `ulimit`, `nice`, `ionice -c3 cmd`, `taskset 1 cmd` work; `renice -p $$`
//! and `prlimit --pid $$` are refused like any other explicit pid. Calls from another architecture
//! (32-bit `int 0x80` on x86_64) kill the process: their numbers are not the ones checked. The x32
//! ABI shares x86_64's architecture value with numbers offset by `0x40000000`, which the rules do
//! not list, so on x86_64 the program refuses every call at or above that offset (a kernel without
//! `CONFIG_X86_X32_ABI` refuses them anyway).
//!
//! The program is compiled once in the parent (`bpf.rs`, shaped so that installing it is cheap)
//! in two forms: plain, and gated, where `connect` is also handed to the socket gate
//! (`crate::sockgate`) — under Landlock the confined spawning thread
//! (`crate::confined_thread`) installs the gated form once for all its commands with one
//! `seccomp(SECCOMP_SET_MODE_FILTER)` call after `no_new_privs` (`install`, no allocation), and
//! gives the listener it returns to the gate (a child confining itself without the thread does the
//! same and sends the listener to dsh). bubblewrap reads the plain program from a sealed memfd
//! (`--seccomp FD`, [`Filter::launcher_fd`]); a launcher's child installs the gate on its own.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, OnceLock};

use nix::libc;

/// `struct seccomp_data`'s layout and this architecture's value, for the socket gate's own program.
pub(crate) use bpf::{ARCH as ARCH_OFFSET, AUDIT_ARCH, NR as NR_OFFSET};
use bpf::{Cmp, Cond, Refusal, Rules};

mod bpf;
#[cfg(test)]
mod interpreter;

/// `IOPRIO_WHO_USER` (`include/uapi/linux/ioprio.h`).
const IOPRIO_WHO_USER: i32 = 3;
/// The bits of a socket type that name the type (the rest are `SOCK_NONBLOCK`, `SOCK_CLOEXEC`).
const SOCK_TYPE_MASK: u32 = 0xf;
/// `SOCK_PACKET` (obsolete, still accepted by the kernel for `AF_INET`).
const SOCK_PACKET: i32 = 10;
/// Every socket type but `SOCK_STREAM`: datagram, raw, RDM, seqpacket, DCCP, packet.
const NOT_STREAM: [u32; 6] = [
    libc::SOCK_DGRAM as u32,
    libc::SOCK_RAW as u32,
    libc::SOCK_RDM as u32,
    libc::SOCK_SEQPACKET as u32,
    libc::SOCK_DCCP as u32,
    SOCK_PACKET as u32,
];

/// Which Internet sockets a command may create.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Sockets {
    /// Any (the network is allowed).
    Any,
    /// TCP only, which Landlock's network rules then control (`--network deny`): no UDP, no raw
    /// IP, no SCTP, no io_uring.
    TcpOnly,
}

/// Why a filter could not be made.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    /// The rules do not compile.
    #[error("building the seccomp filter: {0}")]
    Build(String),
    /// The sealed memfd bubblewrap reads the filter from.
    #[error("the seccomp filter's memfd: {0}")]
    Memfd(#[source] io::Error),
}

/// A built filter. Cheap to clone; immutable, so one filter serves any number of spawns.
#[derive(Debug, Clone)]
pub struct Filter {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    program: bpf::Program,
    /// `program` with `connect` handed to the socket gate (`SECCOMP_RET_USER_NOTIF`).
    gated: bpf::Program,
    sockets: Sockets,
    /// Created on first use by a launcher: a sealed memfd holding `program`.
    memfd: OnceLock<Result<OwnedFd, io::ErrorKind>>,
}

/// `arg` (a 32-bit integer) is not 0.
fn nonzero(arg: u8) -> Cond {
    Cond {
        arg,
        cmp: Cmp::Ne(0),
    }
}

/// `arg` (a 32-bit integer) is `value`.
fn equals(arg: u8, value: i32) -> Cond {
    Cond {
        arg,
        cmp: Cmp::Eq(value as u32),
    }
}

/// `arg`'s socket type (flags masked off) is one of `kinds`.
fn socket_type(arg: u8, kinds: &'static [u32]) -> Cond {
    Cond {
        arg,
        cmp: Cmp::OneOf {
            mask: SOCK_TYPE_MASK,
            values: kinds,
        },
    }
}

/// The Internet families, for [`Sockets::TcpOnly`].
const INET: [u32; 2] = [libc::AF_INET as u32, libc::AF_INET6 as u32];
/// The Unix socket types that carry datagrams (`SOCK_RAW` is one, for `AF_UNIX`).
const UNIX_DATAGRAM: [u32; 2] = [libc::SOCK_DGRAM as u32, libc::SOCK_RAW as u32];

/// The calls refused, and under which rules (see the module table).
fn refusals(sockets: Sockets) -> BTreeMap<u32, Refusal> {
    let call = |nr: libc::c_long| nr as u32;
    let mut refused = BTreeMap::new();
    let other_pid = || Refusal::When(vec![vec![nonzero(0)]]);
    refused.insert(
        call(libc::SYS_prlimit64),
        Refusal::When(vec![vec![
            nonzero(0),
            Cond {
                arg: 2,
                cmp: Cmp::NonNull,
            },
        ]]),
    );
    refused.insert(
        call(libc::SYS_setpriority),
        Refusal::When(vec![
            vec![nonzero(1)],
            vec![equals(0, libc::PRIO_USER as i32)],
        ]),
    );
    refused.insert(
        call(libc::SYS_ioprio_set),
        Refusal::When(vec![vec![nonzero(1)], vec![equals(0, IOPRIO_WHO_USER)]]),
    );
    for nr in [
        libc::SYS_sched_setaffinity,
        libc::SYS_sched_setscheduler,
        libc::SYS_sched_setparam,
        libc::SYS_sched_setattr,
    ] {
        refused.insert(call(nr), other_pid());
    }
    // Datagram Unix sockets, for the socket gate.
    let unix_datagram = || vec![equals(0, libc::AF_UNIX), socket_type(1, &UNIX_DATAGRAM)];
    refused.insert(
        call(libc::SYS_socketpair),
        Refusal::When(vec![unix_datagram()]),
    );
    refused.insert(call(libc::SYS_io_uring_setup), Refusal::Always);
    let mut socket = vec![unix_datagram()];
    if sockets == Sockets::TcpOnly {
        // TCP Fast Open: the flags argument of each send call.
        for (nr, flags_arg) in [
            (libc::SYS_sendto, 3),
            (libc::SYS_sendmsg, 2),
            (libc::SYS_sendmmsg, 3),
        ] {
            let fast_open = Cond {
                arg: flags_arg,
                cmp: Cmp::MaskedEq {
                    mask: libc::MSG_FASTOPEN as u32,
                    value: libc::MSG_FASTOPEN as u32,
                },
            };
            refused.insert(call(nr), Refusal::When(vec![vec![fast_open]]));
        }
        let internet = Cond {
            arg: 0,
            cmp: Cmp::OneOf {
                mask: u32::MAX,
                values: &INET,
            },
        };
        socket.push(vec![internet, socket_type(1, &NOT_STREAM)]);
        socket.push(vec![
            internet,
            nonzero(2),
            Cond {
                arg: 2,
                cmp: Cmp::Ne(libc::IPPROTO_TCP as u32),
            },
        ]);
    }
    refused.insert(call(libc::SYS_socket), Refusal::When(socket));
    refused
}

impl Filter {
    /// Builds the filter for this architecture.
    pub fn build(sockets: Sockets) -> Result<Self, SeccompError> {
        let refused = refusals(sockets);
        let compile = |notified: Vec<u32>| {
            bpf::compile(&Rules {
                refused: refused.clone(),
                notified,
            })
            .map_err(|_| SeccompError::Build("a jump longer than 255 instructions".into()))
        };
        Ok(Filter {
            inner: Arc::new(Inner {
                program: compile(Vec::new())?,
                gated: compile(vec![libc::SYS_connect as u32])?,
                sockets,
                memfd: OnceLock::new(),
            }),
        })
    }

    /// The filter's identity: equal for clones of one built filter.
    pub(crate) fn id(&self) -> usize {
        Arc::as_ptr(&self.inner) as usize
    }

    /// Which Internet sockets the filter lets through.
    pub fn sockets(&self) -> Sockets {
        self.inner.sockets
    }

    /// The program as the kernel takes it; `gated`: the form that also hands `connect` to the
    /// socket gate. Points into this filter: keep the filter alive while the result is in use.
    pub(crate) fn fprog(&self, gated: bool) -> libc::sock_fprog {
        let program = if gated {
            &self.inner.gated
        } else {
            &self.inner.program
        };
        libc::sock_fprog {
            // A few dozen instructions, far below BPF_MAXINSNS (4096).
            len: program.len() as u16,
            filter: program.as_ptr().cast_mut(),
        }
    }

    /// A descriptor (close-on-exec, sealed) whose content is the program, for a launcher's
    /// `--seccomp FD`; created on first use. The spawn hands each launcher its own open file at
    /// this number (see `crate::spawn`), so launchers never share a read offset.
    pub fn launcher_fd(&self) -> Result<RawFd, SeccompError> {
        self.inner
            .memfd
            .get_or_init(|| sealed_memfd(&self.inner.program).map_err(|e| e.kind()))
            .as_ref()
            .map(AsRawFd::as_raw_fd)
            .map_err(|kind| SeccompError::Memfd(io::Error::from(*kind)))
    }
}

/// A memfd holding `program`'s bytes, sealed against every change.
fn sealed_memfd(program: &[libc::sock_filter]) -> io::Result<OwnedFd> {
    let name = CString::new("dsh-seccomp").map_err(io::Error::other)?;
    // SAFETY: a NUL-terminated name and flags; returns a new descriptor or -1.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: memfd_create just returned it and nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let len = std::mem::size_of_val(program);
    let mut written = 0;
    while written < len {
        // SAFETY: the program's memory is valid for `len` bytes; `written` stays below it.
        let n = unsafe {
            libc::write(
                fd.as_raw_fd(),
                program.as_ptr().cast::<u8>().add(written).cast(),
                len - written,
            )
        };
        if n <= 0 {
            return Err(io::Error::last_os_error());
        }
        written += n as usize;
    }
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    // SAFETY: fcntl on a memfd we own, with a seal mask.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Installs `prog` on the calling thread: `seccomp(SECCOMP_SET_MODE_FILTER, flags, prog)`, with
/// `SECCOMP_FILTER_FLAG_NEW_LISTENER` when `listener` (the gated form). Call after `no_new_privs`.
/// Returns the listener's descriptor (close-on-exec), `0` without one, `-1` on failure (errno
/// set). Async-signal-safe (one system call): for the spawned child.
pub(crate) fn install(prog: *const libc::sock_fprog, listener: bool) -> libc::c_long {
    let flags = if listener {
        libc::SECCOMP_FILTER_FLAG_NEW_LISTENER
    } else {
        0
    };
    // SAFETY: `prog` points to a valid sock_fprog whose instructions the caller keeps alive; the
    // kernel copies the program and only changes the calling thread's filter.
    unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            flags,
            prog,
        )
    }
}

#[cfg(test)]
mod tests;
