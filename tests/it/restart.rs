//! Restart of host-started background tasks (`Runtime::start_supervised`): on failure or always,
//! within an intensity limit, with backoff; giving up tells the owner. A kill stops the restarts.

use std::time::Duration;

use crate::common::*;
use dsh::{BashExecRequest, Restart, RestartPolicy};
use serde_json::json;

fn policy(restart: Restart, max_restarts: u32) -> RestartPolicy {
    RestartPolicy {
        restart,
        max_restarts,
        within: Duration::from_secs(60),
        backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(40),
    }
}

/// Starts `command` under `policy` for `owner` and returns its task id.
async fn supervised(
    rt: &dsh::Runtime,
    command: &str,
    policy: RestartPolicy,
    owner: Option<&dsh::AgentRef>,
) -> dsh::TaskId {
    rt.start_supervised(BashExecRequest::new(command), policy, owner.cloned())
        .await
        .expect("a supervised start")
}

/// Reads task `id`'s output until its run `n` has begun (a restart marker `run <n>]`).
async fn until_run(rt: &dsh::Runtime, id: &dsh::TaskId, n: u32) -> dsh::ToolResult {
    let until = format!("run {n}\\]");
    call(rt, "bash_output", json!({"task_id": id, "until": until})).await
}

#[actix_rt::test]
async fn a_failing_task_restarts_up_to_its_limit_then_gives_up_and_tells_the_owner() {
    let (rt, _s) = runtime();
    let agent = TestAgent::new("host");
    let on_failure = policy(Restart::OnFailure, 2);
    let id = supervised(&rt, "echo run; exit 1", on_failure, Some(&agent.agent)).await;
    let r = wait_as(&rt, &agent.agent, &id).await;
    assert_eq!(
        r.text,
        format!(
            "run\n[restarted after exit code 1; run 2]\nrun\n[restarted after exit code 1; run 3]\n\
             run\n[background bash task {id} keeps ending (exit code 1): gave up restarting it after \
             2 restarts in 60s.]\n[status: completed, exit code: 1]"
        )
    );
    let notices = agent.wait_notices(1).await;
    assert_eq!(
        notices[0],
        format!(
            "background bash task {id} keeps ending (exit code 1): gave up restarting it after 2 \
             restarts in 60s."
        )
    );
    finish(rt).await;
}

#[actix_rt::test]
async fn on_failure_leaves_a_success_alone_and_never_never_restarts() {
    let (rt, _s) = runtime();
    let ok = supervised(&rt, "echo ok", policy(Restart::OnFailure, 5), None).await;
    let r = wait_output(&rt, &ok).await;
    assert_eq!(r.text, "ok\n[status: completed, exit code: 0]");
    let never = supervised(&rt, "echo once; exit 4", policy(Restart::Never, 5), None).await;
    let r = wait_output(&rt, &never).await;
    assert_eq!(r.text, "once\n[status: completed, exit code: 4]");
    finish(rt).await;
}

#[actix_rt::test]
async fn always_restarts_until_killed() {
    let (rt, _s) = runtime();
    let always = policy(Restart::Always, 1000);
    let id = supervised(&rt, "echo tick; sleep 0.05", always, None).await;
    let r = until_run(&rt, &id, 3).await;
    assert!(
        r.text.contains("[restarted after exit code 0; run 2]")
            && r.text.ends_with("[status: running]"),
        "{}",
        r.text
    );
    kill_running(&rt, &id).await;
    let r = wait_output(&rt, &id).await;
    assert!(r.text.contains("[status: killed"), "{}", r.text);
    assert!(!r.text.contains("run 50]"), "{}", r.text);
    finish(rt).await;
}

#[actix_rt::test]
async fn only_restarts_within_the_window_count_toward_the_limit() {
    let (rt, _s) = runtime();
    // One restart allowed per 50 ms, and each run lasts longer than that: it never gives up.
    let window = RestartPolicy {
        restart: Restart::OnFailure,
        max_restarts: 1,
        within: Duration::from_millis(50),
        backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(1),
    };
    let id = supervised(&rt, "sleep 0.1; exit 1", window, None).await;
    let r = until_run(&rt, &id, 4).await;
    assert!(r.text.ends_with("[status: running]"), "{}", r.text);
    assert!(!r.text.contains("gave up"), "{}", r.text);
    call(&rt, "bash_kill", json!({"task_id": id})).await;
    finish(rt).await;
}

/// What a run leaves running (a daemon that let go of the pipes) is killed at the run's end, as a
/// service manager kills a service's leftovers: restarts never pile daemons up (each would take the
/// last one's port), and nothing outlives the task. Before, every run's daemon ran until shutdown.
#[actix_rt::test]
async fn what_each_run_leaves_running_is_killed_at_its_end() {
    let (rt, _s) = runtime();
    let marker = "dsh-restart-daemon-4417";
    let command = format!(
        "nohup bash -c 'exec -a {marker} sleep 600' > /dev/null 2>&1 < /dev/null & echo run; exit 1"
    );
    let id = supervised(&rt, &command, policy(Restart::OnFailure, 2), None).await;
    let end = call(
        &rt,
        "bash_output",
        json!({"task_id": id, "wait": true, "timeout_ms": 60000}),
    )
    .await;
    assert!(
        end.text.ends_with("[status: completed, exit code: 1]"),
        "{}",
        end.text
    );
    assert_eq!(end.text.matches("run\n").count(), 3, "{}", end.text);
    let gone = dsh_test_support::wait::poll_until(SOON, || {
        dsh_test_support::procfs::live_with_cmdline(marker).is_empty()
    })
    .await;
    assert!(
        gone,
        "left running: {:?}",
        dsh_test_support::procfs::live_with_cmdline(marker)
    );
    rt.shutdown().await;
}
