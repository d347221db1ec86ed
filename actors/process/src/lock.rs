//! One rule for poisoned locks, used wherever dsh shares state behind a `Mutex`.

use std::sync::{Mutex, MutexGuard};

/// Locks `mutex`, ignoring poison. A poisoned lock only means a panic elsewhere while it was held;
/// every value dsh keeps behind one (collectors, handle state, reply slots) stays usable after a
/// partial update, and refusing to read it would turn one panic into many.
pub fn lock_unpoisoned<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
