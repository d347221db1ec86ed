//! The crate's error type for cgroup and `/proc` work: every failure names the operation and the
//! path, because "Permission denied" alone does not tell an operator which cgroup to delegate.

use std::io;
use std::path::{Path, PathBuf};

/// A failed cgroup, `/proc` or pipe operation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file-system operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was attempted (`mkdir`, `write`, `rmdir`, ...).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The host cannot give what was asked, and why.
    #[error("{0}")]
    Unsupported(String),
}

impl Error {
    pub(crate) fn io(op: &'static str, path: impl AsRef<Path>, source: io::Error) -> Self {
        Error::Io {
            op,
            path: path.as_ref().to_path_buf(),
            source,
        }
    }

    /// The OS error number, when there is one.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::Io { source, .. } => source.raw_os_error(),
            Error::Unsupported(_) => None,
        }
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
