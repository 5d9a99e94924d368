//! Payloads ride on spans only under capture, and only redacted: with
//! capture off no span carries a prompt, a completion, arguments or a
//! result, on any origin (model-issued, nested, delegated); with it on they
//! do, and the secret a tool returned is in none of them.

use super::*;

#[tokio::test]
async fn without_capture_no_span_carries_a_payload_on_any_origin() {
    let spans = Spans::capture();
    team(PayloadCapture::default())
        .run("look r-1 up, the user's words")
        .await
        .unwrap();
    let spans = spans.finished();
    for span in &spans {
        for key in PAYLOAD_KEYS {
            assert_eq!(attr(span, key), None, "{key} on {}", span.name);
        }
    }
    let everything = every_attribute(&spans);
    for payload in [
        "the user's words",
        "r-1",
        "r-2",
        "looked up",
        "record",
        SECRET,
    ] {
        assert!(!everything.contains(payload), "{payload} in\n{everything}");
    }
}

#[tokio::test]
async fn with_capture_payloads_are_attributes_redacted_on_every_origin() {
    let spans = Spans::capture();
    team(PayloadCapture::all())
        .run("look r-1 up, the user's words")
        .await
        .unwrap();
    let spans = spans.finished();
    let everything = every_attribute(&spans);
    assert!(!everything.contains(SECRET), "the secret in\n{everything}");
    for chat in spans.iter().filter(|s| s.name.starts_with("chat ")) {
        let input: Value =
            serde_json::from_str(&attr(chat, "gen_ai.input.messages").unwrap()).unwrap();
        assert!(input.as_array().is_some_and(|m| !m.is_empty()), "{input}");
        let output: Value =
            serde_json::from_str(&attr(chat, "gen_ai.output.messages").unwrap()).unwrap();
        assert_eq!(output[0]["role"], "assistant", "{output}");
    }
    let first_input = attr(
        spans
            .iter()
            .find(|s| s.name == "chat coordinator-model")
            .unwrap(),
        "gen_ai.input.messages",
    )
    .unwrap();
    assert!(first_input.contains("the user's words"), "{first_input}");
    // Model-issued, nested, delegated, and the delegated agent's own call.
    for (tool, id, argument) in [
        ("lookup", "p1", "r-1"),
        ("fetch", "p1/1", "r-1"),
        ("specialist", "p2", "what of r-2?"),
        ("fetch", "p1", "r-2"),
    ] {
        let call = tool_call(&spans, tool, id);
        let arguments = attr(call, "gen_ai.tool.call.arguments").unwrap();
        assert!(arguments.contains(argument), "{tool} {id}: {arguments}");
        let result = attr(call, "gen_ai.tool.call.result").unwrap();
        assert!(!result.is_empty(), "{tool} {id}");
    }
    let fetched = attr(
        tool_call(&spans, "fetch", "p1/1"),
        "gen_ai.tool.call.result",
    )
    .unwrap();
    assert!(fetched.contains("[REDACTED]"), "{fetched}");
}
