//! `dsh doctor`: one line per fact this host gives dsh, exit 0, and the mode `auto` would choose is the
//! one a server started with `--containment auto` really uses.

use std::process::Command;

/// Asserts `text` has a line starting with each of `facts`.
fn assert_lines(text: &str, facts: &[&str]) {
    for fact in facts {
        assert!(
            text.lines().any(|line| line.starts_with(fact)),
            "no line for {fact:?} in:\n{text}"
        );
    }
}

#[test]
fn doctor_reports_every_fact_and_exits_0() {
    let output = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .arg("doctor")
        .output()
        .expect("run dsh doctor");
    assert_eq!(output.status.code(), Some(0));
    let text = String::from_utf8(output.stdout).expect("UTF-8");
    assert_lines(
        &text,
        &[
            "cgroup v2",
            "subreaper:",
            "pidfd:",
            "watchdog:",
            "containment auto:",
            "landlock:",
            "bubblewrap:",
            "sandbox:",
            "sandbox default:",
            "input detection: yes",
        ],
    );
    // With a backend, doctor says what confines a command besides files (docs/ARCHITECTURE.md,
    // "Sandbox").
    if !text.contains("sandbox: none usable") {
        assert_lines(
            &text,
            &[
                "sandbox capabilities: none",
                "sandbox other processes: ",
                "sandbox unix sockets: connects gated by dsh",
                "sandbox seccomp: refuses changing another process's limits",
                "sandbox metadata: ",
            ],
        );
        // Run as root (as the tests are), Landlock refuses metadata through its namespace.
        let root =
            std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap()) == 0;
        if text.contains("sandbox: landlock") && root {
            assert!(
                text.contains("sandbox metadata: refused outside the writable set"),
                "{text}"
            );
        }
    }
    let auto = text
        .lines()
        .find_map(|line| line.strip_prefix("containment auto: "))
        .expect("the auto line");
    assert!(
        ["cgroup", "subreaper", "group"].contains(&auto.trim()),
        "{auto}"
    );
    // The mode doctor names is the one `auto` gives a real server: it accepts it explicitly.
    let run = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .args(["run", "--containment", auto.trim(), "--", "echo ok"])
        .output()
        .expect("run dsh run");
    assert_eq!(
        (
            String::from_utf8_lossy(&run.stdout).as_ref(),
            run.status.code()
        ),
        ("ok\n", Some(0))
    );
}
