//! Supervisor policies through the library: the runtime's policy stack with built-in and host
//! policies, fair admission between sessions, per-session limits, queued background tasks, and queue
//! time counted toward a call's timeout.

use std::sync::{Arc, Mutex};

use crate::common::*;
use dsh::{AbortSignal, Admission, AdmissionRequest, ProcessPolicy, ToolCall};
use serde_json::json;

/// Who asked for each admission: (session, background).
type Asked = Arc<Mutex<Vec<(Option<String>, bool)>>>;

/// The worked example of docs/ARCHITECTURE.md: keep room for foreground calls by letting at most
/// `max` background tasks run at once, whatever their session.
struct BackgroundBudget {
    max: usize,
    seen: Asked,
}

impl ProcessPolicy for BackgroundBudget {
    fn name(&self) -> &str {
        "background-budget"
    }

    fn admit(&mut self, request: &AdmissionRequest<'_>) -> Admission {
        self.seen
            .lock()
            .unwrap()
            .push((request.session.map(str::to_owned), request.background));
        if request.background && request.total.running_background >= self.max {
            Admission::Queue
        } else {
            Admission::Admit
        }
    }
}

#[actix_rt::test]
async fn a_host_policy_sees_who_asks_and_holds_background_work() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (rt, _s) = runtime_with(|b| {
        b.policy(Box::new(BackgroundBudget {
            max: 1,
            seen: seen.clone(),
        }))
    });
    let (agent, first) = TestAgent::with_task(&rt, "s1", "echo one; sleep 60").await;
    let second = agent.start_bg(&rt, "echo two").await;
    let r = agent.output(&rt, &second).await;
    assert_eq!(r.text, "(no new output)\n[status: queued]");
    // Foreground calls still run.
    let r = call_as(&rt, &agent.agent, "bash", bash_args("echo fg")).await;
    assert_eq!(r.text, "fg\n");
    agent.kill(&rt, &first).await;
    let r = wait_as(&rt, &agent.agent, &second).await;
    assert_eq!(r.text, "two\n[status: completed, exit code: 0]");
    let seen = seen.lock().unwrap().clone();
    assert!(seen.contains(&(Some("s1".into()), true)), "{seen:?}");
    assert!(seen.contains(&(Some("s1".into()), false)), "{seen:?}");
    finish(rt).await;
}

#[actix_rt::test]
async fn admission_is_round_robin_between_sessions() {
    let (rt, _s) = runtime_with(|b| b.max_concurrent(1));
    let a = TestAgent::new("A");
    let b = TestAgent::new("B");
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut calls = Vec::new();
    let mut submit = |agent: &TestAgent, name: String| {
        let rt = rt.clone();
        let order = order.clone();
        let call = ToolCall::new("bash", bash_args("sleep 0.05")).with_caller(agent.agent.clone());
        calls.push(actix_rt::spawn(async move {
            rt.call(call).await;
            order.lock().unwrap().push(name);
        }));
    };
    for i in 0..6 {
        submit(&a, format!("a{i}"));
    }
    submit(&b, "b".to_owned());
    for call in calls {
        dsh_test_support::within(SOON * 3, call).await.unwrap();
    }
    let order = order.lock().unwrap().clone();
    let b_at = order.iter().position(|n| n == "b").unwrap();
    assert!(b_at <= 2, "{order:?}");
    finish(rt).await;
}

#[actix_rt::test]
async fn a_queued_call_times_out_or_is_cancelled_without_starting() {
    let (rt, _s) = runtime_with(|b| b.max_concurrent(1));
    let id = start_bg(&rt, None, "sleep 60").await;
    let r = call(
        &rt,
        "bash",
        json!({"command": "echo never", "description": "d", "timeoutMs": 300}),
    )
    .await;
    assert!(r.is_error);
    assert_eq!(r.text, "Error: timed out after 300ms waiting to start");

    let cancel = AbortSignal::new();
    let queued = {
        let rt = rt.clone();
        let call = ToolCall::new("bash", bash_args("echo never")).with_cancel(cancel.clone());
        actix_rt::spawn(async move { rt.call(call).await })
    };
    // Wait until the manager holds it in its queue, then cancel.
    let deadline = std::time::Instant::now() + SOON;
    while rt.process_stats().await.queued == 0 {
        assert!(std::time::Instant::now() < deadline, "never queued");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    cancel.abort("user");
    let r = dsh_test_support::within(SOON, queued).await.unwrap();
    assert_eq!(r.text, "Error: command aborted");
    let stats = rt.process_stats().await;
    assert_eq!(stats.queued, 0, "{stats:?}");
    call(&rt, "bash_kill", json!({"task_id": id})).await;
    finish(rt).await;
}
