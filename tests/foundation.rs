//! The agent loop through the facade: limits at and one over their bounds,
//! both limit behaviours, parallel and exclusive execution, timeouts,
//! cancellation, bad arguments, unknown tools, panics, controls, events.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::json;
use tinyagents::prelude::*;
use tinyagents::{
    core::LimitKind, core::ModelError, core::ModelToolCall, core::Usage, tools::InvalidArgsPolicy,
};
use tinyagents_tests::*;

fn script(responses: Vec<ChatResponse>) -> Arc<ScriptedModel> {
    Arc::new(ScriptedModel::new(responses))
}

fn adds(n: usize) -> ChatResponse {
    ScriptedModel::tool_calls((0..n).map(|i| ("add", json!({"a": i, "b": 1}))))
}

#[tokio::test]
async fn a_turn_with_two_tools_runs_and_pairs_every_call() {
    let model = script(vec![
        adds(2),
        ScriptedModel::tool_call("add", json!({"a": 5, "b": 5})),
        ChatResponse::text("done"),
    ]);
    let harness = AgentHarness::builder(model)
        .tool(add_tool())
        .build()
        .unwrap();
    let (run, events) = run_collecting(&harness, RunRequest::new("go")).await;
    let run = run.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(run.final_text, "done");
    assert_eq!(
        tool_results(&run.messages),
        vec![
            ("add".into(), "1".into(), false),
            ("add".into(), "2".into(), false),
            ("add".into(), "10".into(), false)
        ]
    );
    assert_transcript_paired(&run.messages);
    assert_one_terminal_per_start(&events);
    assert!(matches!(
        events.first(),
        Some(AgentEvent::RunStarted { .. })
    ));
    assert!(matches!(
        events.last(),
        Some(AgentEvent::RunCompleted {
            status: RunStatus::Completed,
            ..
        })
    ));
}

