//! Matching a stream as it is written: the scans a waiter (`bash_output` with `until`) registers on
//! one stream, fed every chunk by the collector as the driver stores it, so no write is missed however
//! fast the stream floods, nothing is polled, and a scan holds only its own state (no copy of the text).
//!
//! A scan starts at a whole-stream offset (the reader's cursor), which may lie before what is still in
//! memory. Then it first *catches up*: the bytes between its offset and the kept tail are read back
//! from the stream's spill file in pieces, on a blocking thread and outside the collector's lock, while
//! new chunks go on arriving (the scan is not fed them: its position is behind); once it has reached
//! the kept tail, the rest is fed under the lock and the scan is *live*, fed each chunk from then on.
//! Bytes that are in neither (a stream whose spill was deleted over its cap) are a gap: the scan is told,
//! and goes on from the oldest byte kept.
//!
//! ```text
//!   register ─► position in the tail? ──yes──► feed the tail ─► Live ──chunk──► feed ──holds──► hit
//!                     │ no                        ▲
//!                     └──► Away (catching up: read the spill, feed) ┘   (gap ─► from the tail)
//! ```

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use crate::collector::OutputCollector;
use crate::lock::lock_unpoisoned;
use crate::spill::{SpillDir, read_spill};

/// A waiter's end of a scan: resolves once the condition holds; dropping it forgets the scan.
pub type ScanWatch = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Bytes of spill file read (and fed) per step of a catch-up.
const CATCH_UP_PIECE: usize = 1 << 20;

/// A condition matched against one stream's text as it is written.
pub trait StreamScan: Send + 'static {
    /// Feeds the next bytes of the text; `true` once the condition holds on the text fed so far.
    fn feed(&mut self, bytes: &[u8]) -> bool;
    /// Bytes between the last fed and the next were lost: what follows is a new text.
    fn gap(&mut self);
}

/// Where a registered scan is.
enum ScanState {
    /// Fed each chunk as it is stored; its position is the end of the stream.
    Live(Box<dyn StreamScan>),
    /// Out with its catch-up, which feeds it what lies between its position and the kept tail.
    Away,
}

struct Registered {
    id: u64,
    /// The whole-stream offset of the next byte it is to be fed.
    position: u64,
    state: ScanState,
    /// Told once the condition holds (taken then); a waiter that went away closed it.
    hit: Option<oneshot::Sender<()>>,
}

impl Registered {
    /// Whether its waiter is still there to be told.
    fn wanted(&self) -> bool {
        self.hit.as_ref().is_some_and(|hit| !hit.is_closed())
    }

    /// Tells its waiter that the condition holds.
    fn tell(&mut self) {
        if let Some(hit) = self.hit.take() {
            let _ = hit.send(());
        }
    }
}

/// The scans registered on one stream.
#[derive(Default)]
pub(crate) struct Scans {
    next_id: u64,
    registered: Vec<Registered>,
}

impl std::fmt::Debug for Scans {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scans")
            .field("registered", &self.registered.len())
            .finish()
    }
}

/// The stream as a scan needs to see it, under the collector's lock.
pub(crate) struct StreamView<'a> {
    /// Every byte ever received.
    pub total: u64,
    /// The kept tail, oldest first, and its length.
    pub tail: (&'a [u8], &'a [u8]),
    /// The spill file holding every byte from the first, if there is one.
    pub spill: Option<(SpillDir, PathBuf)>,
}

impl StreamView<'_> {
    fn window_start(&self) -> u64 {
        self.total - (self.tail.0.len() + self.tail.1.len()) as u64
    }

    /// Feeds `scan` the kept bytes from whole-stream offset `from` (the window's start at the
    /// earliest) to the end; `true` if it holds. With nothing to feed it is still asked once, on
    /// the text as it stands (a condition may hold on an empty text).
    fn feed_tail(&self, from: u64, scan: &mut dyn StreamScan) -> bool {
        let mut skip = (from.saturating_sub(self.window_start())) as usize;
        let mut fed = false;
        for part in [self.tail.0, self.tail.1] {
            if skip >= part.len() {
                skip -= part.len();
                continue;
            }
            fed = true;
            if scan.feed(&part[skip..]) {
                return true;
            }
            skip = 0;
        }
        !fed && scan.feed(&[])
    }
}

