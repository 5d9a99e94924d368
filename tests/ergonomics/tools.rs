//! Tools (friction 8): any `Serialize` answer, the context handed over
//! directly, registration without a `?` per line.

use std::sync::Arc;

use serde_json::json;
use tinyagents::prelude::*;

#[json_schema]
struct Customer {
    customer: String,
}

#[json_schema]
struct Balance {
    customer: String,
    cents: i64,
}

fn tool_result(run: &AgentRun, n: usize) -> (String, bool) {
    run.messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool {
                content, is_error, ..
            } => Some((content.clone(), *is_error)),
            _ => None,
        })
        .nth(n)
        .unwrap()
}

#[tokio::test]
async fn a_struct_answer_reaches_the_model_as_json_and_a_nested_call_needs_only_the_context() {
    let balance = FnTool::new("balance", "Balance.", |c: Customer| async move {
        anyhow::Ok(Balance {
            customer: c.customer,
            cents: 1250,
        })
    });
    let statement = FnTool::with_context(
        "statement",
        "Statement.",
        |c: Customer, ctx: ToolRunContext| async move {
            let exec = ToolExecutionContext::from_run_context(&ctx);
            let inner = exec
                .call_tool("balance", json!({"customer": c.customer}))
                .await?;
            anyhow::Ok(format!("statement: {}", inner.content))
        },
    );
    let harness = AgentHarness::builder(Arc::new(ScriptedModel::new([
        ScriptedModel::tool_call("balance", json!({"customer": "c-1"})),
        ScriptedModel::tool_call("statement", json!({"customer": "c-2"})),
        ChatResponse::text("done"),
    ])))
    .tool(balance)
    .tool(statement)
    .limits(RunLimits::default().with_max_nested_depth(1))
    .build()
    .unwrap();
    let run = harness.run("go").await.unwrap();
    let (first, _) = tool_result(&run, 0);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&first).unwrap(),
        json!({"customer": "c-1", "cents": 1250})
    );
    let (second, failed) = tool_result(&run, 1);
    assert!(!failed, "{second}");
    let inner = second.strip_prefix("statement: ").unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(inner).unwrap(),
        json!({"customer": "c-2", "cents": 1250})
    );
    assert_eq!(
        (run.budget.tool_calls, run.budget.nested_tool_calls),
        (2, 1)
    );
}

#[tokio::test]
async fn a_context_tool_called_outside_a_run_fails_clearly() {
    let tool = FnTool::with_context(
        "ctx",
        "Needs a run.",
        |_: Customer, _ctx: ToolRunContext| async { anyhow::Ok("ran") },
    );
    let error = tool
        .execute_with_context(json!({"customer": "c"}), ToolCallOptions::default(), None)
        .await
        .unwrap_err();
    assert!(error.to_string().contains("'ctx'"), "{error}");
}

#[test]
fn registration_problems_wait_for_build_and_all_are_reported() {
    let twice = || FnTool::new("twice", "Twice.", |_: Customer| async { anyhow::Ok("x") });
    let error = AgentHarness::builder(Arc::new(ScriptedModel::new([])))
        .tool(twice())
        .tool(twice())
        .tool(twice())
        .build()
        .unwrap_err();
    let text = error.to_string();
    assert_eq!(text.matches("'twice'").count(), 2, "{text}");
}
