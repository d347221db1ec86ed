use std::sync::atomic::Ordering::SeqCst;
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
    fn boxed(needle: &'static [u8]) -> (Box<dyn StreamScan>, Arc<std::sync::atomic::AtomicUsize>) {
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

/// Whether `watch` is still unresolved after 200 ms.
async fn pending(watch: &mut ScanWatch) -> bool {
    tokio::time::timeout(Duration::from_millis(200), watch)
        .await
        .is_err()
}

/// A collector with a spill cap of `spill_cap` after [`flood`], and its spill dir.
fn flooded(spill_cap: u64) -> (Arc<Mutex<OutputCollector>>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let collector = collector(spill_cap, &dir);
    flood(&collector);
    (collector, dir)
}

/// A watch from `offset` for the line `TARGET`, and its gap count.
fn watch_for_target(
    collector: &Arc<Mutex<OutputCollector>>,
    offset: u64,
) -> (ScanWatch, Arc<std::sync::atomic::AtomicUsize>) {
    let (scan, gaps) = Needle::boxed(b"TARGET");
    (watch_scan(collector.clone(), offset, scan), gaps)
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
    let (watch, _) = watch_for_target(&collector, 0);
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
    assert!(resolves(watch_scan(collector.clone(), 13, scan)).await);
    assert_eq!(gaps.load(SeqCst), 0);
    // Text already read is not matched: from past the target, only what follows counts, and
    // a later write is fed live.
    let end = lock_unpoisoned(&collector).read_from(0).next_offset;
    let (mut watch, _) = watch_for_target(&collector, end - 5000);
    assert!(pending(&mut watch).await);
    lock_unpoisoned(&collector).push(b"TAR");
    lock_unpoisoned(&collector).push(b"GET\n");
    assert!(resolves(watch).await);
}

#[actix_rt::test]
async fn text_in_neither_memory_nor_a_spill_file_is_a_gap() {
    // The spill is deleted once the stream outgrows 1 MB.
    let (collector, _dir) = flooded(1 << 20);
    let (mut watch, gaps) = watch_for_target(&collector, 0);
    assert!(
        pending(&mut watch).await,
        "the target is gone with the spill"
    );
    assert_eq!(gaps.load(SeqCst), 0, "nothing fed before");
    lock_unpoisoned(&collector).push(b"TARGET\n");
    assert!(resolves(watch).await);
}

#[actix_rt::test]
async fn a_spill_file_that_vanishes_during_a_catch_up_is_a_gap() {
    let (collector, _dir) = flooded(1 << 30);
    let path = lock_unpoisoned(&collector).spill_path().unwrap();
    std::fs::remove_file(&path).unwrap();
    let (mut watch, gaps) = watch_for_target(&collector, 0);
    assert!(pending(&mut watch).await);
    assert_eq!(gaps.load(SeqCst), 1);
    lock_unpoisoned(&collector).push(b"TARGET\n");
    assert!(resolves(watch).await, "live after the gap");
}

#[actix_rt::test]
async fn a_dropped_watch_forgets_its_scan() {
    let dir = tempfile::tempdir().unwrap();
    let collector = collector(1 << 30, &dir);
    let (scan, _) = Needle::boxed(b"never");
    let watch = watch_scan(collector.clone(), 0, scan);
    assert_eq!(lock_unpoisoned(&collector).scan_count(), 1);
    drop(watch);
    assert!(lock_unpoisoned(&collector).scan_count() == 0);
}
