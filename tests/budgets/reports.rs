//! Where usage and cost are told: events, the run's report, and what a
//! model without a price gets.

use tinyagents::core::{Cost, TinyAgentsError};

use super::*;

/// The coordinator's `ModelCompleted` events carry each call's cost, the
/// helper's (inside `Delegated`) theirs, and the coordinator's
/// `RunCompleted` the tree's total beside its own usage.
#[tokio::test]
async fn model_completed_events_carry_each_calls_cost_and_run_completed_the_trees_total() {
    let (root, _) = team(
        vec![Origin::Model.delegation(100, 10), answer("done", 200, 10)],
        vec![answer("helped", 300, 50)],
        RunLimits::default(),
        SpendCaps::default(),
        false,
    )
    .await;
    let (result, events) = run_team(&root).await;
    let run = result.unwrap();
    let own: Vec<Option<Cost>> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ModelCompleted { cost, .. } => Some(*cost),
            _ => None,
        })
        .collect();
    assert_eq!(own, [Some(cost_of(100, 10)), Some(cost_of(200, 10))]);
    let delegated: Vec<Option<Cost>> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Delegated { event, .. } => match &**event {
                AgentEvent::ModelCompleted { cost, .. } => Some(*cost),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert_eq!(delegated, [Some(cost_of(300, 50))]);
    let Some(AgentEvent::RunCompleted { usage, spent, .. }) = events.last() else {
        panic!("the stream ends with RunCompleted: {events:#?}");
    };
    assert_eq!(*usage, Usage::new(300, 20), "the coordinator's own");
    assert_eq!(spent.usage, Usage::new(600, 70), "the tree's");
    assert_eq!(spent.cost, cost_of(600, 70));
    assert_eq!(*spent, run.budget.spent);
    assert_eq!(run.usage, Usage::new(300, 20));
}

/// Cached input tokens are priced at the cached rate and reasoning
/// tokens, part of the output, at the output rate.
#[tokio::test]
async fn cached_and_reasoning_tokens_are_priced_at_their_rates() {
    let usage = Usage {
        input_tokens: 1_000,
        output_tokens: 100,
        cached_input_tokens: 400,
        reasoning_tokens: 60,
    };
    let model = ScriptedModel::new([ChatResponse::text("done").with_usage(usage)]);
    let harness = priced(model, 100, |b| b);
    let run = harness.run("go").await.unwrap();
    // 600 × 1,000 + 400 × 500 + 100 × 2,000 cents per million tokens.
    assert_eq!(run.budget.spent.cost, "1".parse().unwrap());
    assert_eq!(run.budget.spent.usage, usage);
}

/// A model the table does not name is counted, not priced: its calls say
/// so (`cost: None`, `unpriced_calls`), and nothing is guessed.
#[tokio::test]
async fn an_unpriced_model_is_counted_as_unpriced_and_never_guessed() {
    let model = ScriptedModel::new([
        calling("add", json!({"a": 1, "b": 2}), 100, 10),
        answer("done", 100, 10),
    ])
    .named("unlisted");
    let harness = AgentHarness::builder(Arc::new(model))
        .prices(prices())
        .tool(tinyagents_tests::add_tool())
        .build()
        .unwrap();
    let (result, events) = tinyagents_tests::run_collecting(&harness, RunRequest::new("go")).await;
    let run = result.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    let spent = run.budget.spent;
    assert_eq!((spent.model_calls, spent.unpriced_calls), (2, 2));
    assert_eq!(spent.cost, Cost::ZERO);
    assert_eq!(spent.usage, Usage::new(200, 20));
    assert!(
        events
            .iter()
            .filter(|e| matches!(e, AgentEvent::ModelCompleted { .. }))
            .all(|e| matches!(e, AgentEvent::ModelCompleted { cost: None, .. }))
    );
}

/// Under a `max_cost`, a model without a price cannot have its cost
/// bounded: its call is refused before it is made, naming the model.
#[tokio::test]
async fn under_max_cost_an_unpriced_model_call_is_refused_before_it_is_made() {
    let model = Arc::new(ScriptedModel::new([answer("done", 1, 1)]).named("unlisted"));
    let harness = AgentHarness::builder(Arc::clone(&model))
        .prices(prices())
        .limits(RunLimits::default().with_max_cost("100".parse().unwrap()))
        .build()
        .unwrap();
    let error = harness.run("go").await.unwrap_err();
    assert_eq!(
        error,
        TinyAgentsError::ModelUnpriced {
            model: "unlisted".into()
        }
    );
    assert_eq!(model.calls(), 0);
    assert!(error.to_string().contains("has no price"), "{error}");
}

