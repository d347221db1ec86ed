//! The TB-* cases, through the runtime handle: foreground results, argument validation,
//! schemas, background tasks, workdir resolution and the managed environment.

use std::time::Duration;

use crate::common::*;
use dsh::{AbortSignal, ToolCall};
use serde_json::json;

/// Catalogue: TB-01, TB-02, TB-03, TB-04, TB-05.
///
/// A foreground result is not an error and carries: the stdout (TB-01); `(no output)` for a silent
/// command (TB-02); stderr after stdout under its marker (TB-03); a non-zero exit code (TB-04); the
/// timeout's markers, the timeout first (TB-05).
#[actix_rt::test]
async fn foreground_results_carry_the_output_and_its_markers() {
    let (rt, _s) = runtime();
    for (arguments, expected) in [
        (bash_args("echo hello"), "hello\n"),
        (bash_args("true"), "(no output)"),
        (bash_args("echo out; echo err >&2"), "out\n[stderr]\nerr\n"),
        (bash_args("echo failing; exit 3"), "failing\n[exit code: 3]"),
        (
            json!({"command": "sleep 60", "description": "d", "timeoutMs": 100}),
            "(no output)\n[timed out after 100ms]\n[killed by signal: SIGTERM]",
        ),
    ] {
        let r = call(&rt, "bash", arguments).await;
        assert_eq!((r.text.as_str(), r.is_error), (expected, false));
    }
    finish(rt).await;
}

/// Catalogue: TB-06.
#[actix_rt::test]
async fn timeout_reported_even_when_trapped_exit_0() {
    let (rt, _s) = runtime();
    let r = bash_with(
        &rt,
        "trap \"exit 0\" TERM; sleep 60 & wait",
        json!({"timeoutMs": 100}),
    )
    .await;
    assert!(
        r.text.contains("[timed out after 100ms]") && !r.text.contains("[exit code:"),
        "{}",
        r.text
    );
    finish(rt).await;
}

/// Catalogue: TB-07.
#[actix_rt::test]
async fn truncation_with_spill_path() {
    let (rt, _s) = runtime_with(|b| b.max_output_bytes(100));
    let lines = "for i in $(seq 1 100); do printf 'line-%04d\\n' $i; done";
    let r = bash(&rt, lines).await;
    assert!(
        r.text.contains("[output truncated; full output: ") && r.text.contains("line-0100"),
        "{}",
        r.text
    );
    let path = r
        .text
        .rsplit("full output: ")
        .next()
        .unwrap()
        .trim_end_matches(']');
    let full = std::fs::read_to_string(path).unwrap();
    assert!(full.starts_with("line-0001\n") && full.ends_with("line-0100\n"));
    finish(rt).await;
}

/// Catalogue: TB-08.
#[actix_rt::test]
async fn workdir_honoured() {
    let (rt, _s) = runtime();
    let r = bash_with(&rt, "pwd", json!({"workdir": "/tmp"})).await;
    assert!(r.text.trim().ends_with("/tmp"));
    finish(rt).await;
}

/// Catalogue: TB-09.
#[actix_rt::test]
async fn a_spawn_failure_is_an_error_result() {
    let (rt, _s) = runtime();
    let r = bash_with(&rt, "true", json!({"workdir": "/nonexistent-dsh"})).await;
    assert!(
        r.is_error && r.text.contains("ENOENT") && r.text.contains("/nonexistent-dsh"),
        "{}",
        r.text
    );
    finish(rt).await;
}

/// Catalogue: TB-10.
#[actix_rt::test]
async fn foreground_abort_is_an_error() {
    let (rt, _s) = runtime();
    let cancel = AbortSignal::new();
    let trigger = cancel.clone();
    actix_rt::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        trigger.abort("user cancelled");
    });
    let r = rt
        .call(ToolCall::new("bash", bash_args("sleep 60")).with_cancel(cancel))
        .await;
    assert_eq!(
        (r.text.as_str(), r.is_error),
        ("Error: command aborted", true)
    );
    finish(rt).await;
}

