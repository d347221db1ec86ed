//! The binary raises its soft open-files limit to the hard limit, so many concurrent commands fit,
//! and its children still start with the limit the binary was given.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// `dsh` with a soft open-files limit of `soft`.
fn dsh_with_soft_limit(soft: u64) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dsh"));
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        command.pre_exec(move || {
            let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
            setrlimit(Resource::RLIMIT_NOFILE, soft, hard)?;
            Ok(())
        });
    }
    command
}

/// The hard open-files limit if it is above `floor`; else `None`, with `why_skipped` printed.
fn hard_limit_above(floor: u64, why_skipped: &str) -> Option<u64> {
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    if hard <= floor {
        eprintln!("skipped: the hard open-files limit ({hard}) {why_skipped}");
        return None;
    }
    Some(hard)
}

#[test]
fn children_get_the_original_soft_limit_while_dsh_runs_with_the_hard_one() {
    let Some(hard) = hard_limit_above(200, "leaves nothing to raise") else {
        return;
    };
    // dsh lowers its own soft limit for the length of each spawn call (the child inherits it at
    // clone time) and restores it as the call returns. On a loaded machine bash can read its
    // parent's limits before that return lands, so it looks again (up to 10 s) until the spawn is
    // over; a dsh that never raised its limit still prints 200.
    let output = dsh_with_soft_limit(200)
        .args([
            "run",
            "--",
            "ulimit -Sn; for _ in $(seq 200); do \
               host=$(awk '/open files/ {print $4}' /proc/$PPID/limits); \
               [ \"$host\" != 200 ] && break; sleep 0.05; done; echo \"$host\"",
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let hard_text = if hard == u64::MAX {
        "unlimited".to_owned()
    } else {
        hard.to_string()
    };
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        format!("200\n{hard_text}\n")
    );
}

#[test]
fn forty_concurrent_commands_fit_under_a_soft_limit_of_64() {
    if hard_limit_above(1024, "is too low to show the raise").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("started");
    let mut child = dsh_with_soft_limit(64)
        .arg("jsonl")
        // The shared counter's directory is writable to the commands (their own `/tmp` is private).
        .args(["--writable-root", dir.path().to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // Every command waits until all 40 have started, so all 40 are running at once.
    for i in 0..40 {
        let command = format!(
            "echo x >> {f}; for n in $(seq 1 600); do [ $(wc -l < {f}) -ge 40 ] && break; sleep 0.05; done; echo ok",
            f = counter.display()
        );
        let line = serde_json::json!({"id": i, "tool": "bash", "arguments": {"command": command, "description": "d"}});
        writeln!(stdin, "{line}").unwrap();
    }
    drop(stdin);
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let replies: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
        .collect();
    assert_eq!(child.wait().unwrap().code(), Some(0));
    assert_eq!(replies.len(), 40);
    for reply in &replies {
        assert_eq!(reply["text"], "ok\n", "{reply}");
    }
}
