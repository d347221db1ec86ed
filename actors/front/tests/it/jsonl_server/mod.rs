//! A `dsh jsonl` server driven as a subprocess, for the containment tests: requests by id, replies
//! by id (they come in completion order), and a start that tells a refused configuration (the
//! documented startup error) from a running server.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use dsh_test_support::wait::line_channel;
use serde_json::{Value, json};

/// Generous bound for one reply or an exit.
pub const SOON: Duration = Duration::from_secs(60);

/// A `sleep` argument nobody else uses: `<base>.<pid><counter>`.
pub fn unique_marker(base: u32) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    format!(
        "{base}.{}{:04}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// `bash` arguments: the command, a description, and any `extra` keys.
pub fn bash(command: &str, extra: Value) -> Value {
    let mut arguments = json!({"command": command, "description": "test"});
    if let (Some(arguments), Some(extra)) = (arguments.as_object_mut(), extra.as_object()) {
        arguments.extend(extra.clone());
    }
    arguments
}

/// A running `dsh jsonl`.
pub struct Server {
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<Option<Value>>,
    /// Replies read while waiting for another id.
    early: Vec<Value>,
}

impl Server {
    /// `dsh jsonl <args>`; `Err` with what the server printed when it refused to start.
    pub fn start(args: &[&str]) -> Result<Self, String> {
        Self::start_with_env(args, &[])
    }

    /// [`Server::start`] with `env` added to the server's environment.
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Result<Self, String> {
        Self::start_from(args, |command| command.envs(env.iter().copied()))
    }

    /// [`Server::start`] with the variables `names` taken out of the server's environment.
    pub fn start_without_env(args: &[&str], names: &[&str]) -> Result<Self, String> {
        Self::start_from(args, |command| {
            names
                .iter()
                .fold(command, |command, name| command.env_remove(name))
        })
    }

    /// `dsh jsonl <args>`, its environment changed by `environ`.
    fn start_from(
        args: &[&str],
        environ: impl FnOnce(&mut Command) -> &mut Command,
    ) -> Result<Self, String> {
        let mut command = Command::new(env!("CARGO_BIN_EXE_dsh"));
        let mut child = environ(command.arg("jsonl").args(args))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start dsh jsonl");
        let stdout = child.stdout.take().expect("stdout");
        let mut stderr = child.stderr.take().expect("stderr");
        let stdin = child.stdin.take();
        let mut server = Self {
            child,
            stdin,
            lines: line_channel(stdout, |line| serde_json::from_str(&line).ok()),
            early: Vec::new(),
        };
        // A refused start exits at once; a good one answers a first call.
        server.call("ping", "bash", bash("true", json!({})));
        match server.lines.recv_timeout(SOON) {
            Ok(_) => {
                std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::stderr()));
                Ok(server)
            }
            Err(_) => {
                let mut said = String::new();
                let _ = stderr.read_to_string(&mut said);
                Err(said)
            }
        }
    }

    /// Like [`Server::start`] for a configuration the host may refuse (a containment mode, a
    /// limit): `None`, with the reason printed, only for the documented refusal.
    pub fn start_or_skip(args: &[&str]) -> Option<Self> {
        match Self::start(args) {
            Ok(server) => Some(server),
            Err(said) => {
                assert!(
                    said.contains("is not available on this host"),
                    "the server refused to start for another reason: {said}"
                );
                eprintln!("skipping: {}", said.trim());
                None
            }
        }
    }

    /// Writes one request line.
    pub fn send(&mut self, line: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").expect("write a request");
        stdin.flush().expect("flush");
    }

    /// Sends a tool call with id `id`.
    pub fn call(&mut self, id: &str, tool: &str, arguments: Value) {
        self.send(&json!({"id": id, "tool": tool, "arguments": arguments}));
    }

    /// The reply to `id`; other lines read meanwhile are kept for their own callers.
    pub fn reply(&mut self, id: &str) -> Value {
        let id = json!(id);
        self.line_where(|line| line.get("id") == Some(&id))
    }

    /// The next line the server writes (replies and notices, in the order written), after any kept
    /// by [`Server::reply`].
    pub fn next_line(&mut self) -> Value {
        if !self.early.is_empty() {
            return self.early.remove(0);
        }
        loop {
            if let Some(line) = self.lines.recv_timeout(SOON).expect("a line") {
                return line;
            }
        }
    }

    /// Sends a tool call with id `id` for session `session`.
    pub fn call_as(&mut self, session: &str, id: &str, tool: &str, arguments: Value) {
        self.send(&json!({"id": id, "session": session, "tool": tool, "arguments": arguments}));
    }

    /// The first line (already read or new) for which `wanted` holds; other lines are kept.
    pub fn line_where(&mut self, wanted: impl Fn(&Value) -> bool) -> Value {
        if let Some(i) = self.early.iter().position(&wanted) {
            return self.early.remove(i);
        }
        let deadline = Instant::now() + SOON;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(line) = self.lines.recv_timeout(left).expect("a line") else {
                continue;
            };
            if wanted(&line) {
                return line;
            }
            self.early.push(line);
        }
    }

    /// Runs `command` in the foreground as call `id`; its reply.
    pub fn run(&mut self, id: &str, command: &str) -> Value {
        self.call(id, "bash", bash(command, json!({})));
        self.reply(id)
    }

    /// Starts `command` in the background as call `id`; its task id.
    pub fn start_background(&mut self, id: &str, command: &str) -> String {
        self.call(
            id,
            "bash",
            bash(command, json!({"run_in_background": true})),
        );
        let started = self.text(id);
        started
            .strip_prefix("started background task ")
            .unwrap_or_else(|| panic!("not started: {started}"))
            .to_owned()
    }

    /// The text of the reply to `id`.
    pub fn text(&mut self, id: &str) -> String {
        self.reply(id)["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// The file a call's output spills to, from a call whose output spills (the server must run
    /// with `--max-output-bytes 1000`): it is named in the call's text.
    pub fn spill_file(&mut self) -> std::path::PathBuf {
        self.call(
            "spill",
            "bash",
            bash("head -c 5000 /dev/zero | tr '\\0' x", json!({})),
        );
        let text = self.text("spill");
        let file = text
            .split_whitespace()
            .find(|word| word.starts_with('/') && word.contains("dsh-"))
            .map(|word| word.trim_end_matches([']', ')', '.', ',']))
            .unwrap_or_else(|| panic!("no spill path in {text:?}"));
        std::path::PathBuf::from(file)
    }

    /// Closes stdin (end of input).
    pub fn close_input(&mut self) {
        drop(self.stdin.take());
    }

    /// Waits for the server to exit.
    pub fn wait_exit(&mut self) {
        crate::common::exit_status(&mut self.child, SOON, "the server");
    }

    /// End of input, then the exit.
    pub fn finish(mut self) {
        self.close_input();
        self.wait_exit();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
