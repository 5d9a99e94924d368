//! Redaction of planted secrets in events, the transcript and refusals.

use super::*;

const SECRET: &str = "sk-live-9fQ2xT7bLm4Zr8Kc1Vw6Yh3Jd5Np0Gs";

/// A tool that echoes its `api_key` argument back inside its result, with
/// a second key of its own, and logs the key it received.
fn leaky_tool(received: &Arc<Log>) -> impl Tool + use<> {
    let received = Arc::clone(received);
    FnTool::new("configure", "Configures the client.", move |args: serde_json::Map<String, Value>| {
        let received = Arc::clone(&received);
        async move {
            let key = args.get("api_key").and_then(Value::as_str).unwrap_or("").to_owned();
            received.push(key.clone());
            anyhow::Ok(format!("configured with {key}; backup sk-live-BackupKey0123456789abcdef"))
        }
    })
    .map_spec(|s| {
        ToolSpec::new(
            s.name,
            s.description,
            json!({"type": "object", "properties": {"api_key": {"type": "string"}, "region": {"type": "string"}}}),
        )
    })
}

fn secret_harness(model: &Arc<ScriptedModel>, received: &Arc<Log>) -> AgentHarness {
    AgentHarness::builder(model.clone())
        .payload_capture(PayloadCapture::all())
        .middleware(Arc::new(RedactionMiddleware::new()))
        .tool(leaky_tool(received))
        .build()
        .unwrap()
}

/// Redaction: with `PayloadCapture::all()` and RedactionMiddleware, a key
/// planted in a call's arguments and in its result appears in no event
/// (every event serialised with serde_json and searched), while the tool
/// itself received the real key.
#[tokio::test]
async fn a_planted_secret_never_appears_in_any_event() {
    let model = script(vec![
        ScriptedModel::tool_call("configure", json!({"api_key": SECRET, "region": "eu"})),
        ScriptedModel::tool_call("configure", json!({"region": format!("eu {SECRET}")})),
        done(),
    ]);
    let received = Arc::new(Log::default());
    let (run, events) =
        run_collecting(&secret_harness(&model, &received), RunRequest::new("go")).await;
    run.unwrap();
    let text = events_text(&events);
    assert!(!text.contains(SECRET), "{text}");
    assert!(!text.contains("sk-live-"), "{text}");
    assert!(
        text.contains("[REDACTED]"),
        "the payloads were captured, scrubbed: {text}"
    );
    assert!(
        text.contains("\"region\":\"eu\""),
        "what is not secret stays: {text}"
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(
                e,
                AgentEvent::ToolCompleted {
                    result: Some(_),
                    ..
                }
            ))
            .count(),
        2
    );
    // The tool got the real key (redaction never changes what a tool receives).
    assert_eq!(received.entries(), [SECRET, ""]);
}

/// Redaction: a key planted in a result never reaches the transcript or
/// what the model reads.
#[tokio::test]
async fn a_secret_in_a_tool_result_never_reaches_the_transcript() {
    let model = script(vec![
        ScriptedModel::tool_call("configure", json!({"region": "eu"})),
        done(),
    ]);
    let run = secret_harness(&model, &Arc::default())
        .run("go")
        .await
        .unwrap();
    let transcript = serde_json::to_string(&run.messages).unwrap();
    assert!(!transcript.contains("sk-live-"), "{transcript}");
    assert_eq!(
        read_by_model(&model)[0].1,
        "configured with ; backup [REDACTED]"
    );
}

/// Redaction: a key planted in a call's arguments never reaches the
/// transcript (the persisted conversation), in the assistant message that
/// issued the call as well as in the result.
#[tokio::test]
async fn a_secret_in_tool_arguments_never_reaches_the_transcript() {
    let model = script(vec![
        ScriptedModel::tool_call("configure", json!({"api_key": SECRET, "region": "eu"})),
        done(),
    ]);
    let run = secret_harness(&model, &Arc::default())
        .run("go")
        .await
        .unwrap();
    let transcript = serde_json::to_string(&run.messages).unwrap();
    assert!(!transcript.contains(SECRET), "{transcript}");
}

/// Redaction: a key inside arguments the harness refuses (not JSON, or
/// breaking the schema) appears in no event and not in the refusal the
/// transcript holds.
#[tokio::test]
async fn a_secret_in_refused_arguments_never_appears_in_events_or_the_transcript() {
    let model = script(vec![
        ChatResponse::tool_calls(vec![
            ModelToolCall::from_text(None, "configure", &format!("{{\"api_key\": \"{SECRET}\", ")),
            ModelToolCall::new(None, "configure", json!({"region": [SECRET]})),
        ]),
        done(),
    ]);
    let (run, events) = run_collecting(
        &secret_harness(&model, &Arc::default()),
        RunRequest::new("go"),
    )
    .await;
    let run = run.unwrap();
    assert!(
        tool_results(&run.messages).iter().all(|(_, _, e)| *e),
        "both calls were refused"
    );
    let text = events_text(&events);
    assert!(!text.contains(SECRET), "{text}");
    let transcript = serde_json::to_string(&tool_results(&run.messages)).unwrap();
    assert!(!transcript.contains(SECRET), "{transcript}");
}

/// Redaction fails closed: a host matcher that panics redacts the whole
/// result rather than letting it through; a literal the host adds is
/// redacted too.
#[tokio::test]
async fn redaction_with_a_panicking_matcher_redacts_everything_and_host_literals_are_found() {
    let boom: SecretMatcher = Arc::new(|_: &str| panic!("matcher bug"));
    for (redactor, expected) in [
        (Redactor::new().with_matcher(boom), "[REDACTED]"),
        (
            Redactor::new().with_secret("hunter2-corp"),
            "password is [REDACTED] today",
        ),
    ] {
        let probe = ProbeTool::new(
            "read",
            true,
            Behaviour::Return(ToolResult::text("password is hunter2-corp today")),
        );
        let model = script(vec![call("read", ""), done()]);
        let harness = build(&model, &[probe], |b| {
            b.middleware(Arc::new(RedactionMiddleware::with_redactor(redactor)))
        });
        let run = harness.run("go").await.unwrap();
        assert_eq!(tool_results(&run.messages)[0].1, expected);
    }
}