/// Catalogue: TB-11 to TB-17.
#[actix_rt::test]
async fn schema_invalid_arguments() {
    let (rt, _s) = runtime();
    let cases = [
        (
            json!({}),
            "invalid arguments: missing required property \"command\"; missing required property \"description\"",
        ),
        (
            json!({"command": 42, "description": "d"}),
            "\"command\" must be a string",
        ),
        (
            json!({"command": "x"}),
            "missing required property \"description\"",
        ),
        (
            json!({"command": "x", "description": 7}),
            "\"description\" must be a string",
        ),
        (
            json!({"command": "x", "description": "d", "timeoutMs": "soon"}),
            "\"timeoutMs\" must be a number",
        ),
        (
            json!({"command": "x", "description": "d", "workdir": 7}),
            "\"workdir\" must be a string",
        ),
        (
            json!({"command": "x", "description": "d", "run_in_background": "yes"}),
            "\"run_in_background\" must be a boolean",
        ),
        (json!("echo hi"), "invalid arguments: expected an object"),
    ];
    for (args, expected) in cases {
        let r = call(&rt, "bash", args.clone()).await;
        assert!(
            r.is_error && r.text.contains(expected),
            "{args}: {}",
            r.text
        );
        assert!(
            r.text.starts_with("Error: invalid arguments: "),
            "{}",
            r.text
        );
    }
    finish(rt).await;
}

/// Catalogue: TB-18 to TB-20.
#[actix_rt::test]
async fn value_invalid_arguments() {
    let (rt, _s) = runtime();
    let cases = [
        (
            json!({"command": "  ", "description": "d"}),
            "Error: invalid command: expected a non-empty string",
        ),
        (
            json!({"command": "x", "description": "   "}),
            "Error: invalid description: expected a non-empty string",
        ),
        (
            json!({"command": "x", "description": "d", "timeoutMs": -1}),
            "Error: invalid timeoutMs: expected a positive number, got -1",
        ),
        (
            json!({"command": "x", "description": "d", "timeoutMs": 0}),
            "Error: invalid timeoutMs: expected a positive number, got 0",
        ),
    ];
    for (args, expected) in cases {
        let r = call(&rt, "bash", args).await;
        assert!(r.is_error, "{}", r.text);
        assert_eq!(r.text, expected);
    }
    finish(rt).await;
}

/// Catalogue: TB-22.
#[actix_rt::test]
async fn the_tools_are_registered_with_their_schemas() {
    let (rt, _s) = runtime();
    let defs = rt.tool_definitions();
    let names: Vec<&str> = defs.iter().map(|d| d.name).collect();
    assert_eq!(names, ["bash", "bash_output", "bash_write", "bash_kill"]);
    let bash = &defs[0];
    assert_eq!(bash.input_schema["type"], "object");
    assert_eq!(
        bash.input_schema["required"],
        json!(["command", "description"])
    );
    assert!(bash.input_schema["properties"]["run_in_background"].is_object());
    assert_eq!(bash.input_schema["properties"]["tty"]["type"], "boolean");
    assert_eq!(
        bash.input_schema["properties"]["stdin"]["enum"],
        json!(["closed", "open"])
    );
    assert_eq!(defs[2].input_schema["required"], json!(["task_id"]));
    assert!(bash.description.contains("bash_output") && bash.description.contains("bash_kill"));
    assert_eq!(defs[1].input_schema["required"], json!(["task_id"]));
    // Usable as-is in each provider's tool list.
    assert_eq!(bash.openai()["function"]["parameters"], bash.input_schema);
    assert_eq!(bash.anthropic()["input_schema"], bash.input_schema);
    assert_eq!(bash.mcp()["inputSchema"], bash.input_schema);
    finish(rt).await;
}

