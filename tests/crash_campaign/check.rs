//! What a trial of the campaign must leave behind, checked from the ledger
//! and the payment service's record, and the figures it adds to the tally.

use std::collections::HashMap;
use std::path::Path;

use tinyagents::ledger::{Effect, ResolvedBy};
use tinyagents::{
    core::RunId, ledger::CallStatus, ledger::EffectLedger, ledger::LedgerRow, ledger::RunState,
    ledger::SqliteLedger,
};

use crate::workload::{RUN, effects};

/// The campaign's figures, per mode.
#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) trials: u64,
    pub(crate) crashed: u64,
    pub(crate) recoveries: u64,
    /// Payments made (each exactly once).
    payments: usize,
    /// `pay` calls answered "interrupted, outcome unknown".
    interrupted: usize,
    /// Of those, the ones whose payment had in fact happened.
    interrupted_paid: usize,
    /// `pay` calls in doubt that a reconciliation found paid, and not.
    reconciled_paid: usize,
    reconciled_unpaid: usize,
    /// `pay` calls whose effect is still unknown at the end.
    pub(crate) unknown: usize,
}

impl Tally {
    pub(crate) fn report(&self) -> String {
        let share = if self.interrupted == 0 {
            "-".to_owned()
        } else {
            format!(
                "{:.0} %",
                100.0 * self.interrupted_paid as f64 / self.interrupted as f64
            )
        };
        format!(
            "{} trials ({} killed mid-run, {} recoveries), {} payments, none repeated; \
             {} payments answered \"interrupted, outcome unknown\" ({} of them had paid: {share}); \
             reconciled in doubt: {} found paid, {} found unpaid (then run once); unknown at the end: {}",
            self.trials,
            self.crashed,
            self.recoveries,
            self.payments,
            self.interrupted,
            self.interrupted_paid,
            self.reconciled_paid,
            self.reconciled_unpaid,
            self.unknown
        )
    }
}

fn key_of(row: &LedgerRow) -> String {
    format!("{}:{}:{}", row.run_id, row.call_id, row.args_hash)
}

/// Checks the trial in `dir`; `context` names it in every failure.
pub(crate) async fn check_trial(dir: &Path, reconcile: bool, context: &str, tally: &mut Tally) {
    let ledger = SqliteLedger::open(dir.join("ledger.db")).await.unwrap();
    let run = RunId::from(RUN);
    let rows = ledger.rows(&run).await.unwrap();
    let paid = effects(dir);
    let by_key: HashMap<String, &LedgerRow> = rows.iter().map(|r| (key_of(r), r)).collect();

    // No `Never` effect twice.
    for (key, times) in &paid {
        assert_eq!(*times, 1, "{context}: {key} paid {times} times");
    }
    // Every effect settled, reconciled or listed in doubt.
    for key in paid.keys() {
        let row = by_key
            .get(key)
            .unwrap_or_else(|| panic!("{context}: {key} paid without its row"));
        let known = row.status == CallStatus::Completed
            || row
                .resolution
                .as_ref()
                .is_some_and(|r| r.effect == Effect::Happened);
        assert!(
            known || row.is_unresolved(),
            "{context}: {key} was paid, but its row says {} with {:?}",
            row.status,
            row.resolution
        );
    }
    // A completed payment was made.
    for row in rows.iter().filter(|r| r.tool_name == "pay") {
        if row.status == CallStatus::Completed {
            assert!(
                paid.contains_key(&key_of(row)),
                "{context}: {} completed without its payment",
                row.call_id
            );
        }
    }
    // Nothing in doubt missing from the views.
    let unfinished = ledger.unfinished_runs().await.unwrap();
    let in_doubt: Vec<String> = ledger
        .in_doubt()
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.row.call_id.to_string())
        .collect();
    for row in rows.iter().filter(|r| r.is_unresolved()) {
        assert!(
            unfinished.contains(&run),
            "{context}: {} in doubt, run not listed",
            row.call_id
        );
        assert!(
            in_doubt.contains(&row.call_id.to_string()),
            "{context}: {} in doubt but not in in_doubt()",
            row.call_id
        );
    }
    // Clean endings.
    if rows.is_empty() {
        assert!(paid.is_empty(), "{context}: payments without rows");
    } else {
        assert_eq!(
            ledger.run_state(&run).await.unwrap(),
            RunState::Finished,
            "{context}: the run did not finish"
        );
        let started: Vec<String> = rows
            .iter()
            .filter(|r| r.status == CallStatus::Started)
            .map(|r| r.call_id.to_string())
            .collect();
        assert!(
            started.is_empty(),
            "{context}: rows left started: {started:?}"
        );
    }
    if reconcile {
        assert!(
            in_doubt.is_empty(),
            "{context}: left in doubt: {in_doubt:?}"
        );
    }

    tally.payments += paid.len();
    for row in rows.iter().filter(|r| r.tool_name == "pay") {
        if row.status == CallStatus::Interrupted {
            tally.interrupted += 1;
            tally.interrupted_paid += usize::from(paid.contains_key(&key_of(row)));
        }
        if let Some(resolution) = &row.resolution
            && resolution.by == ResolvedBy::Reconcile
        {
            match resolution.effect {
                Effect::Happened => tally.reconciled_paid += 1,
                Effect::NotHappened => tally.reconciled_unpaid += 1,
                Effect::Unknown => {}
            }
        }
        tally.unknown += usize::from(row.is_unresolved());
    }
    ledger.shutdown().await.unwrap();
}
