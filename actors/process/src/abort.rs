//! A cancellation signal that carries a reason.
//!
//! A spawn takes an `AbortSignal` (the call's cancel; docs/ARCHITECTURE.md, "The life of a foreground
//! call", step 3): firing it starts the group kill, and a signal that is already aborted before the
//! spawn makes the spawn fail with `aborted before spawn: <reason>`. Tokio's
//! `CancellationToken` has no reason, so this wraps one together with a write-once reason string.

use std::sync::{Arc, OnceLock};

use tokio_util::sync::CancellationToken;

use crate::errors::SpawnError;

/// A clonable, `Send + Sync` abort signal; every clone observes the same state. The first `abort`
/// wins: its reason is the one reported, later calls change nothing.
#[derive(Clone, Debug, Default)]
pub struct AbortSignal {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    token: CancellationToken,
    /// `Some(None)` once aborted without a reason.
    reason: OnceLock<Option<String>>,
}

impl AbortSignal {
    /// A fresh, not yet aborted signal.
    pub fn new() -> Self {
        Self::default()
    }

    /// Abort with a reason. Only the first call (of `abort` or `abort_without_reason`) counts.
    pub fn abort(&self, reason: impl Into<String>) {
        if self.inner.reason.set(Some(reason.into())).is_ok() {
            self.inner.token.cancel();
        }
    }

    /// Abort with no reason; [`AbortSignal::reason_text`] then reads `aborted`.
    pub fn abort_without_reason(&self) {
        if self.inner.reason.set(None).is_ok() {
            self.inner.token.cancel();
        }
    }

    /// Whether the signal has fired.
    pub fn is_aborted(&self) -> bool {
        self.inner.token.is_cancelled()
    }

    /// The reason given to `abort`, if any.
    pub fn reason(&self) -> Option<String> {
        self.inner.reason.get().cloned().flatten()
    }

    /// The reason as text, `aborted` when none was given.
    pub fn reason_text(&self) -> String {
        self.reason().unwrap_or_else(|| "aborted".to_owned())
    }

    /// Resolves once the signal fires (immediately if it already has).
    pub async fn aborted(&self) {
        self.inner.token.cancelled().await
    }

    /// A token that fires when this signal does, and can also be fired on its own: the one way a
    /// process's driver is told to kill its group, whether the caller aborted or the manager killed.
    pub(crate) fn kill_token(&self) -> CancellationToken {
        self.inner.token.child_token()
    }
}

/// The one rule for "aborted before spawn": a spawn whose abort signal has already fired fails with
/// `aborted before spawn: <reason>`. Every checkpoint (the executor, admission, launch) asks this.
pub fn ensure_not_aborted(abort: Option<&AbortSignal>) -> Result<(), SpawnError> {
    match abort.filter(|abort| abort.is_aborted()) {
        Some(abort) => Err(SpawnError::AbortedBeforeSpawn(abort.reason_text())),
        None => Ok(()),
    }
}

/// Resolves when `abort` fires; pending forever without one (for a `select!` branch).
pub async fn wait_abort(abort: Option<&AbortSignal>) {
    match abort {
        Some(abort) => abort.aborted().await,
        None => std::future::pending().await,
    }
}
