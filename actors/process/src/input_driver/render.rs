//! The terminal's output side of the driver (issue 22): a read of the master fed to the emulator,
//! its completed lines stored in the stdout collector, and what a read shows after them (the
//! cursor's line, or a full-screen program's screen) published as the output's [`Live`] text.
//! Apart from `mod.rs` (input, the wait, the loop) because it is the hot path of a flood: the
//! rendering of the rows above the cursor and of the live text is throttled here.

use std::io;
use std::os::fd::AsFd;
use std::time::Duration;

use dsh_contain::pty::pending_output;
use nix::libc;
use tokio::time::Instant;

use super::{End, InputDriver, MasterOutput, Step, TerminalEnd};
use crate::outcome::StreamKind;
use crate::shared_output::{Live, SharedOutput};

/// How stale the rows above the cursor and the live text may grow while a program floods its
/// terminal (they are rendered whenever the master is drained).
const RENDER_EVERY: Duration = Duration::from_millis(50);

impl InputDriver {
    /// Reads what the master has, renders it, stores lines and the live text.
    pub(super) fn read_terminal(
        &mut self,
        chunk: io::Result<Vec<u8>>,
        output: &SharedOutput,
    ) -> Step {
        let End::Terminal(end) = &mut self.end else {
            return Step::Quiet;
        };
        let step = match chunk {
            Ok(bytes) if !bytes.is_empty() => {
                end.terminal.feed(&bytes);
                Step::Quiet
            }
            Ok(_) => Step::EndOfOutput,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => return Step::Quiet,
            Err(err) => {
                if err.raw_os_error() != Some(libc::EIO) {
                    tracing::warn!(%err, "terminal read failed; treating as the end of output");
                }
                Step::EndOfOutput
            }
        };
        if let Step::EndOfOutput = step {
            end.terminal.finish();
            end.output = MasterOutput::Ended;
        }
        let replies = end.terminal.take_replies();
        // While the program floods, the rows above the cursor and the live text are rendered only
        // once the master is drained, or every RENDER_EVERY: rendering them after every chunk (at
        // most 4 KiB from a pty) cost as much as parsing it. Rows that scroll off go to the stream
        // either way.
        let now = Instant::now();
        let render = end.output == MasterOutput::Ended
            || now.duration_since(end.rendered) >= RENDER_EVERY
            || !matches!(pending_output(end.master.get_ref().as_fd()), Ok(n) if n > 0);
        if render {
            end.rendered = now;
            if end.output == MasterOutput::Open {
                end.terminal.commit();
            }
        }
        let lines = end.terminal.take_lines();
        if !lines.is_empty() {
            output.push(StreamKind::Stdout, lines.as_bytes());
        }
        if render {
            render_live(end);
        }
        if !replies.is_empty() {
            // Answers go ahead of the input, so a program asking before its prompt gets them first.
            match self.pending.take() {
                Some((bytes, written)) => {
                    let mut ahead = replies;
                    ahead.extend_from_slice(&bytes[written..]);
                    self.pending = Some((ahead, 0));
                }
                None => self.pending = Some((replies, 0)),
            }
        }
        self.saw_output();
        step
    }
}

/// Stores what a read shows after the stream: nothing once output ended, the screen of a
/// full-screen program, else the cursor's line.
fn render_live(end: &mut TerminalEnd) {
    let live = if end.output == MasterOutput::Ended {
        Live::Empty
    } else if end.terminal.full_screen() {
        Live::Screen(end.terminal.visible())
    } else {
        match end.terminal.partial() {
            line if line.is_empty() => Live::Empty,
            line => Live::Line(line),
        }
    };
    // Readers waiting on the live text (`until`) wake only when it changed.
    end.live.send_if_modified(|shown| {
        let changed = *shown != live;
        *shown = live;
        changed
    });
}
