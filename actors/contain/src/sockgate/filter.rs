//! The gate's own seccomp program (for a launcher's child; under Landlock the main filter's gated
//! form is installed instead, `crate::seccomp`) and how a listener travels from the spawned child
//! to dsh.
//!
//! The program is six instructions: on this architecture, `connect` returns
//! `SECCOMP_RET_USER_NOTIF` (the calling thread waits for dsh's answer); every other call is
//! allowed (the main filter, `crate::seccomp`, decides those; a 32-bit or x32 call is refused
//! there). The child installs it with `SECCOMP_FILTER_FLAG_NEW_LISTENER`, which returns the
//! listener descriptor — in the child's descriptor table, close-on-exec, so the program never holds
//! it (a command that held its own listener could answer its own connects). The child sends it to
//! dsh over a socket pair made for the spawn (`SCM_RIGHTS`), closes it, and execs; dsh receives it
//! once the spawn returns ([`HandOver::receive`]).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::libc::{self, c_int};

use crate::seccomp::{ARCH_OFFSET, AUDIT_ARCH, NR_OFFSET};

fn insn(code: u32, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

/// The program: `connect` of this architecture to dsh, everything else allowed.
pub(crate) fn program() -> Vec<libc::sock_filter> {
    let load = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    let jeq = libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K;
    let ret = libc::BPF_RET | libc::BPF_K;
    vec![
        insn(load, 0, 0, ARCH_OFFSET),
        // Another architecture: allow here (index 5); the main filter refuses it.
        insn(jeq, 0, 3, AUDIT_ARCH),
        insn(load, 0, 0, NR_OFFSET),
        insn(jeq, 0, 1, libc::SYS_connect as u32),
        insn(ret, 0, 0, libc::SECCOMP_RET_USER_NOTIF),
        insn(ret, 0, 0, libc::SECCOMP_RET_ALLOW),
    ]
}

/// `CMSG_SPACE(sizeof(int))` on 64-bit Linux: a 16-byte header and the descriptor, padded to 8.
const FD_CMSG_SPACE: usize = 24;

/// Control-message space aligned like `struct cmsghdr`.
#[repr(C, align(8))]
struct FdSpace([u8; FD_CMSG_SPACE]);

/// In the child: installs `prog` with a new listener and sends the listener over `sock`.
/// Async-signal-safe (plain syscalls on stack data). Installing needs `no_new_privs` or
/// `CAP_SYS_ADMIN`: a launcher's child (still privileged when dsh runs as root) tries without first
/// and sets `no_new_privs` only when refused.
pub(crate) fn install_in_child(prog: *const libc::sock_fprog, sock: c_int) -> bool {
    let install = || {
        // SAFETY: `prog` points to a program the parent keeps alive; the kernel copies it.
        unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
                prog,
            )
        }
    };
    let mut listener = install();
    if listener < 0 && errno() == libc::EACCES {
        // SAFETY: prctl with constant arguments.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return false;
        }
        listener = install();
    }
    listener >= 0 && hand_over(listener as c_int, sock)
}

/// In the child: sends `listener` to dsh over `sock`, then closes it. Async-signal-safe.
pub(crate) fn hand_over(listener: c_int, sock: c_int) -> bool {
    let sent = send_fd(sock, listener);
    // SAFETY: closing the descriptor the kernel just gave us; the program must not inherit it.
    unsafe { libc::close(listener) };
    sent
}

fn errno() -> c_int {
    // SAFETY: __errno_location returns the calling thread's errno slot, always valid.
    unsafe { *libc::__errno_location() }
}

/// A message header for one byte (`iov`) and one descriptor's control message (`space`).
fn one_fd_message(iov: &mut libc::iovec, space: &mut FdSpace) -> libc::msghdr {
    // SAFETY: a zeroed msghdr is a valid value (null pointers, zero lengths).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov;
    msg.msg_iovlen = 1;
    msg.msg_control = space.0.as_mut_ptr().cast();
    msg.msg_controllen = FD_CMSG_SPACE as _;
    msg
}

/// Sends `fd` with one byte over `sock` (`SCM_RIGHTS`). Async-signal-safe.
fn send_fd(sock: c_int, fd: c_int) -> bool {
    let mut byte = [1u8];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut space = FdSpace([0; FD_CMSG_SPACE]);
    let msg = one_fd_message(&mut iov, &mut space);
    // SAFETY: `msg` points to stack data that outlives the sendmsg call, and its control buffer is
    // large and aligned enough for one descriptor's header, which CMSG_FIRSTHDR returns.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null() {
            return false;
        }
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<c_int>() as u32) as _;
        libc::CMSG_DATA(cmsg).cast::<c_int>().write_unaligned(fd);
        libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) == 1
    }
}

/// The socket pair one spawn's listener travels over: the child sends on [`HandOver::child_end`],
/// dsh receives on the other end. Both ends are close-on-exec.
pub(crate) struct HandOver {
    ours: OwnedFd,
    theirs: OwnedFd,
}

impl HandOver {
    pub(crate) fn new() -> io::Result<Self> {
        let mut fds = [-1 as c_int; 2];
        // SAFETY: socketpair writes two new descriptors into `fds` on success.
        let ret = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        };
        if ret != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: socketpair just created both and nothing else owns them.
        let (ours, theirs) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        Ok(HandOver { ours, theirs })
    }

    /// The end the child sends on.
    pub(crate) fn child_end(&self) -> RawFd {
        self.theirs.as_raw_fd()
    }

    /// The listener the child sent, if it got that far (a child that failed earlier sent nothing).
    pub(crate) fn receive(&self) -> io::Result<OwnedFd> {
        let mut byte = [0u8];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        let mut space = FdSpace([0; FD_CMSG_SPACE]);
        let mut msg = one_fd_message(&mut iov, &mut space);
        // SAFETY: as in `send_fd`; recvmsg fills at most the buffers given.
        unsafe {
            let n = libc::recvmsg(
                self.ours.as_raw_fd(),
                &mut msg,
                libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
            );
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            if n != 1
                || cmsg.is_null()
                || (*cmsg).cmsg_level != libc::SOL_SOCKET
                || (*cmsg).cmsg_type != libc::SCM_RIGHTS
            {
                return Err(io::Error::other("no listener in the child's message"));
            }
            let fd = libc::CMSG_DATA(cmsg).cast::<c_int>().read_unaligned();
            Ok(OwnedFd::from_raw_fd(fd))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_jumps_stay_inside_it() {
        let program = program();
        for (index, insn) in program.iter().enumerate() {
            if insn.code as u32 & 0x07 == libc::BPF_JMP {
                assert!(index + 1 + (insn.jt.max(insn.jf) as usize) < program.len());
            }
        }
        assert_eq!(
            program.last().map(|i| i.k),
            Some(libc::SECCOMP_RET_ALLOW),
            "anything unmatched is allowed (the main filter decides)"
        );
    }

    #[test]
    fn a_descriptor_sent_over_the_pair_arrives() {
        let pair = HandOver::new().unwrap();
        let file = std::fs::File::open("/proc/self/stat").unwrap();
        assert!(send_fd(pair.child_end(), file.as_raw_fd()));
        let got = pair.receive().unwrap();
        let link = |fd: RawFd| std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap();
        assert_eq!(link(got.as_raw_fd()), link(file.as_raw_fd()));
        assert!(pair.receive().is_err(), "one message, one descriptor");
    }
}
