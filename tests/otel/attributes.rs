//! The GenAI attributes: operation names, provider, model, agent, usage,
//! tool name, the harness's call id with the provider's beside it, the
//! session as the conversation id, and `error.type` with the error status
//! on every kind of failure.

use tinyagents::core::{ModelError, ModelToolCall};
use tinyagents::orchestrator::SessionScope;

use super::*;

#[tokio::test]
async fn spans_carry_operation_provider_model_agent_usage_and_harness_call_ids() {
    let spans = Spans::capture();
    let run = team(PayloadCapture::default())
        .run("look r-1 up")
        .await
        .unwrap();
    let spans = spans.finished();
    let root = one(&spans, "invoke_agent coordinator");
    for (key, value) in [
        ("gen_ai.operation.name", "invoke_agent"),
        ("gen_ai.agent.name", "coordinator"),
        ("gen_ai.provider.name", "tinyagents.scripted"),
        ("gen_ai.request.model", "coordinator-model"),
        ("tinyagents.run.status", "completed"),
        ("tinyagents.run.segment", "run"),
        ("tinyagents.depth", "0"),
        // The tree's totals (issue 33): the coordinator's 11 + 0 + 13 in
        // and 5 + 0 + 2 out, and its specialist's 7 in and 3 out.
        ("gen_ai.usage.input_tokens", "31"),
        ("gen_ai.usage.output_tokens", "10"),
    ] {
        assert_eq!(attr(root, key).as_deref(), Some(value), "{key}");
    }
    assert_eq!(
        attr(root, "tinyagents.run.id"),
        Some(run.run_id.to_string())
    );
    let mut chats: Vec<&SpanData> = spans
        .iter()
        .filter(|s| s.name == "chat coordinator-model")
        .collect();
    chats.sort_by_key(|s| s.start_time);
    let first = chats[0];
    for (key, value) in [
        ("gen_ai.operation.name", "chat"),
        ("gen_ai.provider.name", "tinyagents.scripted"),
        ("gen_ai.request.model", "coordinator-model"),
        ("gen_ai.usage.input_tokens", "11"),
        ("gen_ai.usage.output_tokens", "5"),
        ("tinyagents.turn", "1"),
    ] {
        assert_eq!(attr(first, key).as_deref(), Some(value), "{key}");
    }
    assert_eq!(
        attr(chats[2], "gen_ai.usage.input_tokens").as_deref(),
        Some("13")
    );
    // Counts are exported as integers, as the GenAI conventions define
    // them (a `u64` field would reach OpenTelemetry as a string).
    let root = one(&spans, "invoke_agent coordinator");
    for (span, key) in [
        (first, "gen_ai.usage.input_tokens"),
        (first, "gen_ai.usage.output_tokens"),
        (first, "tinyagents.turn"),
        (root, "gen_ai.usage.input_tokens"),
        (root, "gen_ai.usage.output_tokens"),
        (root, "tinyagents.depth"),
    ] {
        let value = span
            .attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| kv.value.clone());
        assert!(
            matches!(value, Some(opentelemetry::Value::I64(_))),
            "{key} of {} is {value:?}, not an integer",
            span.name
        );
    }
    for (tool, id) in [("lookup", "p1"), ("fetch", "p1/1"), ("specialist", "p2")] {
        let call = tool_call(&spans, tool, id);
        assert_eq!(
            attr(call, "gen_ai.operation.name").as_deref(),
            Some("execute_tool")
        );
        assert_eq!(
            attr(call, "tinyagents.run.id"),
            Some(run.run_id.to_string())
        );
        assert!(!is_error(call), "{tool}");
        // The scripted model gives no provider ids.
        assert_eq!(attr(call, "tinyagents.tool.provider_call_id"), None);
    }
    assert!(
        spans
            .iter()
            .all(|s| attr(s, "gen_ai.conversation.id").is_none()),
        "no session, no conversation id"
    );
}

