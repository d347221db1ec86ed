//! The listeners the gate thread serves, and the one epoll set they wait in.
//!
//! A listener comes here from its first watch (`first.rs`) on any wake but a bare hang-up (a
//! notification pending, an interrupted poll), or when that watch ends with its runtime; without a
//! runtime, straight from the spawn. Registering it — an entry in a table, then
//! `epoll_ctl(EPOLL_CTL_ADD)` on the gate's epoll set — wakes no one by itself; the level-triggered
//! set reports a pending notification at once. The gate thread then hears of a listener only when
//! it has something to say: a notification (`EPOLLIN`) or the end of its command (`EPOLLHUP`, once
//! no process holds the filter). Its tokio runtime watches the epoll set itself (an epoll
//! descriptor is pollable), and takes its events with a zero timeout.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use nix::libc;

use super::GatePolicy;
use super::inflight::InFlight;

/// How many events one look at the epoll set takes.
const BATCH: usize = 64;

/// One confined command's listener and what its connects are checked against.
pub(crate) struct Served {
    listener: OwnedFd,
    /// Its key in the table and the epoll set (set by [`Registry::add`]).
    token: u64,
    /// The command's rules.
    pub policy: Arc<GatePolicy>,
    /// The pid the spawn returned (a launcher's sandbox is found from it), or the thread id of the
    /// confined spawning thread whose listener this is (used only in log lines).
    pub spawned: i32,
    /// Its connects in progress.
    pub in_flight: InFlight,
}

impl Served {
    pub(crate) fn new(listener: OwnedFd, policy: Arc<GatePolicy>, spawned: i32) -> Self {
        Served {
            listener,
            token: 0,
            policy,
            spawned,
            in_flight: InFlight::default(),
        }
    }

    /// The listener.
    pub fn listener(&self) -> BorrowedFd<'_> {
        self.listener.as_fd()
    }
}

/// The epoll set and the table of the listeners in it.
pub(crate) struct Registry {
    epoll: OwnedFd,
    served: Mutex<HashMap<u64, Arc<Served>>>,
    next: AtomicU64,
}

impl Registry {
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: epoll_create1 returns a new descriptor or -1.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Registry {
            // SAFETY: epoll_create1 just returned it and nothing else owns it.
            epoll: unsafe { OwnedFd::from_raw_fd(fd) },
            served: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
        })
    }

    /// The epoll set's descriptor, for the gate thread's runtime to watch.
    pub(crate) fn epoll(&self) -> BorrowedFd<'_> {
        self.epoll.as_fd()
    }

    fn raw_fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }

    /// Adds `served` to the set. Called on the spawning thread; wakes no one.
    pub(crate) fn add(&self, mut served: Served) -> io::Result<()> {
        let token = self.next.fetch_add(1, Ordering::Relaxed);
        served.token = token;
        let fd = served.listener.as_raw_fd();
        // In the table first: the gate thread may see the listener's first event at once.
        let mut table = crate::lock_unpoisoned(&self.served);
        table.insert(token, Arc::new(served));
        if let Err(err) = self.control(libc::EPOLL_CTL_ADD, fd, token) {
            table.remove(&token);
            return Err(err);
        }
        Ok(())
    }

    /// `epoll_ctl(op)` of listener `fd` under `token`.
    fn control(&self, op: libc::c_int, fd: RawFd, token: u64) -> io::Result<()> {
        // Level-triggered: a listener the gate thread has not drained yet is reported again.
        let mut event = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLHUP | libc::EPOLLERR) as u32,
            u64: token,
        };
        // SAFETY: epoll_ctl on two descriptors we hold and an event we own.
        if unsafe { libc::epoll_ctl(self.raw_fd(), op, fd, &mut event) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Takes `served`'s listener out of the epoll set.
    fn unregister(&self, served: &Served) {
        // SAFETY: epoll_ctl removing a descriptor the entry holds open.
        unsafe {
            libc::epoll_ctl(
                self.raw_fd(),
                libc::EPOLL_CTL_DEL,
                served.listener.as_raw_fd(),
                std::ptr::null_mut(),
            )
        };
    }

    /// The listeners with a notification pending now (no wait; at most [`BATCH`] events looked
    /// at). A listener whose command ended (hang-up, nothing pending) leaves the set here.
    pub(crate) fn pending(&self) -> io::Result<Vec<Arc<Served>>> {
        // SAFETY: an all-zero epoll_event is a valid value.
        let mut events = [unsafe { std::mem::zeroed::<libc::epoll_event>() }; BATCH];
        // SAFETY: epoll_wait writes at most BATCH events into the array; timeout 0 never blocks.
        let n = unsafe { libc::epoll_wait(self.raw_fd(), events.as_mut_ptr(), BATCH as i32, 0) };
        if n < 0 {
            let err = io::Error::last_os_error();
            return match err.raw_os_error() {
                Some(libc::EINTR) => Ok(Vec::new()),
                _ => Err(err),
            };
        }
        let mut table = crate::lock_unpoisoned(&self.served);
        let mut taken = Vec::with_capacity(n as usize);
        for event in events.iter().take(n as usize) {
            let (token, flags) = (event.u64, event.events);
            let Some(served) = table.get(&token) else {
                continue;
            };
            if flags & libc::EPOLLIN as u32 != 0 {
                taken.push(served.clone());
            } else if flags & libc::EPOLLHUP as u32 != 0 {
                // Only the hang-up ends a listener: `EPOLLERR` alone is the kernel's answer to a
                // poll a signal interrupted, with the command alive (reported again if it lasts).
                let served = served.clone();
                self.remove(&mut table, &served);
            }
        }
        Ok(taken)
    }

    /// Drops `served` from the set (its listener failed).
    pub(crate) fn forget(&self, served: &Served) {
        self.remove(&mut crate::lock_unpoisoned(&self.served), served);
    }

    fn remove(&self, table: &mut HashMap<u64, Arc<Served>>, served: &Served) {
        // Out of the set before the entry goes: settling tasks may still hold the listener open,
        // and a listener left in the set would report its hang-up forever.
        self.unregister(served);
        table.remove(&served.token);
    }
}
