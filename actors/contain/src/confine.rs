//! How the spawn confines a program: the sandbox backend's choice, as the spawn carries it out.
//!
//! Two shapes ([`Confinement`]). Landlock in the spawn: the read-only mount namespace
//! (`crate::mountns`), every capability dropped, `no_new_privs`, the Landlock ruleset and the
//! seccomp filter, in that order — shrinking the bounding set needs a capability, and the filter
//! comes last so nothing of the setup runs under it. All but the ruleset are applied once, by the
//! policy's confined spawning thread ([`ConfinedThread`]), whose children inherit them and only
//! restrict themselves (`ChildConfinement::Inherited`); where that thread cannot be had, the child
//! applies all of it itself right before exec (`ChildConfinement::InSpawn`). Or a launcher the child
//! execs (bubblewrap) confines the program and needs only the seccomp filter handed over on a
//! descriptor. Either shape may also name the runtime's network namespace (`--network loopback`,
//! `crate::netns`), which the thread joins first, and a child confining itself right after its
//! `chdir`, while either still holds the capability to.
//! The parent prepares raw values (`Prepared`); the child applies them with plain syscalls
//! (`ChildConfinement::apply`).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;

use nix::libc::{self, c_int};

use crate::confined_thread::{ConfinedThread, Parts, Running};
use crate::landlock::Ruleset;
use crate::mountns::MountNamespace;
use crate::netns::Netns;
use crate::seccomp::Filter;
use crate::sockgate::{GatePolicy, HandOver};

