//! Admission: one ordered table of stages for every call, whatever its
//! origin. Where the rules (`docs/rules.md`) make origins differ, the
//! table says so as data (a stage applies to model-issued calls, nested
//! calls or both) or one `match` inside the stage decides; no stage exists
//! twice.
//!
//! | stage | model-issued | nested |
//! |---|---|---|
//! | refusal quota | — | charged as the call arrives (given back when admitted): the 9th refusal of a parent is refused unevaluated |
//! | cancellation | — | a cancelled run refuses |
//! | bounds | `max_parallel_calls` per turn | `max_nested_depth` |
//! | budget | every issued call spends a slot | — (reserved later) |
//! | lookup | model dispatch and the allow-list | the same |
//! | arguments | injection, `InvalidArgsPolicy`, schema | the same (`Fail` refuses) |
//! | approval | — | `external`/`approval_required` refuses |
//! | policy | `before_tool` (may rewrite, deny, defer) | `check_nested_tool` |
//! | gate | `authorize_tool`; `Ask` defers | `authorize_tool`; `Ask` refuses |
//! | approval | a flagged tool nothing approved defers | — |
//! | budget | — | one slot of the shared pool, given back on refusal |
//! | hold | — | the concurrency gate, under the parent's hold |
//! | ledger | the started row decided (hash, replay class: `Never` for a call a person approved); the turn writes its rows together | the started row, written |

use crate::mutation::{Mutation, planted};
use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use tinyagents_core::{
    AgentEvent, CallId, LimitKind, LimitTracker, RunContext, State, TinyAgentsError, ToolCall,
    ToolReplay, ToolResult,
};
use tinyagents_middleware::{Hook, ToolCallRequest, ToolVerdict};
use tinytools::{RegisteredTool, prepare_arguments, prepare_owned_arguments};

use super::CallPath;
use super::contain::contain;
use super::emit::ToolEvents;
use super::ledger::Start;
use super::nested::{Hold, HoldKind, NestedRunner, REFUSAL_CAP};

/// Where a call comes from, with what its admission may borrow.
pub(crate) enum Scope<'a> {
    /// Issued by the model: the loop lends the context mutably.
    Model {
        ctx: &'a mut RunContext,
        state: &'a State,
        /// The call's place in its turn.
        position: usize,
    },
    /// Made by a running tool through `ToolExecutionContext::call_tool`.
    Nested {
        ctx: &'a RunContext,
        state: &'a State,
        parent: &'a CallId,
        runner: &'a NestedRunner,
        /// Its parent had its quota of refused calls when it arrived (the
        /// runner charges the quota as a call arrives).
        quota_spent: bool,
    },
}

impl Scope<'_> {
    pub(crate) fn ctx(&self) -> &RunContext {
        match self {
            Self::Model { ctx, .. } => ctx,
            Self::Nested { ctx, .. } => ctx,
        }
    }

    fn is_nested(&self) -> bool {
        matches!(self, Self::Nested { .. })
    }

    fn parent(&self) -> Option<&CallId> {
        match self {
            Self::Model { .. } => None,
            Self::Nested { parent, .. } => Some(parent),
        }
    }
}

/// The stages of admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    RefusalQuota,
    Cancellation,
    Bounds,
    Budget,
    Lookup,
    Arguments,
    Approval,
    Policy,
    Gate,
    Hold,
    Ledger,
}

/// Which origins a row of the table applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Applies {
    Model,
    Nested,
    Both,
}

/// The admission table, in order.
const STAGES: [(Stage, Applies); 13] = [
    (Stage::RefusalQuota, Applies::Nested),
    (Stage::Cancellation, Applies::Nested),
    (Stage::Bounds, Applies::Both),
    (Stage::Budget, Applies::Model),
    (Stage::Lookup, Applies::Both),
    (Stage::Arguments, Applies::Both),
    (Stage::Approval, Applies::Nested),
    (Stage::Policy, Applies::Both),
    (Stage::Gate, Applies::Both),
    (Stage::Approval, Applies::Model),
    (Stage::Budget, Applies::Nested),
    (Stage::Hold, Applies::Nested),
    (Stage::Ledger, Applies::Both),
];

