//! Messages of every kind come back exactly as written.

use serde_json::json;
use tinyagents_core::{CallId, Message, ToolCall};

use super::{child, create, fresh, ok, stored, top};
use crate::session::SessionStore;

/// Every kind of [`Message`], with every optional part set and unset and
/// awkward text.
fn every_kind() -> Vec<Message> {
    let mut call = ToolCall::new(
        CallId::new("p1"),
        "search",
        json!({"query": "naïve café", "limit": 5, "nested": {"list": [1, null, true, 1.5]}}),
    );
    call.provider_id = Some("call_abc123".into());
    let mut unparsed = ToolCall::new(CallId::new("p2"), "write_file", serde_json::Value::Null);
    unparsed.raw_arguments = Some("{\"path\": \"a.txt\", oops".into());
    let nested = ToolCall::new(CallId::new("p1/1"), "fetch", json!({}));
    vec![
        Message::system("You are terse.\nNever guess."),
        Message::user("quotes \" and \\ backslashes, emoji 🦀, a NUL \u{0} and tabs\t"),
        Message::user(""),
        Message::Assistant {
            content: String::new(),
            tool_calls: vec![call, unparsed, nested],
            reasoning: Some("private: check both files".into()),
        },
        Message::Tool {
            call_id: CallId::new("p1"),
            provider_id: Some("call_abc123".into()),
            name: "search".into(),
            content: "3 results".into(),
            is_error: false,
        },
        Message::Tool {
            call_id: CallId::new("p2"),
            provider_id: None,
            name: "write_file".into(),
            content: "arguments are not JSON".into(),
            is_error: true,
        },
        Message::Tool {
            call_id: CallId::new("p1/1"),
            provider_id: None,
            name: "fetch".into(),
            content: "x".repeat(64 * 1024),
            is_error: false,
        },
        Message::Assistant {
            content: "Done: 3 results.".into(),
            tool_calls: Vec::new(),
            reasoning: None,
        },
        Message::assistant("   "),
    ]
}

/// Every message variant round-trips unchanged, whether it was saved with
/// the record, appended, or read through `children`.
pub async fn every_message_variant_round_trips(store: &dyn SessionStore) {
    let what = "messages round-trip";
    let messages = every_kind();

    let id = fresh("messages");
    let saved = create(store, &top(id.clone(), messages.clone()), what).await;
    assert_eq!(
        stored(store, &id, what).await.messages,
        messages,
        "{what}: messages saved with the record"
    );

    let (head, tail) = messages.split_at(3);
    let mut record = saved.clone();
    record.messages = head.to_vec();
    assert_eq!(ok(store.save(&record).await, what), 2, "{what}: resave");
    for (k, message) in tail.iter().enumerate() {
        let base = 2 + k as u64;
        ok(
            store.append(&id, base, std::slice::from_ref(message)).await,
            what,
        );
    }
    assert_eq!(
        stored(store, &id, what).await.messages,
        messages,
        "{what}: messages appended one at a time"
    );

    let mut kid = child(&id, "tools", "all kinds");
    kid.messages = messages.clone();
    create(store, &kid, what).await;
    let listed = ok(store.children(&id).await, what);
    assert_eq!(
        listed.first().map(|c| &c.messages),
        Some(&messages),
        "{what}: messages read through `children`"
    );
}
