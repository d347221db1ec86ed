//! Dropping every capability in the spawned child, before it confines itself and execs.
//!
//! dsh often runs as root (containers). A command confined by Landlock alone would keep every root
//! capability: raw sockets (hand-made packets past `--network deny`), mounts, namespaces, module
//! loads, `CAP_SYS_RESOURCE` and `CAP_SYS_NICE` over other processes. So the confined child clears
//! its bounding set (what any later `execve` could grant), its ambient set, and its effective,
//! permitted and inheritable sets, and then sets `no_new_privs` (with the Landlock step), so no
//! set-uid or file-capability program gives any back.
//!
//! What stays: the uid. A root command still owns root's files, so the ordinary owner permission
//! bits keep the workspace (and the files it creates) writable; what it loses is the override of
//! other owners' bits (`CAP_DAC_OVERRIDE`, `CAP_FOWNER`, `CAP_CHOWN`).
//!
//! Runs between `clone3` and `execve`: plain syscalls on the stack, no allocation, no panics.

use nix::libc::{self, c_int};

/// `PR_CAPBSET_DROP` (`include/uapi/linux/prctl.h`).
const PR_CAPBSET_DROP: c_int = 24;
/// `PR_CAP_AMBIENT`.
const PR_CAP_AMBIENT: c_int = 47;
/// `PR_CAP_AMBIENT_CLEAR_ALL`.
const PR_CAP_AMBIENT_CLEAR_ALL: libc::c_ulong = 4;
/// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words per set.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;
/// `CAP_SETPCAP`: needed to shrink the bounding set.
const CAP_SETPCAP: u32 = 8;
/// Capability numbers are below 64 in every kernel so far (`cap_last_cap` is 40 in 6.x); the loop
/// stops earlier at the first number the kernel does not know (`EINVAL`).
const CAP_NUMBERS: libc::c_ulong = 64;

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: c_int,
}

/// `struct __user_cap_data_struct`.
#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const EMPTY: CapData = CapData {
    effective: 0,
    permitted: 0,
    inheritable: 0,
};

fn errno() -> c_int {
    // SAFETY: __errno_location returns the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() }
}

/// Whether the calling thread holds `CAP_SETPCAP` in its effective set (false if it cannot tell).
fn holds_setpcap() -> bool {
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [EMPTY; 2];
    // SAFETY: capget with a valid version-3 header and room for its two data words.
    let r = unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) };
    r == 0 && data[0].effective & (1 << CAP_SETPCAP) != 0
}

/// Clears the bounding, ambient, effective, permitted and inheritable sets of the calling thread.
/// False (with errno set) when the kernel refused a step that should have worked.
///
/// A process without `CAP_SETPCAP` (dsh run by an ordinary user) cannot shrink its bounding set;
/// it then has no capability to give away, and `no_new_privs` keeps an exec from gaining any, so
/// that case is not a failure.
pub(crate) fn drop_all() -> bool {
    for cap in 0..CAP_NUMBERS {
        // SAFETY: prctl with PR_CAPBSET_DROP takes plain integer arguments.
        if unsafe { libc::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) } != 0 {
            match errno() {
                libc::EINVAL => break,
                libc::EPERM if !holds_setpcap() => break,
                _ => return false,
            }
        }
    }
    // SAFETY: plain integer arguments; kernels before 4.3 answer EINVAL (no ambient set to clear).
    let r = unsafe { libc::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) };
    if r != 0 && errno() != libc::EINVAL {
        return false;
    }
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [EMPTY; 2];
    // SAFETY: capset with a valid version-3 header and two data words; dropping capabilities is
    // always allowed and only changes the calling thread's credentials.
    unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) == 0 }
}