/// An admitted call, ready to run.
pub(crate) struct Admitted<'h> {
    pub(crate) call: ToolCall,
    pub(crate) entry: &'h RegisteredTool,
    /// The hold a nested call runs under.
    pub(crate) hold: Option<(Hold, HoldKind)>,
    /// Settled before a crash: its recorded result answers it.
    pub(crate) recorded: Option<ToolResult>,
    /// The idempotency key's hash (`call_hash`), with a ledger.
    pub(crate) args_hash: Option<String>,
    /// The replay class its started row records: the tool's, or `Never`
    /// for a call a person approved (an approval authorises one
    /// execution).
    pub(crate) replay: ToolReplay,
}

/// How admission of one call ended.
pub(crate) enum Admission<'h> {
    Run(Admitted<'h>),
    /// Refused: the error is its answer.
    Refused(ToolCall, TinyAgentsError),
    /// Waits for a person (model-issued calls only).
    Pending(ToolCall, String),
    /// Ends the run (`InvalidArgsPolicy::Fail` on a model-issued call).
    Fatal(ToolCall, TinyAgentsError),
}

/// What admission carries from stage to stage.
struct Admitting<'h, 'a> {
    call: ToolCall,
    entry: Option<&'h RegisteredTool>,
    /// The call's arguments are ready as sent, for `entry`
    /// ([`CallPath::ready_as_sent`]): lookup and the arguments stage have
    /// nothing to do.
    ready: bool,
    deferred: Option<String>,
    /// A person approved this call before its admission (on resume). Only
    /// that answers a gate's question; a middleware's approval granted
    /// during admission answers only the approval stage.
    approved_by_person: bool,
    slot: Option<NestedSlot<'a>>,
    hold: Option<(Hold, HoldKind)>,
    recorded: Option<ToolResult>,
    args_hash: Option<String>,
    replay: ToolReplay,
}

/// How a stage ended other than by passing the call on.
enum Stop {
    Refuse(TinyAgentsError),
    Fatal(TinyAgentsError),
}

impl CallPath {
    /// Admits one call through every stage of the table that applies to its
    /// origin. A refusal gives back the nested budget slot the call had
    /// reserved (its place in the parent's refusal quota is the runner's:
    /// kept on refusal, given back when admitted).
    ///
    /// `ready` is the call's tool when its arguments were found ready as
    /// sent ([`CallPath::ready_as_sent`]), so they are neither looked up
    /// nor prepared again.
    pub(crate) fn admit<'h, 'a>(
        &'h self,
        scope: Scope<'a>,
        events: &'a ToolEvents,
        call: ToolCall,
        ready: Option<&'h RegisteredTool>,
    ) -> impl Future<Output = Admission<'h>> + use<'h, 'a>
    where
        'h: 'a,
    {
        // A plain function: an `async fn` forwarding to another keeps its
        // arguments twice.
        self.admit_through(scope, events, call, ready)
    }

