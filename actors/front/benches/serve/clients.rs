//! The two clients the serve benches drive: `dsh serve` over HTTP (a ureq agent, so one kept-alive
//! connection per client) and `dsh mcp` over stdio, each an initialized MCP session of the
//! 2025-11-25 line that calls `bash`.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde_json::{Value, json};

/// A running `dsh serve` (killed when dropped).
pub struct HttpServer {
    pub child: Child,
    /// `http://127.0.0.1:<port>/mcp`.
    pub url: String,
}

impl HttpServer {
    /// `dsh serve` on a free loopback port with `--auth-tokens tokens` and `extra` flags.
    pub fn start(cwd: &std::path::Path, tokens: &std::path::Path, extra: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_dsh"))
            .args(["serve", "--listen", "127.0.0.1:0", "--cwd"])
            .arg(cwd)
            .arg("--auth-tokens")
            .arg(tokens)
            .args(extra)
            .env("RUST_LOG", "error")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("dsh serve");
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        while !line.starts_with("dsh serve: ") {
            line.clear();
            assert!(stderr.read_line(&mut line).unwrap() > 0, "dsh serve exited");
        }
        let url = line
            .split_whitespace()
            .find_map(|word| word.strip_suffix(';'))
            .expect("the URL in the startup line")
            .to_owned();
        // Drain the rest, so a chatty server never blocks on its stderr.
        std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
        Self { child, url }
    }

    /// The server's resident set (VmRSS) and its peak (VmHWM), in KiB.
    pub fn rss_kib(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let field = |name: &str| -> u64 {
            let line = status.lines().find(|l| l.starts_with(name)).unwrap();
            line.split_whitespace().nth(1).unwrap().parse().unwrap()
        };
        (field("VmRSS:"), field("VmHWM:"))
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A token file of `identities` (`agent-<i> token-<i>` lines) in `dir`.
pub fn tokens(dir: &std::path::Path, identities: usize) -> std::path::PathBuf {
    let path = dir.join("tokens");
    let text: String = (0..identities)
        .map(|i| format!("agent-{i} token-{i}\n"))
        .collect();
    std::fs::write(&path, text).unwrap();
    path
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "dsh-bench", "version": "1"}}})
}

fn call(id: u64, command: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "bash", "arguments": {"command": command, "description": "bench"}}})
}

/// An HTTP client whose connections are kept alive.
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(std::time::Duration::from_secs(120)))
        .build()
        .into()
}

/// An MCP session over HTTP with one kept-alive connection.
pub struct HttpClient {
    agent: ureq::Agent,
    url: String,
    token: String,
    session: String,
    next: u64,
}

impl HttpClient {
    /// `initialize` and `notifications/initialized` as the identity of `token`, on a connection of
    /// its own.
    pub fn open(url: &str, token: &str) -> Self {
        Self::open_with(agent(), url, token)
    }

    /// [`HttpClient::open`] on `agent`'s connections (shared with other clients).
    pub fn open_with(agent: ureq::Agent, url: &str, token: &str) -> Self {
        let mut client = Self {
            agent,
            url: url.to_owned(),
            token: token.to_owned(),
            session: String::new(),
            next: 0,
        };
        let (session, _) = client.post(&initialize());
        client.session = session.expect("Mcp-Session-Id");
        client.post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        client
    }

    fn post(&self, message: &Value) -> (Option<String>, String) {
        let mut request = self
            .agent
            .post(&self.url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2025-11-25")
            .header("Authorization", format!("Bearer {}", self.token));
        if !self.session.is_empty() {
            request = request.header("Mcp-Session-Id", &self.session);
        }
        let mut response = request.send(message.to_string()).expect("POST /mcp");
        let session = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        (session, response.body_mut().read_to_string().unwrap())
    }

    /// One foreground `bash` call of `command`; its text.
    pub fn bash(&mut self, command: &str) -> String {
        self.next += 1;
        let (_, body) = self.post(&call(self.next, command));
        let answer = body
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
            .find(|message| message["id"] == self.next)
            .expect("the call's answer on its stream");
        answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .to_owned()
    }
}

/// `dsh mcp` on stdio, initialized (killed when dropped).
pub struct StdioClient {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next: u64,
}

impl StdioClient {
    /// Starts `dsh mcp --cwd cwd` and initializes it.
    pub fn start(cwd: &std::path::Path) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_dsh"))
            .args(["mcp", "--cwd"])
            .arg(cwd)
            .env("RUST_LOG", "error")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("dsh mcp");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut client = Self {
            child,
            stdin,
            stdout,
            next: 0,
        };
        client.send(&initialize());
        client.answer(0);
        client.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        client
    }

    fn send(&mut self, message: &Value) {
        writeln!(self.stdin, "{message}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn answer(&mut self, id: u64) -> Value {
        let mut line = String::new();
        loop {
            line.clear();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "dsh mcp ended"
            );
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == id {
                return message;
            }
        }
    }

    /// One foreground `bash` call of `command`; its text.
    pub fn bash(&mut self, command: &str) -> String {
        self.next += 1;
        self.send(&call(self.next, command));
        let answer = self.answer(self.next);
        answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .to_owned()
    }
}

impl Drop for StdioClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
