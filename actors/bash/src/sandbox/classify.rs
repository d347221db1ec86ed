//! Denial and runner-failure classification (docs/ARCHITECTURE.md#sandbox), one rule for both: a
//! command "matches" when it exited with a non-zero code AND its stderr contains one of the
//! signatures, compared case-insensitively. So a clean exit or a signal death (no exit code) is
//! never a denial and never a runner failure. Runner failure is checked first and outranks denial.
//! Only the collected stderr tail is read: a signature that exists only in the spilled head is
//! missed.
//!
//! A runner that failed because the command's own limits left it no process or memory
//! (`bwrap: Creating new namespace failed: Resource temporarily unavailable` under a tight
//! `--task-max-pids`) is not a runner failure: the sandbox works, the command's resources ran out,
//! and the result is shown as it is (stderr and exit code) rather than as `SANDBOX_UNAVAILABLE`,
//! which a model reads as "this host cannot sandbox". [`out_of_resources`] tells them apart.

/// What the C library prints for `EAGAIN` and `ENOMEM`, lowercased.
const OUT_OF_RESOURCES: [&str; 2] = ["resource temporarily unavailable", "cannot allocate memory"];

/// Whether `stderr` reports running out of processes or memory (`EAGAIN`, `ENOMEM`).
pub fn out_of_resources(stderr: &str) -> bool {
    let stderr = stderr.to_lowercase();
    OUT_OF_RESOURCES.iter().any(|text| stderr.contains(text))
}

/// Whether `exit_code` is non-zero and `stderr` contains any of `signatures` (case-insensitive).
pub fn matches_signatures(exit_code: Option<i32>, stderr: &str, signatures: &[String]) -> bool {
    if exit_code.is_none_or(|code| code == 0) {
        return false;
    }
    let stderr = stderr.to_lowercase();
    signatures
        .iter()
        .any(|signature| !signature.is_empty() && stderr.contains(&signature.to_lowercase()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sigs(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn sb_16_clean_exit_or_signal_death_is_never_a_denial() {
        let denial = sigs(&["read-only file system", "permission denied"]);
        assert!(!matches_signatures(Some(0), "Permission denied", &denial));
        assert!(!matches_signatures(None, "Permission denied", &denial));
    }

    #[test]
    fn sb_17_wrap_dialect_is_conservative() {
        let denial = sigs(&["read-only file system", "permission denied"]);
        for (stderr, denied) in [
            ("touch: cannot touch /x: Read-only file system", true),
            ("sh: /x: Permission denied", true),
            ("mount: Operation not permitted", false),
            ("No such file or directory", false),
        ] {
            assert_eq!(
                matches_signatures(Some(1), stderr, &denial),
                denied,
                "{stderr}"
            );
        }
    }

    #[test]
    fn sb_18_signatures_are_backend_specific() {
        assert!(matches_signatures(
            Some(1),
            "bash: /etc/x: Operation not permitted",
            &sigs(&["operation not permitted"])
        ));
        assert!(!matches_signatures(
            Some(1),
            "sh: /x: Permission denied",
            &sigs(&["read-only file system"])
        ));
    }

    #[test]
    fn running_out_of_processes_or_memory_is_told_apart() {
        assert!(out_of_resources(
            "bwrap: Creating new namespace failed: Resource temporarily unavailable"
        ));
        assert!(out_of_resources("bwrap: clone: Cannot allocate memory"));
        assert!(!out_of_resources(
            "bwrap: execvp bash: No such file or directory"
        ));
    }

    #[test]
    fn sb_19_runner_failure_is_case_insensitive_on_both_sides() {
        let runner = sigs(&[
            "exec: /Opt/Runners/bwrap: not found",
            "/Opt/Runners/bwrap: No such file or directory",
        ]);
        for stderr in [
            "bash: /Opt/Runners/bwrap: No such file or directory",
            "BASH: LINE 1: EXEC: /OPT/RUNNERS/BWRAP: NOT FOUND",
        ] {
            assert!(matches_signatures(Some(127), stderr, &runner), "{stderr}");
        }
    }
}
