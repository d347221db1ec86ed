//! A background start that cannot spawn is an error result and registers nothing, as in the
//! foreground: the message names the cause (NUL byte, E2BIG, EMFILE) and no task id is used up.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

/// Runs `dsh jsonl` over `requests` (stdin closed after them) and returns the replies by id.
fn run_jsonl(requests: &[Value], max_open_files: Option<u64>) -> Vec<Value> {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dsh"));
    command
        .args(["jsonl", "--grace-ms", "300"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    if let Some(limit) = max_open_files {
        // SAFETY: setrlimit is async-signal-safe and touches only the child's own limits.
        unsafe {
            command.pre_exec(move || {
                nix::sys::resource::setrlimit(
                    nix::sys::resource::Resource::RLIMIT_NOFILE,
                    limit,
                    limit,
                )
                .map_err(std::io::Error::from)
            });
        }
    }
    let mut child = command.spawn().expect("start dsh jsonl");
    let mut stdin = child.stdin.take().expect("stdin");
    for request in requests {
        writeln!(stdin, "{request}").expect("write");
    }
    drop(stdin);
    let replies: Vec<Value> = BufReader::new(child.stdout.take().expect("stdout"))
        .lines()
        .map_while(Result::ok)
        .filter_map(|line| serde_json::from_str(&line).ok())
        .collect();
    assert_eq!(child.wait().expect("wait").code(), Some(0));
    replies
}

fn background(id: &str, command: &str) -> Value {
    json!({"id": id, "tool": "bash", "arguments": {
        "command": command, "description": "bg", "run_in_background": true}})
}

fn reply<'a>(replies: &'a [Value], id: &str) -> &'a Value {
    replies
        .iter()
        .find(|r| r["id"] == json!(id))
        .unwrap_or_else(|| panic!("no reply for {id}: {replies:?}"))
}

#[test]
fn a_nul_byte_or_an_oversized_command_is_an_error_and_registers_nothing() {
    let huge = format!("echo {}", "a".repeat(3 << 20));
    let replies = run_jsonl(
        &[
            background("nul", "echo a\u{0}b"),
            background("big", &huge),
            background("ok", "true"),
        ],
        None,
    );
    let nul = reply(&replies, "nul");
    assert_eq!(nul["is_error"], json!(true), "{nul}");
    assert!(nul["text"].as_str().unwrap().contains("NUL byte"), "{nul}");
    let big = reply(&replies, "big");
    assert_eq!(big["is_error"], json!(true), "{big}");
    assert!(
        big["text"]
            .as_str()
            .unwrap()
            .contains("E2BIG: Argument list too long"),
        "{big}"
    );
    // Neither failure used up a task id.
    assert_eq!(
        reply(&replies, "ok")["text"],
        json!("started background task bash-1")
    );
}

#[test]
fn running_out_of_descriptors_is_an_emfile_error_not_a_started_task() {
    // 40 descriptors: a few tasks start, then a spawn runs out. Every start is answered either way.
    let marker = format!("300.{}", std::process::id());
    let requests: Vec<Value> = (0..40)
        .map(|i| background(&format!("t{i}"), &format!("sleep {marker}")))
        .collect();
    let replies = run_jsonl(&requests, Some(40));
    let mut started = Vec::new();
    let mut emfile = 0;
    for i in 0..40 {
        let r = reply(&replies, &format!("t{i}"));
        let text = r["text"].as_str().unwrap_or_default();
        if let Some(id) = text.strip_prefix("started background task ") {
            started.push(id.to_owned());
        } else {
            assert_eq!(r["is_error"], json!(true), "{r}");
            assert!(text.contains("EMFILE"), "{r}");
            emfile += 1;
        }
    }
    assert!(emfile > 0, "the limit was never reached: {replies:?}");
    // The ids that were handed out are consecutive from bash-1: failures registered nothing.
    let expected: Vec<String> = (1..=started.len()).map(|n| format!("bash-{n}")).collect();
    let mut sorted = started.clone();
    sorted.sort_by_key(|id| id[5..].parse::<u32>().unwrap_or(0));
    assert_eq!(sorted, expected);
    // End of input killed and joined every task that did start.
    let left = dsh_test_support::procfs::live_with_cmdline(&marker);
    assert!(left.is_empty(), "left running: {left:?}");
}
