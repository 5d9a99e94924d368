//! Issue 32, one hashing rule: a call's arguments hash (its ledger row's
//! idempotency key) is taken of the arguments the tool receives, on every
//! origin. Two calls that differ only in a secret the run's redaction
//! removes never share a hash, and the hash of such a call is keyed, so
//! the ledger holds no plain digest of the secret to test guesses against.
//! An approval binds to its own call: approving one of two such calls runs
//! that one, with its own secret, and no other.

use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{Value, json};
use tinyagents::prelude::*;
use tinyagents::{
    core::RunId, ledger::EffectLedger, ledger::MemoryLedger, ledger::args_hash,
    middleware::REDACTED, middleware::RedactionMiddleware, middleware::Redactor,
};

use crate::{Origin, counted, harness, one_turn, spec, t};

const CARD_A: &str = "card-4111-aaaa-private";
const CARD_B: &str = "card-4111-bbbb-private";

fn redaction() -> Arc<dyn Middleware> {
    Arc::new(RedactionMiddleware::with_redactor(
        Redactor::new().with_secret(CARD_A).with_secret(CARD_B),
    ))
}

/// The rows' hashes of calls 1, 2 and 3 of the model's first turn, made
/// from `origin`: `pay` with card A, with card B, and with no secret.
async fn row_hashes(origin: Origin) -> [String; 3] {
    let pay = counted(spec("pay"), |_| Ok(ToolResult::text("paid")));
    let ledger = Arc::new(MemoryLedger::new());
    let harness = harness(
        one_turn(&[
            origin.call("pay", json!({"card": CARD_A, "cents": 100})),
            origin.call("pay", json!({"card": CARD_B, "cents": 100})),
            origin.call("pay", json!({"card": "public", "cents": 100})),
        ]),
        vec![t(&pay)],
        |b| {
            b.middleware(redaction())
                .ledger(Arc::clone(&ledger) as Arc<dyn EffectLedger>)
        },
    );
    let run_id = RunId::new("hashed");
    let (result, _) = tinyagents_tests::run_collecting(
        &harness,
        RunRequest::new("pay").with_run_id(run_id.clone()),
    )
    .await;
    assert_eq!(result.unwrap().status, RunStatus::Completed);
    assert_eq!(pay.runs(), 3);
    let mut hashes = Vec::new();
    for n in 1..=3 {
        let id = tinyagents::core::CallId::new(origin.id_of(n));
        let row = ledger.get(&run_id, &id).await.unwrap().expect("a row");
        assert_eq!(row.tool_name, "pay");
        hashes.push(row.args_hash);
    }
    hashes.try_into().expect("three rows")
}

fn assert_one_rule(origin: Origin, [a, b, plain]: [String; 3]) {
    let redacted = json!({"card": REDACTED, "cents": 100});
    assert_ne!(a, b, "{origin:?}: two secrets share a hash");
    for (hash, card) in [(&a, CARD_A), (&b, CARD_B)] {
        assert!(hash.starts_with("keyed:"), "{origin:?}: {hash}");
        assert_ne!(
            *hash,
            args_hash(&json!({"card": card, "cents": 100})),
            "{origin:?}: a plain digest of the secret reached the ledger"
        );
        assert_ne!(*hash, args_hash(&redacted), "{origin:?}");
    }
    // Arguments redaction leaves alone hash as they always have.
    assert_eq!(
        plain,
        args_hash(&json!({"card": "public", "cents": 100})),
        "{origin:?}"
    );
}

#[tokio::test]
async fn i32_model_issued_calls_differing_only_in_a_redacted_secret_never_share_a_row_hash() {
    assert_one_rule(Origin::Model, row_hashes(Origin::Model).await);
}

#[tokio::test]
async fn i32_nested_calls_differing_only_in_a_redacted_secret_never_share_a_row_hash() {
    assert_one_rule(Origin::Nested, row_hashes(Origin::Nested).await);
    assert_one_rule(
        Origin::NestedOfNested,
        row_hashes(Origin::NestedOfNested).await,
    );
}

#[tokio::test]
async fn i32_the_same_arguments_hash_alike_on_every_origin() {
    let hashes: Vec<[String; 3]> =
        futures_util::future::join_all(Origin::ALL.map(row_hashes)).await;
    // Keyed hashes are per process, so the same card hashes alike
    // whatever the origin; the plain one is the documented digest.
    for other in &hashes[1..] {
        assert_eq!(other, &hashes[0]);
    }
}

#[tokio::test]
async fn i32_an_approval_runs_its_own_call_of_two_differing_only_in_a_redacted_secret() {
    let received: Arc<Mutex<Vec<Value>>> = Arc::default();
    let seen = Arc::clone(&received);
    let pay = counted(spec("pay").approval_required(), move |args: &Value| {
        seen.lock().push(args.clone());
        Ok(ToolResult::text("paid"))
    });
    let harness = harness(
        one_turn(&[
            Origin::Model.call("pay", json!({"card": CARD_A})),
            Origin::Model.call("pay", json!({"card": CARD_B})),
        ]),
        vec![t(&pay)],
        |b| b.middleware(redaction()),
    );
    let run = harness.run("pay").await.unwrap();
    assert_eq!(run.status, RunStatus::AwaitingApproval);
    let pending = run.pending();
    assert_eq!(pending.len(), 2);
    // What a person sees of the two is the same: the secret is redacted.
    assert_eq!(pending[0].call.arguments, pending[1].call.arguments);
    let decisions = [pending[1].approve(), pending[0].deny("not this card")];
    let suspended = run.suspended.clone().expect("a suspended run");
    let resumed = harness
        .resume(
            suspended,
            &decisions,
            ResumeOptions::default(),
            &EventSink::none(),
        )
        .await
        .unwrap();
    assert_eq!(resumed.status, RunStatus::Completed);
    assert_eq!(pay.runs(), 1);
    assert_eq!(*received.lock(), vec![json!({"card": CARD_B})]);
}