    async fn admit_through<'h, 'a>(
        &'h self,
        mut scope: Scope<'a>,
        events: &'a ToolEvents,
        call: ToolCall,
        ready: Option<&'h RegisteredTool>,
    ) -> Admission<'h>
    where
        'h: 'a,
    {
        let mut admitting = Admitting {
            call,
            entry: ready,
            ready: ready.is_some(),
            deferred: None,
            approved_by_person: false,
            slot: None,
            hold: None,
            recorded: None,
            args_hash: None,
            replay: ToolReplay::Never,
        };
        let nested = scope.is_nested();
        for (stage, applies) in STAGES {
            let applies = match applies {
                Applies::Both => true,
                Applies::Model => !nested,
                Applies::Nested => nested,
            };
            if !applies {
                continue;
            }
            // Only the stages that wait are awaited, each as its own
            // future: one future sized for every stage, made at every stage,
            // would be copied thirteen times per call.
            let passed = match stage {
                Stage::Policy => self
                    .policy(&mut scope, &mut admitting)
                    .await
                    .map_err(Stop::Refuse),
                Stage::Gate => self
                    .gate(&scope, &mut admitting)
                    .await
                    .map_err(Stop::Refuse),
                Stage::Hold => self.hold(&scope, &mut admitting).await,
                Stage::Ledger => self.ledger_start(&scope, events, &mut admitting).await,
                _ => self.stage(stage, &mut scope, events, &mut admitting),
            };
            if let (
                Stage::Budget,
                true,
                Err(Stop::Refuse(TinyAgentsError::LimitExceeded { limit, used, .. })),
            ) = (stage, nested, &passed)
            {
                // A spent cap is reported to the nested caller's run too.
                events
                    .sink()
                    .emit(|| AgentEvent::LimitReached {
                        kind: LimitKind::ToolCalls,
                        limit: *limit,
                        used: *used,
                    })
                    .await;
            }
            if let Err(stop) = passed {
                consume_approval(&mut scope, &admitting.call);
                return match stop {
                    Stop::Refuse(error) => Admission::Refused(admitting.call, error),
                    Stop::Fatal(error) => Admission::Fatal(admitting.call, error),
                };
            }
        }
        let Admitting {
            call,
            entry,
            deferred,
            slot,
            hold,
            recorded,
            args_hash,
            replay,
            ..
        } = admitting;
        consume_approval(&mut scope, &call);
        let Some(entry) = entry else {
            return Admission::Refused(call, before_lookup());
        };
        if let Some(reason) = deferred {
            return Admission::Pending(call, reason);
        }
        if let Some(slot) = slot {
            slot.keep();
        }
        Admission::Run(Admitted {
            call,
            entry,
            hold,
            recorded,
            args_hash,
            replay,
        })
    }

