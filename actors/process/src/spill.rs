//! Spill files: where the full output of a stream goes once it outgrows its in-memory cap.
//!
//! One private directory per manager (`mkdtemp`, mode 0700, created at the first spawn), files created
//! with exclusive-create and mode 0600 so nobody else can read them or plant a symlink in their place.
//! Names follow the seeds: `dsh-proc-<pid>-<counter>-<12 hex>-<stdout|stderr>.log`.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::outcome::StreamKind;

/// Process-wide counter of spill files, starting at 1.
static SPILL_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Creates a private `dsh-proc-XXXXXX` directory (mode 0700) under the OS temp directory.
pub fn create_private_dir() -> io::Result<PathBuf> {
    let template = std::env::temp_dir().join("dsh-proc-XXXXXX");
    nix::unistd::mkdtemp(&template).map_err(io::Error::from)
}

/// Creates a new spill file for `stream` in `dir`: exclusive create, mode 0600.
pub fn create_spill_file(dir: &Path, stream: StreamKind) -> io::Result<(File, PathBuf)> {
    let counter = SPILL_COUNTER.fetch_add(1, Ordering::Relaxed) + 1;
    let name = format!(
        "dsh-proc-{}-{}-{}-{}.log",
        std::process::id(),
        counter,
        random_hex12(),
        stream.label()
    );
    let path = dir.join(name);
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    Ok((file, path))
}

/// Twelve lowercase hex characters from six random bytes.
fn random_hex12() -> String {
    let mut bytes = [0u8; 6];
    let filled = File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if filled.is_err() {
        // No /dev/urandom: the std hasher's per-process random keys are still unpredictable enough
        // for a name whose safety rests on O_EXCL and the 0700 directory, not on secrecy.
        use std::hash::{BuildHasher, RandomState};
        let value = RandomState::new().hash_one(SPILL_COUNTER.load(Ordering::Relaxed));
        bytes.copy_from_slice(&value.to_le_bytes()[..6]);
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
