//! When a completion notice may also go out as an MCP log notification (`notifications/message`).
//!
//! - Sessions that began with `initialize` (protocol 2025-11-25 and earlier): the server may send log
//!   messages until the client picks a level with `logging/setLevel`; after that, only messages at or
//!   above that level.
//! - Protocol 2026-07-28 and later (no `initialize`; SEP-2575): nothing is sent unless the client
//!   opted in, by `logging/setLevel` or by `io.modelcontextprotocol/logLevel` in a request's `_meta`
//!   (the latest one wins).
//!
//! Notices always go into the session's next tool result too; this gate only governs the log channel.
#![allow(
    deprecated,
    reason = "MCP logging is deprecated by SEP-2577 but is still how clients surface server messages"
)]

use dsh::actors::process::lock_unpoisoned;
use std::sync::Mutex;

use rmcp::model::{LoggingLevel, ProtocolVersion};

#[derive(Default)]
pub struct LogGate(Mutex<State>);

#[derive(Default)]
struct State {
    level: Option<LoggingLevel>,
    version: Option<ProtocolVersion>,
}

impl LogGate {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        lock_unpoisoned(&self.0)
    }

    /// Records what a request tells us: the protocol version in force and any per-request level.
    pub fn observe(&self, version: Option<ProtocolVersion>, level: Option<LoggingLevel>) {
        let mut state = self.state();
        if version.is_some() {
            state.version = version;
        }
        if level.is_some() {
            state.level = level;
        }
    }

    /// `logging/setLevel`.
    pub fn set_level(&self, level: LoggingLevel) {
        self.state().level = Some(level);
    }

    /// Whether a message at `level` may be sent now.
    pub fn allows(&self, level: LoggingLevel) -> bool {
        let state = self.state();
        match state.level {
            Some(min) => level as u8 >= min as u8,
            None => state
                .version
                .as_ref()
                .is_none_or(ProtocolVersion::has_initialize),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_sessions_log_until_told_otherwise_new_ones_only_when_asked() {
        let legacy = LogGate::default();
        legacy.observe(Some(ProtocolVersion::V_2025_06_18), None);
        assert!(legacy.allows(LoggingLevel::Info));
        legacy.set_level(LoggingLevel::Warning);
        assert!(!legacy.allows(LoggingLevel::Info));
        assert!(legacy.allows(LoggingLevel::Error));

        let newest = LogGate::default();
        newest.observe(Some(ProtocolVersion::V_2026_07_28), None);
        assert!(!newest.allows(LoggingLevel::Info));
        newest.observe(None, Some(LoggingLevel::Debug));
        assert!(newest.allows(LoggingLevel::Info));
    }
}
