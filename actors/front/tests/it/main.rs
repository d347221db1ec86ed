//! The tests that drive the `dsh` binary (and the runtime under its front ends' settings), in one
//! integration-test binary: one module per subject. `common` and `jsonl_server` are their helpers
//! (`common`: the support crate's runtime helpers, which the library's tests share, and the `dsh`
//! binary as the tests start and run it).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code: a failed unwrap is a failed test"
)]

mod common;
mod jsonl_server;
mod mcp_raw;
mod serve_client;

mod background_spawn_failure;
mod backpressure;
mod clean_start;
mod cli_run;
mod containment;
mod containment_kill;
mod doctor;
mod interactive;
mod interactive_flood;
mod interactive_more;
mod jsonl;
mod jsonl_sessions;
mod long_day;
mod mcp_client;
mod mcp_protocol;
mod mcp_rounds;
mod mcp_tasks;
mod mcp_ts;
mod nofile;
mod on_timeout;
mod policies;
mod retention;
mod sandbox_cli;
mod sandbox_errors;
mod sandbox_escape;
mod sandbox_metadata;
mod sandbox_network;
mod sandbox_sockets;
mod sandbox_workflows;
mod serve;
mod serve_flows;
mod serve_idle;
mod serve_sdk;
mod soak;
mod soak_mixed;
mod watchdog_process;
mod watchdog_restarts;
mod watchdog_watched;