/// What the next step of a catch-up is.
pub(crate) enum CatchUp {
    /// Caught up (now live), matched, or gone: the catch-up is over.
    Done,
    /// Read `len` bytes of the spill file at `offset` and feed them to the scan, which is handed out.
    Read {
        scan: Box<dyn StreamScan>,
        spill: (SpillDir, PathBuf),
        offset: u64,
        len: usize,
    },
}

impl Scans {
    /// Registers `scan` from whole-stream offset `from`. Returns its id and whether it must catch
    /// up; `None` if it already holds (`hit` is then told).
    pub(crate) fn register(
        &mut self,
        view: &StreamView<'_>,
        from: u64,
        mut scan: Box<dyn StreamScan>,
        hit: oneshot::Sender<()>,
    ) -> Option<(u64, bool)> {
        let from = from.min(view.total);
        let position = if from >= view.window_start() || view.spill.is_none() {
            // In memory, or gone for good: from the oldest byte kept.
            if view.feed_tail(from, scan.as_mut()) {
                let _ = hit.send(());
                return None;
            }
            view.total
        } else {
            // Behind the tail: live but not fed until its catch-up has brought it to the end.
            from
        };
        self.next_id += 1;
        let id = self.next_id;
        self.registered.push(Registered {
            id,
            position,
            state: ScanState::Live(scan),
            hit: Some(hit),
        });
        Some((id, position < view.total))
    }

    /// Feeds `chunk`, stored at whole-stream offset `at`, to every live scan; tells and drops those
    /// that now hold, and drops those whose waiter went away.
    pub(crate) fn feed(&mut self, at: u64, chunk: &[u8]) {
        if self.registered.is_empty() {
            return;
        }
        self.registered.retain_mut(|registered| {
            if !registered.wanted() {
                return false;
            }
            let ScanState::Live(scan) = &mut registered.state else {
                return true;
            };
            if registered.position != at {
                // Not yet caught up to here: its catch-up will feed this chunk.
                return true;
            }
            registered.position = at + chunk.len() as u64;
            if scan.feed(chunk) {
                registered.tell();
                return false;
            }
            true
        });
    }

    /// The next step of the catch-up of scan `id`: feed what is in memory and go live, or hand the
    /// scan out with the piece of spill file to read next.
    pub(crate) fn catch_up_step(&mut self, id: u64, view: &StreamView<'_>) -> CatchUp {
        let Some(index) = self.registered.iter().position(|r| r.id == id) else {
            return CatchUp::Done;
        };
        let registered = &mut self.registered[index];
        let window_start = view.window_start();
        match (&mut registered.state, &view.spill) {
            (ScanState::Live(scan), _) if registered.position >= window_start => {
                let holds = view.feed_tail(registered.position, scan.as_mut());
                registered.position = view.total;
                if holds {
                    registered.tell();
                    self.registered.swap_remove(index);
                }
                CatchUp::Done
            }
            (ScanState::Live(_), None) => {
                // The spill went (over its cap): what lay between is lost.
                self.gap(index, view);
                CatchUp::Done
            }
            (state @ ScanState::Live(_), Some(spill)) => {
                let ScanState::Live(scan) = std::mem::replace(state, ScanState::Away) else {
                    return CatchUp::Done;
                };
                let len = (window_start - registered.position).min(CATCH_UP_PIECE as u64) as usize;
                CatchUp::Read {
                    scan,
                    spill: spill.clone(),
                    offset: registered.position,
                    len,
                }
            }
            (ScanState::Away, _) => CatchUp::Done,
        }
    }

