//! Which Unix socket a confined thread's address names, and whether it may reach it.
//!
//! A path is resolved as the thread would resolve it: from its root (`/proc/<tid>/root`, so a
//! sandbox's own `/tmp` is seen) and its working directory, with `openat2(RESOLVE_IN_ROOT)` so no
//! `..` or symbolic link leaves that root; magic links (`/proc/self/fd/N`) are refused (`ELOOP`).
//! The result is an `O_PATH` descriptor of the socket itself, which dsh then connects to — the
//! socket checked is the socket reached. It may be reached when its path, as the thread's mount
//! namespace shows it, lies below a writable root, or when it is one of the operator's allowed
//! sockets (compared by device and inode, looked up again at each connect, so a restarted agent's
//! new socket at the same path counts).
//!
//! A path only means what the policy thinks if the thread sees the sandbox's mounts. Under Landlock
//! a confined process cannot mount at all; under bubblewrap a command could make a user and mount
//! namespace of its own and bind a foreign socket below its workspace, so there the thread's mount
//! namespace must be its sandbox's (that of bubblewrap's first child), else the connect is refused.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use std::sync::OnceLock;

use nix::libc::{self, c_int};

use crate::input_wait::proc_reading::ProcStat;

/// `offsetof(struct sockaddr_un, sun_path)` and `sizeof(struct sockaddr_un)`.
const SUN_PATH_OFFSET: usize = 2;
const SOCKADDR_UN_SIZE: usize = 110;
/// How far up the process tree the sandbox's first process is looked for.
const MAX_DEPTH: usize = 4096;

/// What a Unix-socket address names.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum UnixAddress<'a> {
    /// A file system path (`sun_path` up to its first NUL).
    Path(&'a [u8]),
    /// An abstract name (`sun_path` starting with NUL).
    Abstract,
    /// Longer than a `sockaddr_un`: refused (`EINVAL`), as the kernel would.
    TooLong,
    /// Anything else (another family, no name): the kernel refuses it by itself.
    Other,
}

/// Classifies `address` (the bytes the thread passed) as the kernel will read it.
pub(crate) fn classify(address: &[u8]) -> UnixAddress<'_> {
    if address.len() <= SUN_PATH_OFFSET
        || u16::from_ne_bytes([address[0], address[1]]) != libc::AF_UNIX as u16
    {
        return UnixAddress::Other;
    }
    if address.len() > SOCKADDR_UN_SIZE {
        return UnixAddress::TooLong;
    }
    let path = &address[SUN_PATH_OFFSET..];
    if path[0] == 0 {
        return UnixAddress::Abstract;
    }
    let end = path.iter().position(|&b| b == 0).unwrap_or(path.len());
    UnixAddress::Path(&path[..end])
}

/// The socket `path` names for thread `tid`, as an `O_PATH` descriptor; `Err(errno)` as the thread's
/// own connect would fail (`ENOENT`, `ENOTDIR`, `ELOOP`, `ECONNREFUSED` for a file that is not a
/// socket).
pub(crate) fn resolve(tid: i32, path: &[u8]) -> Result<OwnedFd, i32> {
    let root = open(
        &format!("/proc/{tid}/root"),
        libc::O_PATH | libc::O_DIRECTORY,
    )
    .map_err(|_| libc::EACCES)?;
    let absolute = if path.first() == Some(&b'/') {
        path.to_vec()
    } else {
        let cwd = std::fs::read_link(format!("/proc/{tid}/cwd")).map_err(|_| libc::ENOENT)?;
        let mut joined = cwd.as_os_str().as_bytes().to_vec();
        if joined.ends_with(b" (deleted)") {
            // A removed working directory: nothing can be found from it.
            return Err(libc::ENOENT);
        }
        joined.push(b'/');
        joined.extend_from_slice(path);
        joined
    };
    let absolute = CString::new(absolute).map_err(|_| libc::EINVAL)?;
    let socket = crate::openat2::openat2(
        root.as_raw_fd(),
        &absolute,
        libc::O_PATH,
        libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS,
    )
    .map_err(|err| err.raw_os_error().unwrap_or(libc::ENOENT))?;
    match std::fs::metadata(format!("/proc/self/fd/{}", socket.as_raw_fd())) {
        Ok(meta) if meta.mode() & libc::S_IFMT == libc::S_IFSOCK => Ok(socket),
        Ok(_) => Err(libc::ECONNREFUSED),
        Err(_) => Err(libc::ENOENT),
    }
}

