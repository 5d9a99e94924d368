//! Typed output (friction 9): `agent.run_typed::<T>()`.

use recorder::Seen;
use serde_json::json;
use tinyagents::core::OutputSchema;
use tinyagents::orchestrator::{OUTPUT_RETRIES, RunError};
use tinyagents::prelude::*;

/// A ticket, triaged.
#[json_schema]
#[derive(Debug, PartialEq)]
struct Triage {
    /// The team.
    category: String,
    priority: u8,
}

mod recorder {
    //! What a scripted model was asked, for the test to read.
    use std::sync::{Arc, Mutex};

    use tinyagents::core::OutputSchema;
    use tinyagents::prelude::*;

    /// Each request's output schema and last user message.
    pub(crate) type Requests = Vec<(Option<OutputSchema>, String)>;

    #[derive(Clone, Default)]
    pub(crate) struct Seen(Arc<Mutex<Requests>>);

    impl Seen {
        /// A model answering `answers` in turn, recording each request's
        /// output schema and last message.
        pub(crate) fn model(&self, answers: Vec<String>) -> ScriptedModel {
            let seen = self.clone();
            ScriptedModel::from_fn(move |request| {
                let mut seen = seen.0.lock().unwrap();
                let last = match request.messages.last() {
                    Some(Message::User { content }) => content.clone(),
                    _ => String::new(),
                };
                seen.push((request.options.output_schema.clone(), last));
                let n = seen.len() - 1;
                Ok(ChatResponse::text(
                    answers.get(n).cloned().unwrap_or_default(),
                ))
            })
        }

        pub(crate) fn requests(&self) -> Requests {
            self.0.lock().unwrap().clone()
        }
    }
}

fn agent(model: ScriptedModel) -> Agent {
    Agent::builder("triage").model(model).build().unwrap()
}

#[tokio::test]
async fn a_typed_run_asks_for_the_types_schema_and_reads_the_answer() {
    let seen = Seen::default();
    let agent = agent(seen.model(vec![
        json!({"category": "billing", "priority": 2}).to_string(),
    ]));
    let typed = agent
        .run_typed::<Triage>("my card was charged twice")
        .await
        .unwrap();
    assert_eq!(
        typed.output,
        Triage {
            category: "billing".into(),
            priority: 2
        }
    );
    assert_eq!(typed.run.status, RunStatus::Completed);
    let requests = seen.requests();
    assert_eq!(requests.len(), 1);
    let schema: OutputSchema = requests[0]
        .0
        .clone()
        .expect("the model was asked for a schema");
    assert_eq!(schema.name, "Triage");
    assert_eq!(schema.description.as_deref(), Some("A ticket, triaged."));
    assert_eq!(schema.schema["required"], json!(["category", "priority"]));
    assert!(schema.schema.get("$schema").is_none());
}

#[tokio::test]
async fn an_answer_that_does_not_fit_is_sent_back_with_what_was_wrong() {
    let seen = Seen::default();
    let agent = agent(seen.model(vec![
        "```json\n{\"category\": \"billing\"}\n```".to_owned(),
        "{\"category\": \"billing\", \"priority\": 300}".to_owned(),
        "```json\n{\"category\": \"billing\", \"priority\": 3}\n```".to_owned(),
    ]));
    let typed = agent.run_typed::<Triage>("help").await.unwrap();
    assert_eq!(typed.output.priority, 3);
    let requests = seen.requests();
    assert_eq!(requests.len(), 3);
    assert!(
        requests.iter().all(|r| r.0.is_some()),
        "every attempt asks for the schema"
    );
    assert!(
        requests[1].1.contains("does not match the schema at '/'"),
        "{}",
        requests[1].1
    );
    assert!(requests[1].1.contains("priority"), "{}", requests[1].1);
    assert!(
        requests[2].1.contains("'/priority'") || requests[2].1.contains("does not fit the type"),
        "{}",
        requests[2].1
    );
    // The corrections continue the same conversation.
    assert!(
        typed
            .run
            .messages
            .iter()
            .any(|m| matches!(m, Message::User { content } if content == "help"))
    );
}

#[tokio::test]
async fn answers_that_never_fit_fail_after_the_retries_naming_the_last_problem() {
    let seen = Seen::default();
    let agent = agent(seen.model(vec!["not json".to_owned(); 5]));
    let error = agent.run_typed::<Triage>("help").await.unwrap_err();
    let RunError::InvalidOutput {
        schema,
        attempts,
        problem,
    } = &error
    else {
        panic!("{error:?}");
    };
    assert_eq!(schema, "Triage");
    assert_eq!(*attempts, OUTPUT_RETRIES + 1);
    assert!(problem.starts_with("the answer is not JSON"), "{problem}");
    assert_eq!(seen.requests().len() as u32, OUTPUT_RETRIES + 1);
}

#[tokio::test]
async fn a_typed_run_that_waits_for_approval_resumes_typed() {
    #[json_schema]
    struct Empty {}
    let approve_me = FnTool::new("lookup", "Looks up.", |_: Empty| async {
        anyhow::Ok("found")
    })
    .map_spec(|s| s.approval_required());
    let agent = Agent::builder("triage")
        .model(ScriptedModel::new([
            ScriptedModel::tool_call("lookup", json!({})),
            ChatResponse::text(json!({"category": "other", "priority": 1}).to_string()),
        ]))
        .tool(approve_me)
        .build()
        .unwrap();
    let error = agent.run_typed::<Triage>("help").await.unwrap_err();
    let RunError::Unanswered {
        status,
        suspended: Some(suspended),
    } = error
    else {
        panic!("{error:?}");
    };
    assert_eq!(status, RunStatus::AwaitingApproval);
    let decisions: Vec<_> = suspended.pending().map(PendingCall::approve).collect();
    let typed = agent
        .resume_typed::<Triage>(*suspended, &decisions)
        .await
        .unwrap();
    assert_eq!(typed.output.category, "other");
}

#[tokio::test]
async fn an_agent_called_by_a_typed_run_is_not_asked_for_its_callers_schema() {
    let seen = Seen::default();
    let child = Agent::builder("helper")
        .model(seen.model(vec!["plain words".to_owned()]))
        .build()
        .unwrap();
    let parent = Agent::builder("triage")
        .model(ScriptedModel::new([
            ScriptedModel::tool_call("helper", json!({"query": "which team?"})),
            ChatResponse::text(json!({"category": "billing", "priority": 1}).to_string()),
        ]))
        .tool(child.as_tool("helper", "Helps."))
        .build()
        .unwrap();
    let typed = parent.run_typed::<Triage>("help").await.unwrap();
    assert_eq!(typed.output.category, "billing");
    let child_requests = seen.requests();
    assert_eq!(child_requests.len(), 1);
    assert!(child_requests[0].0.is_none());
}
