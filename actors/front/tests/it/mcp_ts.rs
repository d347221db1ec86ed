//! `dsh mcp` driven by the official TypeScript MCP SDK (tests/mcp-ts/client.mjs: list, call,
//! background, notice, progress with `resetTimeoutOnProgress`, cancel, structured content validated
//! against each tool's output schema with ajv) and by the MCP Inspector CLI (`--cli … --method
//! tools/list` and a `tools/call`).
//!
//! The packages are pinned by tests/mcp-ts/package-lock.json and installed with `npm ci` into
//! tests/mcp-ts/node_modules when it is missing. Without `node` or `npm` the tests print why and pass
//! (or fail, when `DSH_REQUIRE_NODE` is set, as CI does).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::common::reported_pids;
use dsh_test_support::procfs::assert_all_gone;
use serde_json::Value;

fn project() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp-ts")
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The node project ready to run, or `None` (with the reason printed) when node or npm is absent.
pub(crate) fn node_project() -> Option<PathBuf> {
    for tool in ["node", "npm"] {
        if !have(tool) {
            // CI sets DSH_REQUIRE_NODE so a missing Node fails the run instead of skipping silently.
            assert!(
                std::env::var_os("DSH_REQUIRE_NODE").is_none(),
                "`{tool}` is not installed but DSH_REQUIRE_NODE is set"
            );
            println!(
                "skipped: `{tool}` is not installed; the TypeScript SDK and Inspector tests need Node 20+"
            );
            return None;
        }
    }
    let dir = project();
    // One `npm ci` at a time: nextest runs each test in a process of its own.
    let lock = std::fs::File::create(dir.join(".install.lock")).expect("create the install lock");
    let _one = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| e)
        .expect("lock the install");
    if !dir.join("node_modules/@modelcontextprotocol/sdk").is_dir() {
        let status = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund"])
            .current_dir(&dir)
            .status()
            .expect("run npm ci");
        assert!(status.success(), "npm ci failed in {}", dir.display());
    }
    Some(dir)
}

/// The stdout of `what`, which must have succeeded (else its stdout and stderr in the failure).
pub(crate) fn check(output: &Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{what} failed\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[test]
fn the_typescript_sdk_lists_calls_backgrounds_sees_notices_progress_and_cancels() {
    let Some(dir) = node_project() else { return };
    let output = Command::new("node")
        .arg(dir.join("client.mjs"))
        .arg(env!("CARGO_BIN_EXE_dsh"))
        .current_dir(&dir)
        .output()
        .expect("run node");
    let stdout = check(&output, "the TypeScript client");
    let report: Value =
        serde_json::from_str(stdout.trim().lines().last().unwrap_or("")).expect("JSON report");
    assert_eq!(
        report["checks"],
        serde_json::json!([
            "list",
            "call_structured",
            "background",
            "notice",
            "progress",
            "cancel"
        ])
    );
    let pids = reported_pids(&report);
    assert_eq!(pids.len(), 3);
    assert_all_gone(&pids, Duration::from_secs(20));
}

fn inspector(dir: &Path, args: &[&str]) -> Value {
    let output =
        Command::new("node")
            .arg(dir.join(
                "node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js",
            ))
            .arg("--cli")
            .arg(env!("CARGO_BIN_EXE_dsh"))
            .arg("mcp")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("run the MCP Inspector CLI");
    let stdout = check(&output, "the MCP Inspector CLI");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

#[test]
fn the_mcp_inspector_cli_lists_the_tools_and_calls_bash() {
    let Some(dir) = node_project() else { return };
    let listed = inspector(&dir, &["--method", "tools/list"]);
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["bash", "bash_output", "bash_write", "bash_kill"]);
    let called = inspector(
        &dir,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "bash",
            "--tool-arg",
            "command=echo from inspector; exit 2",
            "--tool-arg",
            "description=try the inspector",
        ],
    );
    assert_eq!(
        called["content"][0]["text"],
        "from inspector\n[exit code: 2]"
    );
    assert_eq!(called["structuredContent"]["exit_code"], 2);
    assert_eq!(called["isError"], false);
}
