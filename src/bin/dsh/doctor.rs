//! `dsh doctor`: what this host gives dsh, one line each, so a user can see why `--containment` or a
//! task limit is refused and what to change. The cgroup, subreaper and pidfd facts come from
//! `dsh_contain`; Landlock and bubblewrap are probed here (cheap: one syscall, one `PATH` walk).

use std::path::PathBuf;

use dsh_contain::HostFacts;
use nix::libc;

/// Prints every line to stdout.
pub fn print() {
    for line in HostFacts::discover().doctor_lines() {
        println!("{line}");
    }
    println!("landlock: {}", landlock());
    println!(
        "bubblewrap: {}",
        bwrap().map_or_else(
            || "not found on PATH".to_owned(),
            |p| p.display().to_string()
        )
    );
}

/// The Landlock ABI version, or why there is none.
fn landlock() -> String {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: landlock_create_ruleset with a null attribute, size 0 and the VERSION flag only
    // returns the ABI version (or -1 with errno); it creates nothing.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if abi >= 0 {
        return format!("ABI {abi}");
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::ENOSYS) => "no (the kernel has no Landlock)".to_owned(),
        Some(libc::EOPNOTSUPP) => "no (Landlock is disabled at boot)".to_owned(),
        _ => format!("no ({})", std::io::Error::last_os_error()),
    }
}

/// `bwrap` on `PATH`, if any.
fn bwrap() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("bwrap"))
        .find(|candidate| {
            candidate.is_file()
                && nix::unistd::access(candidate, nix::unistd::AccessFlags::X_OK).is_ok()
        })
}
