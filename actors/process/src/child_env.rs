//! A child's environment in the form exec takes: `NAME=value` C strings.
//!
//! Every child of a manager starts from the same scrubbed ambient environment, so that part is
//! rendered once, when the manager starts ([`AmbientEnv`]). A spawn renders only its own entries (the
//! caller's `env` and managed `dsh_env`, usually a handful) and copies the ready ambient strings for the
//! rest: starting a child no longer copies the whole environment into a fresh map and then again into
//! C strings. This is the only place the environment is merged; the rules it applies (scrub, channels)
//! are in `env`.

use std::collections::BTreeMap;
use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use crate::env::{scrub_ambient, validate_channels};
use crate::errors::SpawnError;

/// One ambient variable: its name, and `NAME=value` ready for `execve`.
#[derive(Debug)]
struct AmbientEntry {
    name: OsString,
    entry: CString,
}

/// The scrubbed ambient environment, rendered once, sorted by name.
#[derive(Debug, Default)]
pub(crate) struct AmbientEnv {
    entries: Vec<AmbientEntry>,
}

impl AmbientEnv {
    /// Scrubs `ambient` (normally `std::env::vars_os()`) and renders what is left.
    pub(crate) fn capture(ambient: impl IntoIterator<Item = (OsString, OsString)>) -> Self {
        let entries = scrub_ambient(ambient)
            .into_iter()
            // The OS never hands out a NUL inside a variable; such an entry could not be passed on.
            .filter_map(|(name, value)| {
                let entry = render(&name, &value)?;
                Some(AmbientEntry { name, entry })
            })
            .collect();
        Self { entries }
    }

    fn get(&self, name: &OsStr) -> Option<&OsStr> {
        let index = self
            .entries
            .binary_search_by(|e| e.name.as_os_str().cmp(name))
            .ok()?;
        let entry = &self.entries[index];
        let value = &entry.entry.as_bytes()[entry.name.len() + 1..];
        Some(OsStr::from_bytes(value))
    }
}

/// `NAME=value` as a C string; `None` if either part contains a NUL byte.
fn render(name: &OsStr, value: &OsStr) -> Option<CString> {
    let mut bytes = Vec::with_capacity(name.len() + value.len() + 2);
    bytes.extend_from_slice(name.as_bytes());
    bytes.push(b'=');
    bytes.extend_from_slice(value.as_bytes());
    CString::new(bytes).ok()
}

/// One child's complete environment: the ambient entries it does not override, then its own.
#[derive(Debug, Clone)]
pub(crate) struct ChildEnv {
    ambient: Arc<AmbientEnv>,
    /// The caller's entries, then the managed ones (a later entry of the same name wins).
    own: BTreeMap<OsString, OsString>,
}

impl ChildEnv {
    /// Checks both channels (no `DSH_*` in `env`, only `DSH_*` in `dsh_env`) and combines them.
    pub(crate) fn new(
        ambient: &Arc<AmbientEnv>,
        env: &BTreeMap<String, String>,
        dsh_env: &BTreeMap<String, String>,
    ) -> Result<Self, SpawnError> {
        validate_channels(env, dsh_env)?;
        let own = env
            .iter()
            .chain(dsh_env)
            .map(|(name, value)| (name.into(), value.into()))
            .collect();
        Ok(Self {
            ambient: ambient.clone(),
            own,
        })
    }

    /// The value the child will see for `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&OsStr> {
        match self.own.get(OsStr::new(name)) {
            Some(value) => Some(value),
            None => self.ambient.get(OsStr::new(name)),
        }
    }
}

