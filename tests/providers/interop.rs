//! Issue 12: both clients against a server no one here wrote, aimock (see
//! `aimock.rs`), through the facade: plain and streamed answers, tool round
//! trips whole and streamed, parallel calls, text then a tool call in one
//! answer, usage, a wrong key, an unknown model, the agent loop built from
//! a model spec, and the faults (429 with Retry-After, 500, malformed JSON,
//! a dropped connection, a stream cut after a few events).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tinyagents::prelude::*;
use tinyagents::{
    core::CallId, core::ChatRequest, core::ModelDelta, core::ModelError, core::ModelOptions,
    core::ToolCall, core::ToolDefinition, models::AnthropicConfig, models::AnthropicModel,
    models::HttpOptions, models::ModelSpec, models::OpenAiConfig, models::OpenAiModel,
    models::RetryPolicy,
};

use super::aimock::{Aimock, GOOD_KEY};

#[derive(Clone, Copy, Debug)]
enum Protocol {
    OpenAi,
    Anthropic,
}

const BOTH: [Protocol; 2] = [Protocol::OpenAi, Protocol::Anthropic];

/// Fast retries, so the fault cases take milliseconds (Retry-After is
/// honoured as the server asks).
fn http() -> HttpOptions {
    HttpOptions::default()
        .with_timeout(Duration::from_secs(20))
        .with_retry(
            RetryPolicy::default()
                .with_max_retries(2)
                .with_backoff(Duration::from_millis(10), Duration::from_millis(50))
                .with_jitter(false),
        )
}

fn client(server: &Aimock, protocol: Protocol, key: &str, model: &str) -> Arc<dyn ChatModel> {
    match protocol {
        Protocol::OpenAi => Arc::new(
            OpenAiModel::new(
                OpenAiConfig::compatible(format!("{}/v1", server.url()), model)
                    .with_api_key(key)
                    .with_http(http()),
            )
            .unwrap(),
        ),
        Protocol::Anthropic => {
            let mut config = AnthropicConfig::new(model)
                .with_api_key(key)
                .with_http(http());
            config.base_url = format!("{}/v1", server.url());
            Arc::new(AnthropicModel::new(config).unwrap())
        }
    }
}

fn good(server: &Aimock, protocol: Protocol) -> Arc<dyn ChatModel> {
    client(server, protocol, GOOD_KEY, "some-model")
}

fn weather_tool() -> ToolDefinition {
    ToolDefinition {
        name: "get_weather".into(),
        description: "The weather in a city.".into(),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    }
}

/// What a streamed answer reported as it came, and the answer.
struct Streamed {
    text: String,
    deltas: usize,
    response: Result<ChatResponse, ModelError>,
}

async fn ask(model: &dyn ChatModel, messages: &[Message], stream: bool) -> Streamed {
    let tools = [weather_tool()];
    let options = ModelOptions::default();
    let text = Mutex::new(String::new());
    let deltas = AtomicUsize::new(0);
    let sink = |delta: ModelDelta| {
        deltas.fetch_add(1, Ordering::Relaxed);
        if let ModelDelta::Text { text: piece } = delta {
            text.lock().unwrap().push_str(&piece);
        }
    };
    let request = ChatRequest {
        messages,
        tools: &tools,
        options: &options,
        deltas: stream.then_some(&sink as _),
    };
    let response = model.chat(request).await;
    Streamed {
        text: text.into_inner().unwrap(),
        deltas: deltas.into_inner(),
        response,
    }
}

fn user(text: &str) -> Vec<Message> {
    vec![Message::user(text)]
}

/// The transcript after `answer`'s tool calls, each answered `result`.
fn with_results(mut messages: Vec<Message>, answer: &ChatResponse, result: &str) -> Vec<Message> {
    let calls: Vec<ToolCall> = answer
        .tool_calls
        .iter()
        .enumerate()
        .map(|(i, call)| {
            let mut made = ToolCall::new(
                CallId::new(format!("p{}", i + 1)),
                &call.name,
                call.arguments.clone(),
            );
            made.provider_id.clone_from(&call.provider_id);
            made
        })
        .collect();
    messages.push(Message::Assistant {
        content: answer.content.clone(),
        tool_calls: calls.clone(),
        reasoning: None,
    });
    for call in calls {
        messages.push(Message::Tool {
            call_id: call.id,
            provider_id: call.provider_id,
            name: call.name,
            content: result.into(),
            is_error: false,
        });
    }
    messages
}

