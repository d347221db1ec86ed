//! The MCP Tasks extension (`io.modelcontextprotocol/tasks`): a `bash` call of a client that
//! declares it, still running after `--task-after-ms`, is answered with a task handle, polled with
//! `tasks/get` to the result a foreground call would have had, stopped with `tasks/cancel`, and asks
//! its approvals as the task's input request, answered with `tasks/update`. Raw JSON-RPC at protocol
//! 2026-07-28.

use std::time::{Duration, Instant};

use dsh_test_support::procfs::{assert_all_gone, live_with_cmdline};
use dsh_test_support::wait::wait_until;
use serde_json::{Value, json};

use crate::mcp_raw::{
    Client, ESCALATION_ANSWERS, SOON, approval_answer, error_code, escalation, inline_meta,
    sandboxed_workspace,
};

fn with_tasks(mut capabilities: Value) -> Value {
    capabilities["extensions"] = json!({"io.modelcontextprotocol/tasks": {}});
    capabilities
}

fn request(client: &mut Client, id: i64, method: &str, mut params: Value, caps: &Value) -> Value {
    params["_meta"] = inline_meta(caps.clone());
    client.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
    client.response(id)
}

/// Polls `tasks/get` (ids from `*id`) until `done` holds for the task, and returns it.
fn poll(
    client: &mut Client,
    id: &mut i64,
    task: &str,
    caps: &Value,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + SOON;
    loop {
        *id += 1;
        let got = get(client, *id, task, caps);
        let got = got
            .get("result")
            .cloned()
            .unwrap_or_else(|| panic!("{got}"));
        if done(&got) {
            return got;
        }
        assert!(Instant::now() < deadline, "task never got there: {got}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `tasks/get` of `task`: the response.
fn get(client: &mut Client, id: i64, task: &str, caps: &Value) -> Value {
    request(client, id, "tasks/get", json!({"taskId": task}), caps)
}

/// Cancels `task` with `tasks/cancel` (request `id`), and polls it (ids from `*poll_id`) until it
/// reports `cancelled`.
fn cancel(client: &mut Client, id: i64, poll_id: &mut i64, task: &str, caps: &Value) {
    let ack = request(client, id, "tasks/cancel", json!({"taskId": task}), caps);
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    let done = poll(client, poll_id, task, caps, |t| t["status"] != "working");
    assert_eq!(done["status"], "cancelled", "{done}");
}

fn command(text: &str) -> Value {
    json!({"command": text, "description": "test"})
}

#[test]
fn a_long_call_becomes_a_task_that_completes_with_the_foreground_result() {
    let ws = tempfile::tempdir().unwrap();
    let cwd = ws.path().to_str().unwrap();
    let mut client = Client::start(&["--task-after-ms", "300", "--cwd", cwd]);
    let run = "echo start; sleep 3; echo end; exit 3";
    // Without the extension: today's behaviour, a foreground result however long it takes.
    let plain = client.call_inline(1, command(run), json!({}), json!({}));
    let foreground = plain["result"].clone();
    assert_eq!(
        foreground["content"][0]["text"],
        "start\nend\n[exit code: 3]"
    );
    let caps = with_tasks(json!({}));
    let handle = client.call_inline(2, command(run), caps.clone(), json!({}));
    let handle = &handle["result"];
    assert_eq!(handle["resultType"], "task", "{handle}");
    assert_eq!(handle["status"], "working", "{handle}");
    let task = handle["taskId"].as_str().unwrap().to_owned();
    let mut id = 10;
    let working = poll(&mut client, &mut id, &task, &caps, |t| {
        t["status"] != "working"
            || t["statusMessage"]
                .as_str()
                .is_some_and(|m| m.contains("last line: start"))
    });
    assert_eq!(
        working["status"], "working",
        "seen only once done: {working}"
    );
    assert!(
        working["statusMessage"]
            .as_str()
            .unwrap()
            .starts_with("[status: running]"),
        "{working}"
    );
    let done = poll(&mut client, &mut id, &task, &caps, |t| {
        t["status"] != "working"
    });
    assert_eq!(done["status"], "completed", "{done}");
    let result = &done["result"];
    // The text byte for byte, and the structured facts the same but for the time taken.
    assert_eq!(result["content"], foreground["content"], "{done}");
    assert_eq!(result["isError"], foreground["isError"]);
    let facts = |r: &Value| {
        let mut facts = r["structuredContent"].clone();
        facts.as_object_mut().unwrap().remove("duration_ms");
        facts
    };
    assert_eq!(facts(result), facts(&foreground));
    // Short calls stay in the foreground, and a task is this session's: an unknown id is refused.
    let short = client.call_inline(3, command("echo quick"), caps.clone(), json!({}));
    assert_eq!(short["result"]["content"][0]["text"], "quick\n", "{short}");
    let unknown = get(&mut client, 4, "elsewhere/task-1", &caps);
    assert_eq!(error_code(&unknown), -32602, "{unknown}");
    // A request that does not declare the extension cannot use tasks/*.
    let undeclared = get(&mut client, 5, &task, &json!({}));
    assert!(undeclared.get("error").is_some(), "{undeclared}");
    client.finish();
}

#[test]
fn a_cancelled_task_kills_its_command_and_leaves_nothing_running() {
    let marker = format!("dsh-mcp-task-{}-{:?}", std::process::id(), Instant::now());
    let ws = tempfile::tempdir().unwrap();
    let cwd = ws.path().to_str().unwrap();
    let mut client = Client::start(&["--task-after-ms", "0", "--cwd", cwd]);
    let caps = with_tasks(json!({}));
    let run = format!("sleep 3600; echo {marker}");
    let handle = client.call_inline(1, command(&run), caps.clone(), json!({}));
    assert_eq!(handle["result"]["resultType"], "task", "{handle}");
    let task = handle["result"]["taskId"].as_str().unwrap().to_owned();
    assert!(
        wait_until(SOON, || !live_with_cmdline(&marker).is_empty()),
        "the command never started"
    );
    let pids = live_with_cmdline(&marker);
    cancel(&mut client, 2, &mut 10, &task, &caps);
    assert_all_gone(&pids, Duration::ZERO);
    assert!(live_with_cmdline(&marker).is_empty());
    client.finish();
}

#[test]
fn an_approval_inside_a_task_is_answered_with_tasks_update() {
    let Some((ws, cwd)) = sandboxed_workspace() else {
        return;
    };
    let mut client = Client::start(&[
        "--sandbox",
        "read-only",
        "--cwd",
        &cwd,
        "--task-after-ms",
        "0",
    ]);
    let caps = with_tasks(json!({"elicitation": {}}));
    let [accepted, _, cancelled] = ESCALATION_ANSWERS;
    for (action, expected) in [accepted, cancelled] {
        // Each answer's command writes a file named after it.
        let file = action;
        let escalate = escalation(&format!("echo once >> {file}"));
        let handle = client.call_inline(1, escalate, caps.clone(), json!({}));
        let task = handle["result"]["taskId"].as_str().unwrap().to_owned();
        let mut id = 10;
        let asked = poll(&mut client, &mut id, &task, &caps, |t| {
            t["status"] == "input_required"
        });
        let ask = &asked["inputRequests"]["approval-1"];
        assert_eq!(ask["method"], "elicitation/create", "{asked}");
        assert!(
            ask["params"]["message"]
                .as_str()
                .unwrap()
                .contains(&format!("echo once >> {file}"))
        );
        assert!(
            !ws.path().join(file).exists(),
            "nothing runs before the answer"
        );
        let answer = approval_answer(action);
        let update = json!({"taskId": task, "inputResponses": {"approval-1": answer}});
        let ack = request(&mut client, 2, "tasks/update", update.clone(), &caps);
        assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
        // The answer is taken once.
        let again = request(&mut client, 3, "tasks/update", update, &caps);
        assert_eq!(error_code(&again), -32602, "{again}");
        let done = poll(&mut client, &mut id, &task, &caps, |t| {
            t["status"] == "completed"
        });
        assert_eq!(done["result"]["content"][0]["text"], expected, "{done}");
        let written = std::fs::read_to_string(ws.path().join(file)).ok();
        assert_eq!(written, (action == "accept").then(|| "once\n".to_owned()));
    }
    client.finish();
}

/// Finished task records obey the retention limit (`--max-finished-tasks`): beyond it the oldest
/// finished one is dropped, and reading it is refused.
#[test]
fn finished_task_records_are_dropped_oldest_first_beyond_the_retention_limit() {
    let ws = tempfile::tempdir().unwrap();
    let cwd = ws.path().to_str().unwrap();
    let mut client = Client::start(&[
        "--task-after-ms",
        "0",
        "--max-finished-tasks",
        "1",
        "--cwd",
        cwd,
    ]);
    let caps = with_tasks(json!({}));
    let mut tasks = Vec::new();
    let mut id = 10;
    for n in 1..=2 {
        let handle = client.call_inline(n, command(&format!("echo {n}")), caps.clone(), json!({}));
        let task = handle["result"]["taskId"].as_str().unwrap().to_owned();
        let done = poll(&mut client, &mut id, &task, &caps, |t| {
            t["status"] != "working"
        });
        assert_eq!(done["result"]["content"][0]["text"], format!("{n}\n"));
        tasks.push(task);
    }
    let first = get(&mut client, 100, &tasks[0], &caps);
    assert_eq!(error_code(&first), -32602, "{first}");
    let second = get(&mut client, 101, &tasks[1], &caps);
    assert_eq!(second["result"]["status"], "completed", "{second}");
    client.finish();
}

/// At most `--max-in-flight` calls run as tasks: past that a call stays in the foreground, where
/// backpressure counts it.
#[test]
fn past_max_in_flight_running_tasks_a_call_stays_in_the_foreground() {
    let ws = tempfile::tempdir().unwrap();
    let cwd = ws.path().to_str().unwrap();
    let mut client = Client::start(&["--task-after-ms", "0", "--max-in-flight", "1", "--cwd", cwd]);
    let caps = with_tasks(json!({}));
    let first = client.call_inline(1, command("sleep 3600"), caps.clone(), json!({}));
    assert_eq!(first["result"]["resultType"], "task", "{first}");
    let task = first["result"]["taskId"].as_str().unwrap().to_owned();
    let second = client.call_inline(2, command("echo two"), caps.clone(), json!({}));
    assert_eq!(second["result"]["content"][0]["text"], "two\n", "{second}");
    cancel(&mut client, 3, &mut 10, &task, &caps);
    client.finish();
}
