//! Everyday development under the default `workspace-write`, with no approval, through the `dsh`
//! binary under each backend (`sandbox_workflows::landlock::…`, `sandbox_workflows::bwrap::…`; a
//! backend this host lacks is skipped, saying why), the network allowed and the package registries
//! reached: a venv with `pip install` and `pytest`, `npm install`, `cargo build` of a crate with a
//! registry dependency, `git commit`, `multiprocessing.Pool`, `make` with `cc`, writes under
//! `$DSH_HOME` and under a `--writable-root`; and the writes the same default must still refuse:
//! shell and ssh start-up files, `~/.gitconfig`, `/etc/passwd`, new programs in `~/.cargo/bin`
//! and `/usr/local/bin`, a directory beside the workspace; and that `dsh doctor` and the `bash`
//! description list the writable set. One venv serves pip and pytest. Every
//! command carries a unique marker, and each test checks that nothing it started is left running.

use std::path::Path;

use serde_json::json;

use crate::jsonl_server::bash;
use crate::sandbox_escape::{
    Backend, assert_nothing_left, confined_server, run, setup, under_each_backend, workspace,
};

/// Each call may take this long (a registry download on a slow day).
const SLOW: &[&str] = &["--timeout-ms", "300000", "--max-timeout-ms", "300000"];

/// Asserts that `printed` (what a call printed) contains `wanted`.
fn assert_has(printed: &str, wanted: &str, what: &str) {
    assert!(printed.contains(wanted), "{what}: {printed}");
}

/// Each package manager's workflow (what, the command, a line it prints when it worked), run in
/// order in one workspace. pip into a venv, then pytest from it; the test's own cargo settings must
/// not steer the build into its target directory.
const PACKAGE_WORKFLOWS: [(&str, &str, &str); 3] = [
    (
        "pip and pytest",
        "python3 -m venv .venv && .venv/bin/pip install -q pytest \
         && printf 'def test_sum():\\n    assert 1 + 1 == 2\\n' > test_sum.py \
         && .venv/bin/pytest -q test_sum.py",
        "1 passed",
    ),
    (
        "npm install",
        "npm init -y >/dev/null && npm install --no-audit --no-fund is-number@7 >/dev/null \
         && node -e 'console.log(\"npm:\", require(\"is-number\")(5))'",
        "npm: true",
    ),
    (
        "cargo build with a registry dependency",
        "unset CARGO_TARGET_DIR CARGO_PROFILE_DEV_DEBUG; cargo new -q x && cd x \
         && echo 'itoa = \"1\"' >> Cargo.toml \
         && printf 'fn main() { println!(\"cargo: {}\", itoa::Buffer::new().format(42)); }\\n' > src/main.rs \
         && cargo build -q && ./target/debug/x",
        "cargo: 42",
    ),
];

pub(crate) fn package_managers_build_and_test_with_no_approval(backend: Backend) {
    let Some((ws, m)) = setup(backend) else {
        return;
    };
    for (what, command, wanted) in PACKAGE_WORKFLOWS {
        let printed = run(backend, ws.path(), SLOW, &format!("{command} # {m}"));
        assert_has(&printed, wanted, what);
    }
    assert_nothing_left(&m);
}

