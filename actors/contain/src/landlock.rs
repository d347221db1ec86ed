//! Landlock rulesets, built in the parent and applied by the child right before exec.
//!
//! The sandbox executor confines one command, never dsh itself: the ruleset is created here, in the
//! unconfined parent, and its descriptor is handed to [`crate::spawn()`] through
//! [`crate::Program::with_confinement`] (see [`crate::confine`]). The child — a `clone3` child that runs only plain syscalls
//! between clone and exec — calls `prctl(PR_SET_NO_NEW_PRIVS)` and `landlock_restrict_self(fd)` as
//! its last steps before `execve` (after the v1 cgroup joins, which write to cgroup files). The
//! domain belongs to the child task alone: dsh stays unconfined, and every descendant of the command
//! inherits it. A restriction the kernel refuses fails the spawn at [`crate::spawn::Step::Confine`]:
//! nothing runs unconfined.
//!
//! Plain syscalls (no crate): three system calls and three structs, written out against the kernel
//! UAPI (`include/uapi/linux/landlock.h`). Rights are taken per ABI version:
//!
//! | ABI | adds | used for |
//! |---|---|---|
//! | 1 | filesystem rights | every confined mode |
//! | 2 | `REFER` | handled (cross-directory renames stay inside writable roots) |
//! | 3 | `TRUNCATE` | handled; below 3 `truncate(2)` is not controlled, so enforcement is `partial` |
//! | 4 | TCP `BIND`/`CONNECT` | `--network deny` |
//! | 5 | `IOCTL_DEV` | handled; granted with reads (terminal ioctls are not file effects) |
//! | 6 | scopes: signals, abstract UNIX sockets | a command cannot signal, nor connect to an abstract socket of, a process outside its domain (dsh, its agent, the user's session bus) |

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::libc;

/// Execute a file.
pub const ACCESS_FS_EXECUTE: u64 = 1 << 0;
/// Open a file for writing.
pub const ACCESS_FS_WRITE_FILE: u64 = 1 << 1;
/// Open a file for reading.
pub const ACCESS_FS_READ_FILE: u64 = 1 << 2;
/// List a directory.
pub const ACCESS_FS_READ_DIR: u64 = 1 << 3;
/// `REFER` (ABI 2).
pub const ACCESS_FS_REFER: u64 = 1 << 13;
/// `TRUNCATE` (ABI 3).
pub const ACCESS_FS_TRUNCATE: u64 = 1 << 14;
/// `IOCTL_DEV` (ABI 5).
pub const ACCESS_FS_IOCTL_DEV: u64 = 1 << 15;
/// Every ABI 1 right (bits 0–12).
const ACCESS_FS_V1: u64 = (1 << 13) - 1;
/// Rights that apply to a regular file (a rule on a file may only grant these).
const ACCESS_FILE: u64 = ACCESS_FS_EXECUTE
    | ACCESS_FS_WRITE_FILE
    | ACCESS_FS_READ_FILE
    | ACCESS_FS_TRUNCATE
    | ACCESS_FS_IOCTL_DEV;
/// TCP bind (ABI 4).
const ACCESS_NET_BIND_TCP: u64 = 1 << 0;
/// TCP connect (ABI 4).
const ACCESS_NET_CONNECT_TCP: u64 = 1 << 1;
/// Scope: connecting to abstract UNIX sockets bound outside the domain (ABI 6).
const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
/// Scope: signals to processes outside the domain (ABI 6).
const SCOPE_SIGNAL: u64 = 1 << 1;

const CREATE_RULESET_VERSION: libc::c_uint = 1 << 0;
const RULE_PATH_BENEATH: libc::c_int = 1;

/// `struct landlock_ruleset_attr` (all three fields; older kernels accept the zero tail).
#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

/// `struct landlock_path_beneath_attr` (packed in the UAPI).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// The Landlock ABI version of the running kernel, or why there is none (`ENOSYS`: no Landlock in
/// the kernel; `EOPNOTSUPP`: disabled at boot).
pub fn abi() -> io::Result<u32> {
    // SAFETY: landlock_create_ruleset with a null attribute, size 0 and the VERSION flag only
    // returns the ABI version (or -1 with errno); it creates nothing.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    if abi < 0 {
        return Err(io::Error::last_os_error());
    }
    u32::try_from(abi).map_err(|_| io::Error::other("Landlock reported a negative ABI"))
}

/// How completely a ruleset stops file writes on this kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coverage {
    /// Every write path is handled (ABI ≥ 3).
    Full,
    /// Some write paths are not controlled by this ABI (`truncate(2)` below ABI 3).
    Partial,
}

