//! A run's checkpoint read back from the ledger, whatever its bytes (a
//! base, then entries, split at NUL bytes): `recover` either continues the
//! run or refuses with an error. Nothing panics.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use tinyagents::prelude::*;
use tinyagents::{ledger::EffectLedger, ledger::MemoryLedger, harness::ResumeOptions, core::RunId};
use tinyagents_fuzz::{RUN, harness, runtime};

fuzz_target!(|data: &[u8]| {
    let mut parts = data.split(|b| *b == 0);
    let base = parts.next().unwrap_or_default().to_vec();
    let entries: Vec<Vec<u8>> = parts.take(8).map(<[u8]>::to_vec).collect();
    let ledger = Arc::new(MemoryLedger::new());
    let run = RunId::new(RUN);
    runtime().block_on(async {
        if ledger.save_checkpoint(&run, 1, base).await.is_err() {
            return;
        }
        for (i, entry) in entries.into_iter().enumerate() {
            let version = 2 + u64::try_from(i).unwrap_or(0);
            let _ = ledger.append_checkpoint(&run, version, entry).await;
        }
        let harness = harness(Some(ledger));
        let _ = harness
            .recover(&run, ResumeOptions::default(), &EventSink::none())
            .await;
    });
});
