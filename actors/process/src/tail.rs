//! The kept tail of one stream: its last `cap` bytes, in one buffer whose size is what the stream
//! costs in memory.
//!
//! Why one buffer: the tail used to be a queue of the chunks the pipe gave, and a chatty command (a
//! line per read) kept thousands of tiny allocations and queue slots for 64,000 bytes of text, ~3×
//! its length while it ran, scattered through the heap. Now every byte is copied once into the
//! tail as it arrives (pipe reads were already copied once a stream outgrew its cap), so what a
//! stream keeps is its bytes and one buffer, and what retention counts is that buffer's size.
//!
//! ```text
//!   Growing (a vector, up to min(cap, 1 KiB)) ──more──► Ring (cap bytes; pages when large)
//!        └─────────────── finish ───────────────┬──────────────┘
//!                                               ▼
//!                              Final (exactly its bytes, in order; pages when large)
//! ```
//!
//! Large buffers are page-backed (`dsh_contain::pages`): freed, they go back to the system at once instead of
//! leaving holes in the heap.

use dsh_contain::pages::Pages;

/// A running stream keeps up to this many bytes in a small vector on the heap (most commands print
/// a line or two); past it, a ring of its whole cap.
const GROWING_MAX: usize = 1024;
/// Buffers from this size on are page-backed: a running stream's ring (touched only as far as it is
/// written), and a finished stream's tail (whole pages, at most a quarter more than its bytes).
/// Smaller finished tails are heap blocks of exactly their size.
pub(crate) const PAGED_FROM: usize = 16 * 1024;

/// The last `cap` bytes of a stream.
#[derive(Debug)]
pub(crate) struct Tail {
    cap: usize,
    kept: Kept,
}

/// Where the kept bytes are.
#[derive(Debug)]
enum Kept {
    /// At most `min(cap, GROWING_MAX)` bytes so far, in order.
    Growing(Vec<u8>),
    /// The last `len` bytes, oldest at `head`, in the first `cap` bytes of `buf`, wrapping around.
    Ring { buf: Buf, head: usize, len: usize },
    /// A finished stream's bytes, in order, in a buffer of their size.
    Final { buf: Buf, len: usize },
}

/// A fixed buffer: on the heap, or in pages of its own.
#[derive(Debug)]
enum Buf {
    Heap(Box<[u8]>),
    Pages(Pages),
}

impl Buf {
    /// A zeroed buffer of at least `len` bytes: pages from `PAGED_FROM` on (the heap if the
    /// system refuses them), else exactly `len` bytes of heap.
    fn new(len: usize) -> Self {
        if len >= PAGED_FROM
            && let Some(pages) = Pages::new(len)
        {
            return Buf::Pages(pages);
        }
        Buf::Heap(vec![0; len].into_boxed_slice())
    }

    /// What the buffer costs: its heap bytes, or its whole pages.
    fn cost(&self) -> usize {
        match self {
            Buf::Heap(bytes) => bytes.len(),
            Buf::Pages(pages) => pages.len(),
        }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            Buf::Heap(bytes) => bytes,
            Buf::Pages(pages) => pages.as_slice(),
        }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            Buf::Heap(bytes) => bytes,
            Buf::Pages(pages) => pages.as_mut_slice(),
        }
    }
}