/// What a command may do, as a Landlock ruleset.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RulesetSpec {
    /// Readable and executable everywhere below these paths (dsh grants `/`: docs/ARCHITECTURE.md,
    /// "Sandbox").
    pub read_only: Vec<PathBuf>,
    /// Fully writable below these paths (or these files, such as `/dev/null`). Canonical: a path with
    /// a symbolic link in it is refused when the ruleset is built.
    pub writable: Vec<PathBuf>,
    /// Refuse every TCP bind and connect (needs ABI 4).
    pub deny_tcp: bool,
    /// Refuse signals to processes outside the command's own domain (needs ABI 6).
    pub scope_signals: bool,
    /// Refuse connections to abstract UNIX sockets bound outside the command's own domain (needs
    /// ABI 6).
    pub scope_abstract_sockets: bool,
}

/// A created ruleset: a descriptor the child passes to `landlock_restrict_self`. Cheap to clone;
/// immutable once built, so one ruleset serves any number of spawns.
#[derive(Debug, Clone)]
pub struct Ruleset {
    fd: Arc<OwnedFd>,
    abi: u32,
    coverage: Coverage,
    signals_scoped: bool,
    abstract_sockets_scoped: bool,
}

impl Ruleset {
    /// Creates the ruleset for `spec` on this kernel. Fails when Landlock is missing, when a path
    /// cannot be opened, or when the spec asks for something this ABI lacks (TCP rules below 4) —
    /// never silently weaker than asked, except for [`Coverage::Partial`] and the scopes, which are
    /// reported ([`Ruleset::coverage`], [`Ruleset::signals_scoped`],
    /// [`Ruleset::abstract_sockets_scoped`]).
    pub fn create(spec: &RulesetSpec) -> io::Result<Self> {
        Self::create_with_handles(spec, &[])
    }

    /// [`Ruleset::create`], also granting everything below each of `writable` (handles of places
    /// no path from here names: the mount namespace's own `/dev/pts` and `ptmx`, `crate::devpts`).
    pub fn create_with_handles(
        spec: &RulesetSpec,
        writable: &[BorrowedFd<'_>],
    ) -> io::Result<Self> {
        let abi = abi()?;
        let mut handled_fs = ACCESS_FS_V1;
        if abi >= 2 {
            handled_fs |= ACCESS_FS_REFER;
        }
        if abi >= 3 {
            handled_fs |= ACCESS_FS_TRUNCATE;
        }
        if abi >= 5 {
            handled_fs |= ACCESS_FS_IOCTL_DEV;
        }
        if spec.deny_tcp && abi < 4 {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("denying TCP needs Landlock ABI 4; this kernel has ABI {abi}"),
            ));
        }
        let signals_scoped = spec.scope_signals && abi >= 6;
        let abstract_sockets_scoped = spec.scope_abstract_sockets && abi >= 6;
        let attr = RulesetAttr {
            handled_access_fs: handled_fs,
            handled_access_net: if spec.deny_tcp {
                ACCESS_NET_BIND_TCP | ACCESS_NET_CONNECT_TCP
            } else {
                0
            },
            scoped: if signals_scoped { SCOPE_SIGNAL } else { 0 }
                | if abstract_sockets_scoped {
                    SCOPE_ABSTRACT_UNIX_SOCKET
                } else {
                    0
                },
        };
        // Older kernels refuse a larger struct only when its tail is non-zero, so the size can stay.
        // SAFETY: a valid attribute pointer and its exact size; flags 0 creates a ruleset.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                &attr as *const RulesetAttr,
                std::mem::size_of::<RulesetAttr>(),
                0u32,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the syscall returned a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
        let mut read = ACCESS_FS_EXECUTE | ACCESS_FS_READ_FILE | ACCESS_FS_READ_DIR;
        if abi >= 5 {
            read |= ACCESS_FS_IOCTL_DEV;
        }
        for path in &spec.read_only {
            add_path_rule(&fd, path, read, handled_fs, Symlinks::Follow)?;
        }
        for path in &spec.writable {
            add_path_rule(&fd, path, handled_fs, handled_fs, Symlinks::Refuse)?;
        }
        for handle in writable {
            add_rule(&fd, *handle, handled_fs, handled_fs)
                .map_err(|err| io::Error::new(err.kind(), format!("landlock rule: {err}")))?;
        }
        Ok(Ruleset {
            fd: Arc::new(fd),
            abi,
            coverage: if abi >= 3 {
                Coverage::Full
            } else {
                Coverage::Partial
            },
            signals_scoped,
            abstract_sockets_scoped,
        })
    }

    /// The descriptor the child restricts itself with.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The ABI the ruleset was built for.
    pub fn abi(&self) -> u32 {
        self.abi
    }

    /// Whether every write path is controlled.
    pub fn coverage(&self) -> Coverage {
        self.coverage
    }

    /// Whether signals to processes outside the domain are refused.
    pub fn signals_scoped(&self) -> bool {
        self.signals_scoped
    }

    /// Whether connections to abstract UNIX sockets outside the domain are refused.
    pub fn abstract_sockets_scoped(&self) -> bool {
        self.abstract_sockets_scoped
    }
}

