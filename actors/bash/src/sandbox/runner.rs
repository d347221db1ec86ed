//! An operator's runner command (`--sandbox-runner`): a bwrap-shaped program used as given, never
//! probed, followed by the bubblewrap profile and the command. Its failures are recognised by the
//! operator's signatures plus three derived from its program word, for a runner that is missing or
//! not executable (`exec: <argv0>: not found`, `<argv0>: No such file or directory`,
//! `<argv0>: Permission denied`); a denial reads `read-only file system` or `permission denied`.

use dsh_contain::seccomp::Filter;

use crate::sandbox::bwrap::{self, Signatures};
use crate::sandbox::config::LocalSandboxConfig;
use crate::sandbox::policy::SandboxPolicy;
use crate::sandbox::provider::Wrap;

/// `argv` run by `runner` under the bubblewrap profile for `policy`.
pub(crate) fn wrap(
    runner: &[String],
    config: &LocalSandboxConfig,
    policy: &SandboxPolicy,
    argv: &[String],
    filter: Filter,
) -> Result<Wrap, String> {
    let argv0 = runner.first().cloned().unwrap_or_default();
    let mut runner_failure = config.runner_failure_signatures.clone();
    runner_failure.extend([
        format!("exec: {argv0}: not found"),
        format!("{argv0}: No such file or directory"),
        format!("{argv0}: Permission denied"),
    ]);
    let signatures = Signatures {
        denial: vec![
            "read-only file system".to_owned(),
            "permission denied".to_owned(),
        ],
        runner_failure,
    };
    bwrap::wrap_in(runner, config, policy, argv, signatures, filter)
}
