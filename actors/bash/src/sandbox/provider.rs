//! The provider seam (docs/ARCHITECTURE.md#sandbox): given the exact argv `["bash", "-c", command]`
//! and a policy, a provider returns how to start it confined — a wrapped argv and/or the child's
//! confinement — with its enforcement and the signatures that classify its failures. A
//! provider that cannot confine fails closed with [`sandbox_unavailable_text`]; nothing then runs.

use dsh_tasks::{Enforcement, SandboxFacts, SandboxMode};

use crate::errors::ExecError;
use crate::sandbox::classify::{matches_signatures, out_of_resources};
use crate::sandbox::policy::SandboxPolicy;

/// The fail-closed text (code `SANDBOX_UNAVAILABLE`, docs/CONTRACT.md#bash), plus
/// ` Runner failure: <detail>` when it comes from a runner that failed at execution time.
pub fn sandbox_unavailable_text(mode: SandboxMode, runner_failure: Option<&str>) -> String {
    let mut text = format!(
        "sandbox mode \"{mode}\" is requested but no sandbox backend is usable on this host; \
         refusing to run the command unconfined. Install bubblewrap or run a Landlock-enforcing \
         kernel (Linux), ensure sandbox-exec is usable (macOS) — Windows has no confinement backend \
         yet — or switch the consumer to danger-full-access."
    );
    if let Some(detail) = runner_failure {
        text.push_str(" Runner failure: ");
        text.push_str(detail);
    }
    text
}

/// What one confinement says about the command's result, kept per process (never "the latest
/// wrap"): the mode, the enforcement, and the signatures of a denial and of a runner failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WrapFacts {
    /// The mode the command runs under.
    pub mode: SandboxMode,
    /// The backend's enforcement on this host.
    pub enforcement: Enforcement,
    /// stderr texts that mean "the sandbox refused a file operation".
    pub denial_signatures: Vec<String>,
    /// stderr texts that mean "the sandbox runner itself failed".
    pub runner_failure_signatures: Vec<String>,
}

impl WrapFacts {
    /// Whether a finished command is a runner failure: a runner signature, and not a runner that
    /// ran out of the command's processes or memory (see [`out_of_resources`]).
    pub fn runner_failed(&self, exit_code: Option<i32>, stderr: &str) -> bool {
        matches_signatures(exit_code, stderr, &self.runner_failure_signatures)
            && !out_of_resources(stderr)
    }

    /// The facts of a finished command: a runner failure outranks a denial.
    pub fn classify(&self, exit_code: Option<i32>, stderr: &str) -> SandboxFacts {
        let runner_failed = self.runner_failed(exit_code, stderr);
        SandboxFacts {
            mode: self.mode,
            denied: !runner_failed
                && matches_signatures(exit_code, stderr, &self.denial_signatures),
            enforcement: Some(self.enforcement),
            runner_failed,
        }
    }
}

/// How to start one command confined.
#[derive(Clone, Debug)]
pub struct Wrap {
    /// The argv to run: the original `["bash", "-c", command]` when confinement is applied in the
    /// spawn itself, else a runner's argv ending with it.
    pub argv: Vec<String>,
    /// Variables the confinement sets for the command (`TMPDIR`); a caller's own entry wins.
    pub env: Vec<(String, String)>,
    /// How the child is confined right before exec: it confines itself (Landlock, seccomp, no
    /// capabilities), or hands the runner its seccomp filter.
    pub confinement: Option<dsh_contain::confine::Confinement>,
    /// The facts to classify the result with.
    pub facts: WrapFacts,
}

impl Wrap {
    /// `argv` run through a runner program: `runner` (its argv, ending where the command's
    /// begins) confines fully, a denial reads as one of `denial`, and a failure of the runner
    /// itself as one of `runner_failure`.
    pub fn through_runner(
        runner: Vec<String>,
        argv: &[String],
        policy: &SandboxPolicy,
        denial: Vec<String>,
        runner_failure: Vec<String>,
    ) -> Self {
        let mut wrapped = runner;
        wrapped.extend(argv.iter().cloned());
        Wrap {
            argv: wrapped,
            env: Vec::new(),
            confinement: None,
            facts: WrapFacts {
                mode: policy.mode,
                enforcement: Enforcement::Full,
                denial_signatures: denial,
                runner_failure_signatures: runner_failure,
            },
        }
    }
}

/// A confinement backend. Consulted on every confined run and start (it may cache inside).
pub trait SandboxProvider: Send + Sync + 'static {
    /// How to run `argv` under `policy` (never `danger-full-access`, which is never confined) for
    /// the agent `session` (`None`: a caller with no session). A provider may keep what it gives
    /// commands apart per session: the local one gives each session's Landlock commands terminals
    /// of their own. Fails with [`ExecError::SandboxUnavailable`] when it cannot confine; nothing
    /// runs then.
    fn confine(
        &self,
        argv: &[String],
        policy: &SandboxPolicy,
        session: Option<&str>,
    ) -> Result<Wrap, ExecError>;

    /// What a command confined under `policy` may write, as the tool description lists it; a
    /// provider that does not say lists nothing.
    fn writable(&self, _policy: &SandboxPolicy) -> Vec<std::path::PathBuf> {
        Vec::new()
    }
    /// Called once when the runtime shuts down, after every command is gone: removes what the
    /// provider made for its commands (the local provider: its private temp, and every session's
    /// namespace, terminals and confined spawning thread).
    fn shutdown(&self) {}

    /// Called when the runtime releases `session`, after its tasks are gone: forgets what the
    /// provider keeps for that session's commands (the local provider: its namespace, terminals
    /// and temp). A later session of the same id starts afresh.
    fn release_session(&self, _session: &str) {}
}
