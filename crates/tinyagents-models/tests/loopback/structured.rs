//! Structured output over loopback: what each provider sends for a request
//! with an output schema, and how the answer comes back (OpenAI: the text;
//! Anthropic: the forced output tool's input, as text).

use std::sync::Mutex;

use serde_json::{Value, json};
use tinyagents_core::{
    ChatModel, ChatRequest, ChatResponse, ModelDelta, ModelError, ModelOptions, ModelToolCall,
    OutputSchema, ToolDefinition,
};

use crate::server::{Reply, Server};
use crate::{add_tool, anthropic_model, fast_http, hello, openai_model, pieces};

fn typed(schema: Value) -> ModelOptions {
    ModelOptions {
        output_schema: Some(OutputSchema {
            name: "Sum".into(),
            schema,
            description: None,
        }),
        ..ModelOptions::default()
    }
}

/// One call with `options`, streaming when `stream`, with its deltas.
async fn ask(
    model: &dyn ChatModel,
    tools: &[ToolDefinition],
    options: &ModelOptions,
    stream: bool,
) -> (Result<ChatResponse, ModelError>, Vec<ModelDelta>) {
    let messages = hello();
    let deltas = Mutex::new(Vec::new());
    let sink = |delta: ModelDelta| deltas.lock().unwrap().push(delta);
    let result = model
        .chat(ChatRequest {
            messages: &messages,
            tools,
            options,
            deltas: if stream { Some(&sink) } else { None },
        })
        .await;
    (result, deltas.into_inner().unwrap())
}

/// A Messages stream of `blocks`, each a `content_block` and the
/// `input_json_delta` fragments of a tool_use block.
fn anthropic_stream(blocks: &[(Value, &[&str])]) -> String {
    let mut out = String::new();
    let mut event = |value: Value| {
        let kind = value["type"].as_str().unwrap().to_owned();
        out.push_str(&format!("event: {kind}\ndata: {value}\n\n"));
    };
    event(
        json!({"type": "message_start", "message": {"usage": {"input_tokens": 20, "output_tokens": 1}}}),
    );
    for (index, (block, fragments)) in blocks.iter().enumerate() {
        event(json!({"type": "content_block_start", "index": index, "content_block": block}));
        for fragment in *fragments {
            event(json!({"type": "content_block_delta", "index": index,
                "delta": {"type": "input_json_delta", "partial_json": fragment}}));
        }
        event(json!({"type": "content_block_stop", "index": index}));
    }
    event(
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}),
    );
    event(json!({"type": "message_stop"}));
    out
}

#[tokio::test]
async fn openai_sends_a_json_schema_response_format_and_reads_the_text() {
    let schema = json!({"type": "object", "properties": {"sum": {"type": "integer"}}});
    let whole = json!({
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "{\"sum\": 3}"}, "finish_reason": "stop"}]
    })
    .to_string();
    let server = Server::start(vec![Reply::json(200, &whole)]).await;
    let model = openai_model(&server, fast_http());
    let (response, _) = ask(&model, &[], &typed(schema.clone()), false).await;
    assert_eq!(response.unwrap().content, "{\"sum\": 3}");
    assert_eq!(
        server.requests()[0].json()["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "Sum", "schema": schema, "strict": false}})
    );
}

#[tokio::test]
async fn anthropic_forces_the_output_tool_and_answers_with_its_input() {
    let whole = json!({
        "type": "message", "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "respond_Sum", "input": {"value": 3}}],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 20, "output_tokens": 9}
    })
    .to_string();
    let server = Server::start(vec![Reply::json(200, &whole)]).await;
    let model = anthropic_model(&server, fast_http());
    let (response, _) = ask(&model, &[], &typed(json!({"type": "integer"})), false).await;
    let response = response.unwrap();
    assert_eq!(response.content, "3");
    assert!(response.tool_calls.is_empty());
    let body = server.requests()[0].json();
    assert_eq!(
        body["tool_choice"],
        json!({"type": "tool", "name": "respond_Sum"})
    );
    assert_eq!(body["tools"][0]["name"], "respond_Sum");
    assert_eq!(
        body["tools"][0]["input_schema"],
        json!({"type": "object", "properties": {"value": {"type": "integer"}}, "required": ["value"]})
    );
}

#[tokio::test]
async fn anthropic_streams_the_answer_without_reporting_the_output_tool() {
    let text = anthropic_stream(&[(
        json!({"type": "tool_use", "id": "toolu_1", "name": "respond_Sum", "input": {}}),
        &["{\"sum\"", ": 3}"],
    )]);
    let server = Server::start(vec![Reply::sse(&pieces(&text, 23))]).await;
    let model = anthropic_model(&server, fast_http());
    let schema = json!({"type": "object", "properties": {"sum": {"type": "integer"}}});
    let (response, deltas) = ask(&model, &[], &typed(schema), true).await;
    let response = response.unwrap();
    assert_eq!(response.content, r#"{"sum":3}"#);
    assert!(response.tool_calls.is_empty());
    assert_eq!(deltas, Vec::<ModelDelta>::new());
    assert_eq!(server.requests()[0].json()["stream"], true);
}

#[tokio::test]
async fn anthropic_keeps_real_calls_and_drops_the_output_call_beside_them() {
    let text = anthropic_stream(&[
        (
            json!({"type": "tool_use", "id": "toolu_1", "name": "respond_Sum", "input": {}}),
            &["{\"sum\": 3}"],
        ),
        (
            json!({"type": "tool_use", "id": "toolu_2", "name": "add", "input": {}}),
            &["{\"a\": 1, \"b\": 2}"],
        ),
    ]);
    let server = Server::start(vec![Reply::sse(&pieces(&text, 31))]).await;
    let model = anthropic_model(&server, fast_http());
    let (response, deltas) =
        ask(&model, &add_tool(), &typed(json!({"type": "object"})), true).await;
    let response = response.unwrap();
    assert_eq!(response.content, "");
    assert_eq!(
        response.tool_calls,
        vec![ModelToolCall::new(
            Some("toolu_2".into()),
            "add",
            json!({"a": 1, "b": 2})
        )]
    );
    assert_eq!(
        deltas,
        vec![
            ModelDelta::ToolCallStarted {
                index: 0,
                name: "add".into()
            },
            ModelDelta::ToolCallArguments {
                index: 0,
                fragment: "{\"a\": 1, \"b\": 2}".into()
            },
        ]
    );
    let body = server.requests()[0].json();
    assert_eq!(body["tool_choice"], json!({"type": "any"}));
    assert_eq!(body["tools"][1]["name"], "respond_Sum");
}