/// Catalogue: TB-23.
#[actix_rt::test]
async fn the_prompt_section_explains_the_exit_code_marker() {
    assert!(dsh::PROMPT_SECTION.contains("[exit code: N]"));
}

/// Catalogue: TB-27.
#[actix_rt::test]
async fn a_background_command_is_acknowledged_then_collected() {
    let (rt, _s) = runtime();
    let r = bash_with(&rt, "echo bg-ok", json!({"run_in_background": true})).await;
    assert_eq!(
        (r.text.as_str(), r.is_error),
        ("started background task bash-1", false)
    );
    let seen = poll_for(&rt, None, "bash-1", "[status: completed, exit code: 0]").await;
    assert!(seen.contains("bg-ok"));
    finish(rt).await;
}

/// Catalogue: TB-28.
#[actix_rt::test]
async fn killable_via_bash_kill() {
    let (rt, _s, id) = runtime_running("sleep 60").await;
    let r = bash_kill(&rt, &id).await;
    assert_eq!(
        (r.text.as_str(), r.is_error),
        ("killed background task bash-1", false)
    );
    poll_for(&rt, None, &id, "[status: killed by SIGTERM]").await;
    finish(rt).await;
}

/// Catalogue: TB-29.
#[actix_rt::test]
async fn self_signal_background_reported_killed() {
    let (rt, _s, id) = runtime_running("kill -TERM $$").await;
    poll_for(&rt, None, &id, "[status: killed by SIGTERM]").await;
    finish(rt).await;
}

/// Catalogue: TB-30.
#[actix_rt::test]
async fn a_task_started_by_an_agent_belongs_to_its_session() {
    let (rt, _s) = runtime();
    let (owner, id) = TestAgent::with_task(&rt, "sess-owner", "sleep 60").await;
    assert_eq!(id, "bash-1");
    let r = bash_output(&rt, json!({"task_id": id})).await;
    assert_eq!(
        (r.text.as_str(), r.is_error),
        ("Error: task bash-1 belongs to another session", true)
    );
    let r = owner.kill(&rt, &id).await;
    assert!(!r.is_error);
    poll_for(&rt, Some(&owner.agent), &id, "[status: killed by SIGTERM]").await;
    finish(rt).await;
}

/// Catalogue: TB-32.
#[actix_rt::test]
async fn pre_aborted_call_never_starts() {
    let (rt, _s) = runtime();
    let cancel = AbortSignal::new();
    cancel.abort_without_reason();
    let args = json!({"command": "echo never", "description": "d", "run_in_background": true});
    let r = rt
        .call(ToolCall::new("bash", args).with_cancel(cancel))
        .await;
    assert_eq!(
        (r.text.as_str(), r.is_error),
        ("Error: tool call aborted before dispatch", true)
    );
    let stats = rt.process_stats().await;
    assert_eq!(
        (stats.live, stats.settled, stats.peak_live),
        (0, 0, 0),
        "nothing was spawned"
    );
    assert!(rt.tasks(None).await.is_empty());
    finish(rt).await;
}

