//! The managed `DSH_*` environment of every model bash call: `DSH_HOME`,
//! `DSH_SHELL=1`, and `DSH_SESSION_ID` when the call has an agent. A fresh map per call; the process
//! manager has already removed every ambient `DSH_*`, so a missing fact is absent, never inherited.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// `DSH_HOME`: the configured value, else a non-blank ambient `$DSH_HOME`, else `<home>/.dsh`; `~`
/// expanded and made absolute against `cwd`.
pub fn resolve_dsh_home(
    configured: Option<&Path>,
    ambient: Option<String>,
    home: Option<PathBuf>,
    cwd: &Path,
) -> PathBuf {
    let raw = configured
        .map(Path::to_path_buf)
        .or_else(|| ambient.filter(|v| !v.trim().is_empty()).map(PathBuf::from))
        .unwrap_or_else(|| {
            home.clone()
                .unwrap_or_else(|| PathBuf::from("/"))
                .join(".dsh")
        });
    let expanded = match raw.to_str() {
        Some("~") => home.clone().unwrap_or(raw.clone()),
        Some(text) if text.starts_with("~/") => home
            .clone()
            .map(|h| h.join(&text[2..]))
            .unwrap_or(raw.clone()),
        _ => raw,
    };
    if expanded.is_absolute() {
        expanded
    } else {
        cwd.join(expanded)
    }
}

/// The managed variables for one call.
pub fn managed_env(dsh_home: &Path, session_id: Option<&str>) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    env.insert("DSH_HOME".to_owned(), dsh_home.display().to_string());
    env.insert("DSH_SHELL".to_owned(), "1".to_owned());
    if let Some(session) = session_id {
        env.insert("DSH_SESSION_ID".to_owned(), session.to_owned());
    }
    env
}
