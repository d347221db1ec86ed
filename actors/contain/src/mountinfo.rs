//! Reading `/proc/self/mountinfo` and `/proc/<pid>/cgroup`.
//!
//! Cgroup hierarchies are found from the mount table, never from fixed paths: a pure v2 host mounts
//! cgroup2 at `/sys/fs/cgroup`, a hybrid systemd host at `/sys/fs/cgroup/unified` beside one v1
//! hierarchy per controller, and containers may mount them anywhere (or a sub-tree of them, which
//! is why a mount's `root` field matters when joining it with a process's cgroup path).

use std::path::{Path, PathBuf};

/// One cgroup hierarchy mounted somewhere in this mount namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMount {
    /// Where the hierarchy is mounted.
    pub mount_point: PathBuf,
    /// Which part of the hierarchy the mount shows (`/` unless a sub-tree was bind-mounted).
    pub root: String,
    /// `true` for cgroup2, `false` for a v1 hierarchy.
    pub v2: bool,
    /// The v1 controllers of the hierarchy (from the super options, e.g. `pids`, `memory`,
    /// `name=systemd`); empty for v2.
    pub controllers: Vec<String>,
    /// Whether the mount is read-write.
    pub writable: bool,
}

/// Parses the text of a mountinfo file and keeps the cgroup mounts, in order.
pub fn parse_mountinfo(text: &str) -> Vec<CgroupMount> {
    text.lines().filter_map(parse_line).collect()
}

/// Reads `/proc/self/mountinfo`.
pub fn cgroup_mounts() -> std::io::Result<Vec<CgroupMount>> {
    Ok(parse_mountinfo(&std::fs::read_to_string(
        "/proc/self/mountinfo",
    )?))
}

fn parse_line(line: &str) -> Option<CgroupMount> {
    // id parent major:minor root mount-point options [optional fields...] - fstype source super-options
    let (left, right) = line.split_once(" - ")?;
    let mut left = left.split(' ');
    let root = unescape(left.nth(3)?);
    let mount_point = PathBuf::from(unescape(left.next()?));
    let mount_options = left.next()?;
    let mut right = right.split(' ');
    let fstype = right.next()?;
    let _source = right.next()?;
    let super_options = right.next().unwrap_or("");
    let v2 = match fstype {
        "cgroup2" => true,
        "cgroup" => false,
        _ => return None,
    };
    let controllers = if v2 {
        Vec::new()
    } else {
        super_options
            .split(',')
            .filter(|o| {
                !matches!(*o, "rw" | "ro")
                    && !is_v1_mount_flag(o)
                    && (!o.contains('=') || o.starts_with("name="))
            })
            .map(str::to_owned)
            .collect()
    };
    let writable = mount_options.split(',').any(|o| o == "rw");
    Some(CgroupMount {
        mount_point,
        root,
        v2,
        controllers,
        writable,
    })
}

/// v1 super options that are flags rather than controller names.
fn is_v1_mount_flag(option: &str) -> bool {
    matches!(
        option,
        "noprefix" | "clone_children" | "xattr" | "cpuset_v2_mode" | "favordynmods"
    )
}

/// Undoes mountinfo's octal escapes (`\040` for a space, `\011`, `\012`, `\134`).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let digits = &bytes[i + 1..i + 4];
            if digits.iter().all(|d| (b'0'..=b'7').contains(d)) {
                let value = digits
                    .iter()
                    .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
                if let Ok(byte) = u8::try_from(value) {
                    out.push(byte);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One line of `/proc/<pid>/cgroup`: `hierarchy-id:controllers:path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMembership {
    /// The hierarchy id (`0` for cgroup2).
    pub hierarchy: u32,
    /// The v1 controllers (e.g. `["memory"]`, `["name=systemd"]`); empty for v2.
    pub controllers: Vec<String>,
    /// The cgroup path inside the hierarchy, starting with `/`.
    pub path: String,
}

/// Parses the text of a `/proc/<pid>/cgroup` file.
pub fn parse_proc_cgroup(text: &str) -> Vec<CgroupMembership> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let hierarchy = parts.next()?.parse().ok()?;
            let controllers = parts.next()?;
            let path = parts.next()?.to_owned();
            Some(CgroupMembership {
                hierarchy,
                controllers: controllers
                    .split(',')
                    .filter(|c| !c.is_empty())
                    .map(str::to_owned)
                    .collect(),
                path,
            })
        })
        .collect()
}

/// Reads `/proc/self/cgroup`.
pub fn own_cgroups() -> std::io::Result<Vec<CgroupMembership>> {
    Ok(parse_proc_cgroup(&std::fs::read_to_string(
        "/proc/self/cgroup",
    )?))
}

/// The directory of cgroup `path` (as `/proc/<pid>/cgroup` names it) under `mount`, or `None` when
/// the mount does not show that part of the hierarchy.
pub fn cgroup_dir(mount: &CgroupMount, path: &str) -> Option<PathBuf> {
    let root = mount.root.trim_end_matches('/');
    let rest = if root.is_empty() {
        path
    } else {
        match path.strip_prefix(root) {
            Some(rest) if rest.is_empty() || rest.starts_with('/') => rest,
            _ => return None,
        }
    };
    let rest = rest.trim_start_matches('/');
    Some(if rest.is_empty() {
        mount.mount_point.clone()
    } else {
        Path::new(&mount.mount_point).join(rest)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate
";

    #[test]
    fn finds_hybrid_mounts() {
        let mounts = parse_mountinfo(HYBRID);
        assert_eq!(mounts.len(), 5);
        assert_eq!(mounts[0].controllers, ["memory"]);
        assert_eq!(mounts[2].controllers, ["name=systemd"]);
        assert_eq!(mounts[3].controllers, ["cpu", "cpuacct"]);
        assert!(mounts[4].v2);
        assert_eq!(mounts[4].mount_point, Path::new("/sys/fs/cgroup/unified"));
        assert!(mounts.iter().all(|m| m.writable));
    }

    #[test]
    fn unescapes_spaces() {
        let line = "50 1 0:40 / /mnt/with\\040space ro - cgroup2 none rw";
        let mounts = parse_mountinfo(line);
        assert_eq!(mounts[0].mount_point, Path::new("/mnt/with space"));
        assert!(!mounts[0].writable);
    }

    #[test]
    fn joins_paths_under_the_mount_root() {
        let mount = CgroupMount {
            mount_point: "/sys/fs/cgroup".into(),
            root: "/".into(),
            v2: true,
            controllers: vec![],
            writable: true,
        };
        assert_eq!(
            cgroup_dir(&mount, "/user.slice/a.scope"),
            Some("/sys/fs/cgroup/user.slice/a.scope".into())
        );
        assert_eq!(cgroup_dir(&mount, "/"), Some("/sys/fs/cgroup".into()));
        let sub = CgroupMount {
            root: "/process_api".into(),
            ..mount
        };
        assert_eq!(
            cgroup_dir(&sub, "/process_api/abc"),
            Some("/sys/fs/cgroup/abc".into())
        );
        assert_eq!(cgroup_dir(&sub, "/other"), None);
        assert_eq!(cgroup_dir(&sub, "/process_apix"), None);
    }

    #[test]
    fn parses_proc_cgroup() {
        let lines = parse_proc_cgroup("4:memory:/process_api/00cd\n0::/\n9:name=systemd:/\n");
        assert_eq!(lines[0].controllers, ["memory"]);
        assert_eq!(lines[0].path, "/process_api/00cd");
        assert_eq!(lines[1].hierarchy, 0);
        assert!(lines[1].controllers.is_empty());
    }
}
