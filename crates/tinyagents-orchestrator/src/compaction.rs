//! Compaction: how an agent's stored history is kept short.
//!
//! A reducer runs on the history an agent is given (before its run) and on
//! the history it leaves (before it is stored): the reduced conversation is
//! what remains. A conversation the reducer would leave as it is
//! ([`HistoryReducer::is_reduced`]) is stored by appending what a run
//! added; one it shortens is rewritten whole.

use std::fmt;

use tinyagents_core::Message;

/// Shortens a conversation history. Implementations must keep it valid for
/// a provider: an assistant message with tool calls keeps all its results.
pub trait HistoryReducer: Send + Sync {
    /// A name for diagnostics.
    fn name(&self) -> &str;

    /// The reduced history.
    fn reduce(&self, messages: Vec<Message>) -> Vec<Message>;

    /// Whether [`reduce`](Self::reduce) would return `messages` unchanged,
    /// told without reducing them. The default says no, so a conversation
    /// under a reducer that does not override it is reduced and rewritten
    /// whole on every save; override it (cheaply: it runs on every save)
    /// to let saves append.
    fn is_reduced(&self, messages: &[Message]) -> bool {
        let _ = messages;
        false
    }
}

impl fmt::Debug for dyn HistoryReducer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HistoryReducer({})", self.name())
    }
}

/// Keeps the last `count` messages. When the cut would leave tool results
/// without the assistant message that called them, those results go too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeepLastMessages {
    count: usize,
}

impl KeepLastMessages {
    /// Keeps the last `count` messages.
    pub fn new(count: usize) -> Self {
        Self { count }
    }
}

impl HistoryReducer for KeepLastMessages {
    fn name(&self) -> &str {
        "keep_last_messages"
    }

    fn reduce(&self, mut messages: Vec<Message>) -> Vec<Message> {
        if self.is_reduced(&messages) {
            return messages;
        }
        let mut start = messages.len() - self.count;
        while messages
            .get(start)
            .is_some_and(|m| matches!(m, Message::Tool { .. }))
        {
            start += 1;
        }
        messages.drain(..start);
        messages
    }

    fn is_reduced(&self, messages: &[Message]) -> bool {
        messages.len() <= self.count
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tinyagents_core::{CallId, ToolCall};

    fn tool_turn() -> Vec<Message> {
        vec![
            Message::Assistant {
                content: String::new(),
                tool_calls: vec![ToolCall::new(CallId::model(1), "t", json!({}))],
                reasoning: None,
            },
            Message::Tool {
                call_id: CallId::model(1),
                provider_id: None,
                name: "t".into(),
                content: "r".into(),
                is_error: false,
            },
        ]
    }

    #[test]
    fn keeps_the_tail_without_orphaned_results() {
        let mut history = vec![Message::user("q")];
        history.extend(tool_turn());
        history.push(Message::assistant("a"));
        let reducer = KeepLastMessages::new(2);
        assert_eq!(
            reducer.reduce(history.clone()),
            vec![Message::assistant("a")]
        );
        assert_eq!(KeepLastMessages::new(3).reduce(history.clone()).len(), 3);
        assert_eq!(KeepLastMessages::new(9).reduce(history.clone()), history);
        assert!(KeepLastMessages::new(4).is_reduced(&history));
        assert!(!KeepLastMessages::new(3).is_reduced(&history));
    }
}