impl ChildEnv {
    /// The whole environment as `NAME=value` C strings for exec, with `extra` (the containment
    /// marker) replacing any entry of that name; `None` if an entry contains a NUL byte.
    pub(crate) fn c_entries(&self, extra: Option<(&str, &str)>) -> Option<Vec<CString>> {
        let extra_name = extra.map(|(name, _)| OsStr::new(name));
        let keep = |name: &OsStr| Some(name) != extra_name;
        let mut entries: Vec<CString> = self
            .ambient
            .entries
            .iter()
            .filter(|e| !self.own.contains_key(&e.name) && keep(&e.name))
            .map(|e| e.entry.clone())
            .collect();
        for (name, value) in self.own.iter().filter(|(name, _)| keep(name)) {
            entries.push(render(name, value)?);
        }
        if let Some((name, value)) = extra {
            entries.push(render(OsStr::new(name), OsStr::new(value))?);
        }
        Some(entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::tests::map;

    fn ambient() -> Vec<(OsString, OsString)> {
        [
            ("PATH", "/usr/bin:/bin"),
            ("HOME", "/home/a"),
            ("OPENAI_API_KEY", "sk-secret"),
            ("DSH_SESSION_ID", "stale"),
            ("LANG", "C.UTF-8"),
            ("GITHUB_TOKEN", "ghp"),
        ]
        .iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect()
    }

    #[test]
    fn the_block_is_exactly_the_merged_environment() {
        let captured = Arc::new(AmbientEnv::capture(ambient()));
        let env = map(&[
            ("HOME", "/override"),
            ("GITHUB_TOKEN", "explicit"),
            ("X", "1"),
        ]);
        let dsh_env = map(&[("DSH_HOME", "/h"), ("DSH_SHELL", "1")]);
        let child = ChildEnv::new(&captured, &env, &dsh_env).unwrap();
        let mut got: Vec<String> = child
            .c_entries(None)
            .unwrap()
            .iter()
            .map(|e| e.to_str().unwrap().to_owned())
            .collect();
        got.sort();
        let expected = [
            "DSH_HOME=/h",
            "DSH_SHELL=1",
            "GITHUB_TOKEN=explicit",
            "HOME=/override",
            "LANG=C.UTF-8",
            "PATH=/usr/bin:/bin",
            "X=1",
        ];
        assert_eq!(got, expected);
        assert_eq!(child.get("HOME"), Some(OsStr::new("/override")));
        assert_eq!(child.get("PATH"), Some(OsStr::new("/usr/bin:/bin")));
        assert_eq!(child.get("OPENAI_API_KEY"), None, "scrubbed");
        assert_eq!(child.get("DSH_SESSION_ID"), None, "ambient DSH_* scrubbed");
    }

    #[test]
    fn channels_are_checked_and_a_nul_byte_refuses_the_block() {
        let captured = Arc::new(AmbientEnv::capture(ambient()));
        assert!(matches!(
            ChildEnv::new(&captured, &map(&[("DSH_X", "1")]), &BTreeMap::new()),
            Err(SpawnError::ReservedOnOrdinaryChannel(_))
        ));
        assert!(matches!(
            ChildEnv::new(&captured, &BTreeMap::new(), &map(&[("X", "1")])),
            Err(SpawnError::OrdinaryOnManagedChannel(_))
        ));
        let child = ChildEnv::new(&captured, &map(&[("X", "a\0b")]), &BTreeMap::new()).unwrap();
        assert!(child.c_entries(None).is_none());
    }

    #[test]
    fn explicit_entries_win_and_managed_entries_come_last() {
        let ambient: Vec<(OsString, OsString)> =
            [("PATH", "/bin"), ("MY_TOKEN", "x"), ("DSH_OLD", "stale")]
                .iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect();
        let env = ChildEnv::new(
            &Arc::new(AmbientEnv::capture(ambient)),
            &map(&[
                ("EXPLICIT_OVERRIDE_KEY", "explicit-wins"),
                ("PATH", "/usr/bin"),
            ]),
            &map(&[("DSH_SHELL", "1")]),
        )
        .unwrap();
        let get = |k: &str| env.get(k).map(|v| v.to_string_lossy().into_owned());
        assert_eq!(get("PATH").as_deref(), Some("/usr/bin"));
        assert_eq!(
            get("EXPLICIT_OVERRIDE_KEY").as_deref(),
            Some("explicit-wins")
        );
        assert_eq!(get("DSH_SHELL").as_deref(), Some("1"));
        assert_eq!(get("MY_TOKEN"), None);
        assert_eq!(get("DSH_OLD"), None);
    }
}