impl Tail {
    /// An empty tail keeping at most `cap` bytes.
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            cap,
            kept: Kept::Growing(Vec::new()),
        }
    }

    /// Bytes kept.
    pub(crate) fn len(&self) -> usize {
        match &self.kept {
            Kept::Growing(bytes) => bytes.len(),
            Kept::Ring { len, .. } | Kept::Final { len, .. } => *len,
        }
    }

    /// What the kept bytes cost in memory: the buffer holding them (a growing vector's capacity, a
    /// ring's whole buffer, whole pages).
    pub(crate) fn memory_bytes(&self) -> usize {
        match &self.kept {
            Kept::Growing(bytes) => bytes.capacity(),
            Kept::Ring { buf, .. } | Kept::Final { buf, .. } => buf.cost(),
        }
    }

    /// Appends `bytes`, dropping the oldest beyond the cap; returns how many were dropped. A
    /// finished tail takes nothing.
    pub(crate) fn push(&mut self, bytes: &[u8]) -> usize {
        let cap = self.cap;
        match &mut self.kept {
            Kept::Final { .. } => bytes.len(),
            Kept::Growing(kept) if kept.len() + bytes.len() <= cap.min(GROWING_MAX) => {
                kept.extend_from_slice(bytes);
                0
            }
            Kept::Growing(kept) => {
                // Outgrown: a ring of the whole cap from now on.
                let mut buf = Buf::new(cap);
                buf.as_mut_slice()[..kept.len()].copy_from_slice(kept);
                let (mut head, mut len) = (0, kept.len());
                let dropped = ring_push(buf.as_mut_slice(), cap, &mut head, &mut len, bytes);
                self.kept = Kept::Ring { buf, head, len };
                dropped
            }
            Kept::Ring { buf, head, len } => ring_push(buf.as_mut_slice(), cap, head, len, bytes),
        }
    }

    /// The kept bytes, oldest first, as at most two slices.
    pub(crate) fn as_slices(&self) -> (&[u8], &[u8]) {
        match &self.kept {
            Kept::Growing(bytes) => (bytes, &[]),
            Kept::Final { buf, len } => (&buf.as_slice()[..*len], &[]),
            Kept::Ring { buf, head, len } => {
                let buf = &buf.as_slice()[..self.cap];
                if head + len <= self.cap {
                    (&buf[*head..head + len], &[])
                } else {
                    (&buf[*head..], &buf[..head + len - self.cap])
                }
            }
        }
    }

    /// The kept bytes from `skip` bytes in, copied into a vector of exactly their length.
    pub(crate) fn copy_from(&self, skip: usize) -> Vec<u8> {
        let (first, second) = self.as_slices();
        let mut out = Vec::with_capacity(self.len().saturating_sub(skip));
        if skip < first.len() {
            out.extend_from_slice(&first[skip..]);
            out.extend_from_slice(second);
        } else if let Some(rest) = second.get(skip - first.len()..) {
            out.extend_from_slice(rest);
        }
        out
    }

    /// The stream has ended: its bytes move to a buffer of exactly their size (whole pages when
    /// large), and the ring or the vector's spare capacity goes. Idempotent.
    pub(crate) fn finish(&mut self) {
        let kept = std::mem::replace(&mut self.kept, Kept::Growing(Vec::new()));
        self.kept = match kept {
            Kept::Growing(bytes) => Kept::Final {
                len: bytes.len(),
                buf: Buf::Heap(bytes.into_boxed_slice()),
            },
            Kept::Ring {
                buf: Buf::Pages(mut pages),
                head,
                len,
            } if dsh_contain::pages::round_to_pages(len) == pages.len() => {
                // A full ring already costs exactly the pages its bytes need: put them in order in
                // place.
                pages.as_mut_slice()[..self.cap].rotate_left(head);
                Kept::Final {
                    buf: Buf::Pages(pages),
                    len,
                }
            }
            ring @ Kept::Ring { .. } => {
                let tail = Tail {
                    cap: self.cap,
                    kept: ring,
                };
                let (first, second) = tail.as_slices();
                let len = first.len() + second.len();
                let mut buf = Buf::new(len);
                let out = buf.as_mut_slice();
                out[..first.len()].copy_from_slice(first);
                out[first.len()..len].copy_from_slice(second);
                Kept::Final { buf, len }
            }
            done @ Kept::Final { .. } => done,
        };
    }
}

