//! A killed runtime still kills its tasks: one small watchdog process per runtime.
//!
//! The runtime starts the watchdog (its own binary re-executed in a hidden mode, see
//! [`Watchdog::start`]) with the read end of a pipe as the watchdog's stdin and keeps the write end
//! (close-on-exec, so no command inherits it). Over the pipe it sends registrations, one line each:
//!
//! | line | meaning | on EOF without goodbye |
//! |---|---|---|
//! | `cgroup <path>` | the runtime's v2 cgroup parent | `cgroup.kill`, wait for `populated 0`, remove the tree |
//! | `cgroup-v1 <path>` | a v1 limit parent | remove the tree (after the kills) |
//! | `group <pgid>` / `ungroup <pgid>` | a task's process group (subreaper/group modes); `ungroup` withdraws one `group` | `kill(-pgid, SIGKILL)` |
//! | `runtime <nonce>` | the runtime's marker prefix `DSH_TASK=<nonce>:` | SIGKILL every process carrying it |
//! | `spill <path>` | the spill directory | remove it recursively |
//! | `bye` | clean shutdown: the runtime cleaned up itself | exit without touching anything |
//!
//! When the runtime dies in any way (SIGKILL, OOM killer, panic with abort) the kernel closes its
//! descriptors, the watchdog reads EOF, kills everything registered, removes the spill directory
//! and the cgroup parents, and exits. It costs one process per runtime, never per task.
//!
//! It runs in a session and process group of its own (so a command's `kill -- -<pgid>` or a
//! terminal's ^C never reaches it), outside the task subtree (it stays in the runtime's own cgroup),
//! with SIGHUP, SIGINT, SIGTERM and SIGPIPE ignored: a host that signals the runtime's whole cgroup
//! (systemd's `KillMode=control-group`) must not take the watchdog down before the runtime, since
//! only EOF tells it the runtime is gone. It asks the OOM killer to pass it over
//! (`oom_score_adj -1000`, where the kernel lets it: root or `CAP_SYS_RESOURCE`): it is tiny, and it
//! is what cleans up after an OOM-killed runtime. Not `PR_SET_PDEATHSIG`: that signal only ends the
//! watchdog (nothing would be cleaned up), and it fires when the *thread* that started the watchdog
//! exits, not the runtime.
//!
//! A SIGKILL of the watchdog itself (an operator, an unconfined command) cannot be defended against
//! here; the runtime watches for it instead: [`Watchdog::exit_notice`] becomes ready when the
//! watchdog exits, [`Watchdog::reap_if_exited`] collects it through its pidfd, and the runtime
//! starts a new one and tells it again everything still live (`dsh-process`'s `watchdog_link`).

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::process::ExitStatus;

use nix::libc;
use tokio::io::unix::AsyncFd;

use crate::spawn::{self, Program, SpawnError, Stdio};
use crate::subreaper::{self, Marker};

