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
//!
//! This module is the table of scans and their states, plain data under the collector's lock; the
//! waiter's future that registers a scan and runs its catch-up is `collector/watch.rs`.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;

use tokio::sync::oneshot;

use crate::spill::SpillDir;

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

/// How one piece of a catch-up ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Piece {
    /// The scan was fed the whole piece and does not hold yet.
    Fed,
    /// The condition holds on what the scan was fed.
    Held,
    /// The spill file gave fewer bytes than asked (or none): what lay after them is lost.
    Lost,
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

    /// Takes back scan `id` after a piece of its catch-up: it was fed `fed` more bytes, and the
    /// piece ended as `piece` says.
    pub(crate) fn returned(
        &mut self,
        id: u64,
        scan: Box<dyn StreamScan>,
        fed: usize,
        piece: Piece,
        view: &StreamView<'_>,
    ) {
        let Some(index) = self.registered.iter().position(|r| r.id == id) else {
            return;
        };
        let registered = &mut self.registered[index];
        registered.state = ScanState::Live(scan);
        registered.position += fed as u64;
        match piece {
            Piece::Held => {
                registered.tell();
                self.registered.swap_remove(index);
            }
            Piece::Lost => self.gap(index, view),
            Piece::Fed => {}
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
