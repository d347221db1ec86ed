//! Room for many concurrent commands: the soft open-files limit goes up to the hard limit at start
//! (each running command holds several pipe descriptors, so a soft limit of 64 ran out at about 20),
//! and children get the original soft limit back (see `dsh_process::rlimit`).

use nix::sys::resource::{Resource, getrlimit, setrlimit};

pub fn raise_open_files_limit() {
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    if soft >= hard {
        return;
    }
    match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
        Ok(()) => {
            dsh::actors::process::rlimit::set_child_nofile_soft_limit(soft);
            tracing::debug!(soft, hard, "raised the open-files limit");
        }
        Err(err) => tracing::warn!(%err, "cannot raise the open-files limit"),
    }
}