#[tokio::test]
async fn harness_ids_are_unique_even_when_the_provider_repeats_its_ids() {
    let same = |args| ModelToolCall::new(Some("call_0".into()), "add", args);
    let model = script(vec![
        ChatResponse::tool_calls(vec![
            same(json!({"a": 1, "b": 1})),
            same(json!({"a": 2, "b": 2})),
        ]),
        ChatResponse::tool_calls(vec![ModelToolCall::new(
            None,
            "add",
            json!({"a": 3, "b": 3}),
        )]),
        ChatResponse::text("ok"),
    ]);
    let harness = AgentHarness::builder(model)
        .tool(add_tool())
        .build()
        .unwrap();
    let run = harness.run("go").await.unwrap();
    let ids: Vec<(String, Option<String>)> = run
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool {
                call_id,
                provider_id,
                ..
            } => Some((call_id.to_string(), provider_id.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        ids,
        vec![
            ("p1".into(), Some("call_0".into())),
            ("p2".into(), Some("call_0".into())),
            ("p3".into(), None)
        ]
    );
}

// ---- max_tool_calls ----

#[tokio::test]
async fn tool_calls_exactly_at_the_cap_complete() {
    let model = script(vec![adds(3), ChatResponse::text("done")]);
    let harness = AgentHarness::builder(model)
        .limits(RunLimits::default().with_max_tool_calls(3))
        .tool(add_tool())
        .build()
        .unwrap();
    let run = harness.run("go").await.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(run.budget.tool_calls, 3);
}

#[tokio::test]
async fn one_call_over_the_cap_is_refused_and_errors_by_default() {
    let model = script(vec![adds(4), ChatResponse::text("unreachable")]);
    let harness = AgentHarness::builder(model)
        .limits(RunLimits::default().with_max_tool_calls(3))
        .tool(add_tool())
        .build()
        .unwrap();
    let (run, events) = run_collecting(&harness, RunRequest::new("go")).await;
    assert_eq!(
        run.unwrap_err(),
        TinyAgentsError::LimitExceeded {
            kind: LimitKind::ToolCalls,
            limit: 3,
            used: 3
        }
    );
    assert!(events.iter().any(|e| matches!(
        e,
        AgentEvent::LimitReached {
            kind: LimitKind::ToolCalls,
            limit: 3,
            used: 3
        }
    )));
    // The first three ran; the fourth was refused without running.
    let completed = events
        .iter()
        .filter(|e| matches!(e, AgentEvent::ToolCompleted { .. }))
        .count();
    assert_eq!(completed, 3);
    assert_one_terminal_per_start(&events);
}

#[tokio::test]
async fn one_call_over_the_cap_stops_with_a_partial_result_under_stop() {
    let model = script(vec![adds(4), ChatResponse::text("unreachable")]);
    let harness = AgentHarness::builder(model)
        .limits(
            RunLimits::default()
                .with_max_tool_calls(3)
                .with_behavior(LimitBehavior::Stop),
        )
        .tool(add_tool())
        .build()
        .unwrap();
    let run = harness.run("go").await.unwrap();
    assert_eq!(run.status, RunStatus::LimitReached(LimitKind::ToolCalls));
    assert_transcript_paired(&run.messages);
    let results = tool_results(&run.messages);
    assert_eq!(results.len(), 4);
    assert!(results[..3].iter().all(|(_, _, is_error)| !is_error));
    assert!(results[3].2);
    assert!(
        results[3].1.contains("max_tool_calls limit of 3"),
        "{}",
        results[3].1
    );
}

// ---- max_model_calls ----

#[tokio::test]
async fn model_calls_at_the_cap_complete_and_one_over_is_refused() {
    let at = script(vec![adds(1), ChatResponse::text("done")]);
    let harness = AgentHarness::builder(at)
        .limits(RunLimits::default().with_max_model_calls(2))
        .tool(add_tool())
        .build()
        .unwrap();
    assert_eq!(
        harness.run("go").await.unwrap().status,
        RunStatus::Completed
    );

    let over = script(vec![adds(1), adds(1), ChatResponse::text("unreachable")]);
    let harness = AgentHarness::builder(over.clone())
        .limits(RunLimits::default().with_max_model_calls(2))
        .tool(add_tool())
        .build()
        .unwrap();
    assert_eq!(
        harness.run("go").await.unwrap_err(),
        TinyAgentsError::LimitExceeded {
            kind: LimitKind::ModelCalls,
            limit: 2,
            used: 2
        }
    );
    assert_eq!(over.calls(), 2, "the third model call was never made");
}

#[tokio::test]
async fn model_call_cap_under_stop_returns_the_valid_transcript() {
    let over = script(vec![adds(1), adds(1), ChatResponse::text("unreachable")]);
    let harness = AgentHarness::builder(over)
        .limits(
            RunLimits::default()
                .with_max_model_calls(2)
                .with_behavior(LimitBehavior::Stop),
        )
        .tool(add_tool())
        .build()
        .unwrap();
    let run = harness.run("go").await.unwrap();
    assert_eq!(run.status, RunStatus::LimitReached(LimitKind::ModelCalls));
    assert_transcript_paired(&run.messages);
}

// ---- max_tokens ----

fn with_usage(response: ChatResponse, tokens: u64) -> ChatResponse {
    response.with_usage(Usage::new(tokens, 0))
}

fn output_cap(tokens: u32) -> tinyagents::core::ModelOptions {
    tinyagents::core::ModelOptions {
        max_output_tokens: Some(tokens),
        ..Default::default()
    }
}

#[tokio::test]
async fn tokens_at_the_cap_complete_and_one_over_is_reported() {
    let at = script(vec![
        with_usage(adds(1), 60),
        with_usage(ChatResponse::text("done"), 40),
    ]);
    // Each call reserves its worst case before it is made (issue 33): no
    // prompt (the estimate says 0) and at most 40 tokens of answer. The
    // first answer spends 60, past what it held; the second fits the 40
    // left exactly.
    let harness = AgentHarness::builder(at)
        .limits(RunLimits::default().with_max_tokens(100))
        .prompt_estimator(|_| 0)
        .model_options(output_cap(40))
        .tool(add_tool())
        .build()
        .unwrap();
    let run = harness.run("go").await.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(run.usage.total(), 100);

    let over = script(vec![
        with_usage(adds(1), 60),
        with_usage(adds(1), 41),
        ChatResponse::text("unreachable"),
    ]);
    let harness = AgentHarness::builder(over)
        .limits(
            RunLimits::default()
                .with_max_tokens(100)
                .with_behavior(LimitBehavior::Stop),
        )
        .prompt_estimator(|_| 0)
        .model_options(output_cap(40))
        .tool(add_tool())
        .build()
        .unwrap();
    let run = harness.run("go").await.unwrap();
    assert_eq!(run.status, RunStatus::LimitReached(LimitKind::Tokens));
    // The calls of the response that crossed the cap were refused, not run.
    assert_eq!(run.budget.tool_calls, 1);
    assert_transcript_paired(&run.messages);
}

// ---- max_parallel_calls ----

#[tokio::test]
async fn parallel_calls_at_the_cap_run_and_one_over_is_refused() {
    let at = script(vec![adds(2), ChatResponse::text("done")]);
    let harness = AgentHarness::builder(at)
        .limits(RunLimits::default().with_max_parallel_calls(2))
        .tool(add_tool())
        .build()
        .unwrap();
    assert_eq!(
        harness.run("go").await.unwrap().status,
        RunStatus::Completed
    );

    let over = script(vec![adds(3), ChatResponse::text("unreachable")]);
    let harness = AgentHarness::builder(over)
        .limits(RunLimits::default().with_max_parallel_calls(2))
        .tool(add_tool())
        .build()
        .unwrap();
    assert_eq!(
        harness.run("go").await.unwrap_err(),
        TinyAgentsError::LimitExceeded {
            kind: LimitKind::ParallelCalls,
            limit: 2,
            used: 3
        }
    );
}

// ---- max_tool_result_bytes ----

#[tokio::test]
async fn results_at_the_byte_cap_are_kept_and_one_over_is_cut_with_a_marker() {
    for (size, cut) in [(16usize, false), (17, true)] {
        let probe = ProbeTool::new(
            "big",
            true,
            Behaviour::Return(ToolResult::text("x".repeat(size))),
        );
        let model = script(vec![
            turn(&[probe_call("big", "a")]),
            ChatResponse::text("done"),
        ]);
        let mut builder = AgentHarness::builder(model)
            .limits(RunLimits::default().with_max_tool_result_bytes(16));
        builder.register(probe).unwrap();
        let run = builder.build().unwrap().run("go").await.unwrap();
        let (_, content, _) = &tool_results(&run.messages)[0];
        if cut {
            assert!(content.starts_with(&"x".repeat(16)));
            assert!(
                content.ends_with("[truncated: kept 16 of 17 bytes]"),
                "{content}"
            );
        } else {
            assert_eq!(content, &"x".repeat(16));
        }
    }
}

// ---- parallel and exclusive execution ----

#[tokio::test(start_paused = true)]
async fn concurrency_safe_calls_of_a_turn_overlap() {
    // A barrier of 4 only opens if all four calls run at the same time.
    let barrier = Arc::new(tokio::sync::Barrier::new(4));
    let probe = ProbeTool::new("meet", true, Behaviour::Barrier(barrier));
    let calls: Vec<_> = (0..4).map(|i| probe_call("meet", &i.to_string())).collect();
    let model = script(vec![turn(&calls), ChatResponse::text("done")]);
    let mut builder = AgentHarness::builder(model)
        .limits(RunLimits::default().with_tool_timeout(Some(Duration::from_secs(5))));
    builder.register(probe.clone()).unwrap();
    let run = builder.build().unwrap().run("go").await.unwrap();
    assert!(
        tool_results(&run.messages)
            .iter()
            .all(|(_, c, e)| c.starts_with("met") && !e)
    );
    assert_eq!(probe.max_active.load(Ordering::SeqCst), 4);
}

#[tokio::test(start_paused = true)]
async fn unsafe_calls_run_alone_and_in_call_order() {
    let probe = ProbeTool::new("write", false, Behaviour::Yield(3));
    let calls: Vec<_> = (0..3)
        .map(|i| probe_call("write", &i.to_string()))
        .collect();
    let model = script(vec![turn(&calls), ChatResponse::text("done")]);
    let mut builder = AgentHarness::builder(model);
    builder.register(probe.clone()).unwrap();
    builder.build().unwrap().run("go").await.unwrap();
    assert_eq!(probe.max_active.load(Ordering::SeqCst), 1);
    assert_eq!(
        probe.order.entries(),
        ["start 0", "end 0", "start 1", "end 1", "start 2", "end 2"]
    );
}

#[tokio::test(start_paused = true)]
async fn an_unsafe_call_between_safe_ones_splits_the_batch() {
    let log = ProbeTool::new("read", true, Behaviour::Yield(2));
    let write = ProbeTool::new("write", false, Behaviour::Yield(2));
    let model = script(vec![
        turn(&[
            probe_call("read", "a"),
            probe_call("read", "b"),
            probe_call("write", "w"),
            probe_call("read", "c"),
        ]),
        ChatResponse::text("done"),
    ]);
    let mut builder = AgentHarness::builder(model);
    builder.register(log.clone()).unwrap();
    builder.register(write.clone()).unwrap();
    let run = builder.build().unwrap().run("go").await.unwrap();
    assert_eq!(
        log.max_active.load(Ordering::SeqCst),
        2,
        "a and b overlapped"
    );
    let reads = log.order.entries();
    // c started only after a and b ended (the write ran in between).
    let c = reads.iter().position(|e| e == "start c").unwrap();
    assert!(reads[..c].contains(&"end a".to_owned()) && reads[..c].contains(&"end b".to_owned()));
    // Results fold in call order whatever the completion order.
    let order: Vec<String> = tool_results(&run.messages)
        .into_iter()
        .map(|(_, c, _)| c)
        .collect();
    assert_eq!(order, ["ok a", "ok b", "ok w", "ok c"]);
}

// ---- timeouts ----

#[tokio::test(start_paused = true)]
async fn a_tool_past_its_timeout_gets_a_timeout_result_and_the_run_goes_on() {
    let slow = ProbeTool::new("slow", false, Behaviour::Sleep(Duration::from_secs(10)))
        .with_spec(|s| s.timeout(Duration::from_secs(1)));
    let model = script(vec![
        turn(&[probe_call("slow", "a")]),
        ChatResponse::text("done"),
    ]);
    let mut builder = AgentHarness::builder(model);
    builder.register(slow).unwrap();
    let (run, events) = run_collecting(&builder.build().unwrap(), RunRequest::new("go")).await;
    let run = run.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    let (_, content, is_error) = &tool_results(&run.messages)[0];
    assert!(is_error);
    assert_eq!(content, "'slow' timed out after 1000 ms");
    assert_one_terminal_per_start(&events);
}

#[tokio::test(start_paused = true)]
async fn the_wall_clock_budget_bounds_a_tool_and_ends_the_run() {
    let slow = ProbeTool::new("slow", false, Behaviour::Sleep(Duration::from_secs(60)));
    let model = script(vec![
        turn(&[probe_call("slow", "a")]),
        ChatResponse::text("unreachable"),
    ]);
    let mut builder = AgentHarness::builder(model).limits(
        RunLimits::default()
            .with_wall_clock(Some(Duration::from_secs(5)))
            .with_behavior(LimitBehavior::Stop),
    );
    builder.register(slow).unwrap();
    let run = builder.build().unwrap().run("go").await.unwrap();
    assert_eq!(run.status, RunStatus::LimitReached(LimitKind::WallClock));
    let (_, content, is_error) = &tool_results(&run.messages)[0];
    assert!(
        *is_error && content.contains("timed out after 5000 ms"),
        "{content}"
    );
}

// ---- cancellation ----

#[tokio::test]
async fn cancelling_in_the_middle_of_a_tool_answers_it_and_ends_the_run() {
    let started = Arc::new(tokio::sync::Notify::new());
    let blocker = ProbeTool::new("block", false, Behaviour::UntilCancelled(started.clone()));
    let model = script(vec![
        turn(&[probe_call("block", "a"), probe_call("block", "b")]),
        ChatResponse::text("unreachable"),
    ]);
    let mut builder = AgentHarness::builder(model);
    builder.register(blocker).unwrap();
    let harness = builder.build().unwrap();
    let token = tinyagents::core::CancellationToken::new();
    let canceller = {
        let token = token.clone();
        async move {
            started.notified().await;
            token.cancel();
        }
    };
    let ((run, events), ()) = tokio::join!(
        run_collecting(&harness, RunRequest::new("go").with_cancellation(token)),
        canceller
    );
    let run = run.unwrap();
    assert_eq!(run.status, RunStatus::Cancelled);
    assert_transcript_paired(&run.messages);
    let results = tool_results(&run.messages);
    assert!(
        results[0].2 && results[0].1.contains("was cancelled"),
        "{:?}",
        results[0]
    );
    assert!(
        results[1].2 && results[1].1.contains("was not run"),
        "{:?}",
        results[1]
    );
    assert_one_terminal_per_start(&events);
}

// ---- bad input ----

#[tokio::test]
async fn unknown_tools_and_bad_arguments_get_model_readable_errors() {
    let model = script(vec![
        ChatResponse::tool_calls(vec![
            ModelToolCall::new(None, "ghost", json!({})),
            ModelToolCall::from_text(None, "add", "{\"a\": 1, \"b\":"),
            ModelToolCall::new(None, "add", json!({"a": "one", "b": 2})),
            ModelToolCall::new(None, "add", json!({"a": 1})),
        ]),
        ChatResponse::text("done"),
    ]);
    let harness = AgentHarness::builder(model)
        .tool(add_tool())
        .build()
        .unwrap();
    let (run, events) = run_collecting(&harness, RunRequest::new("go")).await;
    let run = run.unwrap();
    assert_eq!(
        run.status,
        RunStatus::Completed,
        "bad input does not end the run"
    );
    let results = tool_results(&run.messages);
    assert!(results.iter().all(|(_, _, is_error)| *is_error));
    assert_eq!(results[0].1, "tool not found: ghost. Available tools: add");
    assert!(
        results[1]
            .1
            .starts_with("arguments for tool 'add' are not valid JSON"),
        "{}",
        results[1].1
    );
    assert!(
        results[1].1.contains("(13 bytes received; "),
        "the raw text is counted, not quoted: {}",
        results[1].1
    );
    assert!(
        results[2]
            .1
            .contains("at '/a': schema keyword 'type' expects \"integer\""),
        "{}",
        results[2].1
    );
    assert!(
        results[3]
            .1
            .contains("at '<root>': schema keyword 'required' expects property \"b\""),
        "{}",
        results[3].1
    );
    assert_eq!(run.budget.tool_calls, 4, "broken calls spend their slot");
    assert_one_terminal_per_start(&events);
}

#[tokio::test]
async fn normalisation_repairs_what_small_models_break() {
    let model = script(vec![
        ChatResponse::tool_calls(vec![
            ModelToolCall::new(None, "add", json!("{\"a\": 1, \"b\": 2}")),
            ModelToolCall::from_text(None, "add", "```json\n{\"a\": 2, \"b\": 2}\n```"),
            ModelToolCall::new(None, "add", json!({"arguments": {"a": 3, "b": 3}})),
            ModelToolCall::new(None, "add", json!({"a": "x", "b": 1})),
        ]),
        ChatResponse::text("done"),
    ]);
    let harness = AgentHarness::builder(model)
        .invalid_args(InvalidArgsPolicy::NormalizeThenReturn)
        .tool(add_tool())
        .build()
        .unwrap();
    let run = harness.run("go").await.unwrap();
    let results = tool_results(&run.messages);
    assert_eq!(results[0].1, "3");
    assert_eq!(results[1].1, "4");
    assert_eq!(results[2].1, "6");
    assert!(
        results[3].2,
        "what normalisation cannot fix still goes back to the model"
    );
}

#[tokio::test]
async fn the_fail_policy_ends_the_run_on_invalid_arguments() {
    let model = script(vec![
        ScriptedModel::tool_call("add", json!({"a": 1})),
        ChatResponse::text("unreachable"),
    ]);
    let harness = AgentHarness::builder(model)
        .invalid_args(InvalidArgsPolicy::Fail)
        .tool(add_tool())
        .build()
        .unwrap();
    match harness.run("go").await.unwrap_err() {
        TinyAgentsError::InvalidArguments { tool, .. } => assert_eq!(tool, "add"),
        other => panic!("unexpected {other:?}"),
    }
}

// ---- tool failures ----

#[tokio::test]
async fn a_panic_or_a_raised_error_becomes_that_calls_error_result() {
    let panics = ProbeTool::new("panics", false, Behaviour::Panic);
    let raises = ProbeTool::new("raises", false, Behaviour::Raise("disk full".into()));
    let reports = ProbeTool::new(
        "reports",
        false,
        Behaviour::Return(ToolResult::error("no such file")),
    );
    let model = script(vec![
        turn(&[
            probe_call("panics", ""),
            probe_call("raises", ""),
            probe_call("reports", ""),
        ]),
        ChatResponse::text("done"),
    ]);
    let mut builder = AgentHarness::builder(model).include_detailed_errors(true);
    builder.register(panics).unwrap();
    builder.register(raises).unwrap();
    builder.register(reports).unwrap();
    let (run, events) = run_collecting(&builder.build().unwrap(), RunRequest::new("go")).await;
    let run = run.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    let results = tool_results(&run.messages);
    assert_eq!(
        results[0].1,
        "tool 'panics' panicked: probe panicked on purpose"
    );
    assert_eq!(results[1].1, "disk full");
    assert_eq!(results[2].1, "no such file");
    assert!(results.iter().all(|r| r.2));
    // A raised error and a panic are failures; a reported error is a result.
    let failed = events
        .iter()
        .filter(|e| matches!(e, AgentEvent::ToolFailed { .. }))
        .count();
    let reported = events
        .iter()
        .filter(|e| matches!(e, AgentEvent::ToolCompleted { is_error: true, .. }))
        .count();
    assert_eq!((failed, reported), (2, 1));
}

#[tokio::test]
async fn a_tool_whose_policy_says_so_ends_the_run_with_its_error() {
    let raises = ProbeTool::new("raises", false, Behaviour::Raise("ledger offline".into()))
        .with_spec(|s| s.error_policy(tinyagents::tools::ToolErrorPolicy::EndRun));
    let model = script(vec![
        turn(&[probe_call("raises", "")]),
        ChatResponse::text("unreachable"),
    ]);
    // Detailed errors off (the default): the model would read only that it
    // failed; the host's error keeps the tool's own text.
    let mut builder = AgentHarness::builder(model);
    builder.register(raises).unwrap();
    assert_eq!(
        builder.build().unwrap().run("go").await.unwrap_err(),
        TinyAgentsError::ToolFailed {
            tool: "raises".into(),
            message: "tool 'raises' failed (details withheld)".into(),
            detail: Some("ledger offline".into()),
        }
    );
}

#[tokio::test]
async fn a_model_error_ends_the_run_with_that_error() {
    let model = Arc::new(ScriptedModel::with_results([Err(ModelError::Server {
        status: 503,
        message: "busy".into(),
    })]));
    let harness = AgentHarness::builder(model).build().unwrap();
    assert_eq!(
        harness.run("go").await.unwrap_err(),
        TinyAgentsError::Model(ModelError::Server {
            status: 503,
            message: "busy".into()
        })
    );
}

// ---- controls ----

#[tokio::test]
async fn return_direct_ends_the_run_with_the_tools_content() {
    let direct = ProbeTool::new(
        "direct",
        false,
        Behaviour::Return(ToolResult::text("the answer").with_control(ToolControl::ReturnDirect)),
    );
    let model = Arc::new(ScriptedModel::new([
        turn(&[probe_call("direct", "")]),
        ChatResponse::text("unreachable"),
    ]));
    let mut builder = AgentHarness::builder(model.clone());
    builder.register(direct).unwrap();
    let run = builder.build().unwrap().run("go").await.unwrap();
    assert_eq!(run.status, RunStatus::Terminated);
    assert_eq!(run.final_text, "the answer");
    assert_eq!(model.calls(), 1, "the model is not asked again");
}

#[tokio::test]
async fn terminate_ends_the_run_after_the_turn() {
    let stop = ProbeTool::new(
        "stop",
        false,
        Behaviour::Return(ToolResult::text("stopping").with_control(ToolControl::Terminate)),
    );
    let mut response = turn(&[probe_call("stop", "")]);
    response.content = "I will stop now.".into();
    let model = Arc::new(ScriptedModel::new([
        response,
        ChatResponse::text("unreachable"),
    ]));
    let mut builder = AgentHarness::builder(model.clone());
    builder.register(stop).unwrap();
    let run = builder.build().unwrap().run("go").await.unwrap();
    assert_eq!(run.status, RunStatus::Terminated);
    assert_eq!(run.final_text, "I will stop now.");
    assert_eq!(model.calls(), 1);
    assert_transcript_paired(&run.messages);
}

// ---- events ----

#[tokio::test]
async fn a_slow_consumer_gets_every_event_in_order_through_a_buffer_of_one() {
    let model = script(vec![adds(3), ChatResponse::text("done")]);
    let harness = AgentHarness::builder(model)
        .tool(add_tool())
        .build()
        .unwrap();
    let (sink, mut receiver) = event_channel(1);
    let consumer = tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Some(event) = receiver.recv().await {
            tokio::task::yield_now().await;
            seen.push(event);
        }
        seen
    });
    harness
        .run_with(RunRequest::new("go"), &sink)
        .await
        .unwrap();
    drop(sink);
    let seen = consumer.await.unwrap();
    // run_started, 2 model events per turn (2 turns), 3 starts, 3 completions, run_completed
    assert_eq!(seen.len(), 1 + 4 + 6 + 1);
    assert_one_terminal_per_start(&seen);
}

