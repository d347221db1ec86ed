//! What this host gives dsh: where the cgroup hierarchies are, whether the runtime may create
//! cgroups in them, and whether subreapers, pidfds and `clone3` exist.
//!
//! Everything is probed, not assumed from a kernel version: a container can mount cgroups
//! read-only, a systemd user session owns its cgroup but may not have delegated it, and seccomp
//! profiles can hide `clone3`. [`HostFacts::doctor_lines`] is what `dsh doctor` prints and
//! [`HostFacts::auto_mode`] what `--containment auto` picks.

use std::fmt;
use std::path::PathBuf;

use nix::libc;

use crate::mountinfo::{self, CgroupMembership, CgroupMount};

/// How a task's descendants are kept together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One cgroup v2 leaf per process: exact kill (`cgroup.kill`) and exact "all gone".
    Cgroup,
    /// The runtime is a child subreaper; descendants are attributed by an inherited marker.
    Subreaper,
    /// The process group only (what dsh did before containment).
    Group,
}

impl Mode {
    /// The three modes, strongest first (the order `auto` tries them in).
    pub const ALL: [Mode; 3] = [Mode::Cgroup, Mode::Subreaper, Mode::Group];

    /// `cgroup`, `subreaper` or `group`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Cgroup => "cgroup",
            Mode::Subreaper => "subreaper",
            Mode::Group => "group",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A word that is none of the three modes (`auto` is not a mode: it is the choice among them).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a containment mode (expected one of: cgroup, subreaper, group)")]
pub struct UnknownMode(pub String);

impl std::str::FromStr for Mode {
    type Err = UnknownMode;

    /// `cgroup`, `subreaper` or `group`, exactly.
    fn from_str(text: &str) -> Result<Self, UnknownMode> {
        Mode::ALL
            .into_iter()
            .find(|mode| mode.as_str() == text)
            .ok_or_else(|| UnknownMode(text.to_owned()))
    }
}

/// One cgroup hierarchy as seen by this process.
#[derive(Debug, Clone)]
pub struct CgroupPlace {
    /// The mount the hierarchy is reached through.
    pub mount: CgroupMount,
    /// This process's cgroup path in the hierarchy (from `/proc/self/cgroup`).
    pub own_path: String,
    /// The directory of that cgroup, when the mount shows it.
    pub dir: Option<PathBuf>,
    /// `Ok` when a probe sub-directory could be created and removed there, else why not.
    pub creatable: Result<(), String>,
}

/// Everything `dsh doctor` reports and containment decides on.
#[derive(Debug, Clone)]
pub struct HostFacts {
    /// The cgroup2 hierarchy, if mounted.
    pub v2: Option<CgroupPlace>,
    /// Controllers available in the runtime's own v2 cgroup (`cgroup.controllers`).
    pub v2_controllers: Vec<String>,
    /// Whether a v2 cgroup created by the runtime has `cgroup.kill` (Linux 5.14).
    pub v2_kill: bool,
    /// The v1 `pids` hierarchy, if mounted.
    pub v1_pids: Option<CgroupPlace>,
    /// The v1 `memory` hierarchy, if mounted.
    pub v1_memory: Option<CgroupPlace>,
    /// Other v1 controllers mounted (informational).
    pub v1_other: Vec<String>,
    /// `PR_SET_CHILD_SUBREAPER` is available.
    pub subreaper: bool,
    /// `pidfd_open` works.
    pub pidfd: bool,
    /// The `clone3` system call exists (needed for `CLONE_INTO_CGROUP`).
    pub clone3: bool,
}

/// Where a task limit would be enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitSource {
    /// In the task's v2 leaf (`pids.max`, `memory.max`).
    V2,
    /// In a v1 leaf of that controller's own hierarchy.
    V1,
}