#[tokio::test]
async fn the_providers_call_id_rides_beside_the_harness_id() {
    let spans = Spans::capture();
    let call = ModelToolCall::new(Some("call_abc123".into()), "fetch", json!({ "id": "r-1" }));
    Agent::builder("fetcher")
        .model(ScriptedModel::new([
            ChatResponse::tool_calls(vec![call]),
            ChatResponse::text("ok"),
        ]))
        .tool(fetch())
        .build()
        .unwrap()
        .run("fetch r-1")
        .await
        .unwrap();
    let spans = spans.finished();
    let call = tool_call(&spans, "fetch", "p1");
    assert_eq!(
        attr(call, "tinyagents.tool.provider_call_id").as_deref(),
        Some("call_abc123")
    );
}

#[tokio::test]
async fn the_conversation_id_is_the_session_and_the_delegated_runs_its_child_session() {
    let spans = Spans::capture();
    let scope = SessionScope::new("s-1");
    let run = team(PayloadCapture::default())
        .run_in_session(&scope, "look r-1 up")
        .await
        .unwrap();
    let spans = spans.finished();
    let root = one(&spans, "invoke_agent coordinator");
    assert_eq!(attr(root, "gen_ai.conversation.id").as_deref(), Some("s-1"));
    assert_ne!(
        attr(root, "gen_ai.conversation.id"),
        Some(run.run_id.to_string())
    );
    for chat in spans.iter().filter(|s| s.name == "chat coordinator-model") {
        assert_eq!(attr(chat, "gen_ai.conversation.id").as_deref(), Some("s-1"));
    }
    let delegated = one(&spans, "invoke_agent specialist");
    let child = attr(delegated, "gen_ai.conversation.id").unwrap();
    assert!(child.starts_with("s-1/specialist#"), "{child}");
    for chat in spans.iter().filter(|s| s.name == "chat specialist-model") {
        assert_eq!(attr(chat, "gen_ai.conversation.id"), Some(child.clone()));
    }
}

/// `error.type` and the error status, present together.
fn failed_with(span: &SpanData) -> String {
    assert!(is_error(span), "{} has error status", span.name);
    attr(span, "error.type").unwrap_or_else(|| panic!("{} has error.type", span.name))
}

#[tokio::test]
async fn a_failing_a_panicking_and_a_refused_call_carry_error_type_and_error_status() {
    let spans = Spans::capture();
    let fails = FnTool::new("fails", "Fails.", |_: Record| async move {
        anyhow::bail!("the disk is full");
        #[allow(unreachable_code)]
        anyhow::Ok(String::new())
    });
    let panics = FnTool::new("panics", "Panics.", |_: Record| async move {
        if true {
            panic!("tool bug");
        }
        anyhow::Ok(String::new())
    });
    // `nests_unknown` makes a nested call that admission refuses.
    let nests_unknown = FnTool::with_context(
        "nests_unknown",
        "Nests a call to a tool that is not there.",
        |_: Record, ctx: ToolRunContext| async move {
            let exec = ToolExecutionContext::from_run_context(&ctx);
            let refused = exec.call_tool("nowhere", json!({})).await;
            anyhow::Ok(format!("refused: {}", refused.is_err()))
        },
    );
    let arguments = json!({ "id": "r-1" });
    Agent::builder("failing")
        .model(ScriptedModel::new([
            ScriptedModel::tool_calls([
                ("fails", arguments.clone()),
                ("panics", arguments.clone()),
                ("fetch", arguments.clone()),
                ("nests_unknown", arguments.clone()),
            ]),
            ChatResponse::text("done"),
        ]))
        .tool(fails)
        .tool(panics)
        .tool(fetch())
        .tool(nests_unknown)
        .deny("fetch")
        .max_nested_depth(1)
        .build()
        .unwrap()
        .run("go")
        .await
        .unwrap();
    let spans = spans.finished();
    let root = one(&spans, "invoke_agent failing");
    assert!(!is_error(root), "the run itself completed");
    assert_eq!(failed_with(tool_call(&spans, "fails", "p1")), "tool_failed");
    // A panic is contained as the tool's failure, and says so.
    let panicked = tool_call(&spans, "panics", "p2");
    assert_eq!(failed_with(panicked), "tool_failed");
    assert!(
        matches!(&panicked.status, Status::Error { description } if description.contains("panicked: tool bug")),
        "{:?}",
        panicked.status
    );
    // Denied: refused before it ran; its span still says so.
    let refused = tool_call(&spans, "fetch", "p3");
    assert!(is_child_of(refused, root));
    assert_eq!(failed_with(refused), "tool_not_found");
    // A nested call refused at admission, under its calling tool's span.
    let parent = tool_call(&spans, "nests_unknown", "p4");
    let nested = tool_call(&spans, "nowhere", "p4/1");
    assert!(is_child_of(nested, parent));
    assert_eq!(failed_with(nested), "tool_not_found");
    assert!(!is_error(parent));
}

