//! Scratch directories outside `/tmp`, for the sandbox tests: `workspace-write` may always write
//! `/tmp`, so a workspace whose writes must be told apart from the ones beside it lives elsewhere.

use std::path::{Path, PathBuf};

/// A temp dir named `prefix…` under `$HOME` when that is a directory outside `/tmp`, else under
/// `fallback` (a test passes `env!("CARGO_TARGET_TMPDIR")`, which only test targets know).
pub fn outside_tmp(prefix: &str, fallback: &Path) -> tempfile::TempDir {
    let base = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|home| home.is_dir() && !home.starts_with("/tmp"))
        .unwrap_or_else(|| fallback.to_path_buf());
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(base)
        .expect("a temp dir outside /tmp")
}
