//! The pure cgroup v2 limit path (`pids.max`, `memory.max` in the task's own leaf), which this
//! project's hosts cannot run for real: their pids and memory controllers are bound to v1
//! hierarchies, and a controller serves one hierarchy at a time. The tree is built against a
//! host whose v2 cgroup is a plain directory offering both controllers, and the test reads back
//! every file the kernel would act on. Enforcement itself is the kernel's; what is checked here is
//! that dsh asks for it in the v2 places and the v2 words.

use std::path::Path;

use dsh_contain::host::CgroupPlace;
use dsh_contain::mountinfo::CgroupMount;
use dsh_contain::{CgroupTree, HostFacts, LimitSource, Limits};

/// A host whose own v2 cgroup is `dir` and offers the pids and memory controllers, with no v1.
fn v2_only_host(dir: &Path) -> HostFacts {
    std::fs::write(dir.join("cgroup.subtree_control"), "").unwrap();
    HostFacts {
        v2: Some(CgroupPlace {
            mount: CgroupMount {
                mount_point: dir.to_path_buf(),
                root: "/".into(),
                v2: true,
                controllers: Vec::new(),
                writable: true,
            },
            own_path: "/".into(),
            dir: Some(dir.to_path_buf()),
            creatable: Ok(()),
        }),
        v2_controllers: vec!["pids".into(), "memory".into()],
        v2_kill: true,
        v1_pids: None,
        v1_memory: None,
        v1_other: Vec::new(),
        subreaper: true,
        pidfd: true,
        clone3: true,
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .to_owned()
}

#[test]
fn v2_limits_are_written_in_the_leaf_and_the_controllers_enabled_above_it() {
    let own = tempfile::tempdir().unwrap();
    let facts = v2_only_host(own.path());
    assert_eq!(facts.pids_limit(), Ok(LimitSource::V2));
    assert_eq!(facts.memory_limit(), Ok(LimitSource::V2));
    let limits = Limits {
        max_pids: Some(64),
        max_memory: Some(128 << 20),
    };
    let tree = CgroupTree::create(&facts, limits).expect("tree");
    // Both controllers are enabled for the runtime's children and for the tree's leaves.
    assert_eq!(
        read(&own.path().join("cgroup.subtree_control")),
        "+pids +memory"
    );
    assert_eq!(
        read(&tree.path().join("cgroup.subtree_control")),
        "+pids +memory"
    );
    assert!(tree.v1_paths().is_empty(), "no v1 twin on a v2-only host");

    let leaf = tree.create_leaf("p0-0", limits).expect("leaf");
    let dir = leaf.path().to_path_buf();
    assert_eq!(dir.parent(), Some(tree.path()));
    assert_eq!(read(&dir.join("pids.max")), "64");
    assert_eq!(read(&dir.join("memory.max")), (128u64 << 20).to_string());
    // The whole task dies together on OOM, and cannot swap its way past the limit.
    assert_eq!(read(&dir.join("memory.oom.group")), "1");
    assert_eq!(read(&dir.join("memory.swap.max")), "0");
    // OOM kills are read from the leaf's own memory.events.
    std::fs::write(
        dir.join("memory.events"),
        "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n",
    )
    .unwrap();
    assert_eq!(leaf.oom_kills().expect("events"), Some(1));
    // The plain directory cannot be torn down like a cgroup; the tempdir goes with its files.
    std::mem::forget(leaf);
    std::mem::forget(tree);
}

#[test]
fn a_leaf_without_limits_writes_no_limit_files() {
    let own = tempfile::tempdir().unwrap();
    let facts = v2_only_host(own.path());
    let tree = CgroupTree::create(&facts, Limits::default()).expect("tree");
    assert_eq!(read(&own.path().join("cgroup.subtree_control")), "");
    let leaf = tree.create_leaf("p0-0", Limits::default()).expect("leaf");
    assert!(!leaf.path().join("pids.max").exists());
    assert!(!leaf.path().join("memory.max").exists());
    assert_eq!(leaf.oom_kills().expect("no memory limit"), None);
    std::mem::forget(leaf);
    std::mem::forget(tree);
}
