//! An operator's runner command (`--sandbox-runner`): a bwrap-shaped program used as given, never
//! probed, followed by the bubblewrap profile and the command. Its failures are recognised by the
//! operator's signatures plus three derived from its program word, for a runner that is missing or
//! not executable (`exec: <argv0>: not found`, `<argv0>: No such file or directory`,
//! `<argv0>: Permission denied`); a denial reads `read-only file system` or `permission denied`.

use dsh_tasks::Enforcement;

use crate::sandbox::bwrap;
use crate::sandbox::config::LocalSandboxConfig;
use crate::sandbox::policy::SandboxPolicy;
use crate::sandbox::provider::{Wrap, WrapFacts};

/// `argv` run by `runner` under the bubblewrap profile for `policy`.
pub(crate) fn wrap(
    runner: &[String],
    config: &LocalSandboxConfig,
    policy: &SandboxPolicy,
    argv: &[String],
) -> Wrap {
    let mut wrapped = runner.to_vec();
    wrapped.extend(bwrap::profile(config, policy));
    wrapped.extend(argv.iter().cloned());
    let argv0 = runner.first().cloned().unwrap_or_default();
    let mut runner_signatures = config.runner_failure_signatures.clone();
    runner_signatures.extend([
        format!("exec: {argv0}: not found"),
        format!("{argv0}: No such file or directory"),
        format!("{argv0}: Permission denied"),
    ]);
    Wrap {
        argv: wrapped,
        landlock: None,
        facts: WrapFacts {
            mode: policy.mode,
            enforcement: Enforcement::Full,
            denial_signatures: vec![
                "read-only file system".to_owned(),
                "permission denied".to_owned(),
            ],
            runner_failure_signatures: runner_signatures,
        },
    }
}
