//! `ToolSpec::durable_settle`: the settled row of such a tool's call is made
//! durable (the ledger flushed) before its result is folded and the model
//! is asked again; other tools' rows ride on the next commit. Issue 18,
//! "Durable settle where it matters". The SIGKILL side is in `tests/crash.rs`.

use std::sync::{Arc, Mutex};

use serde_json::json;
use tinyagents::ledger::{
    Checkpoint, InDoubt, LedgerResult, LedgerRow, PruneReport, Resolve, RunState, Timestamp,
};
use tinyagents::prelude::*;
use tinyagents::{CallId, EffectLedger, MemoryLedger, Outcome, RunId, StartedRow};

/// A memory ledger that logs the writes it is asked for.
#[derive(Default)]
struct Logged {
    inner: MemoryLedger,
    log: Mutex<Vec<String>>,
}

impl Logged {
    fn note(&self, what: String) {
        self.log.lock().unwrap().push(what);
    }
    fn entries(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

#[async_trait]
impl EffectLedger for Logged {
    async fn record_started(&self, row: StartedRow) -> LedgerResult<()> {
        self.note(format!("started {}", row.call_id));
        self.inner.record_started(row).await
    }
    async fn record_settled(
        &self,
        run: &RunId,
        call: &CallId,
        outcome: &Outcome,
    ) -> LedgerResult<()> {
        self.note(format!("settled {call}"));
        self.inner.record_settled(run, call, outcome).await
    }
    async fn unresolved(&self, run: &RunId) -> LedgerResult<Vec<LedgerRow>> {
        self.inner.unresolved(run).await
    }
    async fn in_doubt(&self) -> LedgerResult<Vec<InDoubt>> {
        self.inner.in_doubt().await
    }
    async fn resolve(&self, run: &RunId, call: &CallId, resolve: &Resolve) -> LedgerResult<()> {
        self.inner.resolve(run, call, resolve).await
    }
    async fn get(&self, run: &RunId, call: &CallId) -> LedgerResult<Option<LedgerRow>> {
        self.inner.get(run, call).await
    }
    async fn rows(&self, run: &RunId) -> LedgerResult<Vec<LedgerRow>> {
        self.inner.rows(run).await
    }
    async fn unfinished_runs(&self) -> LedgerResult<Vec<RunId>> {
        self.inner.unfinished_runs().await
    }
    async fn begin_run(&self, run: &RunId) -> LedgerResult<()> {
        self.inner.begin_run(run).await
    }
    async fn run_state(&self, run: &RunId) -> LedgerResult<RunState> {
        self.inner.run_state(run).await
    }
    async fn save_checkpoint(&self, run: &RunId, version: u64, data: Vec<u8>) -> LedgerResult<()> {
        self.note(format!("checkpoint {version}"));
        self.inner.save_checkpoint(run, version, data).await
    }
    async fn append_checkpoint(
        &self,
        run: &RunId,
        version: u64,
        entry: Vec<u8>,
    ) -> LedgerResult<()> {
        self.note(format!("checkpoint {version}"));
        self.inner.append_checkpoint(run, version, entry).await
    }
    async fn load_checkpoint(&self, run: &RunId) -> LedgerResult<Option<Checkpoint>> {
        self.inner.load_checkpoint(run).await
    }
    async fn mark_run_finished(&self, run: &RunId) -> LedgerResult<()> {
        self.note("finished".to_owned());
        self.inner.mark_run_finished(run).await
    }
    async fn prune_finished(&self, before: Timestamp) -> LedgerResult<PruneReport> {
        self.inner.prune_finished(before).await
    }
    async fn flush(&self) -> LedgerResult<()> {
        self.note("flush".to_owned());
        self.inner.flush().await
    }
    fn max_result_bytes(&self) -> usize {
        self.inner.max_result_bytes()
    }
}

fn tool(name: &'static str, durable: bool) -> Arc<dyn Tool> {
    let tool = FnTool::new(
        name,
        "Pays.",
        |_: serde_json::Map<String, serde_json::Value>| async { anyhow::Ok("paid") },
    )
    .map_spec(|spec| if durable { spec.durable_settle() } else { spec });
    Arc::new(tool)
}

async fn writes(durable: bool) -> Vec<String> {
    let ledger = Arc::new(Logged::default());
    let model = vec![
        ScriptedModel::tool_calls([("pay", json!({}))]),
        ChatResponse::text("done"),
    ];
    let mut builder =
        AgentHarness::builder(Arc::new(ScriptedModel::new(model))).ledger(ledger.clone());
    builder.register(tool("pay", durable)).unwrap();
    let run = builder.build().unwrap().run("go").await.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    ledger.entries()
}

#[tokio::test]
async fn i18_3_a_durable_settle_flushes_the_row_before_the_model_is_asked_again() {
    let durable = writes(true).await;
    let at = durable.iter().position(|w| w == "settled p1").unwrap();
    assert_eq!(
        durable[at + 1],
        "flush",
        "flushed right after its settled row: {durable:?}"
    );
    let plain = writes(false).await;
    let at = plain.iter().position(|w| w == "settled p1").unwrap();
    assert_ne!(
        plain[at + 1],
        "flush",
        "a plain settle rides on the next commit: {plain:?}"
    );
    // The only flush of a plain run is the finished run's.
    assert_eq!(
        plain.iter().filter(|w| *w == "flush").count(),
        1,
        "{plain:?}"
    );
    assert_eq!(
        durable.iter().filter(|w| *w == "flush").count(),
        2,
        "{durable:?}"
    );
}
