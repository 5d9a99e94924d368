//! `Agent::run_typed`: a final answer as a value of a Rust type. The
//! model is asked for JSON matching the type's schema through its
//! provider's structured-output mechanism; the answer is checked against
//! the compiled schema and read into the type; an answer that does not fit
//! is sent back with what was wrong, a bounded number of times.

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tinyagents_core::{OutputSchema, RunStatus};
use tinyagents_harness::{AgentRun, ApprovalDecision, EventSink, RunRequest, SuspendedRun};

use super::Agent;
use crate::error::RunError;

/// How many times a typed run sends an answer that does not fit back to
/// the model before it gives up.
pub const OUTPUT_RETRIES: u32 = 2;

/// A typed answer and the run that gave it (the last one, when the model
/// was asked again).
#[derive(Debug, Clone)]
pub struct Typed<T> {
    /// The answer.
    pub output: T,
    /// The run.
    pub run: AgentRun,
}

/// The output schema of `T`: its JSON Schema (from `schemars`), named
/// after its title.
pub fn output_schema<T: JsonSchema>() -> OutputSchema {
    let mut schema = schemars::schema_for!(T).to_value();
    let mut name = T::schema_name().into_owned();
    let mut description = None;
    if let Value::Object(object) = &mut schema {
        object.remove("$schema");
        if let Some(Value::String(title)) = object.remove("title") {
            name = title;
        }
        description = object
            .get("description")
            .and_then(Value::as_str)
            .map(str::to_owned);
    }
    OutputSchema {
        name,
        schema,
        description,
    }
}

/// The JSON value in `text`: the whole text, or the body of a fenced code
/// block around it (models add them even when asked not to).
fn json_in(text: &str) -> Result<Value, serde_json::Error> {
    let trimmed = text.trim();
    let body = trimmed
        .strip_prefix("```json")
        .or_else(|| trimmed.strip_prefix("```"))
        .and_then(|rest| rest.strip_suffix("```"))
        .unwrap_or(trimmed);
    serde_json::from_str(body.trim())
}

/// Reads `run`'s final answer as a `T` that fits `validator`, or says what
/// is wrong with it.
fn read_answer<T: DeserializeOwned>(
    validator: &jsonschema::Validator,
    run: &AgentRun,
) -> Result<T, String> {
    let value = json_in(&run.final_text).map_err(|e| format!("the answer is not JSON: {e}"))?;
    if let Some(error) = validator.iter_errors(&value).next() {
        let at = error.instance_path().as_str().to_owned();
        let at = if at.is_empty() { "/".to_owned() } else { at };
        return Err(format!(
            "the answer does not match the schema at '{at}': {error}"
        ));
    }
    serde_json::from_value(value).map_err(|e| format!("the answer does not fit the type: {e}"))
}

impl Agent {
    /// Runs it on `input` and reads its final answer as a `T`. The model is
    /// asked for JSON matching `T`'s schema (OpenAI-compatible providers
    /// send it as `response_format`, Anthropic as a forced tool); the
    /// answer is validated by the compiled schema and deserialised; an
    /// answer that does not fit is sent back, with what was wrong, up to
    /// [`OUTPUT_RETRIES`] times in the same conversation.
    ///
    /// A run that ends without an answer (waiting for approval, at a limit,
    /// cancelled) is [`RunError::Unanswered`], with its suspended state to
    /// resume with [`resume_typed`](Self::resume_typed).
    pub async fn run_typed<T: JsonSchema + DeserializeOwned>(
        &self,
        input: impl Into<String>,
    ) -> Result<Typed<T>, RunError> {
        self.run_typed_with(RunRequest::new(input), &EventSink::none())
            .await
    }

    /// [`run_typed`](Self::run_typed) for a whole request, sending events
    /// to `events`.
    pub async fn run_typed_with<T: JsonSchema + DeserializeOwned>(
        &self,
        request: RunRequest,
        events: &EventSink,
    ) -> Result<Typed<T>, RunError> {
        let schema = output_schema::<T>();
        let request = request.with_output_schema(&schema);
        let run = self.active.run(request, events).await?;
        self.typed_answer(&schema, run, events).await
    }

    /// Resumes a typed run suspended for approval (as
    /// [`resume`](Self::resume)) and reads its answer as a `T`.
    pub async fn resume_typed<T: JsonSchema + DeserializeOwned>(
        &self,
        suspended: SuspendedRun,
        decisions: &[ApprovalDecision],
    ) -> Result<Typed<T>, RunError> {
        let schema = output_schema::<T>();
        let none = EventSink::none();
        let run = self.active.resume(suspended, decisions, &none).await?;
        self.typed_answer(&schema, run, &none).await
    }

    async fn typed_answer<T: DeserializeOwned>(
        &self,
        schema: &OutputSchema,
        mut run: AgentRun,
        events: &EventSink,
    ) -> Result<Typed<T>, RunError> {
        let validator =
            jsonschema::validator_for(&schema.schema).map_err(|e| RunError::OutputSchema {
                schema: schema.name.clone(),
                message: e.to_string(),
            })?;
        let mut retries = 0;
        loop {
            if run.status != RunStatus::Completed {
                return Err(RunError::Unanswered {
                    status: run.status,
                    suspended: run.suspended.map(Box::new),
                });
            }
            let problem = match read_answer::<T>(&validator, &run) {
                Ok(output) => return Ok(Typed { output, run }),
                Err(problem) => problem,
            };
            if retries == OUTPUT_RETRIES {
                return Err(RunError::InvalidOutput {
                    schema: schema.name.clone(),
                    attempts: retries + 1,
                    problem,
                });
            }
            retries += 1;
            let correction = format!(
                "{problem}. Answer again with only a JSON value matching the schema '{}'.",
                schema.name
            );
            let request = RunRequest::new(correction)
                .with_transcript(run.messages)
                .with_output_schema(schema);
            run = self.active.run(request, events).await?;
        }
    }
}
