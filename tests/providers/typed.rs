//! Issue 14: a typed run on both real clients against aimock: the
//! OpenAI-compatible client asks with `response_format` and reads the JSON
//! text; the Anthropic client asks with a forced output tool and reads the
//! tool's input as the answer.

use tinyagents::models::ModelSpec;
use tinyagents::prelude::*;

use super::aimock::{Aimock, GOOD_KEY};

/// A triaged ticket.
#[json_schema]
#[derive(Debug, PartialEq)]
struct Ticket {
    category: String,
    priority: u8,
}

#[tokio::test]
async fn i14_aimock_a_typed_run_reads_its_answer_through_each_providers_mechanism() {
    let server = Aimock::start();
    let root = server.url();
    let cases = [
        (
            format!("openai-compatible:{root}/v1#gpt-4o-mini"),
            None,
            "triage over openai",
            Ticket {
                category: "outage".into(),
                priority: 4,
            },
        ),
        (
            "anthropic:claude-test".to_owned(),
            Some(root.clone()),
            "triage over anthropic",
            Ticket {
                category: "billing".into(),
                priority: 2,
            },
        ),
    ];
    for (spec, anthropic_base, input, expected) in cases {
        let env = |name: &str| match name {
            "OPENAI_COMPATIBLE_API_KEY" | "ANTHROPIC_API_KEY" => Some(GOOD_KEY.to_owned()),
            "ANTHROPIC_BASE_URL" => anthropic_base.clone(),
            _ => None,
        };
        let model = ModelSpec::parse(&spec)
            .unwrap()
            .build_with_env(env)
            .unwrap();
        let agent = Agent::builder("triage").model(model).build().unwrap();
        let typed = agent.run_typed::<Ticket>(input).await.unwrap();
        assert_eq!(typed.output, expected, "{spec}");
        assert_eq!(
            typed.run.budget.model_calls, 1,
            "{spec}: the first answer fit"
        );
    }
}