/// Writes `bytes` after the `len` bytes at `head` of the ring `buf[..cap]`, moving `head` past what
/// is overwritten. Returns how many old or new bytes were dropped.
fn ring_push(buf: &mut [u8], cap: usize, head: &mut usize, len: &mut usize, bytes: &[u8]) -> usize {
    let n = bytes.len();
    if n >= cap {
        // Only the last `cap` bytes of this chunk survive.
        buf[..cap].copy_from_slice(&bytes[n - cap..]);
        let dropped = *len + n - cap;
        (*head, *len) = (0, cap);
        return dropped;
    }
    let end = (*head + *len) % cap;
    let first = n.min(cap - end);
    buf[end..end + first].copy_from_slice(&bytes[..first]);
    buf[..n - first].copy_from_slice(&bytes[first..]);
    let grown = *len + n;
    if grown > cap {
        let over = grown - cap;
        *head = (*head + over) % cap;
        *len = cap;
        over
    } else {
        *len = grown;
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(tail: &Tail) -> Vec<u8> {
        tail.copy_from(0)
    }

    #[test]
    fn a_small_stream_grows_and_finishes_in_exactly_its_bytes() {
        let mut tail = Tail::new(64_000);
        assert_eq!(tail.push(b"hello "), 0);
        assert_eq!(tail.push(b"world"), 0);
        assert_eq!(kept(&tail), b"hello world");
        tail.finish();
        assert_eq!(kept(&tail), b"hello world");
        assert_eq!(tail.memory_bytes(), 11);
        assert_eq!(tail.push(b"late"), 4, "a finished tail takes nothing");
    }

    #[test]
    fn a_ring_keeps_the_last_cap_bytes_across_wraps_and_reads_from_any_offset() {
        let mut tail = Tail::new(10);
        let mut all = Vec::new();
        let mut dropped = 0;
        for i in 0..50u8 {
            let chunk: Vec<u8> = (0..(i % 7) + 1).map(|j| b'a' + (i + j) % 26).collect();
            all.extend_from_slice(&chunk);
            dropped += tail.push(&chunk);
            let want = &all[all.len().saturating_sub(10)..];
            assert_eq!(kept(&tail), want, "after chunk {i}");
            assert_eq!(dropped, all.len() - want.len());
            for skip in 0..=want.len() {
                assert_eq!(tail.copy_from(skip), &want[skip..]);
            }
        }
        // One chunk larger than the cap keeps its own last bytes.
        assert_eq!(tail.push(b"0123456789abcdef"), 16);
        assert_eq!(kept(&tail), b"6789abcdef");
        tail.finish();
        assert_eq!(kept(&tail), b"6789abcdef");
        assert_eq!(tail.memory_bytes(), 10);
    }

    #[test]
    fn a_large_stream_lives_in_pages_and_finishes_in_whole_pages_of_its_size() {
        let cap = 64_000;
        let mut tail = Tail::new(cap);
        let line = b"a line of a chatty build step\n";
        let mut all = Vec::new();
        while all.len() < 3 * cap {
            all.extend_from_slice(line);
            tail.push(line);
        }
        assert_eq!(kept(&tail), &all[all.len() - cap..]);
        assert_eq!(tail.memory_bytes(), dsh_contain::pages::round_to_pages(cap));
        tail.finish();
        assert_eq!(kept(&tail), &all[all.len() - cap..]);
        assert_eq!(tail.memory_bytes(), dsh_contain::pages::round_to_pages(cap));

        // Between the vector's limit and the cap: a ring that never wrapped, finished in pages of
        // its own length.
        let mut tail = Tail::new(cap);
        tail.push(&[b'x'; 20_000]);
        assert_eq!(tail.len(), 20_000);
        tail.finish();
        assert_eq!(
            tail.memory_bytes(),
            dsh_contain::pages::round_to_pages(20_000)
        );
        assert_eq!(kept(&tail), vec![b'x'; 20_000]);
    }

    #[test]
    fn a_zero_cap_keeps_nothing() {
        let mut tail = Tail::new(0);
        assert_eq!(tail.push(b"abc"), 3);
        assert!(kept(&tail).is_empty());
        tail.finish();
        assert_eq!(tail.memory_bytes(), 0);
    }
}