/// The default prompt estimate counts the transcript: a run whose prompt
/// grows is refused once its estimate and the output cap no longer fit,
/// though each answer alone would have.
#[tokio::test]
async fn the_default_estimate_reserves_for_the_prompt_as_it_grows() {
    let long = "x".repeat(3_000);
    let model = Arc::new(
        ScriptedModel::new([
            calling(
                "add",
                json!({"a": 1, "b": 2, "note": "y".repeat(600)}),
                0,
                1,
            ),
            answer("never asked", 0, 1),
        ])
        .named(MODEL),
    );
    let harness = AgentHarness::builder(Arc::clone(&model))
        .prices(prices())
        .model_options(output_cap(1))
        .tool(tinyagents_tests::add_tool())
        .limits(RunLimits::default().with_max_tokens(1_150))
        .build()
        .unwrap();
    // The first prompt is the 3,000-byte input (1,000 tokens by the
    // estimate) and the tool's definition, under 1,150; the second adds
    // the call's 600-byte note (200 more), past it.
    let error = harness.run(long).await.unwrap_err();
    assert!(
        matches!(
            error,
            TinyAgentsError::LimitExceeded {
                kind: LimitKind::Tokens,
                limit: 1_150,
                used: 1
            }
        ),
        "{error:?}"
    );
    assert_eq!(model.calls(), 1);
}

/// The prompt estimator is host code: when it panics the model call is
/// not made and the run fails closed, naming the estimator; with no cap
/// anywhere it is never called.
#[tokio::test]
async fn a_panicking_prompt_estimator_refuses_the_call_and_fails_the_run_naming_it() {
    let model = Arc::new(ScriptedModel::new([answer("done", 1, 1)]).named(MODEL));
    let build = |limits: RunLimits| {
        AgentHarness::builder(Arc::clone(&model))
            .prices(prices())
            .prompt_estimator(|_| panic!("tokenizer missing"))
            .limits(limits)
            .build()
            .unwrap()
    };
    let capped = build(RunLimits::default().with_max_tokens(1_000_000));
    let (result, events) = tinyagents_tests::run_collecting(&capped, RunRequest::new("go")).await;
    let error = result.unwrap_err();
    assert_eq!(
        error,
        TinyAgentsError::Denied {
            by: "the prompt estimator".into(),
            reason: "it panicked: tokenizer missing".into()
        }
    );
    assert_eq!(model.calls(), 0);
    assert!(matches!(events.last(), Some(AgentEvent::RunFailed { .. })));
    // Uncapped, nothing is estimated: the run is made as usual.
    let uncapped = build(RunLimits::default());
    assert_eq!(
        uncapped.run("go").await.unwrap().status,
        RunStatus::Completed
    );
}

/// A "model" that stands for something else (an MCP client in the model's
/// seat) says it is not metered.
struct Unmetered(ScriptedModel);

#[async_trait]
impl ChatModel for Unmetered {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn metered(&self) -> bool {
        false
    }

    async fn chat(
        &self,
        request: tinyagents::core::ChatRequest<'_>,
    ) -> Result<ChatResponse, tinyagents::core::ModelError> {
        self.0.chat(request).await
    }
}

/// An unmetered model's calls are neither reserved, priced nor counted:
/// with no price, under a `max_cost` of nothing and a `max_tokens` of one,
/// its run makes both calls and spends nothing.
#[tokio::test]
async fn an_unmetered_models_calls_hold_cost_and_count_nothing() {
    let model = Unmetered(
        ScriptedModel::new([
            calling("add", json!({"a": 1, "b": 2}), 100, 10),
            answer("done", 100, 10),
        ])
        .named("relay"),
    );
    let harness = AgentHarness::builder(model)
        .prices(prices())
        .tool(tinyagents_tests::add_tool())
        .limits(
            RunLimits::default()
                .with_max_cost(Cost::ZERO)
                .with_max_tokens(1),
        )
        .build()
        .unwrap();
    let (result, events) = tinyagents_tests::run_collecting(&harness, RunRequest::new("go")).await;
    let run = result.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(run.budget.spent, Spent::default());
    assert_eq!(
        run.usage,
        Usage::new(200, 20),
        "its own usage is still told"
    );
    let costs: Vec<Option<Cost>> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ModelCompleted { cost, .. } => Some(*cost),
            _ => None,
        })
        .collect();
    assert_eq!(costs, [None, None]);
}

/// A model whose answer comes as its run is cancelled: the tokens were
/// spent all the same.
struct CancelsAsItAnswers(tinyagents::core::CancellationToken);

#[async_trait]
impl ChatModel for CancelsAsItAnswers {
    fn name(&self) -> &str {
        MODEL
    }

    async fn chat(
        &self,
        _request: tinyagents::core::ChatRequest<'_>,
    ) -> Result<ChatResponse, tinyagents::core::ModelError> {
        self.0.cancel();
        Ok(answer("too late", 100, 10))
    }
}

/// An answer that arrives as the run is cancelled is not used, but what it
/// spent is counted: the cancelled run's budget holds it.
#[tokio::test]
async fn an_answer_that_arrives_as_the_run_is_cancelled_is_counted() {
    let token = tinyagents::core::CancellationToken::new();
    let harness = AgentHarness::builder(CancelsAsItAnswers(token.clone()))
        .prices(prices())
        .build()
        .unwrap();
    let run = harness
        .run_with(
            RunRequest::new("go").with_cancellation(token),
            &EventSink::none(),
        )
        .await
        .unwrap();
    assert_eq!(run.status, RunStatus::Cancelled);
    assert_eq!(run.budget.spent.usage, Usage::new(100, 10));
    assert_eq!(run.budget.spent.cost, cost_of(100, 10));
    assert_eq!(run.budget.spent.model_calls, 1);
}