/// One registration sent to the watchdog.
#[derive(Debug, Clone, Copy)]
pub enum Registration<'a> {
    /// The runtime's v2 cgroup parent.
    Cgroup(&'a Path),
    /// A v1 limit parent directory.
    CgroupV1(&'a Path),
    /// A task's process group.
    Group(i32),
    /// A process group that is gone (its task settled).
    Ungroup(i32),
    /// The runtime's marker nonce (subreaper mode): every `DSH_TASK=<nonce>:…` process is killed.
    Runtime(&'a str),
    /// The spill directory.
    Spill(&'a Path),
}

impl Registration<'_> {
    fn line(&self) -> io::Result<String> {
        let path = |p: &Path| {
            let s = p.to_str().ok_or_else(|| invalid("path is not UTF-8"))?;
            if s.contains('\n') {
                return Err(invalid("path contains a newline"));
            }
            Ok(s.to_owned())
        };
        Ok(match self {
            Registration::Cgroup(p) => format!("cgroup {}\n", path(p)?),
            Registration::CgroupV1(p) => format!("cgroup-v1 {}\n", path(p)?),
            Registration::Group(g) => format!("group {g}\n"),
            Registration::Ungroup(g) => format!("ungroup {g}\n"),
            Registration::Runtime(n) if n.contains(['\n', ':']) => {
                return Err(invalid("nonce contains a newline or ':'"));
            }
            Registration::Runtime(n) => format!("runtime {n}\n"),
            Registration::Spill(p) => format!("spill {}\n", path(p)?),
        })
    }
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, what.to_owned())
}

/// The runtime's handle on its watchdog. Dropping it without [`Watchdog::goodbye`] closes the pipe,
/// which the watchdog treats as the runtime's death.
#[derive(Debug)]
pub struct Watchdog {
    pid: i32,
    /// Names the watchdog for good: its exit is awaited and it is reaped through this. `None` only
    /// on kernels without pidfds (before 5.3).
    pidfd: Option<OwnedFd>,
    pipe: File,
}

/// What [`Watchdog::reap_if_exited`] found.
#[derive(Debug)]
pub enum Exit {
    /// It still runs: the handle, unchanged.
    Running(Watchdog),
    /// It exited and is reaped, with its status (`None`: someone else reaped it first).
    Exited(Option<ExitStatus>),
}

/// Becomes ready once a watchdog has exited: a duplicate of its pidfd, registered with the tokio
/// reactor. It does not borrow the [`Watchdog`], so the handle may stay behind a lock (where
/// registrations reach it) while this is awaited.
#[derive(Debug)]
pub struct ExitNotice(AsyncFd<OwnedFd>);

impl ExitNotice {
    /// Resolves once the watchdog has exited (a pidfd turns readable then and stays so); it is
    /// reaped only by [`Watchdog::reap_if_exited`]. No polling: the reactor wakes the caller.
    pub async fn exited(&self) -> io::Result<()> {
        let mut ready = self.0.readable().await?;
        ready.retain_ready();
        Ok(())
    }
}

impl Watchdog {
    /// Starts `program args…` as the watchdog (e.g. the `dsh` binary with its hidden `__watchdog`
    /// subcommand, which calls [`watchdog_main`] with its stdin). The watchdog gets the read end of
    /// the pipe as stdin, `/dev/null` as stdout and stderr, this process's environment, and `/` as
    /// working directory.
    pub fn start<A: AsRef<OsStr>>(
        program: &Path,
        args: impl IntoIterator<Item = A>,
    ) -> Result<Self, SpawnError> {
        let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| SpawnError::Setup(e.into()))?;
        let null: OwnedFd = File::options()
            .read(true)
            .write(true)
            .open("/dev/null")
            .map_err(SpawnError::Setup)?
            .into();
        let args: Vec<A> = args.into_iter().collect();
        let argv = std::iter::once(program.as_os_str()).chain(args.iter().map(AsRef::as_ref));
        // Without a task marker this runtime inherited as a command of another dsh (nested): the
        // outer runtime's kill of that task must not take the watchdog down with the inner runtime
        // before it has killed the inner runtime's tasks. It exits by itself once done.
        let env = std::env::vars_os().filter(|(name, _)| name != crate::subreaper::MARKER_VAR);
        let program = Program::new(program, argv, env, Some(Path::new("/")))?;
        let child = spawn::spawn(
            &program,
            Stdio {
                stdin: read.as_fd(),
                stdout: null.as_fd(),
                stderr: null.as_fd(),
            },
            None,
        )?;
        // Not reaped yet, so the pid still names the child when the spawn gave no pidfd.
        let pidfd = child.pidfd.or_else(|| crate::pidfd::open(child.pid).ok());
        Ok(Watchdog {
            pid: child.pid,
            pidfd,
            pipe: File::from(write),
        })
    }

    /// The watchdog's pid (a direct child: register it with the subreaper's registry if one runs).
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Sends one registration.
    pub fn register(&mut self, registration: Registration<'_>) -> io::Result<()> {
        self.pipe.write_all(registration.line()?.as_bytes())
    }

    /// A notice that resolves once this watchdog has exited. Must be called inside a tokio runtime
    /// with IO enabled; fails without a pidfd (the watchdog then cannot be watched).
    pub fn exit_notice(&self) -> io::Result<ExitNotice> {
        let Some(pidfd) = &self.pidfd else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "no pidfd for the watchdog (Linux < 5.3)",
            ));
        };
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(io::Error::other("not inside a tokio runtime"));
        }
        let duplicate = pidfd.try_clone()?;
        crate::pidfd::watch(duplicate).map(ExitNotice)
    }

    /// Reaps the watchdog if it has exited (without blocking); otherwise hands the handle back.
    pub fn reap_if_exited(self) -> Exit {
        match self.wait(libc::WNOHANG) {
            Ok(None) => Exit::Running(self),
            Ok(Some(status)) => Exit::Exited(Some(status)),
            // ECHILD: someone else reaped it (a host's `waitpid(-1)`); it is gone either way.
            Err(_) => Exit::Exited(None),
        }
    }

    /// Clean shutdown: tells the watchdog to exit without acting, and reaps it (waiting for it).
    /// It is reaped even when the goodbye cannot be written (it is dead, or reads EOF without
    /// goodbye, which after a clean shutdown finds nothing left to kill).
    pub fn goodbye(mut self) -> io::Result<()> {
        let said = self.pipe.write_all(b"bye\n");
        let Watchdog { pid, pidfd, pipe } = self;
        drop(pipe);
        let _ = Self::wait_for(pid, pidfd.as_ref(), 0);
        said
    }

    /// Reaps the watchdog once it exits (`WNOHANG` in `flags`: only if it has).
    fn wait(&self, flags: i32) -> io::Result<Option<ExitStatus>> {
        Self::wait_for(self.pid, self.pidfd.as_ref(), flags)
    }

    /// Through the pidfd where there is one (and the kernel can wait on it, 5.4+), else by pid: the
    /// watchdog is our child and nobody else reaps it, so its pid is still its own.
    fn wait_for(pid: i32, pidfd: Option<&OwnedFd>, flags: i32) -> io::Result<Option<ExitStatus>> {
        if let Some(pidfd) = pidfd {
            match crate::pidfd::reap(pidfd.as_fd(), flags) {
                Err(err) if err.raw_os_error() == Some(libc::EINVAL) => {}
                reaped => return reaped,
            }
        }
        crate::pidfd::waitpid(pid, flags)
    }
}

