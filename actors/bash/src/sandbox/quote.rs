//! Turning a wrapped argv back into a shell string: the executor runs
//! `bash -c "exec '<a0>' '<a1>' …"`, so the outer shell execs into the runner and no extra shell
//! lingers, and a missing runner fails with the text its derived runner-failure signature matches
//! (`exec: <argv0>: not found`, see `runner.rs`).

/// `'…'` with every embedded `'` written as `'\''`.
pub fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// `exec '<a0>' '<a1>' …`.
pub fn exec_command(argv: &[String]) -> String {
    let quoted: Vec<String> = argv.iter().map(|a| shell_quote(a)).collect();
    format!("exec {}", quoted.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sb_06_quoting_primitive() {
        assert_eq!(shell_quote("a'b"), r"'a'\''b'");
        assert_eq!(
            exec_command(&["bash".into(), "-c".into(), "echo 'x'".into()]),
            r"exec 'bash' '-c' 'echo '\''x'\'''"
        );
    }
}
