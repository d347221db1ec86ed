//! Connects the gate is still carrying out, by socket: a thread whose `connect` is interrupted by a
//! signal calls it again (a restart, or its own retry after `EINTR`) while dsh is still connecting
//! the same socket for the first call. The second call waits for the first's result instead of
//! getting `EALREADY` or `EISCONN` for a connect that, as far as it can tell, never happened — the
//! answer an unconfined blocking `connect` gives. A result whose answer found its thread gone (it
//! was interrupted just as the connect ended) is kept for the socket's next call the same way.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::{Arc, Mutex};

use nix::libc;
use tokio::sync::watch;

/// How many undelivered results a listener keeps at most (a program that never calls again).
const MAX_UNDELIVERED: usize = 1024;

/// One listener's connects in progress, by the socket's inode, and results not yet delivered.
#[derive(Default, Clone)]
pub(crate) struct InFlight {
    tables: Arc<Mutex<Tables>>,
}

#[derive(Default)]
struct Tables {
    in_progress: HashMap<u64, watch::Receiver<Option<i32>>>,
    undelivered: HashMap<u64, i32>,
}

/// What a notification does: carry out the connect, or wait for the one in progress.
pub(crate) enum Turn {
    /// Connect; publish the errno through [`Lead::finish`].
    Lead(Lead),
    /// Another notification connects this socket: its errno, when it has one.
    Follow(watch::Receiver<Option<i32>>),
    /// An earlier call's result that never reached its thread: the answer.
    Done(i32),
}

/// The notification that carries out a connect.
pub(crate) struct Lead {
    table: InFlight,
    socket: u64,
    result: watch::Sender<Option<i32>>,
}

impl InFlight {
    /// The turn of a notification for `socket`.
    pub(crate) fn turn(&self, socket: BorrowedFd<'_>) -> (Turn, u64) {
        let key = inode(socket);
        let mut tables = crate::lock_unpoisoned(&self.tables);
        if let Some(errno) = tables.undelivered.remove(&key) {
            return (Turn::Done(errno), key);
        }
        if let Some(waiting) = tables.in_progress.get(&key) {
            return (Turn::Follow(waiting.clone()), key);
        }
        let (result, receiver) = watch::channel(None);
        tables.in_progress.insert(key, receiver);
        let lead = Lead {
            table: self.clone(),
            socket: key,
            result,
        };
        (Turn::Lead(lead), key)
    }

    /// Keeps `errno` for `socket`'s next call: its answer found the thread gone.
    pub(crate) fn undelivered(&self, socket: u64, errno: i32) {
        let mut tables = crate::lock_unpoisoned(&self.tables);
        if tables.undelivered.len() >= MAX_UNDELIVERED {
            tables.undelivered.clear();
        }
        tables.undelivered.insert(socket, errno);
    }
}

impl Lead {
    /// Whether another notification waits for this connect's result.
    pub(crate) fn followed(&self) -> bool {
        // The table keeps one receiver; each follower holds another.
        self.result.receiver_count() > 1
    }

    /// Publishes the result to any follower and forgets the socket.
    pub(crate) fn finish(self, errno: i32) {
        crate::lock_unpoisoned(&self.table.tables)
            .in_progress
            .remove(&self.socket);
        let _ = self.result.send(Some(errno));
    }
}

/// A follower's errno, once the lead has one (`EINTR` if the lead vanished without one).
pub(crate) async fn follow(mut result: watch::Receiver<Option<i32>>) -> i32 {
    match result.wait_for(Option::is_some).await {
        Ok(errno) => errno.unwrap_or(libc::EINTR),
        Err(_) => libc::EINTR,
    }
}

/// The socket's inode number (unique among live sockets).
fn inode(socket: BorrowedFd<'_>) -> u64 {
    // SAFETY: a zeroed stat is a valid buffer; fstat fills it.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on a descriptor we hold, into a buffer of the right type.
    if unsafe { libc::fstat(socket.as_raw_fd(), &mut stat) } != 0 {
        return 0;
    }
    stat.st_ino
}
