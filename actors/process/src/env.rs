//! The rules of a child's environment: the ambient environment with credentials scrubbed, then the
//! caller's ordinary entries, then the managed `DSH_*` entries (docs/CONTRACT.md, "What every command
//! gets"). The merge itself is done once, in `child_env`, straight into the form `execve` takes.
//!
//! The scrub is a name heuristic: any ambient name containing `KEY`,
//! `SECRET` or `TOKEN` in any case is dropped, and so is every ambient `DSH_*` name, so a child only ever
//! sees the managed facts of its own call; so is anything that changes how the shell starts (`BASH_ENV`,
//! `ENV`, `SHELLOPTS`, `BASHOPTS`, exported `BASH_FUNC_*` functions). An explicit caller entry wins.

use std::collections::BTreeMap;
use std::ffi::OsString;

use crate::errors::SpawnError;

/// The prefix of managed variables.
pub const DSH_ENV_PREFIX: &str = "DSH_";

/// Ambient variables that change what every `bash -c` does before the command runs: a startup file
/// sourced by non-interactive shells (`BASH_ENV`, and `ENV` for `sh`), and shell options switched on
/// for every shell (`SHELLOPTS`, `BASHOPTS`). Exported functions (`BASH_FUNC_<name>%%`) are handled by
/// prefix. None of them reaches a child unless the caller sets it explicitly.
const SHELL_STARTUP_NAMES: [&str; 4] = ["BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS"];

/// The prefix bash gives an exported function in the environment (`BASH_FUNC_ls%%`).
const EXPORTED_FUNCTION_PREFIX: &str = "BASH_FUNC_";

/// Whether an ambient variable of this name is dropped before the child sees it: credentials, ambient
/// `DSH_*` names, and anything that would change how the shell starts.
pub(crate) fn is_scrubbed_name(name: &str) -> bool {
    if name.starts_with(DSH_ENV_PREFIX)
        || name.starts_with(EXPORTED_FUNCTION_PREFIX)
        || SHELL_STARTUP_NAMES.contains(&name)
    {
        return true;
    }
    let upper = name.to_ascii_uppercase();
    ["KEY", "SECRET", "TOKEN"]
        .iter()
        .any(|needle| upper.contains(needle))
}

/// Checks both channels: no `DSH_*` name in `env`, only `DSH_*` names in `dsh_env`.
pub(crate) fn validate_channels(
    env: &BTreeMap<String, String>,
    dsh_env: &BTreeMap<String, String>,
) -> Result<(), SpawnError> {
    if let Some(key) = env.keys().find(|k| k.starts_with(DSH_ENV_PREFIX)) {
        return Err(SpawnError::ReservedOnOrdinaryChannel(key.clone()));
    }
    if let Some(key) = dsh_env.keys().find(|k| !k.starts_with(DSH_ENV_PREFIX)) {
        return Err(SpawnError::OrdinaryOnManagedChannel(key.clone()));
    }
    Ok(())
}

/// The ambient environment with `SHELL` added when it has none, as bash would set it for itself:
/// the user's login shell (`login_shell`, from the passwd database); `/bin/sh` when that names none
/// or one `/etc/shells` does not list.
///
/// Why: a bash started without `SHELL` looks the user up at every start, and glibc's lookup begins
/// with a `connect` to nscd's socket. Under the sandbox's socket gate each such connect is a round
/// trip through dsh, so every confined command of a server started without `SHELL` (a CI job, a
/// container's `docker run`) paid two of them (0.06 on the confined spawn's ratio, BENCHMARKS.md). The
/// manager looks the user up once, when it starts; bash then finds the value it would have computed.
pub(crate) fn with_login_shell(
    ambient: impl IntoIterator<Item = (OsString, OsString)>,
    login_shell: impl FnOnce() -> Option<OsString>,
) -> Vec<(OsString, OsString)> {
    let mut ambient: Vec<_> = ambient.into_iter().collect();
    if !ambient.iter().any(|(name, _)| name == SHELL) {
        let shell = login_shell()
            .filter(|shell| !shell.is_empty())
            .unwrap_or_else(|| FALLBACK_SHELL.into());
        ambient.push((SHELL.into(), shell));
    }
    ambient
}

/// The variable naming the user's shell.
const SHELL: &str = "SHELL";

/// bash's own choice when the passwd database names no shell for the user.
const FALLBACK_SHELL: &str = "/bin/sh";

