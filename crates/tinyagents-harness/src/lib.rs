//! The tinyagents agent loop.
//!
//! [`AgentHarness`] runs an agent: it asks the model, admits each tool call
//! through one path — the same admission table, execution and settlement
//! for a call the model issued, one a tool nested through
//! [`ToolExecutionContext::call_tool`], and one made inside an agent
//! delegated to as a tool — executes admitted calls (concurrency-safe ones
//! together, others alone, each through the `wrap_tool` onion under its
//! timeout), folds the results back in call order, and repeats until a
//! final answer, a limit, a deferral for approval, or cancellation. It
//! emits [`AgentEvent`]s to a bounded channel and returns an [`AgentRun`].
//! Host code it calls (hooks, gates, wrap layers, redaction, the model) is
//! contained: an error or a panic refuses or fails, naming who, and never
//! unwinds the run.
//!
//! A slow event reader slows the run down (back-pressure), but a stalled one
//! cannot hang it: once the run is cancelled or out of wall clock, an event
//! that finds the buffer full waits at most [`STALLED_READER_GRACE`] for a
//! reader that has stopped reading, then is dropped and counted
//! ([`EventSink::dropped_events`]). [`AgentHarness::start`] returns a
//! [`RunHandle`], the stream of a run's events and the future of its result
//! in one value, for hosts that read events and await the run on one task.
//!
//! It is not a model provider (`tinyagents-models`), a tool library
//! (`tinytools`), or a policy (`tinyagents-middleware`): it drives them.
//!
//! [`AgentEvent`]: tinyagents_core::AgentEvent

mod call;
mod durable;
mod events;
mod handle;
mod harness;
#[cfg(feature = "sim-mutations")]
pub mod mutation;
#[cfg(not(feature = "sim-mutations"))]
mod mutation;
mod pricing;
mod resumed;
mod run;
mod trace;
mod turns;

pub use call::Reconciliation;
pub use call::ToolExecutionContext;
pub use durable::ResumeOptions;
pub use durable::seal::{SEAL_KEY_MIN_BYTES, SEALED_RUN_FORMAT, SealedRun};
pub use events::{EventReceiver, EventSink, STALLED_READER_GRACE, event_channel};
pub use handle::{DEFAULT_EVENT_BUFFER, RunHandle, RunHandleFuture};
pub use harness::{AgentHarness, AgentHarnessBuilder};
pub use pricing::{DEFAULT_OUTPUT_RESERVE, PromptEstimator};
pub use run::{
    AgentRun, ApprovalDecision, OUTPUT_SCHEMA_PROPERTY, PendingCall, RunRequest, SESSION_PROPERTY,
    SUSPENDED_RUN_FORMAT, SuspendedRun, TurnEntry,
};
