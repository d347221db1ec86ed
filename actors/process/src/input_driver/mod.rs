//! The driver's interactive side (issue 22): for a process started with an open stdin or under a
//! terminal, it writes the queued input, reads and renders the terminal, and judges from the
//! kernel whether the program waits for input.
//!
//! Kept out of `driver/`, which owns the life of every child; this module owns what only an
//! interactive one has. The driver polls [`InputDriver::step`] as one more branch of its loop;
//! every await inside is cancel-safe (readiness, a notification, a timer), and what a step reads
//! it stores before its next await.
//!
//! - **Terminal output.** Each read of the master (one chunk per step, so a flood never holds the
//!   driver's loop) is fed to the [`Terminal`]; its replies to
//!   queries are queued ahead of the input; its completed lines go to the stdout collector (one
//!   stream: there is no stderr under a terminal); the cursor's line, or the screen of a
//!   full-screen program, becomes the output's [`Live`] text. `EIO` on the master is the end of
//!   output (every slave descriptor closed).
//! - **Input.** Items queued on the [`InputChannel`] are written in order as the master or the
//!   pipe accepts them. A key's bytes follow the emulator's cursor mode under a terminal; on a pipe
//!   [`PipeKey::Interrupt`] (`C-c`) is handed to the driver, which signals the process, and
//!   [`PipeKey::EndOfInput`] (`C-d`) closes the pipe.
//! - **The wait.** When no output arrived for [`SETTLE`], [`input_wait::check`] is asked about
//!   the process's members (its cgroup leaf's `cgroup.procs`, else its session, one `/proc`
//!   walk); again every [`CHECK_EVERY`] while quiet, backing off to [`CHECK_BACKED_OFF`] while
//!   the answer stays no. A wait is published only when seen on **two consecutive checks**, and
//!   after a write of ours only once output came after it or [`AFTER_WRITE`] passed (the line
//!   discipline hands input to the reader from a kernel worker: right after a write the reader
//!   may still look blocked). The checks run inline: 25–60 µs each on the development machine,
//!   a few ms for a session walk (docs/interactive.md, "Measured").

use std::io;
use std::os::fd::OwnedFd;
use std::time::Duration;

use dsh_contain::input_wait::{self, Input, Verdict};
use nix::libc;
use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;
use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};

use crate::containment::Contained;
use crate::input::{InputChannel, InputItem, InputState, PipeKey};
use crate::shared_output::{Live, SharedOutput};
use crate::spawn::StartedInput;
use crate::terminal::Terminal;

mod render;
mod wait_watch;

use wait_watch::{WaitWatch, candidates};

/// No output for this long before the kernel is asked (docs/interactive.md: the verdict follows a
/// prompt within 1–8 ms; 30 ms also lets a program that prints in bursts finish its burst).
pub const SETTLE: Duration = Duration::from_millis(30);
/// Between checks while quiet.
pub const CHECK_EVERY: Duration = Duration::from_millis(25);
/// The longest pause between checks of a quiet program that is not waiting (a long computation
/// with no output costs a check every this often).
pub const CHECK_BACKED_OFF: Duration = Duration::from_millis(400);
/// Between checks once a wait was published (it ends with our write or the program's output).
pub(crate) const CHECK_WHILE_WAITING: Duration = Duration::from_millis(500);
/// After a write of ours, a wait counts only once output arrived or this much time passed.
pub const AFTER_WRITE: Duration = Duration::from_millis(50);
/// A terminal waiting for input this long without output hibernates (`Terminal::hibernate`).
pub const HIBERNATE_AFTER: Duration = Duration::from_secs(2);
/// Bytes asked for per read of the master.
const READ_SIZE: usize = 16 * 1024;

/// What a step did that the driver must act on.
pub(crate) enum Step {
    /// Nothing for the driver (output stored, input written, a check made).
    Quiet,
    /// The terminal's output ended (`EIO`).
    EndOfOutput,
    /// `C-c` on a pipe: signal the process's group and containment with `SIGINT`.
    Interrupt,
}

/// The runtime's end of the input.
enum End {
    /// The stdin pipe's write end; `None` once closed.
    Pipe(Option<pipe::Sender>),
    /// The pty master and its emulator.
    Terminal(Box<TerminalEnd>),
}

struct TerminalEnd {
    master: AsyncFd<OwnedFd>,
    device: libc::dev_t,
    terminal: Terminal,
    live: watch::Sender<Live>,
    /// Whether `EIO` was read (every slave descriptor closed).
    output: MasterOutput,
    /// When the rows above the cursor and the live text were last rendered.
    rendered: Instant,
}

