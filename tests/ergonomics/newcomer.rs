//! Issue 34: the first ten minutes. The README's first program is the
//! `first` example byte for byte (and runs offline: the README's code runs
//! as a doc test of this crate, and CI runs every example); what a
//! newcomer prints reads well; the resume entry points take the same
//! options; the common program's names are in the prelude.

use std::sync::Arc;

use serde_json::json;
use tinyagents::prelude::*;

/// The README's first ```rust block.
fn readme_first_program() -> String {
    let readme = include_str!("../../README.md");
    let start = readme.find("```rust\n").expect("a rust block") + "```rust\n".len();
    let end = start + readme[start..].find("```\n").expect("its end");
    readme[start..end].to_owned()
}

#[test]
fn the_readmes_first_program_is_the_first_example_byte_for_byte() {
    let example = include_str!("../../crates/tinyagents/examples/first.rs");
    // The example's header: its `//!` lines and the lint an example needs.
    let body = example
        .lines()
        .skip_while(|l| l.starts_with("//!") || l.starts_with("#![") || l.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n")
        + "\n";
    assert_eq!(readme_first_program(), body);
    assert!(
        body.contains("ScriptedModel::new(")
            && !body
                .lines()
                .any(|l| l.trim_start().starts_with("let model = tinyagents::models")),
        "it runs offline as written; the real model is the commented line"
    );
    assert!(body.contains("// let model = tinyagents::models::from_spec("));
}

#[test]
fn a_build_errors_debug_lists_each_problem_on_a_line_of_its_own() {
    let error = Agent::builder("main")
        .tool(FnTool::new(
            "t",
            "T.",
            |_: serde_json::Map<String, serde_json::Value>| async { anyhow::Ok("x") },
        ))
        .require_approval("typo")
        .build()
        .unwrap_err();
    assert_eq!(
        format!("{error:?}"),
        "agent 'main' could not be built:\n  - it has no model: set one with .model(...)\n  - \
         a policy names tool 'typo', which it does not have (tools: t)"
    );
    // What `main` prints when it returns the error: the same lines.
    let boxed: Box<dyn std::error::Error> = Box::new(error.clone());
    assert_eq!(format!("{boxed:?}"), format!("{error:?}"));
    // Other build errors read as their message.
    let unknown = tinyagents::orchestrator::BuildError::NotFound {
        agent: AgentId::from("ghost"),
    };
    assert_eq!(
        format!("{unknown:?}"),
        "agent 'ghost' is not defined or not visible to this user"
    );
}

#[test]
fn side_effects_print_their_names() {
    assert_eq!(
        format!("{:?}", SideEffects::PAYMENT | SideEffects::DESTRUCTIVE),
        "SideEffects(destructive | payment)"
    );
    assert_eq!(format!("{:?}", SideEffects::NONE), "SideEffects(none)");
    let odd: SideEffects = serde_json::from_value(json!(0x8008)).unwrap();
    assert_eq!(format!("{odd:?}"), "SideEffects(payment | 0x8000)");
    let spec =
        ToolSpec::new("pay", "Pays.", json!({"type": "object"})).side_effects(SideEffects::PAYMENT);
    assert!(format!("{spec:?}").contains("side_effects: SideEffects(payment)"));
}

#[tokio::test]
async fn resume_with_and_recover_with_take_the_options_their_handles_take() {
    let paid = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let pay = {
        let paid = Arc::clone(&paid);
        FnTool::new(
            "pay",
            "Pays.",
            move |_: serde_json::Map<String, serde_json::Value>| {
                let paid = Arc::clone(&paid);
                async move {
                    paid.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    anyhow::Ok("paid")
                }
            },
        )
        .map_spec(ToolSpec::approval_required)
    };
    let ledger = Arc::new(MemoryLedger::new());
    let agent = Agent::builder("payer")
        .model(ScriptedModel::new([
            ScriptedModel::tool_call("pay", json!({})),
            ChatResponse::text("done"),
        ]))
        .tool(pay)
        .ledger(ledger.clone())
        .build()
        .unwrap();
    let run = agent.run("pay").await.unwrap();
    let suspended = run.suspended.clone().expect("it waits");
    let decisions: Vec<ApprovalDecision> = suspended.pending().map(PendingCall::approve).collect();
    let cancelled = tinyagents::core::CancellationToken::new();
    cancelled.cancel();
    let options = ResumeOptions {
        cancel: Some(cancelled),
        ..ResumeOptions::default()
    };
    let resumed = agent
        .resume_with(suspended, &decisions, options.clone())
        .await
        .unwrap();
    assert_eq!(
        resumed.status,
        RunStatus::Cancelled,
        "its token was the option's"
    );
    assert_eq!(paid.load(std::sync::atomic::Ordering::SeqCst), 0);
    let recovered = agent.recover_with(&run.run_id, options).await;
    match recovered {
        Ok(run) => assert_eq!(run.status, RunStatus::Cancelled),
        Err(error) => assert!(error.to_string().contains("finished"), "{error}"),
    }
    assert_eq!(paid.load(std::sync::atomic::Ordering::SeqCst), 0);
    // The common program's names, from the prelude alone.
    let key: Option<&IdempotencyKey> = None;
    assert!(key.is_none());
    assert_eq!(
        child_run_id(&RunId::from("r"), &CallId::new("p1")).as_str(),
        "r::p1"
    );
}