/// What the spawn does to confine the program.
#[derive(Debug, Clone)]
pub enum Confinement {
    /// `spawner`, the confined spawning thread, enters `mount_ns` (and `netns`), drops every
    /// capability, sets `no_new_privs` and installs `filter` once; its children restrict themselves
    /// with `landlock` as their last step before exec. Without the thread the child does all of it
    /// itself, the namespace before its `chdir`, the rest as its last steps.
    InSpawn {
        /// The Landlock ruleset.
        landlock: Ruleset,
        /// The seccomp filter.
        filter: Filter,
        /// The read-only mount namespace (`crate::mountns`), where dsh may make one.
        mount_ns: Option<MountNamespace>,
        /// The network namespace to join first (`--network loopback`); `None` keeps the host's.
        netns: Option<Netns>,
        /// The socket gate's rules (`crate::sockgate`); `None`: connects are not gated.
        gate: Option<Arc<GatePolicy>>,
        /// The thread that spawns these commands already confined (all of the above but the
        /// Landlock domain, see [`ConfinedThread`]); give clones of one handle only to
        /// confinements with the same filter, namespaces and gate (another is spawned as if there
        /// were none).
        spawner: ConfinedThread,
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
        /// The socket gate's rules, installed before the launcher execs so its sandbox inherits
        /// it; `None`: connects are not gated.
        gate: Option<Arc<GatePolicy>>,
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

    /// The socket gate's rules, if connects are gated.
    pub fn gate(&self) -> Option<&Arc<GatePolicy>> {
        match self {
            Confinement::InSpawn { gate, .. } | Confinement::Launcher { gate, .. } => gate.as_ref(),
        }
    }

    /// The thread that spawns these commands already confined, started at the first call; `None`
    /// for a launcher, or where the thread could not be had (the child then confines itself).
    pub(crate) fn spawning_thread(&self) -> Option<&Running> {
        let Confinement::InSpawn {
            filter,
            mount_ns,
            netns,
            gate,
            spawner,
            ..
        } = self
        else {
            return None;
        };
        spawner.running(Parts {
            filter,
            mount_ns: mount_ns.as_ref(),
            netns: netns.as_ref(),
            gate: gate.as_ref(),
        })
    }

    /// Whether the program starts in a mount namespace of the confinement's (whose entry resets
    /// the working directory).
    pub(crate) fn enters_mount_namespace(&self) -> bool {
        matches!(
            self,
            Confinement::InSpawn {
                mount_ns: Some(_),
                ..
            }
        )
    }

    /// The mount namespace's own terminals (`crate::devpts`), where the child enters one that has
    /// them: a `tty: true` command's terminal is opened there.
    pub fn devpts(&self) -> Option<&crate::devpts::Devpts> {
        match self {
            Confinement::InSpawn {
                mount_ns: Some(ns), ..
            } => ns.devpts(),
            _ => None,
        }
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
    Gate,
}

/// The confinement as raw values for the child (no allocation, no reference counts).
#[derive(Debug, Clone, Copy)]
pub(crate) enum ChildConfinement {
    None,
    /// Spawned by a confined thread: namespaces, capabilities, `no_new_privs` and the filter are
    /// inherited; the child only restricts itself with the ruleset.
    Inherited {
        landlock: c_int,
    },
    InSpawn {
        landlock: c_int,
        filter: *const libc::sock_fprog,
        /// `-1`: none.
        mount_ns: c_int,
        netns: c_int,
        gate: ChildGate,
    },
    Launcher {
        fresh: c_int,
        target: c_int,
        netns: c_int,
        gate: ChildGate,
    },
}

/// The socket gate as the child installs it: its program, and the socket its listener goes out
/// on (`-1`: no gate).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChildGate {
    program: *const libc::sock_fprog,
    sock: c_int,
}

impl ChildGate {
    /// Installs the gate's own program (a launcher's child) and sends its listener to dsh, when
    /// there is a gate.
    fn apply(self) -> Result<(), ConfineFailure> {
        if self.sock < 0 || crate::sockgate::install_in_child(self.program, self.sock) {
            Ok(())
        } else {
            Err(ConfineFailure::Gate)
        }
    }
}

impl ChildConfinement {
    /// The descriptor of the network namespace to join (`crate::netns::join_in_child`), negative
    /// for none.
    pub(crate) fn netns(self) -> c_int {
        match self {
            ChildConfinement::None | ChildConfinement::Inherited { .. } => -1,
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
            ChildConfinement::Inherited { landlock } => {
                if crate::landlock::restrict_in_child(landlock) {
                    Ok(())
                } else {
                    Err(ConfineFailure::Landlock)
                }
            }
            ChildConfinement::InSpawn {
                landlock,
                filter,
                gate,
                ..
            } => {
                if !crate::caps::drop_all() {
                    return Err(ConfineFailure::DropCaps);
                }
                if !crate::landlock::restrict_in_child(landlock) {
                    return Err(ConfineFailure::Landlock);
                }
                // One filter: with a gate, `filter` is the gated form, whose listener goes to dsh.
                let gated = gate.sock >= 0;
                let installed = crate::seccomp::install(filter, gated);
                if installed < 0 {
                    return Err(ConfineFailure::Seccomp);
                }
                if gated && !crate::sockgate::hand_over(installed as c_int, gate.sock) {
                    return Err(ConfineFailure::Gate);
                }
                Ok(())
            }
            ChildConfinement::Launcher {
                fresh,
                target,
                gate,
                ..
            } => {
                // SAFETY: dup2 between two descriptor numbers; the copy at `target` is not
                // close-on-exec, so the launcher inherits it.
                if unsafe { libc::dup2(fresh, target) } != target {
                    return Err(ConfineFailure::Launcher);
                }
                gate.apply()
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
pub(crate) struct Prepared {
    shape: Shape,
    gate: Option<PreparedGate>,
}

/// The socket gate of one spawn: its program, the pair its listener travels over, its rules.
pub(crate) struct PreparedGate {
    program: libc::sock_fprog,
    hand_over: HandOver,
    policy: Arc<GatePolicy>,
}

enum Shape {
    None,
    /// Spawned by the confinement's confined thread.
    Inherited {
        landlock: RawFd,
    },
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
    /// Prepares `confinement` for one spawn; `inherited`: by its confined thread, whose child
    /// only adds its Landlock domain.
    pub(crate) fn new(confinement: Option<&Confinement>, inherited: bool) -> io::Result<Self> {
        if let (Some(Confinement::InSpawn { landlock, .. }), true) = (confinement, inherited) {
            return Ok(Prepared {
                shape: Shape::Inherited {
                    landlock: landlock.raw_fd(),
                },
                gate: None,
            });
        }
        let netns = confinement
            .and_then(Confinement::netns)
            .map_or(-1, Netns::raw_fd);
        let gate = match confinement.and_then(Confinement::gate) {
            Some(policy) => {
                let program = crate::sockgate::gate_program();
                Some(PreparedGate {
                    program: libc::sock_fprog {
                        // Six instructions.
                        len: program.len() as u16,
                        filter: program.as_ptr().cast_mut(),
                    },
                    hand_over: HandOver::new()?,
                    policy: policy.clone(),
                })
            }
            None => None,
        };
        let shape = match confinement {
            None => Shape::None,
            Some(Confinement::InSpawn {
                landlock,
                filter,
                mount_ns,
                ..
            }) => Shape::InSpawn {
                landlock: landlock.raw_fd(),
                fprog: filter.fprog(gate.is_some()),
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
                Shape::Launcher {
                    fresh,
                    target,
                    netns,
                }
            }
        };
        Ok(Prepared { shape, gate })
    }

    /// After a successful spawn of `pid`: hands the child's gate listener to the gate.
    pub(crate) fn start_gate(&self, pid: i32) {
        let Some(gate) = &self.gate else {
            return;
        };
        match gate.hand_over.receive() {
            Ok(listener) => crate::sockgate::watch(listener, gate.policy.clone(), pid),
            // The listener closed with the pair: the command's connects fail (`ENOSYS`).
            Err(err) => tracing::error!(pid, %err, "no socket-gate listener from the child"),
        }
    }

    /// The raw values for the child; they point into `self`, which must outlive the spawn.
    pub(crate) fn child(&self) -> ChildConfinement {
        let gate = match &self.gate {
            Some(gate) => ChildGate {
                program: &gate.program,
                sock: gate.hand_over.child_end(),
            },
            None => ChildGate {
                program: std::ptr::null(),
                sock: -1,
            },
        };
        match &self.shape {
            Shape::None => ChildConfinement::None,
            Shape::Inherited { landlock } => ChildConfinement::Inherited {
                landlock: *landlock,
            },
            Shape::InSpawn {
                landlock,
                fprog,
                mount_ns,
                netns,
            } => ChildConfinement::InSpawn {
                landlock: *landlock,
                filter: fprog,
                mount_ns: *mount_ns,
                netns: *netns,
                gate,
            },
            Shape::Launcher {
                fresh,
                target,
                netns,
            } => ChildConfinement::Launcher {
                fresh: fresh.as_raw_fd(),
                target: *target,
                netns: *netns,
                gate,
            },
        }
    }
}