#[tokio::test]
async fn progress_reports_of_a_model_issued_call_become_events() {
    let probe = ProbeTool::new("long", false, Behaviour::Progress);
    let model = script(vec![
        turn(&[probe_call("long", "")]),
        ChatResponse::text("done"),
    ]);
    let mut builder = AgentHarness::builder(model);
    builder.register(probe).unwrap();
    let (_, events) = run_collecting(&builder.build().unwrap(), RunRequest::new("go")).await;
    let progress: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolProgress {
                call_id,
                fraction,
                message,
            } => Some((call_id.to_string(), *fraction, message.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        progress,
        [
            ("p1".into(), Some(0.5), "halfway".into()),
            ("p1".into(), Some(1.0), "done".into())
        ]
    );
}

#[tokio::test]
async fn payloads_ride_on_events_only_under_capture() {
    for capture in [PayloadCapture::default(), PayloadCapture::all()] {
        let model = script(vec![adds(1), ChatResponse::text("done")]);
        let harness = AgentHarness::builder(model)
            .payload_capture(capture)
            .tool(add_tool())
            .build()
            .unwrap();
        let (_, events) = run_collecting(&harness, RunRequest::new("go")).await;
        for event in &events {
            match event {
                AgentEvent::ToolStarted { arguments, .. } => {
                    assert_eq!(arguments.is_some(), capture.tool_io)
                }
                AgentEvent::ToolCompleted { result, .. } => {
                    assert_eq!(result.is_some(), capture.tool_io)
                }
                AgentEvent::ModelCompleted { content, .. } => {
                    assert_eq!(content.is_some(), capture.model_io)
                }
                _ => {}
            }
        }
    }
}

// ---- injected arguments ----

#[tokio::test]
async fn injected_arguments_are_hidden_from_the_model_and_overwrite_its_value() {
    let whoami = FnTool::new(
        "whoami",
        "Says who the user is.",
        |args: serde_json::Map<String, serde_json::Value>| async move {
            anyhow::Ok(args["user_id"].as_str().unwrap_or("?").to_owned())
        },
    )
    .map_spec(|s| {
        ToolSpec::new(
            s.name,
            s.description,
            json!({
                "type": "object",
                "properties": {"user_id": {"type": "string"}},
                "required": ["user_id"]
            }),
        )
        .injected("user_id")
    });
    let model = Arc::new(
        ScriptedModel::new([
            ScriptedModel::tool_call("whoami", json!({"user_id": "mallory"})),
            ChatResponse::text("done"),
        ])
        .recording(),
    );
    let harness = AgentHarness::builder(model.clone())
        .inject("user_id", json!("alice"))
        .tool(whoami)
        .build()
        .unwrap();
    let run = harness.run("who am I?").await.unwrap();
    assert_eq!(tool_results(&run.messages)[0].1, "alice");
    let offered = &model.requests()[0].tools[0].parameters;
    assert!(offered["properties"].get("user_id").is_none(), "{offered}");
    assert!(
        offered
            .get("required")
            .is_none_or(|r| r.as_array().unwrap().is_empty())
    );
}

#[tokio::test]
async fn the_allow_list_hides_tools_from_the_model_and_refuses_them() {
    let model = Arc::new(
        ScriptedModel::new([
            ScriptedModel::tool_call("add", json!({"a": 1, "b": 1})),
            ChatResponse::text("done"),
        ])
        .recording(),
    );
    let other = ProbeTool::new("other", false, Behaviour::Yield(0));
    let mut builder = AgentHarness::builder(model.clone())
        .tool(add_tool())
        .allow_tools(["other"]);
    builder.register(other).unwrap();
    let run = builder.build().unwrap().run("go").await.unwrap();
    assert_eq!(
        tool_results(&run.messages)[0].1,
        "tool not found: add. Available tools: other"
    );
    let offered: Vec<String> = model.requests()[0]
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert_eq!(offered, ["other"]);
}

// ---- delegation plumbing and continued conversations ----

#[tokio::test]
async fn a_grandchilds_events_arrive_wrapped_once_per_level() {
    let (sink, mut receiver) = event_channel(4);
    let child = sink.delegated(
        tinyagents::core::CallId::new("p1"),
        tinyagents::core::AgentId::from("researcher"),
        1,
    );
    let grandchild = child.delegated(
        tinyagents::core::CallId::new("p3"),
        tinyagents::core::AgentId::from("summarizer"),
        2,
    );
    grandchild
        .emit(|| AgentEvent::ModelStarted { turn: 1 })
        .await;
    match receiver.recv().await.unwrap() {
        AgentEvent::Delegated {
            parent_call_id,
            agent_id,
            depth: 1,
            event,
        } => {
            assert_eq!(
                (parent_call_id.as_str(), agent_id.as_str()),
                ("p1", "researcher")
            );
            match *event {
                AgentEvent::Delegated {
                    parent_call_id,
                    agent_id,
                    depth: 2,
                    event,
                } => {
                    assert_eq!(
                        (parent_call_id.as_str(), agent_id.as_str()),
                        ("p3", "summarizer")
                    );
                    assert_eq!(*event, AgentEvent::ModelStarted { turn: 1 });
                }
                other => panic!("unexpected inner event {other:?}"),
            }
        }
        other => panic!("unexpected event {other:?}"),
    }
}

#[tokio::test]
async fn a_continued_conversation_numbers_its_calls_after_the_earlier_ones() {
    let first = AgentHarness::builder(script(vec![adds(2), ChatResponse::text("first")]))
        .tool(add_tool())
        .build()
        .unwrap();
    let earlier = first.run("go").await.unwrap().messages;
    let second = AgentHarness::builder(script(vec![adds(1), ChatResponse::text("second")]))
        .tool(add_tool())
        .build()
        .unwrap();
    let run = second
        .run_with(
            RunRequest::new("again").with_history(earlier),
            &EventSink::none(),
        )
        .await
        .unwrap();
    let ids: Vec<String> = run
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool { call_id, .. } => Some(call_id.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(ids, ["p1", "p2", "p3"]);
    assert_transcript_paired(&run.messages);
}

#[tokio::test]
async fn a_run_that_ends_in_an_error_ends_its_stream_with_run_failed() {
    let model = script(vec![adds(4), ChatResponse::text("unreachable")]);
    let harness = AgentHarness::builder(model)
        .limits(RunLimits::default().with_max_tool_calls(3))
        .tool(add_tool())
        .build()
        .unwrap();
    let (run, events) = run_collecting(&harness, RunRequest::new("go")).await;
    assert!(run.is_err());
    assert_eq!(
        events.last(),
        Some(&AgentEvent::RunFailed {
            error: "limit exceeded: max_tool_calls (limit 3, used 3)".into()
        })
    );
}

/// `run_with` makes the run when it is called, but a future dropped before
/// it is polled started nothing: no event, no model call, and the run id
/// is free for a run that does start.
#[tokio::test]
async fn a_run_future_dropped_unpolled_sends_nothing_and_asks_no_model() {
    let model = script(vec![ChatResponse::text("done")]);
    let harness = AgentHarness::builder(Arc::clone(&model)).build().unwrap();
    let (sink, collected) = collector();
    let request = RunRequest::new("go").with_run_id(RunId::new("once"));
    drop(harness.run_with(request, &sink));
    drop(sink);
    assert_eq!(collected.await.unwrap(), Vec::<AgentEvent>::new());
    assert_eq!(model.calls(), 0);
    let run = harness
        .run_with(
            RunRequest::new("go").with_run_id(RunId::new("once")),
            &EventSink::none(),
        )
        .await
        .unwrap();
    assert_eq!(run.status, RunStatus::Completed);
}
