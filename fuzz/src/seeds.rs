//! Writes each fuzz target's first corpus (`fuzz/corpus/<target>/`): real
//! stored states, checkpoints, argument texts and cell rewrites, so the
//! fuzzer starts from the shapes the harness writes.

use std::path::Path;
use std::sync::Arc;

use tinyagents::prelude::*;
use tinyagents::{ledger::EffectLedger, ledger::MemoryLedger, core::RunId};
use tinyagents_fuzz::{RUN, harness, runtime};

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::create_dir_all(dir).expect("the corpus directory is created");
    std::fs::write(dir.join(name), bytes).expect("a seed is written");
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    runtime().block_on(async {
        // A stored state waiting for one approval, and its checkpoint.
        let ledger = Arc::new(MemoryLedger::new());
        let agent = harness(Some(Arc::clone(&ledger) as Arc<dyn EffectLedger>));
        let run = agent
            .run_with(
                RunRequest::new("deploy").with_run_id(RunId::new(RUN)),
                &EventSink::none(),
            )
            .await
            .expect("the seed run suspends");
        let state = run.suspended.expect("the seed run waits for approval");
        let json = serde_json::to_vec_pretty(&state).expect("a state serialises");
        write(&root.join("suspended_run"), "waiting", &json);
        let plain = harness(None)
            .run("deploy")
            .await
            .expect("the seed run suspends")
            .suspended
            .expect("it waits");
        write(
            &root.join("suspended_run"),
            "waiting-no-ledger",
            &serde_json::to_vec(&plain).expect("a state serialises"),
        );
        let checkpoint = ledger
            .load_checkpoint(&RunId::new(RUN))
            .await
            .expect("the checkpoint reads")
            .expect("the run was checkpointed");
        let mut bytes = checkpoint.data.clone();
        for entry in &checkpoint.appended {
            bytes.push(0);
            bytes.extend_from_slice(entry);
        }
        write(&root.join("checkpoint"), "suspended-turn", &bytes);
    });
    let arguments = root.join("prepare_arguments");
    for (name, choice, text) in [
        ("add", 0u8, r#"{"a": 1, "b": 2}"#),
        ("add-strings", 0, r#"{"a": "1", "b": "2"}"#),
        (
            "order",
            1,
            r#"{"order": {"items": [{"sku": "x", "qty": 2}], "mode": "fast"}, "note": null}"#,
        ),
        ("order-as-text", 1, r#"{"order": "{\"items\": []}"}"#),
        ("pay", 2, r#"{"amount": 5.5, "user": "model"}"#),
        ("not-json", 2, r#"{"amount": 5"#),
        (
            "deep",
            0,
            "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
        ),
    ] {
        let mut bytes = vec![choice];
        bytes.extend_from_slice(text.as_bytes());
        write(&arguments, name, &bytes);
    }
    let cells = root.join("ledger_rows");
    write(&cells, "untouched", b"");
    // Cell 6 is calls.status as text; 10 calls.content; 20 a checkpoint's data.
    write(&cells, "status-unknown", b"\x06\x00\x00\x04huh?");
    write(&cells, "content-blob", b"\x0a\x02\x01\x03\xff\xfe\x00");
    write(&cells, "checkpoint-null", b"\x14\x03\x00\x00");
    write(
        &cells,
        "attempts-negative",
        b"\x07\x01\x02\x08\xff\xff\xff\xff\xff\xff\xff\xff",
    );
    println!("seeds written under {}", root.display());
}