    /// The stages that never wait.
    fn stage<'h, 'a>(
        &'h self,
        stage: Stage,
        scope: &mut Scope<'a>,
        events: &ToolEvents,
        a: &mut Admitting<'h, 'a>,
    ) -> Result<(), Stop>
    where
        'h: 'a,
    {
        match stage {
            Stage::RefusalQuota => {
                if let Scope::Nested {
                    parent,
                    quota_spent: true,
                    ..
                } = scope
                {
                    return Err(Stop::Refuse(TinyAgentsError::NestedRefusalCap {
                        tool: a.call.name.clone(),
                        parent: (*parent).clone(),
                        cap: REFUSAL_CAP,
                    }));
                }
                Ok(())
            }
            Stage::Cancellation => {
                if scope.ctx().is_cancelled() {
                    let name = &a.call.name;
                    return Err(Stop::Refuse(TinyAgentsError::tool_failed(
                        name.clone(),
                        format!("nested call '{name}' refused: the run was cancelled"),
                    )));
                }
                Ok(())
            }
            Stage::Bounds => self.bounds(scope, &a.call).map_err(Stop::Refuse),
            Stage::Budget => match scope {
                Scope::Model { ctx, .. } => {
                    ctx.tracker().try_reserve_tool_call().map_err(Stop::Refuse)
                }
                Scope::Nested { ctx, .. } => match NestedSlot::reserve(ctx.tracker()) {
                    Ok(slot) => {
                        a.slot = Some(slot);
                        Ok(())
                    }
                    Err(limit) => Err(Stop::Refuse(limit)),
                },
            },
            Stage::Lookup if a.ready => Ok(()),
            Stage::Lookup => match self.lookup(&a.call.name) {
                Some(entry) => {
                    a.entry = Some(entry);
                    Ok(())
                }
                None => Err(Stop::Refuse(TinyAgentsError::ToolNotFound {
                    name: a.call.name.clone(),
                })),
            },
            Stage::Arguments => {
                let entry = a.entry.ok_or_else(|| Stop::Refuse(before_lookup()))?;
                if a.ready {
                    return Ok(());
                }
                // The call gives its arguments up to the tool, unless a
                // refusal's event may still show them.
                let prepared = if events.is_active() && events.captures() {
                    prepare_arguments(entry, &a.call, &self.injected, self.invalid_args)
                } else {
                    let arguments = std::mem::take(&mut a.call.arguments);
                    let raw = a.call.raw_arguments.as_deref();
                    prepare_owned_arguments(
                        entry,
                        arguments,
                        raw,
                        &self.injected,
                        self.invalid_args,
                    )
                };
                match prepared {
                    Ok(arguments) => {
                        a.call.arguments = arguments;
                        a.call.raw_arguments = None;
                        Ok(())
                    }
                    Err(error) if error.ends_run_under(self.invalid_args) && !scope.is_nested() => {
                        Err(Stop::Fatal(error.into()))
                    }
                    Err(error) => Err(Stop::Refuse(error.into())),
                }
            }
            Stage::Approval => {
                let entry = a.entry.ok_or_else(|| Stop::Refuse(before_lookup()))?;
                let spec = entry.spec();
                if !spec.waits_for_person() {
                    return Ok(());
                }
                match scope {
                    Scope::Nested { .. } => {
                        Err(Stop::Refuse(TinyAgentsError::NestedApprovalRequired {
                            tool: a.call.name.clone(),
                        }))
                    }
                    // Fail closed: a flagged tool runs only on an approval
                    // (a person's, or a middleware that decides approvals).
                    Scope::Model { ctx, .. } => {
                        if a.deferred.is_none() && !ctx.is_call_approved(&a.call) {
                            let flag = if spec.approval_required {
                                "flags it approval_required"
                            } else {
                                "marks it external"
                            };
                            a.deferred = Some(format!(
                                "tool '{}' requires a person's approval (asked by the tool's spec, which {flag})",
                                a.call.name
                            ));
                        }
                        Ok(())
                    }
                }
            }
            // Awaited by the caller, each as its own future.
            Stage::Policy | Stage::Gate | Stage::Hold | Stage::Ledger => Ok(()),
        }
    }

    /// The concurrency gate a nested call runs under, under its parent's
    /// hold.
    async fn hold<'h, 'a>(
        &'h self,
        scope: &Scope<'a>,
        a: &mut Admitting<'h, 'a>,
    ) -> Result<(), Stop> {
        let entry = a.entry.ok_or_else(|| Stop::Refuse(before_lookup()))?;
        if let Scope::Nested { parent, runner, .. } = scope {
            let shared = self.runs_shared(entry);
            a.hold = Some(
                runner
                    .acquire(parent, &a.call.name, shared)
                    .await
                    .map_err(Stop::Refuse)?,
            );
        }
        Ok(())
    }

    /// The started row. Its hash is the one rule (`call_hash`) on every
    /// origin, its replay class the tool's unless a person approved the
    /// call (then `Never`: met again in doubt, it is put to its tool, not
    /// run twice). A nested call's row is written here; a model-issued
    /// turn writes its admitted calls' rows together once the turn is
    /// admitted (`CallPath::start_group`), so a durable ledger commits
    /// them at once.
    async fn ledger_start<'h, 'a>(
        &'h self,
        scope: &Scope<'a>,
        events: &ToolEvents,
        a: &mut Admitting<'h, 'a>,
    ) -> Result<(), Stop> {
        let entry = a.entry.ok_or_else(|| Stop::Refuse(before_lookup()))?;
        a.replay = if a.approved_by_person {
            ToolReplay::Never
        } else {
            entry.spec().replay
        };
        if self.ledger.is_none() || a.deferred.is_some() {
            return Ok(());
        }
        let hash = super::identity::call_hash(events.redaction(), &a.call.arguments);
        if !scope.is_nested() {
            a.args_hash = Some(hash);
            return Ok(());
        }
        // Boxed: the ledger's future is large and only runs with a ledger.
        let start =
            Box::pin(self.start_row(scope.ctx(), events, &a.call, entry, &hash, a.replay)).await;
        a.args_hash = Some(hash);
        match start {
            Start::Run => Ok(()),
            Start::Recorded(result) => {
                a.recorded = Some(result);
                Ok(())
            }
            Start::Refused(text) => Err(Stop::Refuse(TinyAgentsError::tool_failed(
                a.call.name.clone(),
                text,
            ))),
        }
    }

