//! The measurement baseline ([`super::Method::SpawnThenJoin`]): glibc `posix_spawn`, then the parent
//! writes the pid into the cgroup. Racy (the child may fork before it is moved), so dsh never
//! spawns this way; it exists only to measure the chosen `clone3` method against (BENCHMARKS.md,
//! "Spawn methods"), and is compiled only with the `bench-internals` feature.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use nix::libc::{self, c_int};

use super::child::Step;
use super::clone::{Request, finish};
use super::{Child, SpawnError};

unsafe extern "C" {
    /// glibc 2.34+.
    fn posix_spawn_file_actions_addclosefrom_np(
        actions: *mut libc::posix_spawn_file_actions_t,
        from: c_int,
    ) -> c_int;
}

/// Method (a): glibc `posix_spawn`, then the parent moves the child (racy; measurement only).
pub(crate) fn posix_spawn_then_join(req: &Request<'_>) -> Result<Child, SpawnError> {
    if !matches!(req.confinement, crate::confine::ChildConfinement::None) || req.terminal {
        // posix_spawn has no hook to confine the child before exec: never start it unconfined.
        // (Nor does this baseline give a controlling terminal.)
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
