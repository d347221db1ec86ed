//! Where the table's spill files go: the directory a spawn or the configuration names, else the
//! private one (`crate::spill`), made on first use (the runtime asks for it when it starts, so its
//! sandbox can show it to commands) and removed at shutdown.

use std::path::PathBuf;

use super::ProcessTable;
use crate::errors::SpawnError;
use crate::spec::ProcessSpawnSpec;
use crate::spill::{SpillDir, create_private_dir};

impl ProcessTable {
    /// The directory for this spec's spill files, creating the private one on first use.
    pub(super) fn spill_dir_for(
        &mut self,
        spec: &ProcessSpawnSpec,
    ) -> Result<SpillDir, SpawnError> {
        if let Some(dir) = spec.spill_dir.as_ref().or(self.config.spill_dir.as_ref()) {
            return SpillDir::open(dir).map_err(SpawnError::SpillDir);
        }
        self.private_spill_dir()
    }

    /// Where this table's spill files go unless a spawn names its own directory: the configured
    /// one, else the private one, created now if it does not exist yet.
    pub(crate) fn spill_dir_path(&mut self) -> Result<PathBuf, SpawnError> {
        match self.config.spill_dir.clone() {
            Some(dir) => Ok(dir),
            None => Ok(self.private_spill_dir()?.path().to_path_buf()),
        }
    }

    /// The private spill directory, created on first use.
    fn private_spill_dir(&mut self) -> Result<SpillDir, SpawnError> {
        if let Some(dir) = &self.private_spill_dir {
            return Ok(dir.clone());
        }
        let path = create_private_dir().map_err(SpawnError::SpillDir)?;
        tracing::debug!(dir = %path.display(), "created private spill directory");
        if !self.config.keep_spill {
            // The watchdog removes it if the runtime dies; with `keep_spill` the outputs stay.
            self.containment.register_spill_dir(&path);
        }
        let dir = SpillDir::open(&path).map_err(|err| {
            let _ = std::fs::remove_dir(&path);
            SpawnError::SpillDir(err)
        })?;
        self.private_spill_dir = Some(dir.clone());
        Ok(dir)
    }

    /// Removes the private spill directory; with `keep_spill`, only if it is empty (an empty spill
    /// directory is never left behind).
    pub(crate) fn remove_private_spill_dir(&mut self) {
        let Some(dir) = self.private_spill_dir.take() else {
            return;
        };
        let dir = dir.path();
        if self.config.keep_spill {
            // Fails, as it should, when the directory holds files; what is kept is the user's to list.
            if std::fs::remove_dir(dir).is_err() {
                let _ = dsh_contain::private_dir::make_listable(dir);
            }
            return;
        }
        if let Err(err) = dsh_contain::private_dir::remove(dir) {
            tracing::warn!(dir = %dir.display(), %err, "cannot remove the spill directory");
        }
    }
}
