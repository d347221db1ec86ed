//! What a finished background task really costs in memory, against what retention counts for it
//! (issue 13: "a finished, fully read task costs at most 2 KiB"; issue 19: "2,000 finished chatty
//! tasks keep 107–110 MB against the 64 MiB `--retained-output-bytes`").
//!
//! The test binary counts memory through this module's global allocator (each test here runs in a
//! process of its own, `own_process!`, so the count is its alone): every heap block as glibc
//! really sizes it (`malloc_usable_size` + its 8-byte header), plus the page-backed tails that live
//! outside the heap (`dsh_process::page_backed_bytes`). Each test first runs a warm-up: twice the
//! measured batch, then the warm-up's session is released and every process record freed, so the
//! one-time allocations (actor mailboxes, the spawn's caches, the leaf pool) and the capacity of
//! the registry's map and the manager's table are in the baseline. Then it runs the measured batch
//! and compares the growth with the growth of what the registry counts
//! (`Runtime::retention_load().retained_bytes`), which the memory budget bounds:
//! - the growth must not exceed what is counted by more than [`NOISE`] (allocations that belong to
//!   no task: a mailbox node, a timer slot); if a task keeps something that is not counted, this
//!   fails, and the accounting (`PROCESS_BYTES` in `actors/bash/src/background.rs`, the registry's
//!   `record_bytes`) must learn it;
//! - what is counted must not exceed the growth by more than [`SLACK_PER_TASK`]: the count includes
//!   each record's share of the registry's map and the manager's table at their emptiest (right after
//!   they double: up to 16/7 and 2 slots per record), which a batch into pre-grown maps does not
//!   allocate. Over-counting only makes retention discard a little early, but a count far above the
//!   truth would be a wrong answer too.
//!
//! Measured at the time of writing: see BENCHMARKS.md ("Bytes per task, counted").

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use crate::common::*;
use dsh::{AgentRef, Inject};
use dsh_test_support::actors::Recorder;
use dsh_test_support::own_process;
use serde_json::json;

/// [`System`], counting the heap it has handed out and not yet been given back, in glibc's terms.
struct Counting;

/// Live heap of this whole test process: each block's usable size plus its 8-byte header.
static HEAP: AtomicIsize = AtomicIsize::new(0);

/// What glibc really uses for the block at `ptr`.
fn block(ptr: *mut u8) -> isize {
    // SAFETY: `ptr` is a live block from `System` (glibc's malloc); malloc_usable_size only reads
    // its header.
    let usable = unsafe { nix::libc::malloc_usable_size(ptr.cast()) };
    usable as isize + 8
}

// SAFETY: every method forwards to `System` with the caller's own arguments, so `System`'s
// guarantees are this allocator's; the counter only adds and subtracts block sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout, which the caller guarantees is non-zero sized.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            HEAP.fetch_add(block(ptr), Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            HEAP.fetch_add(block(ptr), Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        HEAP.fetch_sub(block(ptr), Ordering::Relaxed);
        // SAFETY: the caller guarantees `ptr` came from this allocator (so from `System`) with
        // `layout`.
        unsafe { System.dealloc(ptr, layout) };
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let before = block(ptr);
        // SAFETY: the caller guarantees `ptr` came from this allocator (so from `System`) with
        // `layout`, and that `new_size` is valid for it.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            HEAP.fetch_add(block(new) - before, Ordering::Relaxed);
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The memory dsh holds in this process: the heap and the page-backed tails.
fn memory() -> isize {
    HEAP.load(Ordering::Relaxed) + dsh_process::page_backed_bytes() as isize
}

/// The agent that owns the tasks: it drops its notices (a recording agent's notices would be
/// counted as the tasks' bytes).
type Owner = Recorder<Inject>;

/// Tasks started at once.
const AT_ONCE: usize = 25;
/// Bytes per batch that belong to no task (a mailbox node in flight, a timer slot, the tracing
/// callsite cache): the growth may exceed the count by this much in all.
const NOISE: isize = 16 * 1024;
/// How far the count may exceed the growth per task: the map and table shares counted at their
/// emptiest (~0.6 KiB of registry map, ~0.4 KiB of process table) and rounding.
const SLACK_PER_TASK: isize = 1536;
/// The stream cap (`max_output_bytes`, the default).
const CAP: usize = 64_000;

/// A workload: its command and whether each task is read to its end.
struct Workload {
    command: String,
    read: bool,
    tasks: usize,
}

