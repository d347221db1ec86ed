//! Directories dsh keeps unlistable to its own user (mode 0300: the spill directory, whose files a
//! confined command of that user may open by name but not find; `dsh_process::spill`), and how they
//! are given back their read bit: before removal, by the runtime at shutdown or by its watchdog, and
//! for a kept one its user lists. A non-root owner has no capability that reads a directory
//! without the bit, so emptying one needs it back first.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// The mode of such a directory: its owner may create and open entries, not list them.
pub const UNLISTABLE: u32 = 0o300;

/// Gives `path` back its read bit (0700). Not through a link: the directory dsh made, or nothing.
pub fn make_listable(path: &Path) -> io::Result<()> {
    if !std::fs::symlink_metadata(path)?.is_dir() {
        return Err(io::Error::other("not a directory"));
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))
}

/// Removes `path` and everything in it, listable again first.
pub fn remove(path: &Path) -> io::Result<()> {
    make_listable(path)?;
    std::fs::remove_dir_all(path)
}