#[tokio::test]
async fn a_failing_model_fails_its_chat_and_its_run() {
    let spans = Spans::capture();
    let failed = Agent::builder("unlucky")
        .model(ScriptedModel::with_results([Err(
            ModelError::RateLimited {
                retry_after: None,
                message: "slow down".into(),
            },
        )]))
        .build()
        .unwrap()
        .run("hello")
        .await;
    assert!(failed.is_err());
    let spans = spans.finished();
    let chat = one(&spans, "chat scripted");
    assert_eq!(failed_with(chat), "model.rate_limited");
    let root = one(&spans, "invoke_agent unlucky");
    assert_eq!(failed_with(root), "model.rate_limited");
    assert!(is_child_of(chat, root));
    match &root.status {
        Status::Error { description } => {
            assert!(description.contains("slow down"), "{description}")
        }
        other => panic!("{other:?}"),
    }
}

/// Issue 33: with a price table, the `chat` span carries the call's cost
/// (in the table's smallest unit) and its cache and reasoning tokens, and
/// the `invoke_agent` span the run's totals with how many calls had no
/// price.
#[tokio::test]
async fn chat_and_invoke_agent_spans_carry_cost_and_cache_and_reasoning_tokens_when_priced() {
    let spans = Spans::capture();
    let usage = Usage {
        input_tokens: 1_000,
        output_tokens: 100,
        cached_input_tokens: 400,
        reasoning_tokens: 60,
    };
    let model = ScriptedModel::new([ChatResponse::text("done").with_usage(usage)]).named("m");
    let prices = PriceTable::new("USD").with_model(
        "m",
        ModelPrice {
            input: "1000".parse().unwrap(),
            output: "2000".parse().unwrap(),
            cached_input: Some("500".parse().unwrap()),
        },
    );
    let harness = AgentHarness::builder(Arc::new(model))
        .agent_id(tinyagents::core::AgentId::new("priced"))
        .prices(prices)
        .build()
        .unwrap();
    harness.run("go").await.unwrap();
    let spans = spans.finished();
    // 600 × 1,000 + 400 × 500 + 100 × 2,000 cents per million tokens.
    for span in [one(&spans, "chat m"), one(&spans, "invoke_agent priced")] {
        for (key, value) in [
            ("gen_ai.usage.input_tokens", "1000"),
            ("gen_ai.usage.output_tokens", "100"),
            ("gen_ai.usage.cache_read.input_tokens", "400"),
            ("tinyagents.usage.reasoning_tokens", "60"),
            ("tinyagents.cost", "1"),
        ] {
            assert_eq!(
                attr(span, key).as_deref(),
                Some(value),
                "{} {key}",
                span.name
            );
        }
    }
    let root = one(&spans, "invoke_agent priced");
    assert_eq!(
        attr(root, "tinyagents.cost.unpriced_calls").as_deref(),
        Some("0")
    );
}