fn open(path: &str, flags: c_int) -> io::Result<OwnedFd> {
    let path = CString::new(path).map_err(io::Error::other)?;
    // SAFETY: a NUL-terminated path; returns a new descriptor or -1.
    let fd = unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: open just returned it and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Where a socket may be reached from, for one command.
#[derive(Debug, Clone, Default)]
pub struct Reach {
    /// Directories, as the command's mount namespace shows them, below which any socket may be
    /// reached (its writable roots, its own temp).
    pub writable: Vec<PathBuf>,
    /// Sockets the operator allows wherever they are (`--allow-unix-socket`), as dsh sees them.
    pub allowed: Vec<PathBuf>,
}

impl Reach {
    /// Whether `socket` (from [`resolve`]) may be reached.
    pub(crate) fn permits(&self, socket: &OwnedFd) -> bool {
        let link = format!("/proc/self/fd/{}", socket.as_raw_fd());
        if let Ok(path) = std::fs::read_link(&link)
            && self.writable.iter().any(|root| path.starts_with(root))
        {
            return true;
        }
        let Ok(meta) = std::fs::metadata(&link) else {
            return false;
        };
        self.allowed.iter().any(|allowed| {
            std::fs::metadata(allowed).is_ok_and(|a| a.dev() == meta.dev() && a.ino() == meta.ino())
        })
    }
}

/// A process's namespace link (`/proc/<pid>/ns/<kind>`), e.g. `mnt:[4026531841]`.
pub(crate) fn namespace(pid: i32, kind: &str) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/ns/{kind}")).ok()
}

/// Under a launcher spawned as `launcher`: whether thread `tid` still sees its sandbox's mounts:
/// its mount namespace and its root (mount, device, inode) are those of the launcher's child it
/// descends from. A thread of a user namespace of its own could otherwise `chroot` into the root of
/// a mount namespace where it bound an outside socket below the workspace.
pub(crate) fn sees_sandbox_mounts(tid: i32, launcher: i32) -> bool {
    let mut pid = tid;
    for _ in 0..MAX_DEPTH {
        let Some(parent) = ProcStat::read(pid).map(|stat| stat.parent) else {
            return false;
        };
        if parent == launcher {
            let sandbox = (namespace(pid, "mnt"), root_identity(pid));
            let thread = (namespace(tid, "mnt"), root_identity(tid));
            return sandbox.0.is_some() && sandbox.1.is_some() && sandbox == thread;
        }
        if parent <= 1 {
            return false;
        }
        pid = parent;
    }
    false
}

/// The mount id, device and inode of a process's root directory.
fn root_identity(pid: i32) -> Option<(u64, u32, u32, u64)> {
    let path = CString::new(format!("/proc/{pid}/root")).ok()?;
    // SAFETY: a zeroed statx is a valid buffer; statx fills it.
    let mut buf: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a buffer of the right type.
    let ret = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            path.as_ptr(),
            0,
            libc::STATX_INO | libc::STATX_MNT_ID,
            &mut buf,
        )
    };
    (ret == 0 && buf.stx_mask & libc::STATX_MNT_ID != 0).then_some((
        buf.stx_mnt_id,
        buf.stx_dev_major,
        buf.stx_dev_minor,
        buf.stx_ino,
    ))
}

/// Whether an abstract name has a listener held by a process of thread `tid`'s sandbox: the
/// listening socket of that name in the thread's network namespace (`/proc/<tid>/net/unix`), then a
/// descriptor of it among the processes of the same sandbox. Asked before the gate connects, so an
/// outside listener never sees the command's connection; [`same_sandbox`] on the peer after the
/// connect covers a name bound again in between.
pub(crate) fn listened_in_sandbox(tid: i32, name: &[u8]) -> bool {
    let Some(inode) = listening_inode(tid, name) else {
        return false;
    };
    let Some(sandbox) = Sandbox::of(tid) else {
        return false;
    };
    let wanted = format!("socket:[{inode}]");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| Sandbox::of(pid).as_ref() == Some(&sandbox))
        .any(|pid| {
            std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
                fds.filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
                    .any(|link| link.as_os_str().as_bytes() == wanted.as_bytes())
            })
        })
}

/// The inode of the listening Unix socket bound to abstract `name` (its bytes after the leading
/// NUL) in thread `tid`'s network namespace.
fn listening_inode(tid: i32, name: &[u8]) -> Option<u64> {
    /// `__SO_ACCEPTCON` in `/proc/net/unix`'s flags: a listening socket.
    const ACCEPTING: u32 = 0x0001_0000;
    if name.contains(&b'\n') {
        return None;
    }
    // The kernel shows an abstract name as `@` and its bytes, each NUL as `@`.
    let mut shown = vec![b'@'];
    shown.extend(name.iter().map(|&b| if b == 0 { b'@' } else { b }));
    let table = std::fs::read(format!("/proc/{tid}/net/unix")).ok()?;
    table
        .split(|&b| b == b'\n')
        .skip(1)
        .filter_map(|line| listening_entry(line, ACCEPTING))
        .find(|(_, path)| *path == shown.as_slice())
        .map(|(inode, _)| inode)
}