/// What the watchdog has been told to clean up.
#[derive(Debug, Default)]
struct Registered {
    cgroups: Vec<PathBuf>,
    cgroups_v1: Vec<PathBuf>,
    groups: Vec<i32>,
    runtimes: Vec<String>,
    spills: Vec<PathBuf>,
}

/// Outcome of reading the pipe to its end.
enum Ending {
    Goodbye,
    RuntimeGone,
}

fn read_registrations(mut input: impl BufRead, reg: &mut Registered) -> Ending {
    let mut line = Vec::new();
    loop {
        line.clear();
        match input.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return Ending::RuntimeGone,
            Ok(_) => {}
        }
        // A line cut short by the runtime's death is not acted on: a truncated path could name an
        // ancestor of what was meant.
        let Some(complete) = line.strip_suffix(b"\n") else {
            return Ending::RuntimeGone;
        };
        let text = String::from_utf8_lossy(complete);
        let (word, rest) = text.split_once(' ').unwrap_or((&text, ""));
        match word {
            "bye" => return Ending::Goodbye,
            "cgroup" => reg.cgroups.extend(owned_path(rest, "dsh-")),
            "cgroup-v1" => reg.cgroups_v1.extend(owned_path(rest, "dsh-")),
            "group" => reg
                .groups
                .extend(rest.parse::<i32>().ok().filter(|g| *g > 1)),
            // One registration each: a group number reused by a newer task may be registered
            // again before the older task's `ungroup` arrives.
            "ungroup" => {
                if let Some(at) = reg.groups.iter().position(|g| rest.parse() == Ok(*g)) {
                    reg.groups.swap_remove(at);
                }
            }
            "runtime" => reg
                .runtimes
                .extend(Some(rest.to_owned()).filter(|n| !n.is_empty())),
            "spill" => reg.spills.extend(owned_path(rest, "dsh-proc-")),
            _ => {}
        }
    }
}

/// `text` as a path the watchdog may kill or remove: absolute, without `..`, and named like the
/// directories dsh creates (`prefix…`). Anything else is ignored rather than trusted.
fn owned_path(text: &str, prefix: &str) -> Option<PathBuf> {
    let path = Path::new(text);
    let plain = path
        .components()
        .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    let named = path
        .file_name()
        .and_then(|name| name.to_str())
        .is_some_and(|name| name.starts_with(prefix));
    (path.is_absolute() && plain && named).then(|| path.to_path_buf())
}