    /// Takes back scan `id` after a piece of its catch-up: it was fed `fed` more bytes (`held`: and
    /// then held), or, `lost`, the spill file could not give them.
    pub(crate) fn returned(
        &mut self,
        id: u64,
        scan: Box<dyn StreamScan>,
        fed: usize,
        held: bool,
        lost: bool,
        view: &StreamView<'_>,
    ) {
        let Some(index) = self.registered.iter().position(|r| r.id == id) else {
            return;
        };
        let registered = &mut self.registered[index];
        registered.state = ScanState::Live(scan);
        registered.position += fed as u64;
        if held {
            registered.tell();
            self.registered.swap_remove(index);
        } else if lost {
            self.gap(index, view);
        }
    }

    /// The bytes before the kept tail are lost for scan `index`: it goes on from the oldest byte
    /// kept, live.
    fn gap(&mut self, index: usize, view: &StreamView<'_>) {
        let registered = &mut self.registered[index];
        let ScanState::Live(scan) = &mut registered.state else {
            return;
        };
        scan.gap();
        let holds = view.feed_tail(view.window_start(), scan.as_mut());
        registered.position = view.total;
        if holds {
            registered.tell();
            self.registered.swap_remove(index);
        }
    }

    /// Forgets scan `id` (its waiter went away).
    pub(crate) fn remove(&mut self, id: u64) {
        self.registered.retain(|r| r.id != id);
    }

    /// How many are registered.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.registered.len()
    }
}