/// The login shell the passwd database names for the process's real user (bash asks for that uid),
/// if `/etc/shells` lists it: a service account's `nologin` or `false` would break every program
/// that runs `$SHELL` (`script`, tmux, an editor's `:!`).
pub(crate) fn passwd_login_shell() -> Option<OsString> {
    let user = nix::unistd::User::from_uid(nix::unistd::getuid()).ok()??;
    let shells = std::fs::read_to_string("/etc/shells").ok()?;
    listed(&shells, user.shell.as_os_str()).then(|| user.shell.into_os_string())
}

/// Whether `shell` is one of the lines of `/etc/shells` (comments and blanks aside).
fn listed(shells: &str, shell: &std::ffi::OsStr) -> bool {
    shells.lines().map(str::trim).any(|line| {
        !line.is_empty() && !line.starts_with('#') && std::ffi::OsStr::new(line) == shell
    })
}

/// The ambient environment with credential-shaped and `DSH_*` names removed. The manager takes this
/// snapshot once, when it starts, instead of re-reading and re-scrubbing the environment per spawn.
pub(crate) fn scrub_ambient(
    ambient: impl IntoIterator<Item = (OsString, OsString)>,
) -> BTreeMap<OsString, OsString> {
    ambient
        .into_iter()
        .filter(|(name, _)| !is_scrubbed_name(&name.to_string_lossy()))
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A variable map from `(name, value)` pairs (shared with `child_env`'s tests).
    pub(crate) fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn scrub_is_a_case_insensitive_substring_match() {
        for name in [
            "DEEPSEEK_API_KEY",
            "AWS_SECRET_ACCESS_KEY",
            "GITHUB_TOKEN",
            "MONKEY",
            "api_key",
            "TOKENIZERS_PARALLELISM",
            "DSH_ANYTHING",
            "BASH_ENV",
            "ENV",
            "SHELLOPTS",
            "BASHOPTS",
            "BASH_FUNC_ls%%",
        ] {
            assert!(is_scrubbed_name(name), "{name} should be scrubbed");
        }
        for name in [
            "PATH",
            "PASSWORD",
            "SSH_AUTH_SOCK",
            "CREDENTIAL",
            "dsh_lower",
            "ENVIRONMENT",
            "MY_ENV",
            "BASH_VERSION_WANTED",
        ] {
            assert!(!is_scrubbed_name(name), "{name} should pass");
        }
    }

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    #[test]
    fn a_missing_shell_is_the_login_shell_and_an_ambient_one_is_kept() {
        let added = with_login_shell(vars(&[("PATH", "/bin")]), || Some("/bin/zsh".into()));
        assert_eq!(added, vars(&[("PATH", "/bin"), ("SHELL", "/bin/zsh")]));
        let kept = with_login_shell(vars(&[("SHELL", "/bin/fish")]), || {
            panic!("the user is not looked up when SHELL is set")
        });
        assert_eq!(kept, vars(&[("SHELL", "/bin/fish")]));
        // bash's own fallback when the database names no shell or has no entry.
        for none in [Some(OsString::new()), None] {
            let fallback = with_login_shell(vars(&[]), || none.clone());
            assert_eq!(fallback, vars(&[("SHELL", "/bin/sh")]));
        }
    }

    #[test]
    fn the_passwd_login_shell_is_this_users_entry_when_a_login_shell() {
        let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
        let uid = nix::unistd::getuid().to_string();
        let Some(entry) = passwd
            .lines()
            .map(|line| line.split(':').collect::<Vec<_>>())
            .find(|fields| fields.get(2) == Some(&uid.as_str()))
            .map(|fields| OsString::from(fields[6]))
        else {
            eprintln!("skipped: this user is not in /etc/passwd");
            return;
        };
        let shells = std::fs::read_to_string("/etc/shells").unwrap_or_default();
        let expected = listed(&shells, &entry).then_some(entry);
        assert_eq!(passwd_login_shell(), expected);
    }

    #[test]
    fn only_a_shell_etc_shells_lists_counts() {
        let shells = "# /etc/shells\n/bin/sh\n/bin/bash\n\n/usr/bin/bash\n";
        assert!(listed(shells, "/bin/bash".as_ref()));
        assert!(!listed(shells, "/usr/sbin/nologin".as_ref()));
        assert!(!listed(shells, "# /etc/shells".as_ref()));
        assert!(!listed(shells, "".as_ref()));
    }

    #[test]
    fn channel_violations_have_the_contract_messages() {
        let err = validate_channels(&map(&[("DSH_WRONG_CHANNEL", "bad")]), &map(&[])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "ordinary child env cannot set reserved variable \"DSH_WRONG_CHANNEL\"; use dshEnv"
        );
        let err = validate_channels(&map(&[]), &map(&[("PATH", "/wrong-channel")])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "managed child env cannot set ordinary variable \"PATH\"; use env"
        );
    }
}