/// Whether the master still carries output.
#[derive(Clone, Copy, PartialEq, Eq)]
enum MasterOutput {
    /// Reads may return output.
    Open,
    /// `EIO` was read: every slave descriptor closed.
    Ended,
}

/// The interactive side of one process's driver.
pub(crate) struct InputDriver {
    channel: InputChannel,
    end: End,
    /// The item being written: bytes and how many were written.
    pending: Option<(Vec<u8>, usize)>,
    watch: WaitWatch,
}

/// What woke a step.
enum Wake {
    /// A read of the master: a chunk of output, an empty one at its end, or the error (`EIO`
    /// once every slave descriptor is closed).
    Read(io::Result<Vec<u8>>),
    /// A write of the pending bytes was tried.
    Wrote(io::Result<usize>),
    /// Something was queued, or a write would have blocked: look again.
    Queued,
    /// Time for a check of the kernel's state.
    Check,
}

impl InputDriver {
    /// The interactive side of a started child, and what its output shares; `None` for a child
    /// without input.
    pub(crate) fn new(
        input: StartedInput,
        size: Option<dsh_contain::pty::Size>,
    ) -> Option<(Self, crate::shared_output::Interaction)> {
        let channel = InputChannel::new();
        let (end, live) = match input {
            StartedInput::Closed => return None,
            StartedInput::Pipe(sender) => (End::Pipe(Some(sender)), None),
            StartedInput::Terminal { master, device } => {
                let size = size.unwrap_or(dsh_contain::pty::Size::DEFAULT);
                let live = watch::Sender::new(Live::Empty);
                let end = TerminalEnd {
                    master,
                    device,
                    terminal: Terminal::new(size.rows, size.cols),
                    live: live.clone(),
                    output: MasterOutput::Open,
                    rendered: Instant::now(),
                };
                (End::Terminal(Box::new(end)), Some(live))
            }
        };
        let interaction = crate::shared_output::Interaction {
            input: channel.clone(),
            live,
        };
        Some((
            InputDriver {
                channel,
                end,
                pending: None,
                watch: WaitWatch::new(),
            },
            interaction,
        ))
    }

    /// Whether there is anything left to do: a terminal before its end of output, a pipe still
    /// open.
    pub(crate) fn active(&self) -> bool {
        match &self.end {
            End::Pipe(sender) => sender.is_some(),
            End::Terminal(end) => end.output == MasterOutput::Open,
        }
    }

    /// Whether the terminal's output has ended (always, without a terminal).
    pub(crate) fn output_done(&self) -> bool {
        match &self.end {
            End::Pipe(_) => true,
            End::Terminal(end) => end.output == MasterOutput::Ended,
        }
    }

    /// The pipes carried output: the program is not waiting.
    pub(crate) fn saw_output(&mut self) {
        let now = Instant::now();
        self.watch.last_output = now;
        self.watch.unanswered_write = None;
        if self.watch.published.is_waiting() {
            self.channel.publish(InputState::Busy);
        }
        self.watch.reset(now);
    }

    /// Closes the input at settlement: later writes are refused; the master or the pipe closes.
    pub(crate) fn close(self) {
        self.channel.close();
        if let End::Terminal(end) = &self.end {
            end.live.send_replace(Live::Empty);
        }
    }

    /// Runs until one thing happened; see the module doc.
    pub(crate) async fn step(
        &mut self,
        output: &SharedOutput,
        contained: &Contained,
        pgid: i32,
    ) -> Step {
        if self.pending.is_none()
            && let Some(step) = self.take_next_item()
        {
            return step;
        }
        let chunk: Option<&[u8]> = self.pending.as_ref().map(|(bytes, at)| &bytes[*at..]);
        let writing = chunk.is_some();
        let chunk = chunk.unwrap_or_default();
        let wake = match &self.end {
            End::Terminal(end) => tokio::select! {
                ready = end.master.readable(), if end.output == MasterOutput::Open => match ready {
                    // One chunk per step: a program that floods its terminal never holds the
                    // driver's loop (kill, exit and timers interleave); readiness is cleared only
                    // when the master is empty, so nothing left in it is forgotten.
                    Ok(mut guard) => {
                        let mut chunk = vec![0u8; READ_SIZE];
                        match guard.try_io(|fd| {
                            nix::unistd::read(fd.get_ref(), &mut chunk).map_err(io::Error::from)
                        }) {
                            Ok(result) => Wake::Read(result.map(|n| {
                                chunk.truncate(n);
                                chunk
                            })),
                            Err(_would_block) => Wake::Queued,
                        }
                    }
                    Err(err) => Wake::Read(Err(err)),
                },
                ready = end.master.writable(), if writing && end.output == MasterOutput::Open => match ready {
                    Ok(mut guard) => match guard.try_io(|fd| {
                        nix::unistd::write(fd.get_ref(), chunk).map_err(io::Error::from)
                    }) {
                        Ok(result) => Wake::Wrote(result),
                        Err(_would_block) => Wake::Queued,
                    },
                    Err(err) => Wake::Wrote(Err(err)),
                },
                () = self.channel.queued(), if !writing => Wake::Queued,
                () = sleep_until(self.watch.next_check) => Wake::Check,
            },
            End::Pipe(sender) => {
                let Some(sender) = sender else {
                    return std::future::pending().await;
                };
                tokio::select! {
                    ready = sender.writable(), if writing => match ready {
                        Ok(()) => match sender.try_write(chunk) {
                            Err(err) if err.kind() == io::ErrorKind::WouldBlock => Wake::Queued,
                            result => Wake::Wrote(result),
                        },
                        Err(err) => Wake::Wrote(Err(err)),
                    },
                    () = self.channel.queued(), if !writing => Wake::Queued,
                    () = sleep_until(self.watch.next_check) => Wake::Check,
                }
            }
        };
        match wake {
            Wake::Read(chunk) => self.read_terminal(chunk, output),
            Wake::Wrote(result) => {
                self.wrote(result);
                Step::Quiet
            }
            Wake::Queued => Step::Quiet,
            Wake::Check => {
                self.check(contained, pgid);
                Step::Quiet
            }
        }
    }

