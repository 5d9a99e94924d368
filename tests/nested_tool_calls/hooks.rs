//! Middlewares, a security gate and a wrap layer that record what they see
//! and refuse, fail or rewrite on demand.

use super::*;

/// A lifecycle middleware that records its hooks, admits or refuses nested
/// calls, and records the nested results it observes.
pub(crate) struct Recorder {
    name: &'static str,
    log: Arc<Log>,
    /// `check_nested_tool` refuses calls of this tool (`Denied`).
    refuse: Option<&'static str>,
    /// `check_nested_tool` fails (a non-`Denied` error) for this tool.
    fail: Option<&'static str>,
    checks: AtomicUsize,
}

impl Recorder {
    pub(crate) fn new(name: &'static str, log: &Arc<Log>) -> Self {
        Self {
            name,
            log: Arc::clone(log),
            refuse: None,
            fail: None,
            checks: AtomicUsize::new(0),
        }
    }

    pub(crate) fn refusing(mut self, tool: &'static str) -> Self {
        self.refuse = Some(tool);
        self
    }

    pub(crate) fn failing(mut self, tool: &'static str) -> Self {
        self.fail = Some(tool);
        self
    }

    pub(crate) fn checks(&self) -> usize {
        self.checks.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Middleware for Recorder {
    fn name(&self) -> &str {
        self.name
    }

    async fn before_tool(
        &self,
        _ctx: &mut RunContext,
        _state: &State,
        call: &mut ToolCall,
    ) -> Result<ToolVerdict, TinyAgentsError> {
        self.log
            .push(format!("{} before_tool {}", self.name, call.id));
        Ok(ToolVerdict::Allow)
    }

    async fn after_tool(
        &self,
        _ctx: &mut RunContext,
        _state: &State,
        call: &ToolCall,
        _result: &mut ToolResult,
    ) -> Result<(), TinyAgentsError> {
        self.log
            .push(format!("{} after_tool {}", self.name, call.id));
        Ok(())
    }

    async fn check_nested_tool(
        &self,
        _ctx: &RunContext,
        _state: &State,
        call: &ToolCall,
    ) -> Result<(), TinyAgentsError> {
        self.checks.fetch_add(1, Ordering::SeqCst);
        self.log
            .push(format!("{} check {} {}", self.name, call.id, call.name));
        if self.refuse == Some(call.name.as_str()) {
            return Err(TinyAgentsError::Denied {
                by: self.name.into(),
                reason: format!("no {}", call.name),
            });
        }
        if self.fail == Some(call.name.as_str()) {
            return Err(TinyAgentsError::State("store offline".into()));
        }
        Ok(())
    }

    async fn observe_nested_result(
        &self,
        _ctx: &RunContext,
        _state: &State,
        call: &ToolCall,
        result: &ToolResult,
    ) {
        self.log.push(format!(
            "{} observe {} {} is_error={}",
            self.name, call.id, result.content, result.is_error
        ));
    }
}

/// A middleware that implements no nested hook at all (the defaults).
pub(crate) struct Silent;

#[async_trait]
impl Middleware for Silent {
    fn name(&self) -> &str {
        "silent"
    }
}

/// What [`Gate`] answers about its target tool.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Answer {
    Allow,
    Deny,
    Ask,
    Fail,
    Panic,
}

/// A host security gate: `answer` for calls of `target`, allow for the
/// rest; it records every request and every screening.
pub(crate) struct Gate {
    target: &'static str,
    answer: Answer,
    log: Arc<Log>,
}

impl Gate {
    pub(crate) fn new(target: &'static str, answer: Answer, log: &Arc<Log>) -> Arc<Self> {
        Arc::new(Self {
            target,
            answer,
            log: Arc::clone(log),
        })
    }
}

#[async_trait]
impl SecurityGate for Gate {
    async fn authorize_tool(
        &self,
        request: &ToolCallRequest<'_>,
    ) -> Result<ToolVerdict, TinyAgentsError> {
        self.log.push(format!(
            "gate {} {} parent={} nested={}",
            request.call_id,
            request.spec.name,
            request
                .parent_call_id
                .map_or_else(|| "-".to_owned(), ToString::to_string),
            request.is_nested()
        ));
        if request.spec.name != self.target {
            return Ok(ToolVerdict::Allow);
        }
        match self.answer {
            Answer::Allow => Ok(ToolVerdict::Allow),
            Answer::Deny => Ok(ToolVerdict::Deny {
                reason: "not on weekends".into(),
            }),
            Answer::Ask => Ok(ToolVerdict::Defer {
                reason: "ask the on-call engineer".into(),
            }),
            Answer::Fail => Err(TinyAgentsError::State("policy store unreachable".into())),
            Answer::Panic => panic!("gate panicked on purpose"),
        }
    }

    async fn screen_output(
        &self,
        _ctx: &RunContext,
        output: &str,
    ) -> Result<OutputVerdict, TinyAgentsError> {
        self.log.push(format!("screen {output}"));
        Ok(OutputVerdict::Allow)
    }
}

/// A wrap layer: records what it wraps; may refuse, rewrite, ask for
/// approval or attach a control request, for nested calls of `target`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum WrapMode {
    Observe,
    Refuse,
    Rewrite,
    AskApproval,
    Control(ToolControl),
}

pub(crate) struct Wrap {
    target: &'static str,
    mode: WrapMode,
    pub(crate) exclusive: bool,
    log: Arc<Log>,
}

impl Wrap {
    pub(crate) fn new(target: &'static str, mode: WrapMode, log: &Arc<Log>) -> Arc<Self> {
        Arc::new(Self {
            target,
            mode,
            exclusive: false,
            log: Arc::clone(log),
        })
    }
}

#[async_trait]
impl ToolMiddleware for Wrap {
    fn name(&self) -> &str {
        "wrap"
    }

    fn concurrent_safe(&self) -> bool {
        !self.exclusive
    }

    async fn wrap_tool(
        &self,
        ctx: &ToolCallContext<'_>,
        call: &ToolCall,
        next: Next<'_>,
    ) -> Result<ToolResult, TinyAgentsError> {
        self.log.push(format!(
            "wrap {} {} nested={} parent={}",
            call.id,
            call.name,
            ctx.is_nested(),
            ctx.parent_call_id
                .map_or_else(|| "-".to_owned(), ToString::to_string)
        ));
        if !ctx.is_nested() || call.name != self.target {
            return next.run(ctx, call).await;
        }
        match self.mode {
            WrapMode::Observe => next.run(ctx, call).await,
            WrapMode::Refuse => Err(TinyAgentsError::Denied {
                by: "wrap".into(),
                reason: format!("no nested {}", call.name),
            }),
            WrapMode::Rewrite => {
                let mut rewritten = call.clone();
                rewritten.arguments = json!({"rewritten": true});
                next.run(ctx, &rewritten).await
            }
            WrapMode::AskApproval => Err(TinyAgentsError::ApprovalRequired {
                tool: call.name.clone(),
                reason: "a person must confirm".into(),
            }),
            WrapMode::Control(control) => {
                next.run(ctx, call).await.map(|r| r.with_control(control))
            }
        }
    }
}
