//! The LG-* cases (the `bash_output`/`bash_kill` contract), the TI-* cases (an agent loop), and
//! notices for two agents at once.

use crate::common::*;
use dsh::ToolCall;
use dsh_test_support::actors::Stop;
use serde_json::json;

/// Catalogue: LG-01.
#[actix_rt::test]
async fn a_background_start_is_acknowledged_with_its_task_id() {
    let (rt, _s) = runtime();
    let r = bash_with(&rt, "true", json!({"run_in_background": true})).await;
    let id = r
        .text
        .strip_prefix("started background task bash-")
        .expect(&r.text);
    assert!(id.parse::<u32>().is_ok());
    finish(rt).await;
}

/// Catalogue: LG-02.
#[actix_rt::test]
async fn each_poll_returns_only_the_new_output() {
    let (rt, _s, id) = runtime_running("echo first; sleep 1; echo second").await;
    let seen = poll_for(&rt, None, &id, "first").await;
    assert!(seen.contains("[status: running]"), "{seen}");
    let after = poll_for(&rt, None, &id, "[status: completed, exit code: 0]").await;
    assert!(
        after.contains("second") && !after.contains("first"),
        "{after}"
    );
    let r = bash_output(&rt, json!({"task_id": id})).await;
    assert_eq!(r.text, "(no new output)\n[status: completed, exit code: 0]");
    finish(rt).await;
}

/// Catalogue: LG-03.
#[actix_rt::test]
async fn a_read_past_the_cap_says_what_was_lost() {
    let (rt, _s) = runtime_with(|b| b.max_output_bytes(100));
    let id = start_bg(
        &rt,
        None,
        "for i in $(seq 1 200); do printf 'line-%04d\\n' $i; done",
    )
    .await;
    let seen = poll_for(&rt, None, &id, "[status: completed").await;
    assert!(
        seen.contains("[some output was dropped from memory; full output: /"),
        "{seen}"
    );
    finish(rt).await;
}

/// Catalogue: LG-05.
#[actix_rt::test]
async fn bash_kill_kills_and_the_read_says_so() {
    let (rt, _s, id) = runtime_running("sleep 60").await;
    assert_eq!(
        bash_kill(&rt, &id).await.text,
        format!("killed background task {id}")
    );
    poll_for(&rt, None, &id, "[status: killed by SIGTERM]").await;
    assert_eq!(
        bash_kill(&rt, &id).await.text,
        format!("task {id} had already finished")
    );
    finish(rt).await;
}

/// Catalogue: LG-06.
#[actix_rt::test]
async fn an_unknown_task_id_is_an_error_for_read_and_kill() {
    let (rt, _s) = runtime();
    let r = bash_output(&rt, json!({"task_id": "bash-999"})).await;
    assert_eq!(
        (r.text.as_str(), r.is_error),
        ("Error: unknown bash task \"bash-999\"", true)
    );
    assert!(
        call(&rt, "bash_kill", json!({"task_id": "bash-999"}))
            .await
            .is_error
    );
    finish(rt).await;
}

/// Catalogue: LG-07 to LG-09.
#[actix_rt::test]
async fn a_missing_or_invalid_task_id_is_an_error() {
    let (rt, _s) = runtime();
    let r = bash_output(&rt, json!({})).await;
    assert_eq!(
        r.text,
        "Error: invalid arguments: missing required property \"task_id\""
    );
    let r = bash_output(&rt, json!({"task_id": 9})).await;
    assert_eq!(
        r.text,
        "Error: invalid arguments: \"task_id\" must be a string"
    );
    let r = call(&rt, "bash_kill", json!({"task_id": ""})).await;
    assert!(
        r.is_error && r.text.contains("invalid task_id"),
        "{}",
        r.text
    );
    finish(rt).await;
}

/// Catalogue: LG-10.
#[actix_rt::test]
async fn notice_for_the_owner() {
    let (rt, _s) = runtime();
    let (agent, id) = TestAgent::with_task(&rt, "bg", "true").await;
    let notices = agent.wait_notices(1).await;
    assert_eq!(
        notices,
        [format!(
            "background bash task {id} finished [status: completed, exit code: 0]. Read its output with bash_output."
        )]
    );
    assert_eq!(agent.notices.lock().unwrap()[0].source, "tool-bash");
    finish(rt).await;
}