/// Runs `workload.tasks` tasks of `owner`, reads each to its end if the workload says so, and waits
/// until every one has settled (and, read, been released by the process manager).
async fn batch(rt: &dsh::Runtime, owner: &AgentRef, workload: &Workload) -> Vec<String> {
    let mut ids = Vec::with_capacity(workload.tasks);
    for _ in 0..workload.tasks / AT_ONCE {
        let started = futures::future::join_all(
            (0..AT_ONCE).map(|_| start_bg(rt, Some(owner), &workload.command)),
        )
        .await;
        if workload.read {
            for id in &started {
                let args = json!({"task_id": id, "wait": true});
                let r = call_as(rt, owner, "bash_output", args).await;
                assert!(
                    r.text.ends_with("[status: completed, exit code: 0]"),
                    "{id}: {}",
                    &r.text[r.text.len().saturating_sub(300)..]
                );
            }
        }
        ids.extend(started);
    }
    let deadline = std::time::Instant::now() + SOON * 6;
    loop {
        let tasks = rt.tasks(Some(&owner.session_id)).await;
        let waiting = tasks
            .iter()
            .filter(|t| ids.contains(&t.id) && !t.settled)
            .count();
        let stats = rt.process_stats().await;
        if waiting == 0 && stats.live == 0 && (!workload.read || stats.settled == 0) {
            return ids;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{waiting} tasks never settled: {stats:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Growth per task of what is kept, measured and as retention counts it.
#[derive(Debug)]
struct PerTask {
    measured: isize,
    counted: isize,
}

/// Warm-up (twice the batch, then released), baseline, the measured batch: growth per task.
async fn per_task(rt: &dsh::Runtime, workload: &Workload) -> PerTask {
    let inbox = Owner::start_discarding();
    let warm = AgentRef::new("warm-up", inbox.clone().recipient());
    let measured = AgentRef::new("measured", inbox.recipient());
    let warm_load = Workload {
        tasks: 2 * workload.tasks,
        command: workload.command.clone(),
        read: workload.read,
    };
    batch(rt, &warm, &warm_load).await;
    rt.release_session(&warm.session_id).await;
    let deadline = std::time::Instant::now() + SOON * 3;
    while rt.process_stats().await.settled > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "warm-up never released"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(rt.retention_load().await.finished, 0);
    let (memory_before, counted_before) = (memory(), rt.retention_load().await.retained_bytes);
    let ids = batch(rt, &measured, workload).await;
    let (memory_after, load) = (memory(), rt.retention_load().await);
    assert_eq!(load.finished, ids.len(), "no task was discarded");
    let n = workload.tasks as isize;
    let growth = memory_after - memory_before;
    let counted = load.retained_bytes as isize - counted_before as isize;
    eprintln!(
        "{} tasks{} of {:?}: memory grew {growth} B ({} B per task), counted {counted} B ({} B \
         per task)",
        workload.tasks,
        if workload.read { ", read" } else { ", unread" },
        &workload.command[..workload.command.len().min(60)],
        growth / n,
        counted / n,
    );
    assert!(
        growth <= counted + NOISE,
        "finished tasks keep {growth} B but retention counts {counted} B: {} B per task uncounted",
        (growth - counted) / n
    );
    assert!(
        counted <= growth + SLACK_PER_TASK * n,
        "retention counts {counted} B for {growth} B kept: {} B per task too many",
        (counted - growth) / n
    );
    PerTask {
        measured: growth / n,
        counted: counted / n,
    }
}

/// A command of over 4 KiB (agents write files with heredocs) that prints past the stream cap (so
/// its stdout has a spill file to keep), and a line to stderr.
fn heredoc_command() -> String {
    let heredoc = "a line of a file an agent writes with a heredoc\n".repeat(90);
    format!(
        "cat > /dev/null <<'EOF'\n{heredoc}EOF\nhead -c 100000 /dev/zero | tr '\\0' x; echo done >&2"
    )
}

/// [`per_task`] for `workload` on a runtime of its own (keeping up to 10,000 finished tasks), shut
/// down and checked afterwards.
async fn measured(workload: &Workload) -> PerTask {
    let (rt, spill) = runtime_with(|b| b.max_finished_tasks(10_000));
    let per_task = per_task(&rt, workload).await;
    finish(rt).await;
    drop(spill);
    per_task
}

/// The tests of this module run one at a time, each in a process of its own: the counter is the
/// whole process's.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[actix_rt::test]
async fn a_finished_fully_read_task_keeps_what_is_counted_and_at_most_2_kib() {
    let _serial = SERIAL.lock().await;
    own_process!(a_finished_fully_read_task_keeps_what_is_counted_and_at_most_2_kib);
    let workload = Workload {
        command: heredoc_command(),
        read: true,
        tasks: 250,
    };
    assert!(workload.command.len() > 4096);
    let per_task = measured(&workload).await;
    assert!(
        per_task.counted <= 2048,
        "a finished, fully read task counts {} B (target 2048 B)",
        per_task.counted
    );
}

#[actix_rt::test]
async fn a_finished_stream_keeps_its_cap_and_a_few_kib() {
    let _serial = SERIAL.lock().await;
    own_process!(a_finished_stream_keeps_its_cap_and_a_few_kib);
    // 200 KB to stdout and 100 KB to stderr: both streams outgrow the cap.
    let workload = Workload {
        command: "head -c 200000 /dev/zero | tr '\\0' x; head -c 100000 /dev/zero | tr '\\0' y >&2"
            .into(),
        read: false,
        tasks: 150,
    };
    let per_task = measured(&workload).await;
    let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .unwrap()
        .unwrap() as usize;
    let tails = 2 * CAP.div_ceil(page) as isize * page as isize;
    assert!(
        per_task.measured - tails <= 4096,
        "a finished task with two full streams keeps {} B: {} B over its two tails",
        per_task.measured,
        per_task.measured - tails
    );
}

#[actix_rt::test]
async fn a_finished_quiet_task_keeps_what_is_counted() {
    let _serial = SERIAL.lock().await;
    own_process!(a_finished_quiet_task_keeps_what_is_counted);
    let workload = Workload {
        command: "echo a line of output; echo and one on stderr >&2".into(),
        read: false,
        tasks: 250,
    };
    measured(&workload).await;
}
