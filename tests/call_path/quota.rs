//! Item 7: a parent gets at most 8 refused nested calls evaluated, also
//! when it issues its calls concurrently: a gate that takes a while to
//! refuse is asked at most 8 times for one parent's fan-out of 200 calls,
//! and every call of the fan-out is refused.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tinyagents::prelude::*;
use tinyagents::{
    harness::ToolExecutionContext, middleware::SecurityGate, middleware::ToolCallRequest,
    middleware::ToolVerdict,
};
use tinyagents_tests::assert_one_terminal_per_start;

use crate::{Origin, gate_allow, gate_deny, harness, one_turn, plain, run, t};
use tinyagents_tests::join_all;

const FAN_OUT: usize = 200;
const REFUSAL_CAP: usize = 8;

/// A gate that takes 20 ms over each nested call of `leaf` and refuses it,
/// counting those evaluations; every other call it allows at once.
#[derive(Default)]
struct SlowRefuser {
    evaluations: AtomicUsize,
}

#[async_trait]
impl SecurityGate for SlowRefuser {
    async fn authorize_tool(
        &self,
        request: &ToolCallRequest<'_>,
    ) -> Result<ToolVerdict, TinyAgentsError> {
        if !request.is_nested() || request.spec.name != "leaf" {
            return Ok(gate_allow());
        }
        self.evaluations.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(20)).await;
        Ok(gate_deny("leaf is closed"))
    }
}

/// `fan`: calls `leaf` 200 times at once through the harness and records
/// every outcome.
struct Fan {
    spec: ToolSpec,
    outcomes: Mutex<Vec<Result<ToolResult, TinyAgentsError>>>,
}

#[async_trait]
impl Tool for Fan {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn execute_with_context(
        &self,
        _args: Value,
        _opts: ToolCallOptions,
        context: Option<&ToolRunContext>,
    ) -> anyhow::Result<ToolResult> {
        let harness = ToolExecutionContext::from_run_context(context.expect("a context"));
        let calls = (0..FAN_OUT)
            .map(|i| harness.call_tool("leaf", json!({"i": i})))
            .collect();
        let outcomes = join_all(calls).await;
        let refused = outcomes.iter().filter(|o| o.is_err()).count();
        *self.outcomes.lock().unwrap() = outcomes;
        Ok(ToolResult::text(format!("{refused} refused")))
    }
}

async fn a_concurrent_fan_out_is_evaluated_at_most_eight_times(parent: Origin) {
    let gate = Arc::new(SlowRefuser::default());
    let leaf = plain("leaf");
    let fan = Arc::new(Fan {
        spec: crate::spec("fan"),
        outcomes: Mutex::default(),
    });
    let harness = harness(
        one_turn(&[parent.call("fan", json!({}))]),
        vec![t(&leaf), Arc::clone(&fan) as Arc<dyn Tool>],
        |b| b.security_gate(Arc::clone(&gate) as Arc<dyn SecurityGate>),
    );
    let (result, events) = run(&harness).await;
    assert_eq!(result.unwrap().status, RunStatus::Completed);
    let evaluations = gate.evaluations.load(Ordering::SeqCst);
    assert!(
        evaluations <= REFUSAL_CAP,
        "{parent:?} parent: the gate was asked {evaluations} times for one parent's refused calls"
    );
    let outcomes = fan.outcomes.lock().unwrap();
    assert_eq!(outcomes.len(), FAN_OUT);
    for outcome in outcomes.iter() {
        match outcome {
            Err(TinyAgentsError::Denied { by, .. }) if by == "security gate" => {}
            Err(TinyAgentsError::NestedRefusalCap { .. }) => {}
            other => panic!("{parent:?} parent: a fan-out call was not refused: {other:?}"),
        }
    }
    assert_eq!(leaf.runs(), 0);
    let fan_id = parent.id_of(1);
    let nested_starts = events
        .iter()
        .filter(|e| {
            matches!(e, AgentEvent::ToolStarted { parent_call_id: Some(p), .. } if p.as_str() == fan_id)
        })
        .count();
    assert_eq!(nested_starts, FAN_OUT, "every call of the fan-out started");
    assert_one_terminal_per_start(&events);
}

/// Item 7: a model-issued parent's 200 concurrent nested calls, refused by
/// a slow gate, get the gate's evaluation at most 8 times; all 200 are
/// refused, none runs, and each has one terminal event.
#[tokio::test(start_paused = true)]
async fn i10_7_a_model_issued_parents_concurrent_fan_out_is_evaluated_at_most_eight_times_and_all_refused()
 {
    a_concurrent_fan_out_is_evaluated_at_most_eight_times(Origin::Model).await;
}

/// Item 7: the same for a nested parent (`p1/1`, whose calls are
/// nested-of-nested).
#[tokio::test(start_paused = true)]
async fn i10_7_a_nested_parents_concurrent_fan_out_is_evaluated_at_most_eight_times_and_all_refused()
 {
    a_concurrent_fan_out_is_evaluated_at_most_eight_times(Origin::Nested).await;
}