/// Catalogue: LG-11, LG-13.
#[actix_rt::test]
async fn a_gone_agent_gets_no_notice_and_its_task_is_killed() {
    let (rt, _s) = runtime();
    let (agent, id) = TestAgent::with_task(&rt, "short-lived", "sleep 60").await;
    agent.addr.send(Stop::new()).await.unwrap();
    // The registry notices the closed mailbox, kills the task and forgets it; no error anywhere.
    let deadline = std::time::Instant::now() + SOON;
    while !rt.tasks(Some("short-lived")).await.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the gone agent's task was never released"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(agent.notice_texts().is_empty());
    let r = bash_output(&rt, json!({"task_id": id})).await;
    assert!(r.text.contains("unknown bash task"), "{}", r.text);
    finish(rt).await;
}

/// Catalogue: LG-14.
#[actix_rt::test]
async fn unowned_task_gets_no_notice() {
    let (rt, _s) = runtime();
    let bystander = TestAgent::new("bystander");
    let id = start_bg(&rt, None, "true").await;
    poll_for(&rt, None, &id, "[status: completed").await;
    // A later owned task's notice arrives, proving notices flow; the unowned one produced none.
    bystander.start_bg(&rt, "true").await;
    let notices = bystander.wait_notices(1).await;
    assert_eq!(notices.len(), 1);
    assert!(notices[0].contains("bash-2"));
    finish(rt).await;
}

/// Catalogue: LG-15 to LG-19.
#[actix_rt::test]
async fn only_the_owning_session_reads_and_kills_an_owned_task() {
    let (rt, _s) = runtime();
    let [owner, same_session, other] = ["owner", "owner", "other"].map(TestAgent::new);
    let open = start_bg(&rt, None, "sleep 60").await;
    let owned = owner.start_bg(&rt, "sleep 60").await;
    let foreign = format!("Error: task {owned} belongs to another session");
    // LG-15: a different session is refused for read and kill.
    assert_eq!(other.output(&rt, &owned).await.text, foreign);
    assert_eq!(other.kill(&rt, &owned).await.text, foreign);
    // LG-17: so is a caller with no agent.
    assert_eq!(
        bash_output(&rt, json!({"task_id": owned})).await.text,
        foreign
    );
    // LG-16: another agent object with the same session id is the owner.
    assert!(!same_session.output(&rt, &owned).await.is_error);
    // LG-18: an unowned task is open to everyone.
    assert!(!other.output(&rt, &open).await.is_error);
    assert!(!bash_kill(&rt, &open).await.is_error);
    // LG-19: ownership persists after completion.
    assert!(!owner.kill(&rt, &owned).await.is_error);
    poll_for(
        &rt,
        Some(&owner.agent),
        &owned,
        "[status: killed by SIGTERM]",
    )
    .await;
    assert_eq!(other.output(&rt, &owned).await.text, foreign);
    finish(rt).await;
}

/// Catalogue: TI-01.
#[actix_rt::test]
async fn first_turn_session_identity() {
    // Changes the process environment: only safe with no other test running beside it.
    dsh_test_support::own_process!(first_turn_session_identity);
    // SAFETY: own_process! above: this test has its process to itself.
    unsafe { std::env::set_var("DSH_STALE_PARENT", "stale") };
    let command = "printf '%s\\n' \"$DSH_HOME\" \"$DSH_SHELL\" \"$DSH_SESSION_ID\" \"${DSH_STALE_PARENT-unset}\"";
    let (text, home) = run_in_a_session("session-env-id", command).await;
    let expected = format!("{}\n1\nsession-env-id\nunset\n", home.display());
    assert_eq!(text, expected);
}

/// Catalogue: TI-02, TI-03.
#[actix_rt::test]
async fn foreground_results_in_a_loop() {
    let (rt, _s) = runtime();
    let agent = TestAgent::new("loop");
    let r = call_as(&rt, &agent.agent, "bash", bash_args("echo integration-ok")).await;
    assert_eq!((r.text.as_str(), r.is_error), ("integration-ok\n", false));
    let r = call_as(&rt, &agent.agent, "bash", bash_args("exit 9")).await;
    assert!(!r.is_error && r.text.contains("[exit code: 9]"));
    finish(rt).await;
}

/// Catalogue: TI-04.
#[actix_rt::test]
async fn background_start_notice_then_collection() {
    let (rt, _s) = runtime();
    let agent = TestAgent::new("loop");
    let r = call_as(
        &rt,
        &agent.agent,
        "bash",
        json!({"command": "echo bg-ok", "description": "d", "run_in_background": true}),
    )
    .await;
    assert_eq!(r.text, "started background task bash-1");
    let notices = agent.wait_notices(1).await;
    assert!(
        notices[0].starts_with("background bash task bash-1 finished"),
        "{notices:?}"
    );
    let r = agent.output(&rt, "bash-1").await;
    assert_eq!(r.text, "bg-ok\n[status: completed, exit code: 0]");
    finish(rt).await;
}