pub(crate) fn local_tools_dsh_home_and_extra_roots_are_writable(backend: Backend) {
    let Some((ws, m)) = setup(backend) else {
        return;
    };
    let elsewhere = workspace();
    // A DSH_HOME that does not exist yet: dsh makes it at startup.
    let dsh_home = elsewhere.path().join("dsh-home");
    let extra = elsewhere.path().join("extra");
    std::fs::create_dir(&extra).unwrap();
    let command = format!(
        "set -e; git init -q r && cd r && echo hi > f && git add -A \
         && git -c user.name=t -c user.email=t@example.invalid commit -qm first \
         && git log --oneline | wc -l && cd ..; \
         python3 -c 'from multiprocessing import Pool
with Pool(2) as pool: print(\"pool:\", sum(pool.map(abs, range(4))))'; \
         printf 'hello: hello.c\\n\\tcc -o hello hello.c\\n' > Makefile; \
         printf '#include <stdio.h>\\nint main(void) {{ puts(\"hello from cc\"); return 0; }}\\n' > hello.c; \
         make -s && ./hello; \
         mkdir -p \"$DSH_HOME/notes\" && echo kept > \"$DSH_HOME/notes/f\" && cat \"$DSH_HOME/notes/f\"; \
         echo extra > {extra}/f && cat {extra}/f # {m}",
        extra = extra.display()
    );
    let printed = run(
        backend,
        ws.path(),
        &[
            "--dsh-home",
            dsh_home.to_str().unwrap(),
            "--writable-root",
            extra.to_str().unwrap(),
        ],
        &command,
    );
    assert_eq!(
        printed, "1\npool: 6\nhello from cc\nkept\nextra\n",
        "{printed}"
    );
    assert_eq!(
        std::fs::read_to_string(dsh_home.join("notes/f")).unwrap(),
        "kept\n"
    );
    assert_nothing_left(&m);
}

pub(crate) fn start_up_files_programs_and_other_directories_stay_refused(backend: Backend) {
    let Some((ws, m)) = setup(backend) else {
        return;
    };
    let beside = workspace();
    let home = std::env::var("HOME").unwrap();
    let ssh_existed = Path::new(&home).join(".ssh").exists();
    let new = format!("dsh-refused-{m}");
    let planted = [
        format!("{home}/.cargo/bin/{new}"),
        format!("/usr/local/bin/{new}"),
        format!("{}/{new}", beside.path().display()),
    ];
    // `: >>` opens an existing file for writing without changing it: were the sandbox to let it
    // through, nothing of the user's would be harmed.
    let command = format!(
        "try() {{ if (eval \"$2\") 2>/dev/null; then echo \"WROTE $1\"; else echo \"refused $1\"; fi; }}; \
         try bashrc ': >> ~/.bashrc'; \
         try ssh 'mkdir -p ~/.ssh && : >> ~/.ssh/authorized_keys'; \
         try gitconfig ': >> ~/.gitconfig'; \
         try passwd ': >> /etc/passwd'; \
         try cargo-bin ': > {}'; \
         try usr-local-bin ': > {}'; \
         try beside ': > {}' # {m}",
        planted[0], planted[1], planted[2]
    );
    let printed = run(backend, ws.path(), &[], &command);
    let wrote: Vec<&str> = printed.lines().filter(|l| l.starts_with("WROTE")).collect();
    for file in &planted {
        let _ = std::fs::remove_file(file);
    }
    if !ssh_existed {
        let _ = std::fs::remove_dir_all(Path::new(&home).join(".ssh"));
    }
    assert!(wrote.is_empty(), "{printed}");
    for what in [
        "bashrc",
        "ssh",
        "gitconfig",
        "passwd",
        "cargo-bin",
        "usr-local-bin",
        "beside",
    ] {
        assert_has(&printed, &format!("refused {what}\n"), what);
    }
    assert_nothing_left(&m);
}

/// `dsh doctor` and the `bash` description (MCP `tools/list`) list the same writable set: the
/// everyday roots and, for the server, its `--writable-root`.
#[test]
fn doctor_and_the_tool_description_list_the_writable_set() {
    if !Backend::Landlock.usable() {
        return;
    }
    let extra = workspace();
    let extra = extra.path().to_str().unwrap();
    let doctor = crate::common::run_dsh(&["doctor"]);
    let doctor = String::from_utf8_lossy(&doctor.stdout).into_owned();
    let roots = doctor
        .lines()
        .find_map(|line| line.strip_prefix("sandbox writable roots: "))
        .unwrap_or_else(|| panic!("no writable roots in {doctor}"))
        .strip_suffix(" (and each --writable-root)")
        .unwrap()
        .to_owned();
    assert!(roots.contains("/dev/shm"), "{roots}");
    assert!(!roots.contains(".cargo/bin"), "{roots}");
    let mut client = crate::mcp_raw::Client::session(
        "2025-06-18",
        serde_json::json!({}),
        &["--sandbox-backend", "landlock", "--writable-root", extra],
    );
    client.send(serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    let tools = client.response(1)["result"]["tools"].clone();
    client.finish();
    let description = tools[0]["description"].as_str().unwrap();
    let tmp = std::fs::canonicalize("/tmp").unwrap();
    assert!(
        description.ends_with(&format!(
            "\n\nUnder workspace-write a command may write only the workspace and: \
             /dev/null, /dev/tty, {}, {roots}, {extra}.",
            tmp.display()
        )),
        "{description}"
    );
}

/// A truncated result names its spill file, and the next command reads it whole: the sandbox shows
/// the runtime's spill directory read-only at its own path (it lies in the host's `/tmp`, which the
/// sandbox covers with its own temp). The directory cannot be listed, so a command (of any session)
/// finds only the files it was told of; nothing in it can be written or removed; the server removes
/// it when it ends.
fn a_truncated_outputs_spill_file_is_readable_by_the_next_command(backend: Backend) {
    let Some((ws, m)) = setup(backend) else {
        return;
    };
    spill_file_read_by_the_next_command(confined_server(backend, ws.path(), &[]), &m);
}

/// The same with no `--sandbox` flag: the default `workspace-write` (the provider the binary probes
/// is then rebuilt by the runtime, which adds its spill directory).
#[test]
fn the_default_sandbox_shows_the_spill_directory_too() {
    let Some((ws, m)) = setup(Backend::Landlock) else {
        return;
    };
    let server =
        crate::jsonl_server::Server::start(&["--cwd", ws.path().to_str().unwrap()]).unwrap();
    spill_file_read_by_the_next_command(server, &m);
}

/// The spill file named in `text` (the reply to `id`), read by the next command, holds `bytes`.
fn read_back(server: &mut crate::jsonl_server::Server, id: &str, text: &str, bytes: usize) {
    let path = text
        .split("full output: ")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .unwrap_or_else(|| panic!("no spill path in {id}: {text}"))
        .to_owned();
    let read = format!("{id}-read");
    server.call(&read, "bash", bash(&format!("wc -c < {path}"), json!({})));
    assert_eq!(server.text(&read), format!("{bytes}\n"), "{id}");
}

/// `server` (confined) spills a call's output; the next command reads the file whole (so too after
/// a timeout and after a `bash_kill`), another session cannot list, write or remove anything there;
/// the directory is gone when it ends.
fn spill_file_read_by_the_next_command(mut server: crate::jsonl_server::Server, m: &str) {
    server.call(
        "big",
        "bash",
        bash(&format!("seq 1 30000 # {m}"), json!({})),
    );
    let big = server.text("big");
    let path = big
        .split("full output: ")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .unwrap_or_else(|| panic!("no spill path in {}", &big[big.len() - 200..]))
        .to_owned();
    let dir = Path::new(&path).parent().unwrap().display().to_string();
    let whole: usize = (1..=30000).map(|n: u32| n.to_string().len() + 1).sum();
    server.call("read", "bash", bash(&format!("wc -c < {path}"), json!({})));
    assert_eq!(server.text("read"), format!("{whole}\n"));
    let probes = format!(
        "ls {dir}; ls {dir}/dsh-proc-*; touch {dir}/new-{m}; echo more >> {path}; rm -f {path}; \
         echo probed"
    );
    server.call_as("other", "probe", "bash", bash(&probes, json!({})));
    let probed = server.text("probe");
    assert!(probed.contains("probed"), "{probed}");
    assert!(
        probed.contains(&format!(
            "ls: cannot open directory '{dir}': Permission denied"
        )),
        "{probed}"
    );
    // The glob found nothing to expand: the files are there, but not to be listed.
    assert!(
        probed.contains(&format!("ls: cannot access '{dir}/dsh-proc-*'")),
        "{probed}"
    );
    assert!(!Path::new(&format!("{dir}/new-{m}")).exists());
    assert_eq!(std::fs::metadata(&path).unwrap().len(), whole as u64);
    // A command that spilled and then ended by its timeout, or by `bash_kill`, leaves a file the
    // next command reads whole too; then ordinary work runs on.
    let flood_then_hang = format!("seq 1 30000; echo flooded; sleep 600 # {m}");
    server.call(
        "timed",
        "bash",
        bash(&flood_then_hang, json!({"timeoutMs": 3000})),
    );
    let timed = server.text("timed");
    assert!(
        timed.contains("BASH_TIMEOUT") || timed.contains("timed out"),
        "{timed}"
    );
    let flooded = whole + "flooded\n".len();
    read_back(&mut server, "timed", &timed, flooded);
    let task = server.start_background("bg", &flood_then_hang);
    server.call(
        "flooded",
        "bash_output",
        json!({"task_id": task, "until": "flooded\n", "timeout_ms": 60000}),
    );
    let seen = server.text("flooded");
    assert!(seen.contains("flooded"), "{seen}");
    server.call("kill", "bash_kill", json!({"task_id": task}));
    assert!(server.text("kill").contains(&task));
    server.call(
        "killed",
        "bash_output",
        json!({"task_id": task, "wait": true, "timeout_ms": 60000}),
    );
    let killed = server.text("killed");
    assert!(killed.contains("[status: killed"), "{killed}");
    // The read that cut the flood named the file.
    read_back(&mut server, "killed", &seen, flooded);
    server.call("after", "bash", bash("echo still fine", json!({})));
    assert_eq!(server.text("after"), "still fine\n");
    server.finish();
    assert!(
        !Path::new(&dir).exists(),
        "{dir} is left after the server ended"
    );
    assert_nothing_left(m);
}

under_each_backend!(
    a_truncated_outputs_spill_file_is_readable_by_the_next_command,
    package_managers_build_and_test_with_no_approval,
    local_tools_dsh_home_and_extra_roots_are_writable,
    start_up_files_programs_and_other_directories_stay_refused,
);