    /// The fan-out bound: a turn's parallel calls, or a nested call's depth.
    fn bounds(&self, scope: &Scope<'_>, call: &ToolCall) -> Result<(), TinyAgentsError> {
        let limits = &scope.ctx().limits;
        match scope {
            Scope::Model { position, .. } => {
                let max = limits.max_parallel_calls;
                if u32::try_from(*position).unwrap_or(u32::MAX) >= max {
                    return Err(TinyAgentsError::LimitExceeded {
                        kind: LimitKind::ParallelCalls,
                        limit: u64::from(max),
                        used: u64::try_from(*position).unwrap_or(u64::MAX) + 1,
                    });
                }
                Ok(())
            }
            Scope::Nested { .. } => {
                let max = limits.max_nested_depth();
                let depth = call.id.depth();
                if max == 0 {
                    return Err(TinyAgentsError::NestedDisabled {
                        tool: call.name.clone(),
                    });
                }
                if depth > max {
                    return Err(TinyAgentsError::NestedDepthExceeded {
                        tool: call.name.clone(),
                        depth,
                        max,
                    });
                }
                Ok(())
            }
        }
    }

    /// Every middleware's admission hook, in order: `before_tool` for a
    /// model-issued call (most restrictive verdict wins), `check_nested_tool`
    /// for a nested one (the first refusal wins). Contained: an error or a
    /// panic refuses, naming the middleware.
    async fn policy(
        &self,
        scope: &mut Scope<'_>,
        a: &mut Admitting<'_, '_>,
    ) -> Result<(), TinyAgentsError> {
        if let Scope::Model { ctx, .. } = scope {
            a.approved_by_person = ctx.is_call_approved(&a.call);
        }
        let hook = match scope {
            Scope::Model { .. } => Hook::BeforeTool,
            Scope::Nested { .. } => Hook::CheckNestedTool,
        };
        for site in self.middlewares.with(hook) {
            let name = site.name();
            match scope {
                Scope::Model { ctx, state, .. } => {
                    let built = site.build(|m| m.before_tool(ctx, state, &mut a.call));
                    let verdict = contain(name, built).await?;
                    // The lookup matched the spec's name: no copy needed
                    // to tell whether a middleware changed it.
                    let tool = a.entry.map(|entry| entry.spec().name.as_str());
                    if tool.is_some_and(|tool| a.call.name != tool) {
                        a.call.name = tool.unwrap_or_default().to_owned();
                        return Err(TinyAgentsError::Denied {
                            by: name.to_owned(),
                            reason: "a middleware may not change which tool is called".to_owned(),
                        });
                    }
                    match verdict {
                        ToolVerdict::Allow => {}
                        ToolVerdict::Deny { reason } => {
                            return Err(denial(name, reason, &a.call.name));
                        }
                        ToolVerdict::Defer { reason } => {
                            a.deferred.get_or_insert_with(|| {
                                format!("{reason} (asked by policy '{name}')")
                            });
                        }
                    }
                }
                Scope::Nested { ctx, state, .. } => {
                    if planted(Mutation::SkipNestedPolicy) {
                        continue;
                    }
                    let built = site.build(|m| m.check_nested_tool(ctx, state, &a.call));
                    contain(name, built).await?;
                }
            }
        }
        Ok(())
    }

