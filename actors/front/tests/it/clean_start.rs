//! A clean start for every child: ambient variables that would change how `bash -c` starts (a startup
//! file, shell options, exported functions) never reach a command.

use std::process::Command;

#[test]
fn shell_startup_variables_from_the_ambient_environment_have_no_effect() {
    let dir = tempfile::tempdir().unwrap();
    let startup = dir.path().join("startup.sh");
    std::fs::write(&startup, "echo INJECTED-BY-BASH_ENV\n").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .args([
            "run",
            "--",
            "echo clean; type -t echo; echo \"[$-]\" | tr -d hB",
        ])
        .env("BASH_ENV", &startup)
        .env("ENV", &startup)
        .env("SHELLOPTS", "xtrace:errexit")
        .env("BASHOPTS", "xpg_echo")
        .env("BASH_FUNC_echo%%", "() { builtin echo hijacked; }")
        .output()
        .expect("run dsh");
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{text}");
    // No startup file ran, `echo` is the builtin, and neither xtrace (`x`) nor errexit (`e`) is on.
    assert_eq!(text, "clean\nbuiltin\n[c]\n");
}
