//! How the spawn confines a program: the sandbox backend's choice, as the spawn carries it out.
//!
//! Two shapes ([`Confinement`]): the child confines itself right before exec (Landlock in the
//! spawn: the read-only mount namespace entered before the `chdir` (`crate::mountns`), then capabilities dropped, `no_new_privs`, the Landlock ruleset, the seccomp filter, in that
//! order — shrinking the bounding set needs a capability, and the filter comes last so nothing of
//! the setup runs under it); or a launcher the child execs (bubblewrap) confines the program and
//! needs only the seccomp filter handed over on a descriptor. Either shape may also name the
//! runtime's network namespace (`--network loopback`, `crate::netns`), which the child joins first,
//! while it still holds the capability to. The parent prepares raw values (`Prepared`); the child
//! applies them with plain syscalls (`ChildConfinement::apply`).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::libc::{self, c_int};

use crate::landlock::Ruleset;
use crate::mountns::MountNamespace;
use crate::netns::Netns;
use crate::seccomp::Filter;

/// What the spawn does to confine the program.
#[derive(Debug, Clone)]
pub enum Confinement {
    /// The child enters `mount_ns` (before its `chdir`), then drops every capability, sets
    /// `no_new_privs`, restricts itself with `landlock` and installs `filter`, as its last steps
    /// before exec.
    InSpawn {
        /// The Landlock ruleset.
        landlock: Ruleset,
        /// The seccomp filter.
        filter: Filter,
        /// The read-only mount namespace (`crate::mountns`), where dsh may make one.
        mount_ns: Option<MountNamespace>,
        /// The network namespace to join first (`--network loopback`); `None` keeps the host's.
        netns: Option<Netns>,
    },
    /// The program is a launcher (bubblewrap) that confines what it runs; the child gives it
    /// `filter` on descriptor [`Filter::launcher_fd`] (its own open file, read from the start), for
    /// its `--seccomp FD`.
    Launcher {
        /// The seccomp filter.
        filter: Filter,
        /// The network namespace the launcher starts in (`--network loopback`); `None` keeps the
        /// host's.
        netns: Option<Netns>,
    },
}

impl Confinement {
    /// The same confinement, joining `netns` first (or keeping the host's with `None`).
    pub fn with_netns(mut self, netns: Option<Netns>) -> Self {
        match &mut self {
            Confinement::InSpawn { netns: slot, .. }
            | Confinement::Launcher { netns: slot, .. } => {
                *slot = netns;
            }
        }
        self
    }

    /// The network namespace the child joins, if any.
    fn netns(&self) -> Option<&Netns> {
        match self {
            Confinement::InSpawn { netns, .. } | Confinement::Launcher { netns, .. } => {
                netns.as_ref()
            }
        }
    }
}

/// Which part of the confinement the child failed at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConfineFailure {
    DropCaps,
    Landlock,
    Seccomp,
    Launcher,
}

/// The confinement as raw values for the child (no allocation, no reference counts).
#[derive(Debug, Clone, Copy)]
pub(crate) enum ChildConfinement {
    None,
    InSpawn {
        landlock: c_int,
        filter: *const libc::sock_fprog,
        /// `-1`: none.
        mount_ns: c_int,
        netns: c_int,
    },
    Launcher {
        fresh: c_int,
        target: c_int,
        netns: c_int,
    },
}

impl ChildConfinement {
    /// The descriptor of the network namespace to join (`crate::netns::join_in_child`), negative
    /// for none.
    pub(crate) fn netns(self) -> c_int {
        match self {
            ChildConfinement::None => -1,
            ChildConfinement::InSpawn { netns, .. } | ChildConfinement::Launcher { netns, .. } => {
                netns
            }
        }
    }

    /// Applies the confinement to the calling (child) thread. Async-signal-safe: plain syscalls on
    /// values the parent prepared.
    pub(crate) fn apply(self) -> Result<(), ConfineFailure> {
        match self {
            ChildConfinement::None => Ok(()),
            ChildConfinement::InSpawn {
                landlock, filter, ..
            } => {
                if !crate::caps::drop_all() {
                    return Err(ConfineFailure::DropCaps);
                }
                if !crate::landlock::restrict_in_child(landlock) {
                    return Err(ConfineFailure::Landlock);
                }
                if !crate::seccomp::install(filter) {
                    return Err(ConfineFailure::Seccomp);
                }
                Ok(())
            }
            ChildConfinement::Launcher { fresh, target, .. } => {
                // SAFETY: dup2 between two descriptor numbers; the copy at `target` is not
                // close-on-exec, so the launcher inherits it.
                if unsafe { libc::dup2(fresh, target) } != target {
                    return Err(ConfineFailure::Launcher);
                }
                Ok(())
            }
        }
    }
}

impl ChildConfinement {
    /// The mount namespace the child enters before its `chdir`, if any.
    pub(crate) fn mount_namespace(self) -> Option<c_int> {
        match self {
            ChildConfinement::InSpawn { mount_ns, .. } if mount_ns >= 0 => Some(mount_ns),
            _ => None,
        }
    }
}

/// What the parent keeps alive across one spawn for the child's confinement.
pub(crate) enum Prepared {
    None,
    InSpawn {
        landlock: RawFd,
        fprog: libc::sock_fprog,
        mount_ns: RawFd,
        netns: RawFd,
    },
    /// `fresh`: the filter's memfd opened again, so this launcher reads it from offset 0 whatever
    /// other launchers read (a shared descriptor would share one offset).
    Launcher {
        fresh: OwnedFd,
        target: RawFd,
        netns: RawFd,
    },
}

impl Prepared {
    /// Prepares `confinement` for one spawn.
    pub(crate) fn new(confinement: Option<&Confinement>) -> io::Result<Self> {
        let netns = confinement
            .and_then(Confinement::netns)
            .map_or(-1, Netns::raw_fd);
        Ok(match confinement {
            None => Prepared::None,
            Some(Confinement::InSpawn {
                landlock,
                filter,
                mount_ns,
                ..
            }) => Prepared::InSpawn {
                landlock: landlock.raw_fd(),
                fprog: filter.fprog(),
                mount_ns: mount_ns.as_ref().map_or(-1, MountNamespace::raw_fd),
                netns,
            },
            Some(Confinement::Launcher { filter, .. }) => {
                let target = filter.launcher_fd().map_err(io::Error::other)?;
                let path =
                    CString::new(format!("/proc/self/fd/{target}")).map_err(io::Error::other)?;
                // SAFETY: a NUL-terminated path; opens a new read-only file of the memfd.
                let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
                if fd < 0 {
                    return Err(io::Error::last_os_error());
                }
                // SAFETY: open just returned it and nothing else owns it.
                let fresh = unsafe { OwnedFd::from_raw_fd(fd) };
                Prepared::Launcher {
                    fresh,
                    target,
                    netns,
                }
            }
        })
    }

    /// The raw values for the child; they point into `self`, which must outlive the spawn.
    pub(crate) fn child(&self) -> ChildConfinement {
        match self {
            Prepared::None => ChildConfinement::None,
            Prepared::InSpawn {
                landlock,
                fprog,
                mount_ns,
                netns,
            } => ChildConfinement::InSpawn {
                landlock: *landlock,
                filter: fprog,
                mount_ns: *mount_ns,
                netns: *netns,
            },
            Prepared::Launcher {
                fresh,
                target,
                netns,
            } => ChildConfinement::Launcher {
                fresh: fresh.as_raw_fd(),
                target: *target,
                netns: *netns,
            },
        }
    }
}
