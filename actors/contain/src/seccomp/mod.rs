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
//! not list, so on x86_64 the program starts with three instructions of ours that refuse every call
//! at or above that offset (a kernel without `CONFIG_X86_X32_ABI` refuses them anyway).
//!
//! The program is built once in the parent (with `seccompiler`, rust-vmm's filter compiler) and
//! installed by the spawned child with one `seccomp(SECCOMP_SET_MODE_FILTER)` call after
//! `no_new_privs` (`install`, no allocation); bubblewrap reads the same program from a sealed
//! memfd (`--seccomp FD`, [`Filter::launcher_fd`]).

use std::collections::BTreeMap;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, OnceLock};

use nix::libc;
use seccompiler::{
    SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    TargetArch,
};

/// `IOPRIO_WHO_USER` (`include/uapi/linux/ioprio.h`).
const IOPRIO_WHO_USER: u64 = 3;
/// The bits of a socket type that name the type (the rest are `SOCK_NONBLOCK`, `SOCK_CLOEXEC`).
const SOCK_TYPE_MASK: u64 = 0xf;
/// `SOCK_PACKET` (obsolete, still accepted by the kernel for `AF_INET`).
const SOCK_PACKET: i32 = 10;
/// Every socket type but `SOCK_STREAM`: datagram, raw, RDM, seqpacket, DCCP, packet.
const NOT_STREAM: [i32; 6] = [
    libc::SOCK_DGRAM,
    libc::SOCK_RAW,
    libc::SOCK_RDM,
    libc::SOCK_SEQPACKET,
    libc::SOCK_DCCP,
    SOCK_PACKET,
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
    /// `seccompiler` refused the rules, or does not know this architecture.
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
    program: Vec<libc::sock_filter>,
    sockets: Sockets,
    /// Created on first use by a launcher: a sealed memfd holding `program`.
    memfd: OnceLock<Result<OwnedFd, io::ErrorKind>>,
}

type Condition = Result<SeccompCondition, SeccompError>;

fn condition(arg: u8, len: SeccompCmpArgLen, op: SeccompCmpOp, value: u64) -> Condition {
    SeccompCondition::new(arg, len, op, value).map_err(|e| SeccompError::Build(e.to_string()))
}

fn rule(conditions: impl IntoIterator<Item = Condition>) -> Result<SeccompRule, SeccompError> {
    let conditions = conditions.into_iter().collect::<Result<Vec<_>, _>>()?;
    SeccompRule::new(conditions).map_err(|e| SeccompError::Build(e.to_string()))
}

/// `arg` (a 32-bit integer) is not 0.
fn nonzero(arg: u8) -> Condition {
    condition(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, 0)
}

/// `arg` (a 32-bit integer) is `value`.
fn equals(arg: u8, value: u64) -> Condition {
    condition(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, value)
}

/// The rules under which each call is refused (see the module table).
fn refusals(sockets: Sockets) -> Result<BTreeMap<i64, Vec<SeccompRule>>, SeccompError> {
    let mut rules = BTreeMap::new();
    let other_pid = || rule([nonzero(0)]);
    rules.insert(
        libc::SYS_prlimit64,
        vec![rule([
            nonzero(0),
            condition(2, SeccompCmpArgLen::Qword, SeccompCmpOp::Ne, 0),
        ])?],
    );
    rules.insert(
        libc::SYS_setpriority,
        vec![
            rule([nonzero(1)])?,
            rule([equals(0, libc::PRIO_USER as u64)])?,
        ],
    );
    rules.insert(
        libc::SYS_ioprio_set,
        vec![rule([nonzero(1)])?, rule([equals(0, IOPRIO_WHO_USER)])?],
    );
    for call in [
        libc::SYS_sched_setaffinity,
        libc::SYS_sched_setscheduler,
        libc::SYS_sched_setparam,
        libc::SYS_sched_setattr,
    ] {
        rules.insert(call, vec![other_pid()?]);
    }
    // Datagram Unix sockets (`SOCK_RAW` is one too, for `AF_UNIX`), for the socket gate.
    let unix_datagram = || -> Result<Vec<SeccompRule>, SeccompError> {
        [libc::SOCK_DGRAM, libc::SOCK_RAW]
            .into_iter()
            .map(|kind| {
                rule([
                    equals(0, libc::AF_UNIX as u64),
                    condition(
                        1,
                        SeccompCmpArgLen::Dword,
                        SeccompCmpOp::MaskedEq(SOCK_TYPE_MASK),
                        kind as u64,
                    ),
                ])
            })
            .collect()
    };
    rules.insert(libc::SYS_socketpair, unix_datagram()?);
    rules.insert(libc::SYS_io_uring_setup, Vec::new());
    let mut socket = unix_datagram()?;
    if sockets == Sockets::TcpOnly {
        // TCP Fast Open: the flags argument of each send call.
        for (call, flags_arg) in [
            (libc::SYS_sendto, 3),
            (libc::SYS_sendmsg, 2),
            (libc::SYS_sendmmsg, 3),
        ] {
            rules.insert(
                call,
                vec![rule([condition(
                    flags_arg,
                    SeccompCmpArgLen::Dword,
                    SeccompCmpOp::MaskedEq(libc::MSG_FASTOPEN as u64),
                    libc::MSG_FASTOPEN as u64,
                )])?],
            );
        }
        for family in [libc::AF_INET, libc::AF_INET6] {
            let family = family as u64;
            for kind in NOT_STREAM {
                socket.push(rule([
                    equals(0, family),
                    condition(
                        1,
                        SeccompCmpArgLen::Dword,
                        SeccompCmpOp::MaskedEq(SOCK_TYPE_MASK),
                        kind as u64,
                    ),
                ])?);
            }
            socket.push(rule([
                equals(0, family),
                nonzero(2),
                condition(
                    2,
                    SeccompCmpArgLen::Dword,
                    SeccompCmpOp::Ne,
                    libc::IPPROTO_TCP as u64,
                ),
            ])?);
        }
    }
    rules.insert(libc::SYS_socket, socket);
    Ok(rules)
}

