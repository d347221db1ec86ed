//! dsh embedded as a library in subreaper mode must not take its host's children: the host's own
//! `Command`s still get their exit statuses while dsh runs tasks (and reaps the orphans it adopts).

use dsh::{ContainmentMode, Runtime, ToolCall};
use dsh_test_support::own_process;
use serde_json::json;

#[test]
fn a_subreaper_runtime_leaves_the_hosts_own_children_alone() {
    // Becoming a subreaper and reaping orphans changes this whole process: it gets one of its own.
    own_process!(a_subreaper_runtime_leaves_the_hosts_own_children_alone);
    let spill = tempfile::tempdir().unwrap();
    let runtime = match Runtime::builder()
        .spill_dir(spill.path())
        .containment(Some(ContainmentMode::Subreaper))
        .start()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("skipping: this host cannot give subreaper containment: {err}");
            return;
        }
    };
    let tasks = std::thread::spawn({
        let runtime = runtime.clone();
        move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                for _ in 0..40 {
                    // Each call leaves an orphan for the subreaper to adopt and reap.
                    let result = runtime
                        .call(ToolCall::new(
                            "bash",
                            json!({"command": "(true &); true", "description": "orphan"}),
                        ))
                        .await;
                    assert!(!result.is_error, "{}", result.text);
                }
            });
        }
    });
    // Meanwhile the host runs children of its own and waits for each, half of them in a session of
    // their own (as a host's daemon-style helpers would be).
    for i in 0..200 {
        let mut command = std::process::Command::new("true");
        if i % 2 == 1 {
            // SAFETY: setsid is async-signal-safe.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut command, || {
                    nix::unistd::setsid()
                        .map(|_| ())
                        .map_err(std::io::Error::from)
                });
            }
        }
        let status = command
            .status()
            .unwrap_or_else(|err| panic!("the host's child {i} lost its status: {err}"));
        assert!(status.success());
    }
    tasks.join().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(runtime.shutdown());
}