#[tokio::test]
async fn i12_aimock_plain_and_streamed_answers_and_usage_in_both_protocols() {
    let server = Aimock::start();
    for protocol in BOTH {
        let model = good(&server, protocol);
        let plain = ask(model.as_ref(), &user("say hello"), false).await;
        let answer = plain.response.unwrap();
        assert_eq!(
            answer.content, "Hello from aimock, speaking in several chunks.",
            "{protocol:?}"
        );
        assert_eq!(plain.deltas, 0);
        let streamed = ask(model.as_ref(), &user("say hello"), true).await;
        assert_eq!(
            streamed.response.unwrap().content,
            answer.content,
            "{protocol:?}"
        );
        assert_eq!(
            streamed.text, answer.content,
            "{protocol:?}: the deltas add up"
        );
        assert!(streamed.deltas > 1, "{protocol:?}: streamed in pieces");
        for stream in [false, true] {
            let counted = ask(model.as_ref(), &user("count my tokens"), stream).await;
            let usage = counted.response.unwrap().usage;
            assert_eq!(
                (usage.input_tokens, usage.output_tokens),
                (11, 7),
                "{protocol:?}, streamed {stream}"
            );
        }
    }
}

#[tokio::test]
async fn i12_aimock_tool_round_trips_whole_and_streamed_parallel_and_after_text() {
    let server = Aimock::start();
    for protocol in BOTH {
        let model = good(&server, protocol);
        for stream in [false, true] {
            let what = format!("{protocol:?}, streamed {stream}");
            let first = ask(model.as_ref(), &user("weather in Paris"), stream).await;
            let call = first.response.unwrap();
            assert_eq!(call.tool_calls.len(), 1, "{what}");
            assert_eq!(call.tool_calls[0].name, "get_weather", "{what}");
            assert_eq!(
                call.tool_calls[0].arguments,
                json!({"city": "Paris"}),
                "{what}"
            );
            let next = with_results(user("weather in Paris"), &call, "sunny, 24 C");
            let done = ask(model.as_ref(), &next, stream).await.response.unwrap();
            assert_eq!(done.content, "Sunny in Paris.", "{what}");
            assert!(done.tool_calls.is_empty());

            let two = ask(model.as_ref(), &user("two cities"), stream)
                .await
                .response
                .unwrap();
            let cities: Vec<&Value> = two
                .tool_calls
                .iter()
                .map(|c| &c.arguments["city"])
                .collect();
            assert_eq!(cities, [&json!("Paris"), &json!("Rome")], "{what}");
            let ids: Vec<_> = two
                .tool_calls
                .iter()
                .map(|c| c.provider_id.clone())
                .collect();
            assert!(
                ids[0].is_some() && ids[0] != ids[1],
                "{what}: distinct provider ids {ids:?}"
            );
            let next = with_results(user("two cities"), &two, "sunny");
            let both = ask(model.as_ref(), &next, stream).await.response.unwrap();
            assert_eq!(both.content, "Sunny in both.", "{what}");

            let mixed = ask(model.as_ref(), &user("check first"), stream)
                .await
                .response
                .unwrap();
            assert_eq!(mixed.content, "Let me check.", "{what}");
            assert_eq!(
                mixed.tool_calls[0].arguments,
                json!({"city": "Oslo"}),
                "{what}"
            );
            let next = with_results(user("check first"), &mixed, "snow");
            let after = ask(model.as_ref(), &next, stream).await.response.unwrap();
            assert_eq!(after.content, "Snow in Oslo.", "{what}");
        }
    }
}

