//! Host discovery on the machine running the tests: what `dsh doctor` would print.

use dsh_contain::{HostFacts, Mode};

#[test]
fn doctor_lines_describe_the_host() {
    let facts = HostFacts::discover();
    let lines = facts.doctor_lines();
    for line in &lines {
        println!("{line}");
    }
    assert!(lines.iter().any(|l| l.starts_with("cgroup v2:")));
    assert!(lines.iter().any(|l| l.starts_with("containment auto: ")));
    assert!(lines.iter().any(|l| l.starts_with("subreaper: ")));
    let auto = facts.auto_mode();
    assert!(facts.check_mode(auto).is_ok());
    assert_eq!(auto == Mode::Cgroup, facts.cgroup_ready().is_ok());
    if let Err(why) = facts.cgroup_ready() {
        assert!(facts.check_mode(Mode::Cgroup).is_err());
        assert!(lines.iter().any(|l| l.contains("Delegate=yes")), "{why}");
    }
    // Probes leave nothing behind.
    if let Some(dir) = facts.v2.as_ref().and_then(|p| p.dir.as_ref()) {
        let probes = std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with("dsh-probe-"))
                    .count()
            })
            .unwrap_or(0);
        assert_eq!(probes, 0);
    }
}