/// Catalogue: TB-34.
#[actix_rt::test]
async fn with_background_disabled_only_bash_is_offered_without_run_in_background() {
    let (rt, _s) = runtime_with(|b| b.background(false));
    let defs = rt.tool_definitions();
    assert_eq!(defs.len(), 1);
    let keys: Vec<&String> = defs[0].input_schema["properties"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(keys, ["command", "description", "timeoutMs", "workdir"]);
    assert!(
        defs[0]
            .description
            .contains("Background execution is not available")
    );
    assert!(!defs[0].description.contains("run_in_background"));
    let r = bash_with(&rt, "true", json!({"run_in_background": true})).await;
    assert_eq!(
        r.text,
        "Error: run_in_background is disabled for this deployment (enableRunInBackground: false)"
    );
    let r = bash_output(&rt, json!({"task_id": "bash-1"})).await;
    assert!(r.is_error && r.text.contains("unknown tool \"bash_output\""));
    assert_eq!(bash(&rt, "echo still works").await.text, "still works\n");
    finish(rt).await;
}

/// Catalogue: TB-57.
#[actix_rt::test]
async fn absolute_workdir_is_used_as_given() {
    let (rt, _s) = runtime_with(|b| b.cwd("/"));
    let r = bash_with(&rt, "pwd", json!({"workdir": "/tmp"})).await;
    assert!(r.text.trim().ends_with("/tmp"));
    finish(rt).await;
}

/// Catalogue: TB-58.
#[actix_rt::test]
async fn relative_workdir_resolves_against_the_runtime_cwd() {
    let (rt, _s) = runtime_with(|b| b.cwd("/usr"));
    let r = bash_with(&rt, "pwd", json!({"workdir": "bin"})).await;
    assert!(r.text.trim().ends_with("/usr/bin"), "{}", r.text);
    assert_eq!(
        bash(&rt, "pwd").await.text,
        "/usr\n",
        "no workdir: the runtime cwd"
    );
    finish(rt).await;
}

/// Catalogue: TB-60.
#[actix_rt::test]
async fn no_agent_uses_the_executor_default() {
    let (rt, _s) = runtime();
    let r = bash(&rt, "pwd").await;
    assert!(!r.is_error && !r.text.trim().is_empty());
    assert_eq!(
        r.text.trim(),
        std::env::current_dir().unwrap().to_str().unwrap()
    );
    finish(rt).await;
}

/// Catalogue: TB-79.
#[actix_rt::test]
async fn description_mentions_managed_env() {
    let (rt, _s) = runtime();
    let description = &rt.tool_definitions()[0].description;
    assert!(description.contains("$DSH_*") && !description.contains("DSH_SESSION_JSONL"));
    finish(rt).await;
}

const PRINT_DSH_ENV: &str = "env | grep '^DSH_' | sort";

/// Catalogue: TB-80.
#[actix_rt::test]
async fn foreground_managed_env_is_exactly_the_current_facts() {
    // Changes the process environment: only safe with no other test running beside it.
    dsh_test_support::own_process!(foreground_managed_env_is_exactly_the_current_facts);
    // SAFETY: own_process! above: this test has its process to itself.
    unsafe { std::env::set_var("DSH_STALE_PARENT", "stale") };
    let (text, home) = run_in_a_session("request-fg", PRINT_DSH_ENV).await;
    let expected = format!(
        "DSH_HOME={}\nDSH_SESSION_ID=request-fg\nDSH_SHELL=1\n",
        home.display()
    );
    assert_eq!(text, expected);
}

/// Catalogue: TB-81.
#[actix_rt::test]
async fn background_managed_env_and_model_env_ignored() {
    let home = tempfile::tempdir().unwrap();
    let (rt, _s) = runtime_with(|b| b.dsh_home(home.path()));
    let agent = TestAgent::new("request-bg");
    let args = json!({
        "command": format!("{PRINT_DSH_ENV}; echo \"${{SPOOF:-unset}}\""),
        "description": "d",
        "run_in_background": true,
        "env": {"DSH_SESSION_ID": "spoofed", "SPOOF": "yes"},
    });
    let r = call_as(&rt, &agent.agent, "bash", args).await;
    assert_eq!(r.text, "started background task bash-1");
    let seen = poll_for(&rt, Some(&agent.agent), "bash-1", "[status: completed").await;
    let expected = format!(
        "DSH_HOME={}\nDSH_SESSION_ID=request-bg\nDSH_SHELL=1\nunset\n",
        home.path().display()
    );
    // The output may arrive over several polls: their status lines are not part of it.
    let output: String = seen
        .lines()
        .filter(|line| !line.starts_with("[status:") && *line != "(no new output)")
        .map(|line| format!("{line}\n"))
        .collect();
    assert!(output.contains(&expected), "{seen}");
    finish(rt).await;
}

/// Catalogue: TB-82.
#[actix_rt::test]
async fn no_agent_no_session_id_and_the_harness_env_is_untouched() {
    // Changes the process environment: only safe with no other test running beside it.
    dsh_test_support::own_process!(no_agent_no_session_id_and_the_harness_env_is_untouched);
    // SAFETY: own_process! above: this test has its process to itself.
    unsafe { std::env::set_var("DSH_SESSION_ID", "harness-own") };
    let (rt, _s) = runtime_with(|b| b.dsh_home("/srv/dsh"));
    assert_eq!(
        bash(&rt, PRINT_DSH_ENV).await.text,
        "DSH_HOME=/srv/dsh\nDSH_SHELL=1\n"
    );
    assert_eq!(std::env::var("DSH_SESSION_ID").unwrap(), "harness-own");
    finish(rt).await;
}

/// Catalogue: TB-83.
#[actix_rt::test]
async fn parent_and_child_agents_get_their_own_ids() {
    let (rt, _s) = runtime_with(|b| b.dsh_home("/srv/dsh"));
    let parent = TestAgent::new("parent");
    let child = TestAgent::new("child");
    let (a, b) = futures::join!(
        call_as(
            &rt,
            &parent.agent,
            "bash",
            bash_args("sleep 0.1; echo $DSH_SESSION_ID")
        ),
        call_as(&rt, &child.agent, "bash", bash_args("echo $DSH_SESSION_ID")),
    );
    assert_eq!((a.text.as_str(), b.text.as_str()), ("parent\n", "child\n"));
    finish(rt).await;
}

/// Catalogue: TB-84.
#[actix_rt::test]
async fn extra_model_keys_are_not_forwarded() {
    let (rt, _s) = runtime();
    let extra = json!({
        "env": {"FOO": "bar"},
        // `stdin` takes "closed" | "open" since issue 22; bytes for stdin are not an argument.
        "stdin_bytes": "injected",
        "stdoutMaxBytes": 1,
    });
    let r = bash_with(&rt, "cat; echo \"${FOO:-unset}\"", extra).await;
    assert_eq!(r.text, "unset\n");
    finish(rt).await;
}

/// Catalogue: TB-85.
#[actix_rt::test]
async fn extra_model_keys_are_not_forwarded_in_the_background() {
    let (rt, _s) = runtime();
    let extra =
        json!({"run_in_background": true, "env": {"FOO": "bar"}, "stdin_bytes": "injected"});
    let r = bash_with(&rt, "cat; echo \"${FOO:-unset}\"", extra).await;
    assert_eq!(r.text, "started background task bash-1");
    let seen = poll_for(&rt, None, "bash-1", "[status: completed").await;
    assert!(
        seen.contains("unset\n[status: completed, exit code: 0]"),
        "{seen}"
    );
    assert!(
        !seen.contains("injected") && !seen.contains("bar"),
        "{seen}"
    );
    finish(rt).await;
}

#[actix_rt::test]
async fn unknown_tools_get_a_clear_error() {
    let (rt, _s) = runtime();
    let r = call(&rt, "rm_rf", json!({})).await;
    assert_eq!(
        r.text,
        "Error: unknown tool \"rm_rf\"; available tools: bash, bash_output, bash_write, bash_kill"
    );
    finish(rt).await;
}

#[actix_rt::test]
async fn binary_and_huge_output_give_correct_results() {
    let (rt, _s) = runtime();
    let binary = bash(&rt, "printf '\\377\\000ok'").await.text;
    assert_eq!(binary, "\u{FFFD}\u{0}ok");
    let r = bash(&rt, "head -c 10000000 /dev/zero | tr '\\0' 'x'").await;
    assert!(
        r.text.starts_with(&"x".repeat(64_000))
            && r.text.contains("[output truncated; full output: /"),
        "{}",
        &r.text[64_000..]
    );
    finish(rt).await;
}