    /// The host's security gate. An error or a panic denies; `Ask` defers a
    /// model-issued call that was not approved, and refuses a nested one,
    /// which cannot be prompted for.
    async fn gate(
        &self,
        scope: &Scope<'_>,
        a: &mut Admitting<'_, '_>,
    ) -> Result<(), TinyAgentsError> {
        let Some(gate) = &self.gate else {
            return Ok(());
        };
        let entry = a.entry.ok_or_else(before_lookup)?;
        let ctx = scope.ctx();
        let request = ToolCallRequest {
            run_id: &ctx.run_id,
            agent_id: ctx.agent_id.as_ref(),
            call_id: &a.call.id,
            parent_call_id: scope.parent(),
            spec: entry.spec(),
            arguments: &a.call.arguments,
        };
        let decision = AssertUnwindSafe(gate.authorize_tool(&request))
            .catch_unwind()
            .await;
        let refusal = match decision {
            Ok(Ok(ToolVerdict::Allow)) => return Ok(()),
            Ok(Ok(ToolVerdict::Defer { reason })) => match scope {
                Scope::Model { .. } => {
                    if !a.approved_by_person {
                        a.deferred.get_or_insert_with(|| {
                            format!("{reason} (asked by the security gate)")
                        });
                    }
                    return Ok(());
                }
                Scope::Nested { .. } => format!(
                    "{reason} (a nested call cannot be prompted for, so the gate's question is a refusal)"
                ),
            },
            Ok(Ok(ToolVerdict::Deny { reason })) => reason,
            Ok(Err(error)) => format!("the gate failed: {error}"),
            Err(_) => "the gate panicked".to_owned(),
        };
        Err(TinyAgentsError::Denied {
            by: "security gate".to_owned(),
            reason: refusal,
        })
    }
}

/// Consumes the approval of a model-issued call as its admission ends,
/// whatever the end: an approval answers one admission.
fn consume_approval(scope: &mut Scope<'_>, call: &ToolCall) {
    if let Scope::Model { ctx, .. } = scope
        && !ctx.approvals.is_empty()
    {
        let run = ctx.run_id.clone();
        ctx.approvals.consume(&run, call);
    }
}

/// A middleware's denial. A reason that already names who denied is kept
/// as it is, so the text does not say it twice.
fn denial(by: &str, reason: String, tool: &str) -> TinyAgentsError {
    if reason.starts_with("denied by ") {
        TinyAgentsError::tool_failed(tool, reason)
    } else {
        TinyAgentsError::Denied {
            by: by.to_owned(),
            reason,
        }
    }
}

/// A stage that needs the tool ran before the lookup: a broken table. Fails
/// closed.
fn before_lookup() -> TinyAgentsError {
    TinyAgentsError::Config("admission table: a stage needs the tool before its lookup".to_owned())
}

/// A nested call's budget slot: given back when dropped, unless kept (the
/// call was admitted). Dropping the admission of a caller that left
/// releases it.
pub(crate) struct NestedSlot<'a> {
    tracker: &'a LimitTracker,
    kept: bool,
}

impl<'a> NestedSlot<'a> {
    fn reserve(tracker: &'a LimitTracker) -> Result<Self, TinyAgentsError> {
        tracker.try_reserve_nested_tool_call()?;
        Ok(Self {
            tracker,
            kept: false,
        })
    }

    fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for NestedSlot<'_> {
    fn drop(&mut self) {
        if !self.kept && !planted(Mutation::KeepRefusedSlot) {
            self.tracker.release_nested_tool_call();
        }
    }
}

/// The model-readable text of a refusal.
pub(crate) fn refusal_text(path: &CallPath, error: &TinyAgentsError) -> String {
    match error {
        TinyAgentsError::LimitExceeded { kind, limit, .. } => {
            format!("refused: the run reached its {kind} limit of {limit}")
        }
        TinyAgentsError::ToolNotFound { name } => {
            let available: Vec<&str> = path.model_tools.iter().map(|d| d.name.as_str()).collect();
            format!(
                "tool not found: {name}. Available tools: {}",
                available.join(", ")
            )
        }
        // The argument error's own text already names the tool.
        TinyAgentsError::InvalidArguments { message, .. } => message.clone(),
        other => other.to_string(),
    }
}
