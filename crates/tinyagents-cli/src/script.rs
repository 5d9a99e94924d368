//! The scripted model of an agents file: answer `n` of the script is the
//! answer to the `n`-th model call of a request, counted from the
//! transcript (the assistant turns since the last user message), not from
//! a counter in the process. So a run resumed after an approval, or
//! recovered after a crash, in another process, goes on where it was. A
//! string `{input}` inside a scripted call's arguments is the request's
//! input (its last user message), so one file can script many runs.

use tinyagents::core::{ChatRequest, ModelError};
use tinyagents::prelude::{ChatResponse, Message, ScriptedModel, Usage};

use crate::file::{ScriptStep, ScriptUsage};

/// A scripted model answering from `steps`, named `name`.
pub(crate) fn scripted_model(name: &str, steps: &[ScriptStep]) -> ScriptedModel {
    let answers: Vec<ChatResponse> = steps.iter().map(answer).collect();
    ScriptedModel::from_fn(move |request: &ChatRequest<'_>| {
        let turn = turn_of(request.messages);
        let mut answer = answers
            .get(turn)
            .cloned()
            .ok_or(ModelError::ScriptExhausted { call: turn + 1 })?;
        if let Some(input) = last_input(request.messages) {
            for call in &mut answer.tool_calls {
                fill(&mut call.arguments, input);
            }
        }
        Ok(answer)
    })
    .named(name)
}

/// How many model calls this request has made: the assistant messages
/// after the last user message.
fn turn_of(messages: &[Message]) -> usize {
    messages
        .iter()
        .rev()
        .take_while(|m| !matches!(m, Message::User { .. }))
        .filter(|m| matches!(m, Message::Assistant { .. }))
        .count()
}

/// The text of the last user message.
fn last_input(messages: &[Message]) -> Option<&str> {
    messages.iter().rev().find_map(|m| match m {
        Message::User { content } => Some(content.as_str()),
        _ => None,
    })
}

/// Replaces `{input}` in every string of `value` by `input`.
fn fill(value: &mut serde_json::Value, input: &str) {
    match value {
        serde_json::Value::String(text) if text.contains("{input}") => {
            *text = text.replace("{input}", input);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(|v| fill(v, input)),
        serde_json::Value::Object(map) => map.values_mut().for_each(|v| fill(v, input)),
        _ => {}
    }
}

fn answer(step: &ScriptStep) -> ChatResponse {
    let empty = || serde_json::Value::Object(serde_json::Map::new());
    let mut response = if let Some(text) = &step.text {
        ChatResponse::text(text.clone())
    } else if let Some(tool) = &step.tool {
        ScriptedModel::tool_call(tool, step.arguments.clone().unwrap_or_else(empty))
    } else {
        ScriptedModel::tool_calls(
            step.calls
                .iter()
                .map(|c| (c.tool.as_str(), c.arguments.clone().unwrap_or_else(empty))),
        )
    };
    if let Some(ScriptUsage {
        input,
        output,
        cached,
        reasoning,
    }) = step.usage
    {
        response.usage = Usage {
            cached_input_tokens: cached,
            reasoning_tokens: reasoning,
            ..Usage::new(input, output)
        };
    }
    response
}

#[cfg(test)]
mod tests {
    use tinyagents::prelude::{Message, ToolCall};

    use super::{fill, turn_of};

    #[test]
    fn input_in_scripted_arguments_is_the_requests_input() {
        let mut args = serde_json::json!({"to": "{input}", "memo": ["paid {input}"], "n": 1});
        fill(&mut args, "acme");
        assert_eq!(
            args,
            serde_json::json!({"to": "acme", "memo": ["paid acme"], "n": 1})
        );
    }

    #[test]
    fn the_turn_is_counted_from_the_transcript_since_the_last_user_message() {
        let user = |text: &str| Message::User {
            content: text.to_owned(),
        };
        let assistant = || Message::Assistant {
            content: String::new(),
            tool_calls: Vec::<ToolCall>::new(),
            reasoning: None,
        };
        assert_eq!(turn_of(&[user("a")]), 0);
        assert_eq!(turn_of(&[user("a"), assistant()]), 1);
        // A second request in a session starts the script again.
        assert_eq!(
            turn_of(&[user("a"), assistant(), assistant(), user("b")]),
            0
        );
        assert_eq!(
            turn_of(&[user("a"), assistant(), user("b"), assistant()]),
            1
        );
    }
}
