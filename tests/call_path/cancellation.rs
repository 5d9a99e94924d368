//! The one call path and cancellation: a call admitted in a run that was
//! cancelled before execution does not start, on the in-place path of a
//! one-call turn as on the batched path.

use std::sync::Arc;

use serde_json::json;
use tinyagents::prelude::*;
use tinyagents::{core::RunContext, core::State};
use tinyagents_tests::{assert_one_terminal_per_start, assert_transcript_paired};

use crate::{answer, assert_one_run_end, harness, plain, run, t};

/// Cancels the run from `before_tool`, after the call was admitted.
struct CancelOnAdmission;

#[async_trait]
impl Middleware for CancelOnAdmission {
    fn name(&self) -> &str {
        "cancel-on-admission"
    }

    async fn before_tool(
        &self,
        ctx: &mut RunContext,
        _state: &State,
        _call: &mut ToolCall,
    ) -> Result<ToolVerdict, TinyAgentsError> {
        ctx.cancellation().cancel();
        Ok(ToolVerdict::Allow)
    }
}

/// A turn of one call with nesting off (the call runs in place) and a turn
/// of two calls with nesting on (batched): once the run is cancelled after
/// admission, no call starts; each is answered "was not run", the run ends
/// `Cancelled`, and every started call has its one terminal event.
#[tokio::test]
async fn i10_a_call_admitted_in_a_run_cancelled_before_execution_never_starts() {
    for (calls, nesting) in [(1, 0), (2, 3)] {
        let work = plain("work");
        let turn: Vec<(String, serde_json::Value)> =
            (0..calls).map(|_| ("work".to_owned(), json!({}))).collect();
        let harness = harness(
            vec![
                tinyagents_tests::turn(&turn),
                ChatResponse::text("unreachable"),
            ],
            vec![t(&work)],
            |b| {
                b.limits(RunLimits::default().with_max_nested_depth(nesting))
                    .middleware(Arc::new(CancelOnAdmission))
            },
        );
        let (result, events) = run(&harness).await;
        let done = result.unwrap();
        assert_eq!(done.status, RunStatus::Cancelled, "{calls} call(s)");
        assert_eq!(work.runs(), 0, "no call starts in a cancelled run");
        let (text, is_error) = answer(&done, "p1").expect("p1 is answered");
        assert!(is_error && text.contains("was not run"), "{text}");
        assert_transcript_paired(&done.messages);
        assert_one_terminal_per_start(&events);
        assert_one_run_end(&events);
    }
}
