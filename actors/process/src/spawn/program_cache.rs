//! Where each program a child runs was found on its `PATH`, so a busy runtime does not walk `PATH`
//! for every spawn of the same program.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io;
use std::path::PathBuf;

use nix::libc;

use super::find_program;
use crate::child_env::ChildEnv;
use crate::errors::SpawnError;

/// Where each program name was found, per `PATH` value. An entry is dropped when spawning from it
/// fails, so a program that moved is looked up afresh.
#[derive(Debug, Default)]
pub(crate) struct ProgramCache {
    found: HashMap<(Option<OsString>, String), PathBuf>,
}

impl ProgramCache {
    fn key(name: &str, env: &ChildEnv) -> (Option<OsString>, String) {
        (env.get("PATH").map(OsStr::to_os_string), name.to_owned())
    }

    /// Looks `argv[0]` up on the child's `PATH` (cached). `ENOENT` when it is not there.
    pub(crate) fn program_for(
        &mut self,
        name: &str,
        env: &ChildEnv,
    ) -> Result<PathBuf, SpawnError> {
        let key = Self::key(name, env);
        if let Some(found) = self.found.get(&key) {
            return Ok(found.clone());
        }
        let found = find_program(name, key.0.as_deref()).ok_or_else(|| SpawnError::Os {
            program: name.to_owned(),
            source: io::Error::from_raw_os_error(libc::ENOENT),
        })?;
        self.found.insert(key, found.clone());
        Ok(found)
    }

    /// Drops the cached location of `name` after a spawn from it failed.
    pub(crate) fn forget_program(&mut self, name: &str, env: &ChildEnv) {
        self.found.remove(&Self::key(name, env));
    }
}
