//! Running one test in a process of its own.
//!
//! `cargo test` runs the tests of one binary as threads of one process; cargo-nextest runs each in
//! a process of its own. A test that measures the process it runs in (open descriptors, peak
//! memory, threads, zombie children) or changes it (subreaper, environment) holds under both only if
//! it has a process to itself. [`own_process!`](crate::own_process) gives it one: the first line
//! of such a test re-executes the current test binary for just that test (`--exact NAME
//! --test-threads=1`, with [`MARKER`] set to its name) and asserts that the child ran and passed it;
//! in the child the marker is set, so the test body runs there.

use std::process::Command;

/// The environment variable that tells a re-executed test binary it is the isolated child.
pub const MARKER: &str = "DSH_TEST_OWN_PROCESS";

/// Returns `true` in the process where the test body should run (the isolated child); otherwise
/// runs the test `name` (its path inside the test binary) in a child process, asserts that it
/// passed, and returns `false`.
pub fn run_here_or_in_child(name: &str) -> bool {
    if std::env::var(MARKER).is_ok_and(|v| v == name) {
        return true;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let output = Command::new(&exe)
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(MARKER, name)
        .output()
        .expect("re-execute the test binary");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // Shown by the harness only when the test fails (or under --nocapture).
    print!("{stdout}");
    eprint!("{stderr}");
    assert!(
        output.status.success(),
        "{name} failed in its own process ({}):\n{stdout}\n{stderr}",
        output.status
    );
    assert!(
        stdout.contains("test result: ok. 1 passed"),
        "{name} did not run in its own process:\n{stdout}\n{stderr}"
    );
    false
}

/// The test's path inside its binary, from `module_path!()` and the function's name: the crate
/// name (the first segment) is not part of it.
pub fn test_path(module_path: &str, function: &str) -> String {
    match module_path.split_once("::") {
        Some((_, inner)) => format!("{inner}::{function}"),
        None => function.to_owned(),
    }
}

/// First statement of a test that must run in a process of its own:
/// `own_process!(test_function_name);`. In the test's usual process it runs the test in a child
/// and returns; in the child it falls through to the body.
#[macro_export]
macro_rules! own_process {
    ($test:ident) => {
        if !$crate::isolate::run_here_or_in_child(&$crate::isolate::test_path(
            module_path!(),
            stringify!($test),
        )) {
            return;
        }
    };
}

#[cfg(test)]
mod tests {
    use super::test_path;

    #[test]
    fn the_crate_name_is_not_part_of_the_path() {
        assert_eq!(test_path("manager", "leaks"), "leaks");
        assert_eq!(test_path("manager::inner", "leaks"), "inner::leaks");
    }
}
