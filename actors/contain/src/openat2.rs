//! `openat2(2)`: how dsh opens a path it must not let a command redirect (a writable root with no
//! link in it, a mount point in the command-writable temp, a socket resolved in a command's root).
//! One wrapper, so the `open_how` layout and the descriptor's ownership are written once.

use std::ffi::CStr;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use nix::libc;

/// `openat2(dir, path, flags | O_CLOEXEC)` with the `RESOLVE_*` bits `resolve`.
pub(crate) fn openat2(
    dir: RawFd,
    path: &CStr,
    flags: libc::c_int,
    resolve: u64,
) -> io::Result<OwnedFd> {
    // SAFETY: open_how is plain integers; all-zero is a valid value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC) as u64;
    how.resolve = resolve;
    // SAFETY: a directory descriptor (or AT_FDCWD) valid for the call, a NUL-terminated path and
    // an open_how of the size given; returns a new descriptor or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir,
            path.as_ptr(),
            &how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: openat2 just returned it and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}
