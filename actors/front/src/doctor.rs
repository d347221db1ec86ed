//! `dsh doctor`: what this host gives dsh, one line each, so a user can see why `--containment`,
//! a task limit or `--sandbox` is refused and what to change. The cgroup, subreaper and pidfd facts
//! come from `dsh_contain`; the sandbox lines come from the same probe the runtime runs at start
//! (`LocalSandboxProvider`), so what doctor says is what `dsh` would do.

use dsh::actors::bash::sandbox::probe::Backend;
use dsh::{BackendChoice, LocalSandboxConfig, LocalSandboxProvider, NetworkPolicy};
use dsh_contain::HostFacts;
use nix::libc;

/// Prints every line to stdout.
pub fn print() {
    for line in HostFacts::discover().doctor_lines() {
        println!("{line}");
    }
    println!("landlock: {}", landlock());
    println!("bubblewrap: {}", bwrap());
    for line in sandbox_lines() {
        println!("{line}");
    }
    println!("input detection: {}", input_detection());
}

/// Whether dsh can tell that a `tty: true` or `stdin: "open"` command waits for input: it reads
/// the command's `/proc/<pid>/syscall`, which needs ptrace access to its own children (asked of a
/// short-lived `sleep`).
fn input_detection() -> String {
    let child = std::process::Command::new("sleep")
        .arg("5")
        .stdin(std::process::Stdio::null())
        .spawn();
    let Ok(mut child) = child else {
        return "unknown (cannot start `sleep` to ask)".to_owned();
    };
    let pid = i32::try_from(child.id()).unwrap_or(0);
    let inspectable = dsh_contain::input_wait::can_inspect(pid);
    let _ = child.kill();
    let _ = child.wait();
    if inspectable {
        "yes (a command waiting for input ends the call)".to_owned()
    } else {
        "no (no ptrace access to children: /proc/<pid>/syscall is unreadable, so a command \
         waiting for input is only seen at its timeout; check kernel.yama.ptrace_scope)"
            .to_owned()
    }
}

/// The Landlock ABI version, or why there is none.
fn landlock() -> String {
    match dsh_contain::landlock::abi() {
        Ok(abi) => format!("ABI {abi}"),
        Err(err) => match err.raw_os_error() {
            Some(libc::ENOSYS) => "no (the kernel has no Landlock)".to_owned(),
            Some(libc::EOPNOTSUPP) => "no (Landlock is disabled at boot)".to_owned(),
            _ => format!("no ({err})"),
        },
    }
}

/// Where bubblewrap is and whether it runs dsh's bubblewrap profile here (docs/ARCHITECTURE.md,
/// "Sandbox").
fn bwrap() -> String {
    let Some(path) = dsh::actors::bash::sandbox::local::find_on_path("bwrap") else {
        return "not found on PATH".to_owned();
    };
    let probe = LocalSandboxProvider::new(LocalSandboxConfig {
        backend: BackendChoice::Bwrap,
        ..LocalSandboxConfig::default()
    });
    match probe.as_ref().map(LocalSandboxProvider::verdict) {
        Ok(Ok(_)) => format!("{} (usable)", path.display()),
        Ok(Err(reason)) => format!("{} (not usable: {reason})", path.display()),
        Err(reason) => format!("{} (not usable: {reason})", path.display()),
    }
}