    /// Pops the next item: bytes become the pending write; signals and closes are acted on.
    fn take_next_item(&mut self) -> Option<Step> {
        let item = self.channel.pop()?;
        self.note_write();
        match (item, &mut self.end) {
            (InputItem::Bytes(bytes), _) => {
                self.pending = Some((bytes, 0));
                None
            }
            (InputItem::Key(key), End::Terminal(end)) => {
                let bytes = if end.terminal.application_cursor() {
                    key.application
                } else {
                    key.normal
                };
                self.pending = Some((bytes.to_vec(), 0));
                None
            }
            (InputItem::Key(key), End::Pipe(sender)) => match key.on_pipe {
                PipeKey::Bytes(bytes) => {
                    self.pending = Some((bytes.to_vec(), 0));
                    None
                }
                PipeKey::Interrupt => Some(Step::Interrupt),
                PipeKey::EndOfInput => {
                    *sender = None;
                    self.channel.close();
                    Some(Step::Quiet)
                }
            },
        }
    }

    fn note_write(&mut self) {
        let now = Instant::now();
        self.watch.unanswered_write = Some(now);
        self.watch.reset(now);
    }

    /// Applies the result of a write of the pending bytes.
    fn wrote(&mut self, result: io::Result<usize>) {
        let Some((bytes, written)) = &mut self.pending else {
            return;
        };
        match result {
            Ok(n) => {
                *written += n;
                if *written >= bytes.len() {
                    self.pending = None;
                }
                self.note_write();
            }
            Err(err) => {
                // The program closed its end (EPIPE) or the terminal is gone: input is over.
                tracing::debug!(%err, "input write failed; closing the input");
                self.pending = None;
                if let End::Pipe(sender) = &mut self.end {
                    *sender = None;
                }
                self.channel.close();
            }
        }
    }

    /// One check of the kernel's state, and what follows from it.
    fn check(&mut self, contained: &Contained, pgid: i32) {
        let now = Instant::now();
        if !self.watch.settled(now) {
            return;
        }
        let candidates = candidates(contained, pgid);
        let verdict = match &self.end {
            End::Terminal(end) => input_wait::check(
                Input::Terminal {
                    master: std::os::fd::AsFd::as_fd(end.master.get_ref()),
                    device: end.device,
                },
                &candidates,
            ),
            End::Pipe(Some(sender)) => input_wait::check(
                Input::Pipe {
                    writer: std::os::fd::AsFd::as_fd(sender),
                },
                &candidates,
            ),
            End::Pipe(None) => Verdict::NotWaiting(input_wait::Reason::NoReader),
        };
        let idle = self.pending.is_none() && !self.channel.has_queued();
        self.watch.judge(now, verdict, idle, &self.channel);
        // A terminal that has waited quietly for a while sleeps as its redraw sequences (a few
        // KiB instead of its grid); its live text is kept, and the next output or key wakes it.
        if self.watch.published.is_waiting()
            && now.duration_since(self.watch.last_output) >= HIBERNATE_AFTER
            && let End::Terminal(end) = &mut self.end
            && !end.terminal.asleep()
            && end.terminal.hibernate()
        {
            tracing::trace!("an idle terminal sleeps");
            // Its grid's rows are freed: give their pages back, or the heap keeps them resident.
            dsh_contain::pages::release_free_memory();
        }
    }
}
