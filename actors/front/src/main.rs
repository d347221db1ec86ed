//! `dsh`: the dsh runtime as a command.
//!
//! - `dsh run [flags] -- COMMAND…` runs one foreground `bash` call and prints what a model would see
//!   (exit 0 for a result, 1 for an error result, 2 for bad usage);
//! - `dsh mcp` serves the four tools over the Model Context Protocol on stdio;
//! - `dsh serve` serves them over MCP Streamable HTTP to many clients, one runtime for all;
//! - `dsh jsonl` serves them as newline-delimited JSON on stdin/stdout;
//! - `dsh doctor` prints what this host gives dsh (cgroups, subreaper, pidfd, Landlock, bubblewrap);
//! - `dsh __watchdog` (hidden) is the watchdog every runtime starts: it kills every command if the
//!   runtime dies without saying goodbye.
//!
//! Logs go to stderr only (`RUST_LOG`, default `warn`); stdout belongs to the protocol.
//!
//! This crate (`dsh-front`) holds the front ends so the `dsh` library carries nothing only the command
//! needs (clap, rmcp, axum, tracing-subscriber): one folder per front end (`mcp/`, `jsonl/`, `http/`)
//! beside what they share (`flags.rs`, `stdio.rs`, `outbox.rs`, `flow.rs`, `signals.rs`); see
//! docs/ARCHITECTURE.md, "Front ends".

mod bytes;
mod doctor;
mod flags;
mod flow;
mod http;
mod json_field;
mod jsonl;
mod limits;
mod mcp;
mod nofile;
mod notices;
mod outbox;
mod run;
mod signals;
mod stdio;
mod writable;

use clap::{Parser, Subcommand};

use crate::flags::RuntimeFlags;

/// A bash tool for AI agents: process groups, timeouts, bounded output, background tasks.
#[derive(Parser, Debug)]
#[command(name = "dsh", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand, Debug)]
enum Mode {
    /// Run one foreground `bash` call and print exactly the text the model would see.
    Run {
        #[command(flatten)]
        flags: RuntimeFlags,
        /// Working directory for this call (relative to --cwd).
        #[arg(long)]
        workdir: Option<String>,
        /// The command; several words are joined with spaces and run by `bash -c`.
        #[arg(
            required = true,
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "COMMAND"
        )]
        command: Vec<String>,
    },
    /// Serve `bash`, `bash_output`, `bash_write` and `bash_kill` over MCP on stdio (one connection = one agent session).
    Mcp {
        #[command(flatten)]
        flags: RuntimeFlags,
        /// Longest JSON-RPC message accepted; a longer one is answered -32600 and skipped unread.
        #[arg(long, default_value_t = stdio::DEFAULT_MAX_LINE_BYTES, value_name = "BYTES")]
        max_line_bytes: usize,
        /// Most tools/calls running at once; more are held (in order) and, once as many are held,
        /// input is not read until one ends. Other messages (cancels, responses) always get through
        /// while fewer are held.
        #[arg(long, default_value_t = flow::DEFAULT_MAX_IN_FLIGHT, value_name = "N",
              value_parser = parse_max_in_flight)]
        max_in_flight: usize,
        /// How often a call with a progressToken reports progress.
        #[arg(long, default_value_t = mcp::progress::DEFAULT_INTERVAL_MS, value_name = "MS",
              value_parser = clap::value_parser!(u64).range(1..))]
        progress_interval_ms: u64,
        /// Without --cwd, how long a call waits for the client to answer roots/list before it runs
        /// without a client root (in the server's directory); logged at info when it runs out.
        #[arg(long, default_value_t = mcp::DEFAULT_ROOTS_TIMEOUT_MS, value_name = "MS")]
        roots_timeout_ms: u64,
        /// A bash call of a client that declared the MCP Tasks extension and still running after
        /// this long is answered with a task handle (polled with tasks/get); 0: always a task.
        #[arg(long, default_value_t = mcp::DEFAULT_TASK_AFTER_MS, value_name = "MS")]
        task_after_ms: u64,
    },
    /// Serve the tools over MCP Streamable HTTP at /mcp: one runtime for every client, background
    /// tasks owned by each client's identity (see README, "dsh serve").
    Serve {
        #[command(flatten)]
        flags: RuntimeFlags,
        #[command(flatten)]
        options: http::ServeOptions,
    },
    /// Serve the tools as JSON lines on stdin/stdout (see README for the protocol).
    Jsonl {
        #[command(flatten)]
        flags: RuntimeFlags,
        /// Longest input line accepted; a longer one is answered with an error and skipped unread.
        #[arg(long, default_value_t = stdio::DEFAULT_MAX_LINE_BYTES, value_name = "BYTES")]
        max_line_bytes: usize,
        /// Most calls running at once; more are held (in order) and, once as many are held, input is
        /// not read until one ends. Cancels and approval answers always get through while fewer are
        /// held.
        #[arg(long, default_value_t = flow::DEFAULT_MAX_IN_FLIGHT, value_name = "N",
              value_parser = parse_max_in_flight)]
        max_in_flight: usize,
    },
    /// Print, one line each, what this host gives dsh, and the containment `auto` would choose.
    Doctor,
    /// The runtime's watchdog (started by dsh itself; reads registrations on stdin).
    #[command(name = "__watchdog", hide = true)]
    Watchdog,
    /// A Landlock launcher: confine this process to MODE with ROOT writable, then exec the command.
    /// Not used by dsh itself (it confines in the spawn); kept to measure the launcher design
    /// against it (`benches/sandbox.rs`), so only built with the `bench-internals` feature.
    #[cfg(feature = "bench-internals")]
    #[command(name = "__landlock-launch", hide = true)]
    LandlockLaunch {
        /// `read-only` or `workspace-write`.
        mode: String,
        /// The workspace root.
        root: std::path::PathBuf,
        /// The program and its arguments.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        argv: Vec<String>,
    },
}

