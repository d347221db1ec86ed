//! Structured results beside the unchanged text, and the output peek a front end uses for progress.

use std::time::{Duration, Instant};

use crate::common::*;
use dsh::ToolCall;
use dsh::actors::tool_bash::{OutputPeek, output_schema};
use serde_json::json;

#[actix_rt::test]
async fn foreground_background_read_and_kill_carry_structured_facts() {
    let (rt, _spill) = runtime();
    let result = bash(&rt, "printf 'out\\n'; printf 'e' >&2; exit 3").await;
    assert_eq!(result.text, "out\n[stderr]\ne\n[exit code: 3]");
    let s = result.structured.expect("structured");
    assert_eq!(s["background"], false);
    assert_eq!(s["exit_code"], 3);
    assert_eq!(s["signal"], serde_json::Value::Null);
    assert_eq!(s["timed_out"], false);
    assert_eq!(
        s["stdout"],
        json!({"bytes": 4, "truncated": false, "spill_path": null})
    );
    assert_eq!(s["stderr"]["bytes"], 1);
    assert!(s["duration_ms"].as_u64().is_some());

    let timed_out = call(
        &rt,
        "bash",
        json!({"command": "sleep 5", "description": "d", "timeoutMs": 100}),
    )
    .await;
    let s = timed_out.structured.unwrap();
    assert_eq!(s["timed_out"], true);
    assert_eq!(s["signal"], "SIGTERM");

    let id = start_bg(&rt, None, "echo bg; sleep 30").await;
    poll_for(&rt, None, &id, "bg").await;
    let read = call(&rt, "bash_output", json!({"task_id": id})).await;
    let s = read.structured.unwrap();
    assert_eq!(
        (s["task_id"].as_str(), s["status"].as_str()),
        (Some(id.as_str()), Some("running"))
    );
    let kill = call(&rt, "bash_kill", json!({"task_id": id})).await;
    assert_eq!(kill.structured.unwrap()["outcome"], "killed");
    // A second kill while the first is under way is "killed" too (issue 11); once the task has
    // settled (its status names the signal) it is "already finished".
    let deadline = Instant::now() + Duration::from_secs(30);
    while call(&rt, "bash_output", json!({"task_id": id}))
        .await
        .structured
        .is_none_or(|s| s["signal"].is_null())
    {
        assert!(Instant::now() < deadline, "the killed task never settled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let again = call(&rt, "bash_kill", json!({"task_id": id})).await;
    assert_eq!(again.structured.unwrap()["outcome"], "already_finished");

    let bad = call(&rt, "bash", json!({"description": "no command"})).await;
    assert!(bad.is_error && bad.structured.is_none());
    for tool in ["bash", "bash_output", "bash_write", "bash_kill"] {
        assert!(output_schema(tool).is_some());
    }
    finish(rt).await;
}

#[actix_rt::test]
async fn a_peek_sees_a_running_commands_bytes_and_last_line() {
    let (rt, _spill) = runtime();
    let peek = OutputPeek::new();
    let call = ToolCall::new(
        "bash",
        bash_args("printf 'first\\nsecond line\\n'; sleep 30"),
    )
    .with_cancel(dsh::AbortSignal::new())
    .with_peek(peek.clone());
    let cancel = call.cancel.clone().unwrap();
    let running = actix::spawn({
        let rt = rt.clone();
        async move { rt.call(call).await }
    });
    let deadline = Instant::now() + SOON;
    let seen = loop {
        if let Some(seen) = peek.snapshot().filter(|s| s.stdout_bytes == 18) {
            break seen;
        }
        assert!(Instant::now() < deadline, "peek never saw the output");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(seen.last_line, "second line");
    assert_eq!(seen.stderr_bytes, 0);
    cancel.abort("test done");
    let result = running.await.unwrap();
    assert_eq!(result.text, "Error: command aborted");
    assert_eq!(result.structured.unwrap()["aborted"], true);
    finish(rt).await;
}

/// One session of one runtime goes through every kind of outcome — an exit, a signal, a timeout, a
/// cancel, a refused argument, a background start, a read, a kill — and each typed outcome says
/// what its text says; afterwards ordinary work is still right, and releasing the session kills
/// what it left running.
#[actix_rt::test]
async fn a_session_sees_every_kind_of_outcome_typed_as_its_text_says() {
    use dsh::{Ending, KillResult, TaskStatus, ToolOutcome};

    let (rt, _spill) = runtime();
    let agent = TestAgent::new("typed");
    let session = rt.session_of(agent.agent.clone());
    assert_eq!(session.id(), "typed");
    let ran = |result: &dsh::ToolResult| match &result.outcome {
        Some(ToolOutcome::Ran(ran)) => ran.clone(),
        other => panic!("not a run: {other:?} ({})", result.text),
    };

    let exited = session
        .call(ToolCall::new("bash", bash_args("echo hi; exit 3")))
        .await;
    assert_eq!(exited.text, "hi\n[exit code: 3]");
    let facts = ran(&exited);
    assert_eq!((facts.ending, facts.exit_code), (Ending::Exited, Some(3)));
    assert_eq!(facts.stdout.bytes, 3);
    assert!(exited.error.is_none() && exited.task_id().is_none());

    let signalled = session
        .call(ToolCall::new("bash", bash_args("kill -TERM $$")))
        .await;
    assert_eq!(signalled.text, "(no output)\n[killed by signal: SIGTERM]");
    let facts = ran(&signalled);
    assert_eq!(facts.ending, Ending::Exited);
    assert_eq!(
        facts.signal.as_ref().map(dsh::Signal::as_str),
        Some("SIGTERM")
    );

    let timed_out = session
        .call(ToolCall::new(
            "bash",
            json!({"command": "sleep 5", "description": "d", "timeoutMs": 100}),
        ))
        .await;
    assert!(
        timed_out.text.contains("[timed out after 100ms]"),
        "{}",
        timed_out.text
    );
    let facts = ran(&timed_out);
    assert_eq!(facts.ending, Ending::TimedOut);
    assert_eq!(facts.timeout, Duration::from_millis(100));

    let cancel = dsh::AbortSignal::new();
    let peek = OutputPeek::new();
    let running = session.call(
        ToolCall::new("bash", bash_args("echo started; sleep 30"))
            .with_cancel(cancel.clone())
            .with_peek(peek.clone()),
    );
    tokio::pin!(running);
    let started = Instant::now();
    loop {
        tokio::select! {
            _ = &mut running => panic!("the call ended before it was cancelled"),
            () = tokio::time::sleep(Duration::from_millis(10)) => {}
        }
        if peek.snapshot().is_some_and(|s| s.stdout_bytes > 0) {
            break;
        }
        assert!(started.elapsed() < SOON, "no output");
    }
    cancel.abort("test");
    let aborted = running.await;
    assert_eq!(aborted.text, "Error: command aborted");
    assert_eq!(ran(&aborted).ending, Ending::Aborted);
    assert_eq!(
        aborted.error.as_ref().map(dsh::ToolError::code),
        Some("ABORTED")
    );

    let refused = session.call(ToolCall::new("bash", bash_args(" "))).await;
    assert_eq!(
        refused.text,
        "Error: invalid command: expected a non-empty string"
    );
    assert!(refused.outcome.is_none());
    assert_eq!(
        refused.error.as_ref().map(dsh::ToolError::code),
        Some("INVALID_ARGUMENTS")
    );

    let background = json!({"command": "echo bg", "description": "d", "run_in_background": true});
    let start = session.call(ToolCall::new("bash", background)).await;
    let id = start.task_id().cloned().expect("a task id");
    assert_eq!(start.text, format!("started background task {id}"));
    assert_eq!(
        start.outcome,
        Some(ToolOutcome::Started {
            task_id: id.clone()
        })
    );
    let read = session
        .call(ToolCall::new(
            "bash_output",
            json!({"task_id": id, "wait": true}),
        ))
        .await;
    assert_eq!(read.text, "bg\n[status: completed, exit code: 0]");
    let Some(ToolOutcome::Read(facts)) = &read.outcome else {
        panic!("not a read: {:?}", read.outcome);
    };
    assert_eq!((&facts.task_id, facts.output.as_str()), (&id, "bg\n"));
    assert_eq!(facts.status, TaskStatus::Completed { exit_code: 0 });
    let kill = session
        .call(ToolCall::new("bash_kill", json!({"task_id": id})))
        .await;
    assert_eq!(kill.text, format!("task {id} had already finished"));
    assert_eq!(
        kill.outcome,
        Some(ToolOutcome::Kill {
            task_id: id,
            result: KillResult::AlreadyFinished
        })
    );
    let foreign = rt
        .session("stranger", TestAgent::new("stranger").agent.inbox)
        .call(ToolCall::new(
            "bash_kill",
            json!({"task_id": start.task_id().unwrap()}),
        ))
        .await;
    assert_eq!(
        foreign.error.as_ref().map(dsh::ToolError::code),
        Some("FOREIGN_TASK")
    );

    // Ordinary work after all of that.
    let again = session
        .call(ToolCall::new("bash", bash_args("printf ok")))
        .await;
    assert_eq!(again.text, "ok");
    assert_eq!(ran(&again).exit_code, Some(0));

    // Release kills what the session left running and forgets its tasks.
    let sleeper = json!({"command": "sleep 60", "description": "d", "run_in_background": true});
    let sleeper = session.call(ToolCall::new("bash", sleeper)).await;
    let sleeper_id = sleeper.task_id().unwrap().to_string();
    assert!(session.tasks().await.iter().any(|t| t.id == sleeper_id));
    session.release().await;
    assert!(session.tasks().await.is_empty());
    let gone = session
        .call(ToolCall::new(
            "bash_output",
            json!({"task_id": sleeper.task_id().unwrap()}),
        ))
        .await;
    assert!(gone.is_error, "{}", gone.text);
    rt.shutdown().await;
}

/// A session on a runtime without a sandbox has no mode to set: a typed error, not text.
#[actix_rt::test]
async fn a_sandbox_mode_on_a_runtime_without_a_sandbox_is_a_typed_error() {
    let (rt, _spill) = runtime();
    let session = rt.session_of(TestAgent::new("plain").agent);
    let err = session
        .set_sandbox_mode(Some(dsh::SandboxMode::ReadOnly))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, dsh::RuntimeError::Tool(e) if e.code() == "NOT_SANDBOXED"),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "the bash executor does not sandbox; there is no mode to set"
    );
    session.set_workspace(None).await.unwrap();
    rt.shutdown().await;
}