#[tokio::test]
async fn i12_aimock_a_wrong_key_and_an_unknown_model_are_typed_errors() {
    let server = Aimock::start();
    for protocol in BOTH {
        let wrong = client(&server, protocol, "not-the-key", "some-model");
        let refused = ask(wrong.as_ref(), &user("say hello"), false)
            .await
            .response;
        assert!(
            matches!(refused, Err(ModelError::Authentication { .. })),
            "{protocol:?}: {refused:?}"
        );
        let unknown = client(&server, protocol, GOOD_KEY, "no-such-model");
        let refused = ask(unknown.as_ref(), &user("say hello"), false)
            .await
            .response;
        assert!(
            matches!(&refused, Err(ModelError::InvalidRequest { message }) if message.contains("does not exist")),
            "{protocol:?}: {refused:?}"
        );
    }
}

#[tokio::test]
async fn i12_aimock_faults_rate_limit_server_error_malformed_dropped_and_cut_streams() {
    let server = Aimock::start();
    for protocol in BOTH {
        let model = good(&server, protocol);
        // 429 with Retry-After: 1, then an answer: the client waits and retries.
        let retried = ask(model.as_ref(), &user("rate limited once"), false).await;
        assert_eq!(
            retried.response.unwrap().content,
            "after the wait",
            "{protocol:?}"
        );
        let failed = ask(model.as_ref(), &user("server fails"), false)
            .await
            .response;
        assert!(
            matches!(failed, Err(ModelError::Server { status: 500, .. })),
            "{protocol:?}: {failed:?}"
        );
        let garbled = ask(model.as_ref(), &user("malformed body"), false)
            .await
            .response;
        assert!(
            matches!(garbled, Err(ModelError::Malformed { .. })),
            "{protocol:?}: {garbled:?}"
        );
        let dropped = ask(model.as_ref(), &user("drop the line"), false)
            .await
            .response;
        assert!(
            matches!(dropped, Err(ModelError::Transport { .. })),
            "{protocol:?}: {dropped:?}"
        );
        let cut = ask(model.as_ref(), &user("cut the stream"), true).await;
        assert!(
            cut.deltas > 0,
            "{protocol:?}: some events arrived before the cut"
        );
        assert!(
            matches!(
                cut.response,
                Err(ModelError::Transport { .. } | ModelError::Malformed { .. })
            ),
            "{protocol:?}: a cut stream is an error, not a short answer: {:?}",
            cut.response
        );
    }
}

/// The agent loop on each protocol, its model built from a spec (with the
/// environment given as a function): the model calls the tool, the harness
/// runs it, the model answers from its result.
#[tokio::test]
async fn i12_aimock_the_agent_loop_runs_on_models_built_from_specs() {
    let server = Aimock::start();
    let root = server.url();
    let specs = [
        (format!("openai-compatible:{root}/v1#gpt-4o-mini"), None),
        ("anthropic:claude-test".to_owned(), Some(root.clone())),
    ];
    for (spec, anthropic_base) in specs {
        let env = |name: &str| match name {
            "OPENAI_COMPATIBLE_API_KEY" | "ANTHROPIC_API_KEY" => Some(GOOD_KEY.to_owned()),
            "ANTHROPIC_BASE_URL" => anthropic_base.clone(),
            _ => None,
        };
        let model = ModelSpec::parse(&spec)
            .unwrap()
            .build_with_env(env)
            .unwrap();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let seen = asked.clone();
        #[derive(serde::Deserialize, schemars::JsonSchema)]
        struct City {
            city: String,
        }
        let tool = FnTool::new(
            "get_weather",
            "The weather in a city.",
            move |args: City| {
                let seen = seen.clone();
                async move {
                    seen.lock().unwrap().push(args.city);
                    anyhow::Ok("sunny, 24 C")
                }
            },
        )
        .map_spec(ToolSpec::read_only);
        let harness = AgentHarness::builder(model).tool(tool).build().unwrap();
        let run = harness.run("weather in Paris").await.unwrap();
        assert_eq!(run.status, RunStatus::Completed, "{spec}");
        assert_eq!(run.final_text, "Sunny in Paris.", "{spec}");
        assert_eq!(
            *asked.lock().unwrap(),
            ["Paris"],
            "{spec}: the tool ran once"
        );
        assert_eq!(
            (run.usage.input_tokens, run.usage.output_tokens),
            (50, 11),
            "{spec}: the usage of both turns is counted"
        );
    }
}
