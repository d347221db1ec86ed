//! The flags of `dsh serve` beside the runtime's, and the startup check that keeps a server
//! reachable from other machines from running without tokens.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::http::session_cap;
use crate::{flow, mcp, stdio};

/// Where `dsh serve` listens unless `--listen` says otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7433";

/// How long an identity with no connection keeps its tasks, unless `--identity-idle-ms` says.
pub const DEFAULT_IDENTITY_IDLE_MS: u64 = 600_000;

/// Most connections open at once unless `--max-connections` says (more wait their turn).
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;

/// How long a connection may take to send a request's headers, and a request its body, unless
/// `--header-timeout-ms` says.
pub const DEFAULT_HEADER_TIMEOUT_MS: u64 = 30_000;

/// The flags of `dsh serve`.
#[derive(clap::Args, Debug)]
pub struct ServeOptions {
    /// Address and port to listen on. A non-loopback address needs --auth-tokens.
    #[arg(long, default_value = DEFAULT_LISTEN, value_name = "ADDR:PORT")]
    pub listen: SocketAddr,
    /// File of `<identity> <token>` lines; every request must then carry
    /// `Authorization: Bearer <token>`, and its identity owns its background tasks.
    #[arg(long, value_name = "FILE")]
    pub auth_tokens: Option<PathBuf>,
    /// An identity with no connection for this long has its tasks killed and forgotten.
    #[arg(long, default_value_t = DEFAULT_IDENTITY_IDLE_MS, value_name = "MS",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub identity_idle_ms: u64,
    /// A browser `Origin` to accept besides loopback ones (`scheme://host[:port|:*]`); repeatable.
    #[arg(long, value_name = "ORIGIN")]
    pub allow_origin: Vec<String>,
    /// Largest request body accepted; a larger one is answered 413.
    #[arg(long, default_value_t = stdio::DEFAULT_MAX_LINE_BYTES, value_name = "BYTES")]
    pub max_line_bytes: usize,
    /// Most connections open at once, over all clients (an SSE stream holds one); more wait in
    /// the listen backlog until one closes.
    #[arg(long, default_value_t = DEFAULT_MAX_CONNECTIONS, value_name = "N",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_connections: usize,
    /// Most MCP sessions (`Mcp-Session-Id`) at once; an `initialize` beyond is answered 503.
    #[arg(long, default_value_t = session_cap::DEFAULT_MAX_SESSIONS, value_name = "N",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_sessions: usize,
    /// A connection whose next request's headers take longer than this to arrive (an idle one
    /// too) is closed; a request whose body takes longer is answered 408.
    #[arg(long, default_value_t = DEFAULT_HEADER_TIMEOUT_MS, value_name = "MS",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub header_timeout_ms: u64,
    /// PEM certificate chain (leaf first): serve HTTPS, with --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Per identity: most MCP tasks and parked input rounds at once.
    #[arg(long, default_value_t = flow::DEFAULT_MAX_IN_FLIGHT, value_name = "N",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_in_flight: usize,
    /// How often a call with a progressToken reports progress.
    #[arg(long, default_value_t = mcp::progress::DEFAULT_INTERVAL_MS, value_name = "MS",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub progress_interval_ms: u64,
    /// Without --cwd, how long a call waits for the client's roots before it runs without one.
    #[arg(long, default_value_t = mcp::DEFAULT_ROOTS_TIMEOUT_MS, value_name = "MS")]
    pub roots_timeout_ms: u64,
    /// A bash call of a client with the Tasks extension still running after this long becomes
    /// an MCP task; 0: always a task.
    #[arg(long, default_value_t = mcp::DEFAULT_TASK_AFTER_MS, value_name = "MS")]
    pub task_after_ms: u64,
}

/// A configuration `dsh serve` refuses to start with; the Display is the startup error.
#[derive(Debug, thiserror::Error)]
pub enum UnsafeListen {
    /// Anyone who can reach the address could run commands.
    #[error(
        "refusing to listen on {0} without --auth-tokens: anyone who can reach it could run \
         commands; listen on 127.0.0.1 or give --auth-tokens FILE"
    )]
    OpenToTheNetwork(SocketAddr),
}

impl ServeOptions {
    /// Refuses a non-loopback address without tokens.
    pub fn check(&self) -> Result<(), UnsafeListen> {
        if !self.listen.ip().is_loopback() && self.auth_tokens.is_none() {
            return Err(UnsafeListen::OpenToTheNetwork(self.listen));
        }
        Ok(())
    }

    /// The browser origins accepted: loopback ones on any port, then `--allow-origin`.
    pub fn origins(&self) -> Vec<String> {
        let mut origins: Vec<String> = ["localhost", "127.0.0.1", "[::1]"]
            .iter()
            .flat_map(|host| [format!("http://{host}:*"), format!("https://{host}:*")])
            .collect();
        origins.extend(self.allow_origin.iter().cloned());
        origins
    }
}