/// The backend `--sandbox` would use, what each mode enforces with it, and the extras.
fn sandbox_lines() -> Vec<String> {
    let provider = match LocalSandboxProvider::new(LocalSandboxConfig::default()) {
        Ok(provider) => provider,
        Err(reason) => return vec![format!("sandbox: {reason}")],
    };
    let backend = match provider.verdict() {
        Ok(backend) => backend.to_string(),
        Err(reason) => {
            return vec![
                format!("sandbox: none usable ({reason})"),
                "sandbox default: UNCONFINED — commands can write anywhere this user can; \
                 an explicit --sandbox read-only|workspace-write fails at start"
                    .to_owned(),
            ];
        }
    };
    let enforcement = provider
        .enforcement()
        .map_or("none", |e| e.as_str())
        .to_owned();
    let deny = LocalSandboxProvider::new(LocalSandboxConfig {
        network: NetworkPolicy::Deny,
        ..LocalSandboxConfig::default()
    })
    .ok()
    .and_then(|p| p.verdict().ok().map(ToString::to_string));
    let loopback = match LocalSandboxProvider::new(LocalSandboxConfig {
        network: NetworkPolicy::Loopback,
        ..LocalSandboxConfig::default()
    }) {
        Ok(p) => p.verdict().map_or_else(
            |_| "unavailable (no sandbox backend)".to_owned(),
            |b| format!("yes, by a network namespace of the runtime's own with only lo, joined under {b}"),
        ),
        // The reason begins with "--network loopback: ".
        Err(reason) => format!("unavailable ({reason})"),
    };
    let backend_kind = provider.verdict().ok();
    let namespaced = matches!(backend_kind, Some(Backend::Bwrap(_) | Backend::Runner(_)));
    // Landlock mediates file contents, not metadata: without its read-only mount namespace (dsh
    // needs root or CAP_SYS_ADMIN to make one) a command may still chmod, touch -d or set xattrs on
    // the user's own files elsewhere. bubblewrap's read-only bind of / refuses them.
    let metadata = if provider.metadata_enforced() {
        ""
    } else {
        " of contents; metadata (chmod, timestamps, xattrs, links, renames) of the user's own files \
         elsewhere is not enforced: no mount namespace without root or CAP_SYS_ADMIN"
    };
    let temp = if namespaced || provider.metadata_enforced() {
        "a private /tmp and /var/tmp"
    } else {
        "a private temp directory ($TMPDIR; the host's /tmp is not writable)"
    };
    let mut lines = vec![
        format!("sandbox: {backend}"),
        "sandbox default: workspace-write".to_owned(),
        format!(
            "sandbox read-only: no writes anywhere except /dev/null and the command's own terminal \
             (/dev/tty) (enforcement {enforcement}{metadata})"
        ),
        format!(
            "sandbox workspace-write: writes only below the workspace, {temp} and the writable roots (enforcement {enforcement}{metadata})"
        ),
        format!(
            "sandbox writable roots: {} (and each --writable-root)",
            display_paths(&crate::writable::roots(None, None, &[], false))
        ),
        "sandbox danger-full-access: unconfined".to_owned(),
        format!(
            "sandbox network deny: {}",
            deny.map_or_else(
                || "unavailable (--network deny fails at start)".to_owned(),
                |b| format!("yes, by {b}")
            )
        ),
        format!("sandbox network loopback: {loopback}"),
        format!(
            "sandbox signal scope: {}",
            if provider.signals_scoped() {
                "yes (Landlock ABI 6+: a confined command cannot signal dsh or its agent)"
            } else if namespaced {
                "yes (bubblewrap's own pid namespace: dsh and its agent have no pid there)"
            } else {
                "no (needs Landlock ABI 6)"
            }
        ),
        format!(
            "sandbox metadata: {}",
            if namespaced {
                "refused outside the writable set (bubblewrap's read-only bind of /)"
            } else if provider.metadata_enforced() {
                "refused outside the writable set (a read-only mount namespace)"
            } else {
                "NOT enforced (chmod, touch -d, xattrs, links, renames outside the workspace \
                 succeed): dsh needs root or CAP_SYS_ADMIN for its mount namespace"
            }
        ),
    ];
    lines.extend(confinement_lines(backend_kind));
    lines.push(
        "sandbox unix sockets: connects gated by dsh (seccomp user notification): a path socket \
         only below the writable roots or allowed by --allow-unix-socket PATH; an abstract one \
         only if its listener is in the same sandbox; datagram Unix sockets and io_uring refused"
            .to_owned(),
    );
    lines
}

/// `paths` as one comma-separated list.
fn display_paths(paths: &[std::path::PathBuf]) -> String {
    let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    shown.join(", ")
}

/// What confines a command beyond files and the network, per backend (docs/ARCHITECTURE.md,
/// "Sandbox"): capabilities, other processes, abstract sockets, the seccomp filter.
fn confinement_lines(backend: Option<&Backend>) -> Vec<String> {
    let (caps, processes) = match backend {
        Some(Backend::Landlock { .. }) => (
            "none (every set cleared, the bounding set too; no_new_privs)",
            "Landlock's ptrace scope: no other process's environ, mem or fd is readable",
        ),
        _ => (
            "none (bubblewrap --cap-drop ALL, no_new_privs; the bounding set stays full but no exec can use it)",
            "bubblewrap's own pid namespace and /proc: no other process is visible",
        ),
    };
    vec![
        format!("sandbox capabilities: {caps}"),
        format!("sandbox other processes: {processes}"),
        "sandbox seccomp: refuses changing another process's limits, priority, affinity, scheduling \
         or I/O class (a command's own, named as 0, stay allowed); under --network deny also UDP, \
         raw IP and SCTP"
            .to_owned(),
    ]
}