/// A `/proc/net/unix` line (`Num: RefCount Protocol Flags Type St Inode Path`, the inode padded)
/// of a socket with `flag` set: its inode and path.
fn listening_entry(line: &[u8], flag: u32) -> Option<(u64, &[u8])> {
    let mut rest = line;
    let mut fields = Vec::with_capacity(7);
    for _ in 0..7 {
        let start = rest.iter().position(|&b| b != b' ')?;
        rest = &rest[start..];
        let end = rest.iter().position(|&b| b == b' ').unwrap_or(rest.len());
        fields.push(&rest[..end]);
        rest = &rest[end..];
    }
    let flags = u32::from_str_radix(std::str::from_utf8(fields[3]).ok()?, 16).ok()?;
    let inode = std::str::from_utf8(fields[6]).ok()?.parse().ok()?;
    let path = rest.strip_prefix(b" ")?;
    (flags & flag != 0).then_some((inode, path))
}

/// The sandbox a process is in, for abstract sockets: its pid namespace when that is not dsh's own
/// (bubblewrap), else its session (each command starts one).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Sandbox {
    PidNamespace(PathBuf),
    Session(i32),
}

impl Sandbox {
    pub(crate) fn of(pid: i32) -> Option<Sandbox> {
        static OWN: OnceLock<Option<PathBuf>> = OnceLock::new();
        let own = OWN.get_or_init(|| namespace(std::process::id() as i32, "pid"));
        let ns = namespace(pid, "pid")?;
        if Some(&ns) != own.as_ref() {
            return Some(Sandbox::PidNamespace(ns));
        }
        ProcStat::read(pid).map(|stat| Sandbox::Session(stat.session))
    }
}

/// Whether two processes are in one sandbox ([`Sandbox::of`] each).
pub(crate) fn same_sandbox(a: i32, b: i32) -> bool {
    Sandbox::of(a).is_some_and(|sandbox| Sandbox::of(b) == Some(sandbox))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address(path: &[u8]) -> Vec<u8> {
        let mut bytes = (libc::AF_UNIX as u16).to_ne_bytes().to_vec();
        bytes.extend_from_slice(path);
        bytes
    }

    #[test]
    fn addresses_are_read_as_the_kernel_reads_them() {
        assert_eq!(
            classify(&address(b"/run/x.sock\0junk")),
            UnixAddress::Path(b"/run/x.sock")
        );
        assert_eq!(classify(&address(b"rel")), UnixAddress::Path(b"rel"));
        assert_eq!(classify(&address(b"\0name")), UnixAddress::Abstract);
        assert_eq!(classify(&address(b"")), UnixAddress::Other);
        let mut inet = address(b"/x");
        inet[0..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        assert_eq!(classify(&inet), UnixAddress::Other);
    }

    #[test]
    fn an_abstract_listener_is_found_by_name_and_holder() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("dsh-verdict-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let _listener = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
        let me = std::process::id() as i32;
        assert!(listening_inode(me, name.as_bytes()).is_some());
        assert!(
            listened_in_sandbox(me, name.as_bytes()),
            "this process holds it"
        );
        assert!(listening_inode(me, b"dsh-verdict-nobody").is_none());
        assert_eq!(
            listening_entry(
                b"0000000096a9a8ae: 00000002 00000000 00010000 0001 01  1074 @x y",
                0x10000
            ),
            Some((1074, &b"@x y"[..]))
        );
    }

    #[test]
    fn a_socket_resolves_from_the_threads_root_and_a_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("s");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        std::fs::write(dir.path().join("f"), b"").unwrap();
        let me = std::process::id() as i32;
        let fd = resolve(me, sock.as_os_str().as_bytes()).unwrap();
        let reach = Reach {
            writable: vec![dir.path().to_path_buf()],
            allowed: Vec::new(),
        };
        assert!(reach.permits(&fd));
        assert!(!Reach::default().permits(&fd), "outside every root");
        let allowed = Reach {
            writable: Vec::new(),
            allowed: vec![sock.clone()],
        };
        assert!(allowed.permits(&fd), "allowed by identity");
        let file = dir.path().join("f");
        assert_eq!(
            resolve(me, file.as_os_str().as_bytes()).err(),
            Some(libc::ECONNREFUSED)
        );
        assert_eq!(
            resolve(me, b"/proc/self/fd/0").err(),
            Some(libc::ELOOP),
            "magic links are refused"
        );
    }
}