impl HostFacts {
    /// Probes the host. Creates and removes one probe directory per writable hierarchy.
    pub fn discover() -> Self {
        let mounts = mountinfo::cgroup_mounts().unwrap_or_default();
        let own = mountinfo::own_cgroups().unwrap_or_default();
        let v2 = mounts
            .iter()
            .find(|m| m.v2)
            .and_then(|m| place(m, &own, |c| c.hierarchy == 0 && c.controllers.is_empty()));
        let v1 = |name: &str| {
            mounts
                .iter()
                .find(|m| !m.v2 && m.controllers.iter().any(|c| c == name))
                .and_then(|m| place(m, &own, |c| c.controllers.iter().any(|c| c == name)))
        };
        let v1_other = mounts
            .iter()
            .filter(|m| !m.v2)
            .flat_map(|m| m.controllers.iter().cloned())
            .filter(|c| c != "pids" && c != "memory")
            .collect();
        let v2_controllers = v2
            .as_ref()
            .and_then(|p| p.dir.as_ref())
            .and_then(|d| std::fs::read_to_string(d.join("cgroup.controllers")).ok())
            .map(|s| s.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default();
        let v2_kill = v2.as_ref().is_some_and(probe_kill_file);
        HostFacts {
            v2_controllers,
            v2_kill,
            v1_pids: v1("pids"),
            v1_memory: v1("memory"),
            v2,
            v1_other,
            subreaper: subreaper_available(),
            pidfd: pidfd_available(),
            clone3: clone3_available(),
        }
    }

    /// Whether the cgroup mode can run here: a creatable v2 cgroup with `cgroup.kill`, and `clone3`.
    pub fn cgroup_ready(&self) -> Result<(), String> {
        let v2 = self.v2.as_ref().ok_or("no cgroup2 hierarchy is mounted")?;
        v2.creatable.clone()?;
        if !self.v2_kill {
            return Err("cgroup.kill is missing (Linux 5.14 or later is needed)".into());
        }
        if !self.clone3 {
            return Err(
                "clone3 is unavailable (Linux 5.7 or later, or a seccomp profile hides it)".into(),
            );
        }
        Ok(())
    }

    /// The mode `--containment auto` chooses: the strongest the host allows.
    pub fn auto_mode(&self) -> Mode {
        if self.cgroup_ready().is_ok() {
            Mode::Cgroup
        } else if self.subreaper {
            Mode::Subreaper
        } else {
            Mode::Group
        }
    }

    /// Checks that `mode` can run here; the error says why not.
    pub fn check_mode(&self, mode: Mode) -> Result<(), String> {
        match mode {
            Mode::Cgroup => self.cgroup_ready(),
            Mode::Subreaper if !self.subreaper => {
                Err("PR_SET_CHILD_SUBREAPER is unavailable".into())
            }
            Mode::Subreaper | Mode::Group => Ok(()),
        }
    }

    /// Where `--task-max-pids` would be enforced, or why it cannot be.
    pub fn pids_limit(&self) -> Result<LimitSource, String> {
        self.limit_source("pids", self.v1_pids.as_ref())
    }

    /// Where `--task-max-memory` would be enforced, or why it cannot be.
    pub fn memory_limit(&self) -> Result<LimitSource, String> {
        self.limit_source("memory", self.v1_memory.as_ref())
    }

    fn limit_source(&self, name: &str, v1: Option<&CgroupPlace>) -> Result<LimitSource, String> {
        self.cgroup_ready()?;
        if self.v2_controllers.iter().any(|c| c == name) {
            return Ok(LimitSource::V2);
        }
        match v1 {
            Some(place) => match &place.creatable {
                Ok(()) => Ok(LimitSource::V1),
                Err(why) => Err(format!("the v1 {name} hierarchy is not writable: {why}")),
            },
            None => Err(format!(
                "no {name} controller: not in the v2 cgroup's cgroup.controllers, no v1 {name} hierarchy"
            )),
        }
    }

    /// One line per fact, for `dsh doctor`.
    pub fn doctor_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        match &self.v2 {
            Some(place) => {
                let controllers = if self.v2_controllers.is_empty() {
                    "none".to_owned()
                } else {
                    self.v2_controllers.join(" ")
                };
                lines.push(format!(
                    "cgroup v2: mounted at {}, own cgroup {}, controllers: {controllers}",
                    place.mount.mount_point.display(),
                    place.own_path
                ));
                lines.push(format!("cgroup v2 create: {}", yes_or(&place.creatable)));
                lines.push(format!("cgroup v2 cgroup.kill: {}", yes_no(self.v2_kill)));
            }
            None => lines.push("cgroup v2: not mounted".to_owned()),
        }
        for (name, place) in [("pids", &self.v1_pids), ("memory", &self.v1_memory)] {
            lines.push(match place {
                Some(p) => format!(
                    "cgroup v1 {name}: mounted at {}, own cgroup {}, create: {}",
                    p.mount.mount_point.display(),
                    p.own_path,
                    yes_or(&p.creatable)
                ),
                None => format!("cgroup v1 {name}: not mounted"),
            });
        }
        if !self.v1_other.is_empty() {
            lines.push(format!("cgroup v1 other: {}", self.v1_other.join(" ")));
        }
        let limit = |r: Result<LimitSource, String>| match r {
            Ok(LimitSource::V2) => "yes (cgroup v2)".to_owned(),
            Ok(LimitSource::V1) => "yes (cgroup v1)".to_owned(),
            Err(why) => format!("no ({why})"),
        };
        lines.push(format!("task max pids: {}", limit(self.pids_limit())));
        lines.push(format!("task max memory: {}", limit(self.memory_limit())));
        lines.push(format!("clone3: {}", yes_no(self.clone3)));
        lines.push(format!("subreaper: {}", yes_no(self.subreaper)));
        lines.push(format!("pidfd: {}", yes_no(self.pidfd)));
        lines.push(if self.pidfd {
            "watchdog: replaced if it dies (its pidfd is watched; a running server logs each \
             replacement at warn)"
                .to_owned()
        } else {
            "watchdog: not replaced if it dies (no pidfd to watch it by)".to_owned()
        });
        lines.push(format!("containment auto: {}", self.auto_mode()));
        if let Err(why) = self.cgroup_ready() {
            lines.push(format!(
                "containment cgroup: unavailable ({why}); to delegate a cgroup subtree run \
                 `systemd-run --user --scope -p Delegate=yes dsh ...`"
            ));
        }
        lines
    }
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

fn yes_or(r: &Result<(), String>) -> String {
    match r {
        Ok(()) => "yes".into(),
        Err(why) => format!("no ({why})"),
    }
}

fn place(
    mount: &CgroupMount,
    own: &[CgroupMembership],
    pick: impl Fn(&CgroupMembership) -> bool,
) -> Option<CgroupPlace> {
    let own_path = own.iter().find(|c| pick(c))?.path.clone();
    let dir = mountinfo::cgroup_dir(mount, &own_path);
    let creatable = match &dir {
        None => Err(format!(
            "the mount at {} does not show this process's cgroup {own_path}",
            mount.mount_point.display()
        )),
        Some(_) if !mount.writable => Err(format!(
            "{} is mounted read-only",
            mount.mount_point.display()
        )),
        Some(dir) => probe_mkdir(dir),
    };
    Some(CgroupPlace {
        mount: mount.clone(),
        own_path,
        dir,
        creatable,
    })
}

fn probe_name() -> String {
    format!("dsh-probe-{}-{}", std::process::id(), crate::nonce())
}

fn probe_mkdir(dir: &std::path::Path) -> Result<(), String> {
    let probe = dir.join(probe_name());
    std::fs::create_dir(&probe).map_err(|e| format!("mkdir {}: {e}", probe.display()))?;
    std::fs::remove_dir(&probe).map_err(|e| format!("rmdir {}: {e}", probe.display()))
}

/// `cgroup.kill` only exists in non-root cgroups, so look in a fresh probe cgroup.
fn probe_kill_file(place: &CgroupPlace) -> bool {
    let (Some(dir), Ok(())) = (&place.dir, &place.creatable) else {
        return false;
    };
    let probe = dir.join(probe_name());
    if std::fs::create_dir(&probe).is_err() {
        return false;
    }
    let present = probe.join("cgroup.kill").exists() && probe.join("cgroup.events").exists();
    let _ = std::fs::remove_dir(&probe);
    present
}

fn subreaper_available() -> bool {
    let mut value: libc::c_int = 0;
    // SAFETY: PR_GET_CHILD_SUBREAPER writes one int through the pointer, which is valid.
    unsafe { libc::prctl(libc::PR_GET_CHILD_SUBREAPER, &mut value as *mut libc::c_int) == 0 }
}

fn pidfd_available() -> bool {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) };
    if fd < 0 {
        return false;
    }
    // SAFETY: the kernel just gave us this descriptor; nothing else owns it.
    unsafe { libc::close(fd as libc::c_int) };
    true
}

fn clone3_available() -> bool {
    // SAFETY: a null argument with size 0 is rejected before anything is cloned: EINVAL if clone3
    // exists, ENOSYS (or EPERM under some seccomp profiles) if not.
    let r = unsafe { libc::syscall(libc::SYS_clone3, std::ptr::null_mut::<u8>(), 0usize) };
    r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL)
}