fn main() {
    let cli = Cli::parse();
    match cli.mode {
        Mode::Watchdog => watchdog(),
        #[cfg(feature = "bench-internals")]
        Mode::LandlockLaunch { mode, root, argv } => landlock_launch(&mode, root, &argv),
        Mode::Doctor => {
            doctor::print();
            std::process::exit(0)
        }
        _ => {}
    }
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    nofile::raise_open_files_limit();
    // Kept alive until `exit`: dropping it would wait for a stdin read still pending on tokio's blocking
    // pool (a server stopped by a signal has not seen EOF).
    let system = actix::System::new();
    // The servers write stdout on a thread of their own (`stdio.rs`), which holds stdout's lock for
    // its whole life: flushing here could wait for ever on a client that does not read.
    let flush_stdout = matches!(cli.mode, Mode::Run { .. });
    let outcome = system.block_on(async move {
        match cli.mode {
            Mode::Run {
                flags,
                workdir,
                command,
            } => run::main(flags, workdir, command).await,
            Mode::Mcp {
                flags,
                max_line_bytes,
                max_in_flight,
                progress_interval_ms,
                roots_timeout_ms,
                task_after_ms,
            } => {
                let options = mcp::McpOptions {
                    max_line_bytes,
                    max_in_flight,
                    progress_interval: std::time::Duration::from_millis(progress_interval_ms),
                    roots_timeout: std::time::Duration::from_millis(roots_timeout_ms),
                    task_after: std::time::Duration::from_millis(task_after_ms),
                };
                mcp::main(flags, options).await
            }
            Mode::Serve { flags, options } => http::main(flags, options).await,
            Mode::Jsonl {
                flags,
                max_line_bytes,
                max_in_flight,
            } => jsonl::main(flags, max_line_bytes, max_in_flight).await,
            Mode::Doctor | Mode::Watchdog => Ok(0),
            #[cfg(feature = "bench-internals")]
            Mode::LandlockLaunch { .. } => Ok(0),
        }
    });
    let code = match outcome {
        Ok(code) => code,
        Err(message) => {
            eprintln!("dsh: {message}");
            2
        }
    };
    // Everything was killed and joined before the mode returned.
    if flush_stdout {
        use std::io::Write;
        let _ = std::io::stdout().flush();
    }
    std::process::exit(code)
}

/// `--max-in-flight`: at least 1 (with 0 no call could ever run).
fn parse_max_in_flight(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(0) => Err("at least 1 call must be allowed to run".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{text:?} is not a number of calls")),
    }
}

/// The watchdog's whole life: its stdin is the read end of the runtime's pipe.
fn watchdog() -> ! {
    use std::os::fd::AsFd;
    match std::io::stdin().as_fd().try_clone_to_owned() {
        Ok(input) => dsh_contain::watchdog::watchdog_main(input),
        Err(_) => std::process::exit(1),
    }
}

/// `__landlock-launch` (`bench-internals` only): confine this (still single-threaded) process, then exec `argv`. Errors go
/// to stderr prefixed `dsh-landlock-launch: ` (the launcher's runner-failure signature), exit 125.
#[cfg(feature = "bench-internals")]
fn landlock_launch(mode: &str, root: std::path::PathBuf, argv: &[String]) -> ! {
    use std::os::unix::process::CommandExt;
    let fail = |what: String| -> ! {
        eprintln!("dsh-landlock-launch: {what}");
        std::process::exit(125)
    };
    let Some(mode) = dsh::SandboxMode::parse(mode).filter(|m| m.confines()) else {
        fail(format!("{mode}: expected read-only or workspace-write"))
    };
    let policy = dsh::actors::bash::SandboxPolicy {
        mode,
        workspace_root: root,
    };
    let spec = dsh::actors::bash::sandbox::local::landlock_spec(
        &dsh::LocalSandboxConfig::default(),
        &policy,
    );
    let ruleset = dsh_contain::landlock::Ruleset::create(&spec)
        .unwrap_or_else(|err| fail(format!("ruleset: {err}")));
    if let Err(err) = dsh_contain::landlock::restrict_current_thread(&ruleset) {
        fail(format!("restrict: {err}"))
    }
    let Some((program, args)) = argv.split_first() else {
        fail("no command".into())
    };
    let err = std::process::Command::new(program).args(args).exec();
    fail(format!("{program}: {err}"))
}
