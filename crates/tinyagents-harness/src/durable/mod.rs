//! What outlives a process: recovering a run whose process died from its
//! last checkpoint, resuming a suspended run with a person's decisions
//! (after checking the stored state never widens what the run may do), the
//! sealed form of a suspended run, and reconciling a finished run's calls
//! in doubt. Each drives the loop (`crate::turns`) from a restored state.

mod reconcile;
mod recover;
mod resume;
mod resume_check;
pub(crate) mod seal;

pub use resume::ResumeOptions;

use tinyagents_core::{RunId, TinyAgentsError};
use tracing::Instrument;

use crate::events::EventSink;
use crate::events::segment::SegmentGuard;
use crate::harness::AgentHarness;
use crate::run::AgentRun;
use crate::trace;

/// One resumed or recovered segment of run `run_id`, from its first event
/// to its last: its own sink (`SegmentGuard`), `RunStarted`, `body` under
/// `span`, its failure reported as `RunFailed`, the span ended.
async fn restored_segment(
    harness: &AgentHarness,
    run_id: RunId,
    span: tracing::Span,
    events: &EventSink,
    body: impl AsyncFnOnce(&mut EventSink) -> Result<AgentRun, TinyAgentsError>,
) -> Result<AgentRun, TinyAgentsError> {
    let (guard, mut events) = SegmentGuard::open(events, run_id.clone());
    crate::turns::announce(&events, &run_id, harness)
        .instrument(span.clone())
        .await;
    // Once the run is open, its failure is reported on its bounded sink.
    let result = body(&mut events).instrument(span.clone()).await;
    let result = crate::turns::report_failure(&events, result).await;
    trace::run_ended(&span, &result, harness);
    guard.disarm();
    result
}
