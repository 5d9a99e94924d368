//! A `SuspendedRun` read back from the host's storage, whatever its bytes:
//! it parses or is refused, and a parsed one, resumed with every waiting
//! call approved, either runs or is refused with an error. Nothing panics,
//! and nothing outside the stored turn runs.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tinyagents::prelude::*;
use tinyagents::{harness::ResumeOptions, harness::SuspendedRun};
use tinyagents_fuzz::{harness, runtime};

fuzz_target!(|data: &[u8]| {
    let Ok(state) = serde_json::from_slice::<SuspendedRun>(data) else {
        return;
    };
    if state.check_format().is_err() {
        return;
    }
    let decisions: Vec<_> = state.pending().map(|p| p.approve()).collect();
    let harness = harness(None);
    runtime().block_on(async {
        let _ = harness
            .resume(
                state,
                &decisions,
                ResumeOptions::default(),
                &EventSink::none(),
            )
            .await;
    });
});
