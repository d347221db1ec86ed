//! A `dsh serve` process for the tests and a raw HTTP client of it (ureq): MCP sessions of the
//! 2025-11-25 line (`initialize`, `Mcp-Session-Id`), with each response read off its SSE stream;
//! and the markers and raw-socket reads the serve tests share.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

/// A marker no other process has: the test's name, this process and the time.
pub fn marker(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("serve-{name}-{}-{nanos}", std::process::id())
}

/// Reads `stream` until the server closes it; what it sent.
pub fn read_to_close(stream: &mut std::net::TcpStream) -> String {
    stream.set_read_timeout(Some(SOON)).unwrap();
    let mut seen = Vec::new();
    stream
        .read_to_end(&mut seen)
        .expect("the server closes the connection");
    String::from_utf8_lossy(&seen).into_owned()
}

/// Generous: two shared cores, heavily loaded.
pub const SOON: Duration = Duration::from_secs(60);

/// A running `dsh serve`, killed when dropped.
pub struct Server {
    pub child: Child,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    /// What it wrote to stderr so far.
    pub log: Arc<Mutex<String>>,
}

impl Server {
    /// Starts `dsh serve` on a free loopback port with `extra` flags; waits for its startup line.
    pub fn start(extra: &[&str]) -> Self {
        Self::start_with_log(extra, "warn")
    }

    /// [`Server::start`] with `RUST_LOG` set to `filter`; its stderr is kept in `log`.
    pub fn start_with_log(extra: &[&str], filter: &str) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_dsh"))
            .args(["serve", "--listen", "127.0.0.1:0", "--grace-ms", "300"])
            .args(extra)
            .env("RUST_LOG", filter)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start dsh serve");
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let log = Arc::new(Mutex::new(String::new()));
        // Warnings (a dead runtime's leftovers) may come first: the startup line names the URL.
        let mut line = String::new();
        while !line.starts_with("dsh serve: ") {
            line.clear();
            let read = stderr.read_line(&mut line).unwrap();
            assert!(read > 0, "dsh serve exited before its startup line");
            log.lock().unwrap().push_str(&line);
        }
        let base = line
            .split_whitespace()
            .find_map(|word| word.strip_suffix("/mcp;"))
            .unwrap_or_else(|| panic!("no URL in {line:?}"))
            .to_owned();
        let kept = log.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            while stderr.read_line(&mut line).is_ok_and(|n| n > 0) {
                kept.lock().unwrap().push_str(&line);
                line.clear();
            }
        });
        Self { child, base, log }
    }

    /// A server with `--auth-tokens` of the one identity `alice` (token `alice-token`) and `extra`
    /// flags; its token file lives in `dir`.
    pub fn alice(dir: &tempfile::TempDir, extra: &[&str]) -> Self {
        let tokens = Self::tokens(dir, &[("alice", "alice-token")]);
        let mut args = vec!["--auth-tokens", tokens.as_str()];
        args.extend_from_slice(extra);
        Self::start(&args)
    }

    /// A token file with these `(identity, token)` lines.
    pub fn tokens(dir: &tempfile::TempDir, lines: &[(&str, &str)]) -> String {
        let path = dir.path().join("tokens");
        let text: String = lines.iter().map(|(i, t)| format!("{i} {t}\n")).collect();
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The status, headers and body of a response.
pub struct Reply {
    pub status: u16,
    pub session: Option<String>,
    pub body: String,
}

/// A POST to `/mcp` with `token` (if any), `headers` and `body`.
pub fn post(server: &Server, token: Option<&str>, headers: &[(&str, &str)], body: &str) -> Reply {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(SOON))
        .build()
        .into();
    let mut request = agent
        .post(format!("{}/mcp", server.base))
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2025-11-25");
    if let Some(token) = token {
        request = request.header("Authorization", format!("Bearer {token}"));
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let mut response = request.send(body).expect("send");
    let session = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = response
        .body_mut()
        .with_config()
        .limit(64 << 20)
        .read_to_string()
        .unwrap_or_default();
    Reply {
        status: response.status().as_u16(),
        session,
        body,
    }
}

/// An initialized MCP session of one identity.
pub struct McpSession<'a> {
    server: &'a Server,
    token: String,
    /// Its `Mcp-Session-Id`.
    pub id: String,
    next: u64,
}

impl<'a> McpSession<'a> {
    /// `initialize` and `notifications/initialized` with `token`.
    pub fn open(server: &'a Server, token: &str) -> Self {
        let init = post(
            server,
            Some(token),
            &[],
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "serve-test", "version": "1"}}})
            .to_string(),
        );
        assert_eq!(init.status, 200, "{}", init.body);
        let id = init.session.expect("Mcp-Session-Id");
        let session = Self {
            server,
            token: token.to_owned(),
            id,
            next: 1,
        };
        let ack = session.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        assert_eq!(ack.status, 202, "{}", ack.body);
        session
    }

    fn send(&self, message: &Value) -> Reply {
        post(
            self.server,
            Some(&self.token),
            &[("Mcp-Session-Id", &self.id)],
            &message.to_string(),
        )
    }

    /// A `tools/call`; its result (or error) object.
    pub fn call(&mut self, tool: &str, arguments: Value) -> Value {
        self.next += 1;
        let id = self.next;
        let reply = self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}}));
        assert_eq!(reply.status, 200, "{}", reply.body);
        reply
            .body
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
            .find(|message| message["id"] == id)
            .unwrap_or_else(|| panic!("no response {id} in {}", reply.body))
    }

    /// The text of a call's result.
    pub fn text(&mut self, tool: &str, arguments: Value) -> String {
        let response = self.call(tool, arguments);
        response["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("no text in {response}"))
            .to_owned()
    }

    /// Starts `command` in the background; its task id.
    pub fn background(&mut self, command: &str) -> String {
        let text = self.text(
            "bash",
            json!({"command": command, "description": "test", "run_in_background": true}),
        );
        text.strip_prefix("started background task ")
            .unwrap_or_else(|| panic!("not started: {text}"))
            .split_whitespace()
            .next()
            .unwrap()
            .to_owned()
    }

    /// Ends the MCP session (`DELETE /mcp`), as a client that goes away does.
    pub fn close(self) {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        agent
            .delete(format!("{}/mcp", self.server.base))
            .header("Authorization", format!("Bearer {}", self.token))
            .header("Mcp-Session-Id", &self.id)
            .header("MCP-Protocol-Version", "2025-11-25")
            .call()
            .expect("DELETE");
    }
}