#[actix_rt::test]
async fn two_agents_get_exactly_their_own_notices_and_cannot_touch_each_other() {
    let (rt, _s) = runtime();
    let [alice, bob] = ["alice", "bob"].map(TestAgent::new);
    let a_done = alice.start_bg(&rt, "echo a1").await;
    let a_killed = alice.start_bg(&rt, "sleep 60").await;
    let b_done = bob.start_bg(&rt, "exit 4").await;
    let b_killed = bob.start_bg(&rt, "sleep 60").await;
    let b_done2 = bob.start_bg(&rt, "echo b2").await;
    // Neither can read or kill the other's tasks.
    for (agent, foreign) in [(&alice, &b_killed), (&bob, &a_killed)] {
        let expected = format!("Error: task {foreign} belongs to another session");
        assert_eq!(agent.output(&rt, &foreign).await.text, expected);
        assert_eq!(agent.kill(&rt, &foreign).await.text, expected);
    }
    // Each kills its own sleeper: no notice for those.
    assert!(!alice.kill(&rt, &a_killed).await.is_error);
    assert!(!bob.kill(&rt, &b_killed).await.is_error);
    poll_for(&rt, Some(&alice.agent), &a_killed, "[status: killed").await;
    poll_for(&rt, Some(&bob.agent), &b_killed, "[status: killed by").await;
    let alice_notices = alice.wait_notices(1).await;
    let bob_notices = bob.wait_notices(2).await;
    // A further owned task's notice is a barrier: anything that was due has arrived by then.
    let barrier = alice.start_bg(&rt, "true").await;
    alice.wait_notices(2).await;
    let notice = |id: &str, status: &str| {
        format!("background bash task {id} finished {status}. Read its output with bash_output.")
    };
    assert_eq!(
        alice.notice_texts(),
        [
            notice(&a_done, "[status: completed, exit code: 0]"),
            notice(&barrier, "[status: completed, exit code: 0]")
        ]
    );
    let mut bob_texts = bob.notice_texts();
    bob_texts.sort();
    let mut expected = vec![
        notice(&b_done, "[status: completed, exit code: 4]"),
        notice(&b_done2, "[status: completed, exit code: 0]"),
    ];
    expected.sort();
    assert_eq!(bob_texts, expected);
    assert_eq!((alice_notices.len(), bob_notices.len()), (1, 2));
    finish(rt).await;
}

#[actix_rt::test]
async fn the_handle_works_from_plain_tokio_code_on_another_thread() {
    fn assert_send_sync<T: Send + Sync + Clone>() {}
    assert_send_sync::<dsh::Runtime>();
    let rt = dsh::Runtime::builder()
        .grace_ms(200)
        .start()
        .expect("own-thread runtime");
    let handle = rt.clone();
    let text = std::thread::spawn(move || {
        let tokio_rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        tokio_rt.block_on(async move {
            handle
                .call(ToolCall::new("bash", bash_args("echo from-tokio")))
                .await
                .text
        })
    })
    .join()
    .unwrap();
    assert_eq!(text, "from-tokio\n");
    let id = start_bg(&rt, None, "sleep 60").await;
    let pid_task = rt.tasks(None).await;
    assert_eq!(pid_task[0].id, id);
    rt.shutdown().await;
    rt.shutdown().await; // idempotent
    let r = rt.call(ToolCall::new("bash", bash_args("echo late"))).await;
    assert!(r.is_error, "calls after shutdown are errors: {}", r.text);
}

#[actix_rt::test]
async fn dropping_the_last_handle_kills_and_joins_everything() {
    let rt = dsh::Runtime::builder()
        .grace_ms(200)
        .start()
        .expect("own-thread runtime");
    let id = start_bg(&rt, None, "echo $$; exec sleep 300").await;
    let seen = poll_output(&rt, None, &id, |s| {
        s.lines().any(|l| l.parse::<i32>().is_ok())
    })
    .await;
    let pid: i32 = seen.lines().find_map(|l| l.parse().ok()).unwrap();
    assert!(dsh::actors::process::signal::pid_is_live(pid));
    let clone = rt.clone();
    drop(rt);
    assert!(
        dsh::actors::process::signal::pid_is_live(pid),
        "a clone still holds the runtime"
    );
    drop(clone);
    let deadline = std::time::Instant::now() + SOON;
    while dsh::actors::process::signal::pid_is_live(pid) {
        assert!(
            std::time::Instant::now() < deadline,
            "the task outlived the last handle"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