impl Filter {
    /// Builds the filter for this architecture.
    pub fn build(sockets: Sockets) -> Result<Self, SeccompError> {
        let arch = TargetArch::try_from(std::env::consts::ARCH)
            .map_err(|e| SeccompError::Build(e.to_string()))?;
        let filter = SeccompFilter::new(
            refusals(sockets)?,
            SeccompAction::Allow,
            SeccompAction::Errno(libc::EPERM as u32),
            arch,
        )
        .map_err(|e| SeccompError::Build(e.to_string()))?;
        let program: seccompiler::BpfProgram = filter
            .try_into()
            .map_err(|e: seccompiler::BackendError| SeccompError::Build(e.to_string()))?;
        // BPF jumps are relative and forward: instructions put before the compiled program leave
        // its jumps intact.
        let program = x32_guard()
            .into_iter()
            .chain(program.into_iter().map(|insn| libc::sock_filter {
                code: insn.code,
                jt: insn.jt,
                jf: insn.jf,
                k: insn.k,
            }))
            .collect();
        Ok(Filter {
            inner: Arc::new(Inner {
                program,
                sockets,
                memfd: OnceLock::new(),
            }),
        })
    }

    /// Which Internet sockets the filter lets through.
    pub fn sockets(&self) -> Sockets {
        self.inner.sockets
    }

    /// The program as the kernel takes it. Points into this filter: keep the filter alive while
    /// the result is in use.
    pub(crate) fn fprog(&self) -> libc::sock_fprog {
        libc::sock_fprog {
            // A few dozen instructions, far below BPF_MAXINSNS (4096).
            len: self.inner.program.len() as u16,
            filter: self.inner.program.as_ptr().cast_mut(),
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

/// x86_64: refuse (`EPERM`) every call numbered at or above the x32 bit, before the compiled
/// program looks at the architecture and the number.
#[cfg(target_arch = "x86_64")]
fn x32_guard() -> Vec<libc::sock_filter> {
    /// `offsetof(struct seccomp_data, nr)`.
    const NR_OFFSET: u32 = 0;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    let insn = |code: u32, jt: u8, jf: u8, k: u32| libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    };
    vec![
        insn(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0, 0, NR_OFFSET),
        insn(
            libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K,
            0,
            1,
            X32_SYSCALL_BIT,
        ),
        insn(
            libc::BPF_RET | libc::BPF_K,
            0,
            0,
            libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
        ),
    ]
}

/// Other architectures have no second numbering under the same architecture value.
#[cfg(not(target_arch = "x86_64"))]
fn x32_guard() -> Vec<libc::sock_filter> {
    Vec::new()
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

/// Installs `prog` on the calling thread: `seccomp(SECCOMP_SET_MODE_FILTER, 0, prog)`. Call after
/// `no_new_privs`. Async-signal-safe (one system call): for the spawned child.
pub(crate) fn install(prog: *const libc::sock_fprog) -> bool {
    // SAFETY: `prog` points to a valid sock_fprog whose instructions the caller keeps alive; the
    // kernel copies the program and only changes the calling thread's filter.
    unsafe { libc::syscall(libc::SYS_seccomp, libc::SECCOMP_SET_MODE_FILTER, 0u32, prog) == 0 }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn the_launcher_descriptor_holds_the_program_and_is_sealed() {
        let filter = Filter::build(Sockets::TcpOnly).unwrap();
        let path = format!("/proc/self/fd/{}", filter.launcher_fd().unwrap());
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len(), 8 * filter.inner.program.len());
        // The same descriptor on a second use: built once.
        assert_eq!(
            filter.launcher_fd().unwrap(),
            filter.clone().launcher_fd().unwrap()
        );
        let mut file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        assert!(file.write_all(b"x").is_err(), "the memfd is sealed");
    }

    #[test]
    fn the_network_policy_adds_the_socket_rules() {
        let any = Filter::build(Sockets::Any).unwrap();
        let tcp_only = Filter::build(Sockets::TcpOnly).unwrap();
        assert!(tcp_only.inner.program.len() > any.inner.program.len());
        assert_eq!(tcp_only.sockets(), Sockets::TcpOnly);
    }
}
