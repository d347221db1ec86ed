//! Page-backed byte buffers: memory that goes back to the system the moment it is freed.
//!
//! A stream's kept tail is the one large, long-lived allocation dsh makes per process (up to its
//! 64,000-byte cap, for as long as a finished task is kept). Taken from the allocator's heap, freed
//! tails leave holes between the small records that outlive them, and glibc returns those to the
//! system only when a whole page is free (or never, for memory below the top of its heap): after two
//! thousand chatty tasks the process kept ~40 MB of resident memory beyond what it still used
//! (BENCHMARKS.md, "Retention"). A private anonymous mapping is returned by `munmap` when dropped,
//! costs exactly its pages, and is touched (so resident) only as far as it is written.
//!
//! Memory freed through the allocator after a burst (a hibernating terminal's grid) goes back with
//! [`release_free_memory`].
//!
//! It lives in this crate, beside the other raw syscalls, so the process crate that keeps the tails
//! (`dsh-process`'s `tail.rs`) has no `unsafe` of its own.

use std::num::NonZeroUsize;
use std::ptr::NonNull;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use nix::sys::mman::{MapFlags, ProtFlags, mmap_anonymous, munmap};

/// Bytes mapped by every live [`Pages`] of this process.
static MAPPED: AtomicUsize = AtomicUsize::new(0);

/// Bytes of page-backed tails mapped in this process now (every runtime's together): the part of
/// dsh's memory the allocator does not see, for tests and health checks that count memory.
pub fn page_backed_bytes() -> usize {
    MAPPED.load(Ordering::Relaxed)
}

/// The system's page size (4 KiB where it cannot be read).
pub fn page_size() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    *PAGE.get_or_init(|| {
        nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
            .ok()
            .flatten()
            .and_then(|n| usize::try_from(n).ok())
            .filter(|n| n.is_power_of_two())
            .unwrap_or(4096)
    })
}

/// `len` rounded up to whole pages.
pub fn round_to_pages(len: usize) -> usize {
    let page = page_size();
    len.div_ceil(page).saturating_mul(page)
}

/// A zero-filled, read-write, private anonymous mapping of whole pages, unmapped when dropped.
#[derive(Debug)]
pub struct Pages {
    ptr: NonNull<u8>,
    /// The mapped length: a multiple of the page size, never zero.
    len: usize,
}

// SAFETY: `Pages` owns its mapping exclusively (nothing else holds the pointer), like a `Box<[u8]>`;
// moving it to another thread moves that ownership.
unsafe impl Send for Pages {}
// SAFETY: shared references only read through `as_slice`; writes need `&mut self`.
unsafe impl Sync for Pages {}

#[allow(clippy::len_without_is_empty)] // Never empty: a mapping is at least one page.
impl Pages {
    /// A mapping of at least `len` bytes (whole pages); `None` for `len == 0` or when the system
    /// refuses (out of memory, or the process's map count limit), for the caller to fall back to the
    /// heap.
    pub fn new(len: usize) -> Option<Self> {
        let len = NonZeroUsize::new(round_to_pages(len))?;
        // SAFETY: a new private anonymous mapping at an address the kernel chooses: it aliases no
        // existing memory, and nothing but this `Pages` will ever hold its address.
        let ptr = unsafe {
            mmap_anonymous(
                None,
                len,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_PRIVATE,
            )
        }
        .map_err(|err| tracing::debug!(%err, len, "no pages for a stream's tail; using the heap"))
        .ok()?;
        MAPPED.fetch_add(len.get(), Ordering::Relaxed);
        Some(Self {
            ptr: ptr.cast(),
            len: len.get(),
        })
    }

    /// The bytes the mapping costs (whole pages).
    pub fn len(&self) -> usize {
        self.len
    }

    /// The whole mapping, readable.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the mapping is `len` readable bytes (zero-filled at first), alive as long as
        // `self`, and only mutated through `&mut self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The whole mapping, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as for `as_slice`, and `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        // SAFETY: `ptr` and `len` are exactly the mapping `new` made, unmapped only here, and no
        // reference into it outlives `self`.
        match unsafe { munmap(self.ptr.cast(), self.len) } {
            Ok(()) => {
                MAPPED.fetch_sub(self.len, Ordering::Relaxed);
            }
            Err(err) => tracing::warn!(%err, len = self.len, "munmap of a stream's tail failed"),
        }
    }
}

/// Hands the allocator's free memory back to the system: glibc's `malloc_trim(0)` releases the free
/// pages inside its heaps, not only at their top. For the moment much was freed at once and the
/// process goes on idling: a hibernating terminal's grid is forty rows of 3.75 KiB that the heap
/// would otherwise keep resident (BENCHMARKS.md, "Interactive programs"). It walks the heaps' free
/// chunks (about a millisecond for tens of MB). Nothing happens where the C library is not glibc.
pub fn release_free_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: `malloc_trim` only inspects and releases the allocator's own free chunks, under the
    // allocator's locks; it may be called from any thread at any time.
    unsafe {
        nix::libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mapping_is_whole_zeroed_pages_and_writable() {
        let page = page_size();
        let mut pages = Pages::new(page + 1).unwrap();
        assert_eq!(pages.len(), 2 * page);
        assert!(pages.as_slice().iter().all(|b| *b == 0));
        pages.as_mut_slice()[page] = 7;
        assert_eq!(pages.as_slice()[page], 7);
        assert!(Pages::new(0).is_none());
    }
}
