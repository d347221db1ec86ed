//! A waiter's end of a scan ([`crate::scan`]): registers the scan on a shared collector, catches it
//! up from the spill file when it starts behind the kept tail, and forgets it when dropped.
//!
//! It lives beside the collector because it works on the collector as readers share it
//! (`Arc<Mutex<OutputCollector>>`), taking the lock for each step and never across a read of the
//! spill file; the scan table it steps through knows nothing of collectors.

use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use super::OutputCollector;
use crate::lock::lock_unpoisoned;
use crate::scan::{CatchUp, Piece, ScanWatch, StreamScan};
use crate::spill::read_spill;

/// Resolves once `scan`, registered on `collector` from offset `from`, holds; catches it up from the
/// spill file first if `from` lies before the kept tail. Dropping it forgets the scan.
pub(crate) fn watch_scan(
    collector: Arc<Mutex<OutputCollector>>,
    from: u64,
    scan: Box<dyn StreamScan>,
) -> ScanWatch {
    let (hit, mut held) = oneshot::channel();
    let registered = lock_unpoisoned(&collector).register_scan(from, scan, hit);
    let Some((id, away)) = registered else {
        return Box::pin(async {});
    };
    let guard = Forget {
        collector: collector.clone(),
        id,
    };
    Box::pin(async move {
        let _guard = guard;
        if away {
            catch_up(&collector, id).await;
        }
        if (&mut held).await.is_err() {
            // The collector went without a verdict: nothing more will be written.
            std::future::pending::<()>().await;
        }
    })
}

/// Feeds scan `id` what lies between its position and the kept tail, piece by piece from the spill
/// file, until it is live (or holds, or is gone).
async fn catch_up(collector: &Arc<Mutex<OutputCollector>>, id: u64) {
    loop {
        let step = lock_unpoisoned(collector).catch_up_step(id);
        let CatchUp::Read {
            mut scan,
            spill: (dir, path),
            offset,
            len,
        } = step
        else {
            return;
        };
        let read = tokio::task::spawn_blocking(move || {
            let (fed, piece) = match read_spill(&dir, &path, offset, len) {
                Ok(bytes) => {
                    let piece = if scan.feed(&bytes) {
                        Piece::Held
                    } else if bytes.len() < len {
                        Piece::Lost
                    } else {
                        Piece::Fed
                    };
                    (bytes.len(), piece)
                }
                Err(err) => {
                    tracing::debug!(%err, path = %path.display(), "reading a spill file back for a scan");
                    (0, Piece::Lost)
                }
            };
            (scan, fed, piece)
        })
        .await;
        let Ok((scan, fed, piece)) = read else {
            // The blocking pool is gone (the runtime is stopping); the scan with it.
            return;
        };
        lock_unpoisoned(collector).scan_returned(id, scan, fed, piece);
    }
}

/// Forgets its scan when the waiter's future is dropped.
struct Forget {
    collector: Arc<Mutex<OutputCollector>>,
    id: u64,
}

impl Drop for Forget {
    fn drop(&mut self) {
        lock_unpoisoned(&self.collector).remove_scan(self.id);
    }
}

#[cfg(test)]
mod tests;
