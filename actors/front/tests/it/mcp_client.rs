//! `dsh mcp` driven by a real MCP client: the official Python `mcp` package (tests/mcp/client.py).
//! It lists the tools, runs foreground and background calls, `bash_output` and `bash_kill`, sees a
//! completion notice both as a log notification and appended to its next result, and cancels a call.
//!
//! The client lives in a virtual environment: `$DSH_TEST_PYTHON` if set (`.ci/run` sets it), else
//! `target/mcp-venv`, created here from tests/mcp/requirements.txt when missing.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::reported_pids;
use dsh_test_support::procfs::assert_all_gone;
use serde_json::Value;

pub(crate) fn python() -> PathBuf {
    if let Some(python) = std::env::var_os("DSH_TEST_PYTHON") {
        return PathBuf::from(python);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // The workspace's target directory, two levels above this crate.
    let venv = root.join("../../target/mcp-venv");
    let python = venv.join("bin/python");
    let ready = Command::new(&python)
        .args(["-c", "import mcp"])
        .status()
        .is_ok_and(|s| s.success());
    if !ready {
        let status = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .expect("python3 -m venv");
        assert!(status.success(), "cannot create {}", venv.display());
        let status = Command::new(venv.join("bin/pip"))
            .args(["install", "-q", "-r"])
            .arg(root.join("tests/mcp/requirements.txt"))
            .status()
            .expect("pip install");
        assert!(status.success(), "cannot install the Python MCP client");
    }
    python
}

/// Runs the Python client `script` (under tests/mcp) against this dsh with `args`, asserts it
/// succeeded, and returns the JSON report it printed last.
fn run_client(script: &str, args: &[&OsStr]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mcp")
        .join(script);
    let output = Command::new(python())
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_dsh"))
        .args(args)
        .output()
        .expect("run the MCP client");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "client failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    serde_json::from_str(stdout.trim().lines().last().unwrap_or("")).expect("JSON report")
}

#[test]
fn a_real_mcp_client_uses_all_three_tools_sees_notices_and_cancels() {
    let report = run_client("client.py", &[]);
    let checks: Vec<&str> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(
        checks,
        [
            "list_tools",
            "foreground",
            "validation",
            "session_id",
            "notice_logged",
            "notice_appended",
            "background_kill",
            "cancel"
        ]
    );
    // Every process the session started is gone once the client has disconnected.
    let pids = reported_pids(&report);
    assert_eq!(pids.len(), 4, "bash-1, bash-2, the cancelled call, bash-3");
    assert_all_gone(&pids, Duration::from_secs(20));
}

/// The Python client's default `Client` (`mode="auto"`) negotiates 2026-07-28 and answers input
/// rounds itself (tests/mcp/rounds.py): its roots become the workspace and follow a change, and an
/// escalation is approved, declined and cancelled through its elicitation callback.
#[test]
fn the_default_python_client_gets_roots_and_approvals_through_input_rounds() {
    let sandboxed = dsh::LocalSandboxProvider::new(dsh::LocalSandboxConfig::default())
        .unwrap()
        .verdict()
        .is_ok();
    let (first, second) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (first, second) = (
        first.path().canonicalize().unwrap(),
        second.path().canonicalize().unwrap(),
    );
    let sandboxed_flag = OsStr::new(if sandboxed { "1" } else { "0" });
    let report = run_client(
        "rounds.py",
        &[first.as_os_str(), second.as_os_str(), sandboxed_flag],
    );
    let mut expected = vec!["roots", "roots_changed"];
    if sandboxed {
        expected.extend([
            "escalation_accept",
            "escalation_decline",
            "escalation_cancel",
        ]);
    } else {
        eprintln!("escalations skipped: no sandbox backend is usable here");
    }
    assert_eq!(report["checks"], serde_json::json!(expected));
}