/// Whether a rule's path may pass through symbolic links.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Symlinks {
    Follow,
    /// Writable paths are given canonical: a link in one now was put there after (a confined
    /// command that can write the parent of its workspace swapped it for a link to elsewhere), and
    /// following it would grant writes to wherever it points. Refused in the same `openat2` that
    /// opens the path, so there is no window between a check and the open.
    Refuse,
}

/// An `O_PATH` descriptor of `path`, resolved without symbolic links when `symlinks` says so.
fn open_path(path: &Path, symlinks: Symlinks) -> io::Result<OwnedFd> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    let resolve = match symlinks {
        Symlinks::Follow => 0,
        Symlinks::Refuse => libc::RESOLVE_NO_SYMLINKS,
    };
    crate::openat2::openat2(libc::AT_FDCWD, &c_path, libc::O_PATH, resolve).map_err(|err| {
        let why = if err.raw_os_error() == Some(libc::ELOOP) && symlinks == Symlinks::Refuse {
            "a symbolic link is in its path".to_owned()
        } else {
            err.to_string()
        };
        io::Error::new(err.kind(), format!("{}: {why}", path.display()))
    })
}

/// Whether the descriptor is a directory.
fn is_directory(fd: BorrowedFd<'_>) -> bool {
    // SAFETY: an all-zero `stat` is a valid out-buffer.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a descriptor borrowed for the call (open while it lasts) and a valid out-pointer.
    let r = unsafe { libc::fstat(fd.as_raw_fd(), &mut stat) };
    r == 0 && (stat.st_mode & libc::S_IFMT) == libc::S_IFDIR
}

/// Grants `access` (limited to what applies to the path's kind) below `path`.
fn add_path_rule(
    ruleset: &OwnedFd,
    path: &Path,
    access: u64,
    handled: u64,
    symlinks: Symlinks,
) -> io::Result<()> {
    let parent = open_path(path, symlinks)?;
    add_rule(ruleset, parent.as_fd(), access, handled).map_err(|err| {
        io::Error::new(
            err.kind(),
            format!("landlock rule for {}: {err}", path.display()),
        )
    })
}

/// Grants `access` (limited to what applies to its kind) below the handle `parent`.
fn add_rule(
    ruleset: &OwnedFd,
    parent: BorrowedFd<'_>,
    access: u64,
    handled: u64,
) -> io::Result<()> {
    let is_dir = is_directory(parent);
    let allowed = if is_dir { access } else { access & ACCESS_FILE } & handled;
    let attr = PathBeneathAttr {
        allowed_access: allowed,
        parent_fd: parent.as_raw_fd(),
    };
    // SAFETY: a ruleset descriptor we own, the rule type and a pointer to a valid attribute.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            RULE_PATH_BENEATH,
            &attr as *const PathBeneathAttr,
            0u32,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `prctl(PR_SET_NO_NEW_PRIVS, 1)` then `landlock_restrict_self(ruleset, 0)`, for the spawned child
/// (async-signal-safe: two system calls).
pub(crate) fn restrict_in_child(ruleset: RawFd) -> bool {
    // SAFETY: prctl with PR_SET_NO_NEW_PRIVS takes plain integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return false;
    }
    // SAFETY: landlock_restrict_self takes a descriptor number and flags; it only changes the
    // calling task's credentials.
    unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) == 0 }
}

/// Restricts the calling thread (and its future children) with `ruleset`: `PR_SET_NO_NEW_PRIVS`,
/// then `landlock_restrict_self`. For a launcher process that confines itself before exec; call it
/// while the process has one thread (other threads keep their old domain).
pub fn restrict_current_thread(ruleset: &Ruleset) -> io::Result<()> {
    // SAFETY: prctl with PR_SET_NO_NEW_PRIVS takes plain integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a ruleset descriptor we own and flags 0; only this thread's credentials change.
    if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset.raw_fd(), 0u32) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
