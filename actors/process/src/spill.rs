//! Spill files: where the full output of a stream goes once it outgrows its in-memory cap.
//!
//! One private directory per manager (`mkdtemp`, created when the runtime starts), files created
//! with exclusive-create and mode 0600 so nobody else can read them or plant a symlink in their place.
//! The directory's mode is 0300 (`-wx------`): a result names its spill file, and a confined command
//! (the sandbox shows the directory read-only at its own path) may open the file it was told of, but
//! with no capability it cannot list the directory, so one session does not find another's outputs
//! (the names carry 48 random bits). dsh, as root, lists it anyway; as any user it makes it
//! listable again before removing it (`dsh_contain::private_dir`).
//! Files are created relative to a descriptor of the directory the runtime opened once ([`SpillDir`]),
//! with `O_NOFOLLOW`: a command that swaps the directory (or a path component) for a symlink cannot
//! redirect a spill file. Names are as docs/CONTRACT.md, "What every command gets", states:
//! `dsh-proc-<pid>-<counter>-<12 hex>-<stdout|stderr>.log`.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use nix::fcntl::{OFlag, open, openat};
use nix::libc;
use nix::sys::stat::Mode;

use dsh_contain::private_dir::UNLISTABLE;

use crate::outcome::StreamKind;

/// Process-wide counter of spill files, starting at 1.
static SPILL_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Creates a private `dsh-proc-XXXXXX` directory (mode 0300) under the OS temp directory.
pub fn create_private_dir() -> io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let template = std::env::temp_dir().join("dsh-proc-XXXXXX");
    let path = nix::unistd::mkdtemp(&template).map_err(io::Error::from)?;
    let made = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(UNLISTABLE));
    if let Err(err) = made {
        let _ = std::fs::remove_dir(&path);
        return Err(err);
    }
    Ok(path)
}

/// A spill directory held open: files are created relative to its descriptor.
#[derive(Clone, Debug)]
pub struct SpillDir {
    path: PathBuf,
    fd: Arc<OwnedFd>,
}

impl SpillDir {
    /// Opens `path` (which must be a directory, not a symlink to one).
    pub fn open(path: &Path) -> io::Result<Self> {
        // `O_PATH`: a handle to create and open files under, which needs no read bit on the
        // private directory (mode 0300, unreadable to a non-root owner).
        let fd = open(
            path,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Self {
            path: path.to_path_buf(),
            fd: Arc::new(fd),
        })
    }

    /// The directory's path, as reported in spill paths.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Creates a new spill file for `stream` in `dir`: relative to its descriptor, exclusive create,
/// no symlink followed, mode 0600.
pub fn create_spill_file(dir: &SpillDir, stream: StreamKind) -> io::Result<(File, PathBuf)> {
    let counter = SPILL_COUNTER.fetch_add(1, Ordering::Relaxed) + 1;
    let name = format!(
        "dsh-proc-{}-{}-{}-{}.log",
        std::process::id(),
        counter,
        random_hex12(),
        stream.label()
    );
    let fd = openat(
        &*dir.fd,
        name.as_str(),
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o600),
    )?;
    let file = File::from(fd);
    Ok((file, dir.path.join(name)))
}

/// Reads up to `len` bytes at `offset` of the spill file `path` in `dir`, opened relative to the
/// directory's descriptor without following a symlink (a command cannot point a read back at another
/// file). Fewer bytes at the end of the file.
pub(crate) fn read_spill(
    dir: &SpillDir,
    path: &Path,
    offset: u64,
    len: usize,
) -> io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    let fd = openat(
        &*dir.fd,
        name,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let file = File::from(fd);
    let mut bytes = vec![0; len];
    let mut filled = 0;
    while filled < len {
        match file.read_at(&mut bytes[filled..], offset + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    bytes.truncate(filled);
    Ok(bytes)
}

/// Twelve lowercase hex characters from six random bytes.
fn random_hex12() -> String {
    let mut bytes = [0u8; 6];
    let filled = File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if filled.is_err() {
        // No /dev/urandom: the std hasher's per-process random keys are still unpredictable
        // enough for a name that must not be guessed by another session (the directory is not
        // listable, mode 0300), created with O_EXCL.
        use std::hash::{BuildHasher, RandomState};
        let value = RandomState::new().hash_one(SPILL_COUNTER.load(Ordering::Relaxed));
        bytes.copy_from_slice(&value.to_le_bytes()[..6]);
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
