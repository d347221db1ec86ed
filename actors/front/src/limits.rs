//! The smallest `--task-max-pids` and `--task-max-memory` the binary accepts, and why.
//!
//! A per-command limit below what a shell needs to start makes every command fail, and the model
//! can only read that as a broken tool (before this check `--task-max-memory 1` answered every call
//! with the sandbox's `SANDBOX_UNAVAILABLE` text). Such a value is an operator's mistake, so it is a
//! usage error (exit 2) that names the minimum, not a server that starts and fails each call.
//!
//! The minimums were found by trying, with `bash -c 'echo hi; ls / | wc -l'` on a hybrid host (v1
//! `pids`/`memory` controllers):
//! - processes: the shell itself is one; a command that runs a program and then another needs a
//!   second, a two-command pipeline a third, and under bubblewrap the runner's own process comes
//!   first (with 1, bubblewrap cannot even create its sandbox). 4 runs that pipeline under every
//!   backend without a fork being refused.
//! - memory: `bash -c 'echo hi'` needs about 0.5 MiB charged to its cgroup, the pipeline about
//!   1 MiB, the same under bubblewrap about 1.5 MiB. Smaller limits end in `[killed: out of
//!   memory]` before the shell prints anything, in `ENOMEM` from the spawn (4 KiB), or from the
//!   Landlock restriction itself (0 or 1 byte). 4 MiB leaves room for all three.

/// The smallest `--task-max-pids`.
pub const MIN_TASK_PIDS: u64 = 4;

/// The smallest `--task-max-memory`: 4 MiB.
pub const MIN_TASK_MEMORY: u64 = 4 << 20;

/// A limit too small for any command to run under it. The text is what `dsh` prints (after clap's
/// `invalid value '<v>' for '<flag>': `) before exiting 2.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// `--task-max-pids` below [`MIN_TASK_PIDS`].
    #[error(
        "at least {MIN_TASK_PIDS} processes are needed (the shell, a two-command pipeline, and \
         bubblewrap's own process); fewer makes commands fail to start"
    )]
    TooFewPids,
    /// `--task-max-memory` below [`MIN_TASK_MEMORY`].
    #[error(
        "at least 4MiB is needed (bash alone needs about 0.5 MiB, a small pipeline under \
         bubblewrap 1.5 MiB); less makes every command fail to start"
    )]
    TooLittleMemory,
    /// Not a byte count (`--task-max-memory`).
    #[error("{0}")]
    NotBytes(String),
    /// Not a number (`--task-max-pids`).
    #[error("{0:?} is not a number of processes")]
    NotPids(String),
}

/// `--task-max-pids`: a count of at least [`MIN_TASK_PIDS`].
pub fn parse_task_pids(text: &str) -> Result<u64, LimitError> {
    let pids: u64 = text
        .trim()
        .parse()
        .map_err(|_| LimitError::NotPids(text.to_owned()))?;
    if pids < MIN_TASK_PIDS {
        return Err(LimitError::TooFewPids);
    }
    Ok(pids)
}

/// `--task-max-memory`: a byte count (as [`crate::bytes::parse_bytes`]) of at least
/// [`MIN_TASK_MEMORY`].
pub fn parse_task_memory(text: &str) -> Result<u64, LimitError> {
    let bytes = crate::bytes::parse_bytes(text).map_err(LimitError::NotBytes)?;
    if bytes < MIN_TASK_MEMORY {
        return Err(LimitError::TooLittleMemory);
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_below_the_minimum_are_refused_and_the_minimum_is_accepted() {
        assert_eq!(parse_task_pids("0"), Err(LimitError::TooFewPids));
        assert_eq!(parse_task_pids("3"), Err(LimitError::TooFewPids));
        assert_eq!(parse_task_pids("4"), Ok(4));
        assert!(matches!(parse_task_pids("x"), Err(LimitError::NotPids(_))));
        assert_eq!(parse_task_memory("0"), Err(LimitError::TooLittleMemory));
        assert_eq!(parse_task_memory("1"), Err(LimitError::TooLittleMemory));
        assert_eq!(
            parse_task_memory("4095KiB"),
            Err(LimitError::TooLittleMemory)
        );
        assert_eq!(parse_task_memory("4MiB"), Ok(4 << 20));
        assert!(matches!(
            parse_task_memory("lots"),
            Err(LimitError::NotBytes(_))
        ));
    }
}