/// Kills and removes everything registered. Each step is best effort: one failure must not stop
/// the others.
fn clean_up(reg: &Registered) {
    for group in &reg.groups {
        // SAFETY: kill with a negative pgid (> 1, checked when read) and a signal number.
        unsafe { libc::kill(-group, libc::SIGKILL) };
    }
    for nonce in &reg.runtimes {
        subreaper::kill_marked(&Marker::runtime(nonce), libc::SIGKILL);
    }
    for cgroup in &reg.cgroups {
        let _ = crate::cgroup::kill_and_remove(cgroup);
    }
    for cgroup in &reg.cgroups_v1 {
        let _ = crate::cgroup::remove_tree(cgroup);
    }
    for spill in &reg.spills {
        let _ = crate::private_dir::remove(spill);
    }
}

/// The watchdog process's whole life: read registrations from `input` until EOF, then clean up
/// (unless the runtime said goodbye) and exit. Call it from the binary's hidden watchdog mode with
/// the descriptor the runtime handed over (stdin for [`Watchdog::start`]).
pub fn watchdog_main(input: OwnedFd) -> ! {
    for sig in [libc::SIGHUP, libc::SIGINT, libc::SIGTERM, libc::SIGPIPE] {
        // SAFETY: setting a signal to SIG_IGN installs no handler code.
        unsafe { libc::signal(sig, libc::SIG_IGN) };
    }
    // Best effort: without CAP_SYS_RESOURCE the kernel refuses a lower value, and the inherited one
    // stays.
    let _ = std::fs::write("/proc/self/oom_score_adj", "-1000");
    let mut reg = Registered::default();
    let ending = read_registrations(BufReader::new(File::from(input)), &mut reg);
    if let Ending::RuntimeGone = ending {
        clean_up(&reg);
    }
    std::process::exit(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_registrations_and_goodbye() {
        let mut reg = Registered::default();
        let text = "cgroup /a/dsh-1 b\ngroup 12\ngroup 13\nungroup 12\nruntime n1\n\
                    spill /tmp/dsh-proc-x\ngroup 1\n";
        assert!(matches!(
            read_registrations(text.as_bytes(), &mut reg),
            Ending::RuntimeGone
        ));
        assert_eq!(reg.cgroups, [PathBuf::from("/a/dsh-1 b")]);
        assert_eq!(reg.groups, [13]);
        assert_eq!(reg.runtimes, ["n1"]);
        assert_eq!(reg.spills, [PathBuf::from("/tmp/dsh-proc-x")]);
        let mut reg = Registered::default();
        assert!(matches!(
            read_registrations("group 5\nbye\n".as_bytes(), &mut reg),
            Ending::Goodbye
        ));
    }

    #[test]
    fn an_ungroup_withdraws_one_registration_of_a_reused_group_number() {
        let mut reg = Registered::default();
        read_registrations("group 5\ngroup 5\nungroup 5\n".as_bytes(), &mut reg);
        assert_eq!(reg.groups, [5]);
    }

    #[test]
    fn only_complete_lines_naming_dsh_directories_are_trusted() {
        let mut reg = Registered::default();
        let text = "spill /home/me\nspill relative/dsh-proc-x\nspill /tmp/dsh-proc-a/../..\n\
                    cgroup /sys/fs/cgroup/unified\ncgroup-v1 /sys/fs/cgroup/pids/system.slice\n\
                    runtime \nspill /tmp/dsh-proc-cut";
        read_registrations(text.as_bytes(), &mut reg);
        assert!(reg.spills.is_empty(), "{:?}", reg.spills);
        assert!(reg.cgroups.is_empty() && reg.cgroups_v1.is_empty());
        assert!(reg.runtimes.is_empty());
    }

    #[test]
    fn registration_lines_reject_newlines() {
        assert!(Registration::Spill(Path::new("/a\nb")).line().is_err());
        assert!(Registration::Runtime("a:b").line().is_err());
        assert_eq!(
            Registration::Group(7).line().ok().as_deref(),
            Some("group 7\n")
        );
    }
}