/// Resolves once `scan`, registered on `collector` from offset `from`, holds; catches it up from the
/// spill file first if `from` lies before the kept tail. Dropping it forgets the scan.
pub(crate) fn watch(
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
            let piece = read_spill(&dir, &path, offset, len);
            let (fed, held, lost) = match &piece {
                Ok(bytes) => (bytes.len(), scan.feed(bytes), bytes.len() < len),
                Err(err) => {
                    tracing::debug!(%err, path = %path.display(), "reading a spill file back for a scan");
                    (0, false, true)
                }
            };
            (scan, fed, held, lost)
        })
        .await;
        let Ok((scan, fed, held, lost)) = read else {
            // The blocking pool is gone (the runtime is stopping); the scan with it.
            return;
        };
        lock_unpoisoned(collector).scan_returned(id, scan, fed, held, lost);
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
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::outcome::StreamKind;
    use crate::spill::SpillDir;

    /// Holds once `needle` has been fed, across any split; counts gaps.
    struct Needle {
        needle: &'static [u8],
        /// The last `needle.len() - 1` bytes fed.
        carry: Vec<u8>,
        gaps: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl Needle {
        fn boxed(
            needle: &'static [u8],
        ) -> (Box<dyn StreamScan>, Arc<std::sync::atomic::AtomicUsize>) {
            let gaps = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let scan = Needle {
                needle,
                carry: Vec::new(),
                gaps: gaps.clone(),
            };
            (Box::new(scan), gaps)
        }
    }

    impl StreamScan for Needle {
        fn feed(&mut self, bytes: &[u8]) -> bool {
            self.carry.extend_from_slice(bytes);
            let found = self
                .carry
                .windows(self.needle.len())
                .any(|w| w == self.needle);
            let keep = self.needle.len() - 1;
            if self.carry.len() > keep {
                self.carry.drain(..self.carry.len() - keep);
            }
            found
        }

        fn gap(&mut self) {
            self.carry.clear();
            self.gaps.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    fn collector(spill_cap: u64, dir: &tempfile::TempDir) -> Arc<Mutex<OutputCollector>> {
        Arc::new(Mutex::new(OutputCollector::new(
            StreamKind::Stdout,
            1000,
            spill_cap,
            Some(SpillDir::open(dir.path()).unwrap()),
        )))
    }

    /// 10 MB of lines with `TARGET` about halfway, as pipe reads of 4 KiB.
    fn flood(collector: &Arc<Mutex<OutputCollector>>) {
        let mut text = Vec::new();
        for i in 0..440_000 {
            if i == 220_000 {
                text.extend_from_slice(b"TARGET\n");
            }
            text.extend_from_slice(format!("line {i} of a flood\n").as_bytes());
        }
        for chunk in text.chunks(4096) {
            lock_unpoisoned(collector).push(chunk);
        }
    }

    async fn resolves(watch: ScanWatch) -> bool {
        tokio::time::timeout(Duration::from_secs(30), watch)
            .await
            .is_ok()
    }

    #[actix_rt::test]
    async fn a_live_scan_is_fed_every_chunk_of_a_flood() {
        let dir = tempfile::tempdir().unwrap();
        let collector = collector(1 << 30, &dir);
        let (scan, _) = Needle::boxed(b"TARGET");
        let watch = super::watch(collector.clone(), 0, scan);
        flood(&collector);
        assert!(resolves(watch).await);
        assert!(lock_unpoisoned(&collector).scan_count() == 0);
    }

    #[actix_rt::test]
    async fn a_scan_behind_the_tail_catches_up_from_the_spill_file_then_goes_live() {
        let dir = tempfile::tempdir().unwrap();
        let collector = collector(1 << 30, &dir);
        lock_unpoisoned(&collector).push(b"read already\n");
        flood(&collector);
        let (scan, gaps) = Needle::boxed(b"TARGET");
        assert!(resolves(super::watch(collector.clone(), 13, scan)).await);
        assert_eq!(gaps.load(std::sync::atomic::Ordering::SeqCst), 0);
        // Text already read is not matched: from past the target, only what follows counts, and
        // a later write is fed live.
        let end = lock_unpoisoned(&collector).read_from(0).next_offset;
        let (scan, _) = Needle::boxed(b"TARGET");
        let mut watch = super::watch(collector.clone(), end - 5000, scan);
        assert!(
            tokio::time::timeout(Duration::from_millis(200), &mut watch)
                .await
                .is_err()
        );
        lock_unpoisoned(&collector).push(b"TAR");
        lock_unpoisoned(&collector).push(b"GET\n");
        assert!(resolves(watch).await);
    }

    #[actix_rt::test]
    async fn text_in_neither_memory_nor_a_spill_file_is_a_gap() {
        let dir = tempfile::tempdir().unwrap();
        // The spill is deleted once the stream outgrows 1 MB.
        let collector = collector(1 << 20, &dir);
        flood(&collector);
        let (scan, gaps) = Needle::boxed(b"TARGET");
        let mut watch = super::watch(collector.clone(), 0, scan);
        assert!(
            tokio::time::timeout(Duration::from_millis(200), &mut watch)
                .await
                .is_err(),
            "the target is gone with the spill"
        );
        assert_eq!(
            gaps.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "nothing fed before"
        );
        lock_unpoisoned(&collector).push(b"TARGET\n");
        assert!(resolves(watch).await);
    }

    #[actix_rt::test]
    async fn a_spill_file_that_vanishes_during_a_catch_up_is_a_gap() {
        let dir = tempfile::tempdir().unwrap();
        let collector = collector(1 << 30, &dir);
        flood(&collector);
        let path = lock_unpoisoned(&collector).spill_path().unwrap();
        std::fs::remove_file(&path).unwrap();
        let (scan, gaps) = Needle::boxed(b"TARGET");
        let mut watch = super::watch(collector.clone(), 0, scan);
        assert!(
            tokio::time::timeout(Duration::from_millis(200), &mut watch)
                .await
                .is_err()
        );
        assert_eq!(gaps.load(std::sync::atomic::Ordering::SeqCst), 1);
        lock_unpoisoned(&collector).push(b"TARGET\n");
        assert!(resolves(watch).await, "live after the gap");
    }

    #[actix_rt::test]
    async fn a_dropped_watch_forgets_its_scan() {
        let dir = tempfile::tempdir().unwrap();
        let collector = collector(1 << 30, &dir);
        let (scan, _) = Needle::boxed(b"never");
        let watch = super::watch(collector.clone(), 0, scan);
        assert_eq!(lock_unpoisoned(&collector).scan_count(), 1);
        drop(watch);
        assert!(lock_unpoisoned(&collector).scan_count() == 0);
    }
}
