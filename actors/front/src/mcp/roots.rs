//! MCP roots as the workspace: without `--cwd`, the first `file://` root the client offers is where
//! commands run and what a relative `workdir` resolves against.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// The local path of a `file://` URI (`file:///a%20b` → `/a b`); `None` for other schemes or hosts.
pub fn file_uri_path(uri: &str) -> Option<PathBuf> {
    let rest = uri.strip_prefix("file://")?;
    let path = match rest.strip_prefix("localhost") {
        Some(path) => path,
        None => rest,
    };
    if !path.starts_with('/') {
        return None;
    }
    let bytes = path.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(byte) = bytes
                .get(i + 1..i + 3)
                .and_then(|hex| std::str::from_utf8(hex).ok())
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
        {
            decoded.push(byte);
            i += 3;
            continue;
        }
        decoded.push(bytes[i]);
        i += 1;
    }
    use std::os::unix::ffi::OsStringExt;
    Some(PathBuf::from(std::ffi::OsString::from_vec(decoded)))
}

/// The client's root as the session's workspace: canonical, an existing directory, and not `/`
/// (which would make `workspace-write` write everywhere while still reporting `workspace-write`).
/// `None` falls back to the server's own directory, as a client without roots does.
pub fn usable_root(path: &Path) -> Option<PathBuf> {
    let canonical = std::fs::canonicalize(path).ok().filter(|p| p.is_dir())?;
    if canonical == Path::new("/") {
        tracing::warn!(
            root = %path.display(),
            "the client's root is the whole file system; not used as the writable workspace"
        );
        return None;
    }
    Some(canonical)
}

/// Points a `bash` call at the workspace: no `workdir` → the root; a relative one → under the root.
pub fn apply_workspace(arguments: &mut Value, root: &Path) {
    let Value::Object(args) = arguments else {
        return;
    };
    let workdir = match args.get("workdir") {
        None | Some(Value::Null) => root.to_path_buf(),
        Some(Value::String(dir)) if Path::new(dir).is_relative() => root.join(dir),
        Some(_) => return,
    };
    args.insert(
        "workdir".into(),
        Value::String(workdir.to_string_lossy().into_owned()),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn file_uris_decode_and_workdirs_resolve_under_the_root() {
        assert_eq!(file_uri_path("file:///a%20b/c"), Some("/a b/c".into()));
        assert_eq!(file_uri_path("file://localhost/x"), Some("/x".into()));
        assert_eq!(file_uri_path("https://x/y"), None);
        assert_eq!(file_uri_path("file://host/x"), None);
        let root = Path::new("/ws");
        let mut args = json!({"command": "ls"});
        apply_workspace(&mut args, root);
        assert_eq!(args["workdir"], "/ws");
        let mut args = json!({"command": "ls", "workdir": "sub"});
        apply_workspace(&mut args, root);
        assert_eq!(args["workdir"], "/ws/sub");
        let mut args = json!({"command": "ls", "workdir": "/abs"});
        apply_workspace(&mut args, root);
        assert_eq!(args["workdir"], "/abs");
    }

    #[test]
    fn the_whole_file_system_or_a_missing_directory_is_no_workspace() {
        assert_eq!(usable_root(Path::new("/")), None);
        assert_eq!(usable_root(Path::new("/tmp/..")), None);
        assert_eq!(usable_root(Path::new("/nonexistent-dsh-root")), None);
        let dir = tempfile::tempdir().unwrap();
        let canonical = std::fs::canonicalize(dir.path()).unwrap();
        assert_eq!(usable_root(&dir.path().join(".")), Some(canonical));
    }
}
