//! The simulated model: it answers from a script, and which turn it is on
//! is a function of the transcript (how many assistant messages it holds),
//! so a recovered or resumed run asks for the turns after its checkpoint,
//! as a real model would continue. The root reads its script from the
//! history; a helper reads its own from the query it was sent.

use tinyagents::prelude::*;
use tinyagents::{core::ChatRequest, core::ModelError, core::ModelToolCall, core::Usage};

use crate::plan::TurnPlan;
use crate::tools::arguments;

/// The input the root run is started with.
pub(crate) const ROOT_INPUT: &str = "run the simulated plan";

/// The simulated model of every agent of a history.
pub(crate) struct PlanModel {
    root: Vec<TurnPlan>,
    secret: Option<String>,
    conversation: bool,
}

impl PlanModel {
    /// A model answering the root with `root`.
    pub(crate) fn new(root: Vec<TurnPlan>, secret: Option<String>, conversation: bool) -> Self {
        Self {
            root,
            secret,
            conversation,
        }
    }

    fn script(&self, messages: &[Message]) -> Vec<TurnPlan> {
        for message in messages {
            if let Message::User { content, .. } = message {
                if content.contains(ROOT_INPUT) {
                    return self.root.clone();
                }
                if let Some(turns) = query_script(content) {
                    return turns;
                }
            }
        }
        Vec::new()
    }
}

/// The script a helper's query carries (the query text is JSON; a helper
/// may see it inside a longer message).
fn query_script(content: &str) -> Option<Vec<TurnPlan>> {
    if let Ok(turns) = serde_json::from_str::<Vec<TurnPlan>>(content) {
        return Some(turns);
    }
    let start = content.find('[')?;
    let end = content.rfind(']')?;
    serde_json::from_str(content.get(start..=end)?).ok()
}

#[async_trait]
impl ChatModel for PlanModel {
    fn name(&self) -> &str {
        "sim-plan"
    }

    async fn chat(&self, request: ChatRequest<'_>) -> Result<ChatResponse, ModelError> {
        let script = self.script(request.messages);
        let turn = request
            .messages
            .iter()
            .filter(|m| matches!(m, Message::Assistant { .. }))
            .count();
        let usage = Usage::new(10, 3);
        let mut response = match script.get(turn) {
            None => ChatResponse::text("done"),
            Some(TurnPlan::Fails) => {
                return Err(ModelError::Server {
                    status: 503,
                    message: format!("planted model failure at turn {turn}"),
                });
            }
            Some(TurnPlan::Calls(calls)) => ChatResponse::tool_calls(
                calls
                    .iter()
                    .map(|call| {
                        let provider = call.provider_id.clone();
                        match arguments(&call.args, self.secret.as_deref(), self.conversation) {
                            Ok(args) => ModelToolCall::new(provider, call.tool.clone(), args),
                            Err(text) => {
                                ModelToolCall::from_text(provider, call.tool.clone(), &text)
                            }
                        }
                    })
                    .collect(),
            ),
        };
        response.usage = usage;
        Ok(response)
    }
}
