//! The runtime for tests, shared with the library's own tests: it lives in `dsh-test-support`
//! (feature `runtime`). Beside it, the `dsh` binary as the tests start it.

use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::Duration;

pub use dsh_test_support::runtime::*;

/// `dsh <args>` started with piped stdin and stdout and `stderr` as given.
pub fn start_dsh(args: &[&str], stderr: Stdio) -> Child {
    Command::new(env!("CARGO_BIN_EXE_dsh"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("start dsh")
}

/// `dsh <args>` run to its end (stdin empty), with its output.
pub fn run_dsh(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dsh"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run dsh")
}

/// `child`'s exit status once it has exited; fails the test, saying `what` did not exit, if that
/// takes longer than `limit`.
pub fn exit_status(child: &mut Child, limit: Duration, what: &str) -> ExitStatus {
    let mut status = None;
    let exited = dsh_test_support::wait::wait_until(limit, || {
        status = child.try_wait().expect("try_wait");
        status.is_some()
    });
    assert!(exited, "{what} did not exit within {limit:?}");
    status.expect("exited")
}

/// The pids an MCP client's JSON report lists under `"pids"`: the processes its session started.
pub fn reported_pids(report: &serde_json::Value) -> Vec<i32> {
    report["pids"]
        .as_array()
        .expect("a list of pids")
        .iter()
        .map(|p| i32::try_from(p.as_i64().expect("a pid")).expect("a pid"))
        .collect()
}
