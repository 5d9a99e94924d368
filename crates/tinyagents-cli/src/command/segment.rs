//! A claimed run, from its first segment this process runs to its end:
//! each segment started, resumed or recovered as the run store and the
//! ledger say (`next_segment`), over the ledger the run writes through,
//! its events shown as they come in one tree for the whole run, Ctrl-C
//! cancelling it, its end recorded under its claim's epoch; and, on a
//! terminal, a run that waits for a person asked about each waiting call,
//! its decisions recorded, and resumed in the same process.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tinyagents::harness::SuspendedRun;
use tinyagents::ledger::SharedLedger;
use tinyagents::orchestrator::{Agent, RunError, SessionScope};
use tinyagents::prelude::{AgentRun, ResumeOptions, RunHandle, RunStatus};
use tinyagents::runs::{
    Claim, Decision, Ending, Hold, JOURNAL_FLUSH_EVERY, Journal, NextSegment, RecordStatus,
    next_segment,
};

use super::hold::Keeper;
use super::prompt;
use crate::build::Toolbox;
use crate::exit;
use crate::file::Loaded;
use crate::signal::Interrupt;
use crate::store::{Stores, person};
use crate::view::{Mode, Watch, out, spend};

/// What a command needs to run a claimed run's segments.
pub(crate) struct Runner<'a> {
    /// The stores.
    pub(crate) stores: &'a Stores,
    /// The agents file.
    pub(crate) loaded: &'a Loaded,
    /// Its MCP servers' tools.
    pub(crate) toolbox: &'a Toolbox,
    /// The view.
    pub(crate) watch: &'a mut Watch,
    /// Ctrl-C.
    pub(crate) interrupt: &'a Interrupt,
    /// Ask a person at the terminal about waiting calls.
    pub(crate) interactive: bool,
    /// This process as a holder.
    pub(crate) hold: Hold,
}

impl Runner<'_> {
    /// Runs `claim`'s run until it ends, or waits for a person nobody here
    /// can ask; `first` is its first segment when the caller knows it (a
    /// new run's start), else the store and ledger decide. Returns the
    /// exit code.
    pub(crate) async fn finish(
        &mut self,
        mut claim: Claim,
        mut first: Option<NextSegment>,
        session: Option<&SessionScope>,
    ) -> u8 {
        let run_id = claim.record.run_id.clone();
        loop {
            let ledger = self.stores.held_ledger(&run_id, claim.epoch);
            let built = self.toolbox.agent(
                self.loaded,
                Arc::clone(&ledger) as SharedLedger,
                Arc::clone(&self.stores.sessions),
            );
            let agent = match built {
                Ok(agent) => agent,
                Err(error) => {
                    return self
                        .fail(&claim, tinyagents::core::error_chain(error.as_ref()))
                        .await;
                }
            };
            let next = match first.take() {
                Some(next) => next,
                None => match next_segment(&claim, ledger.as_ref()).await {
                    Ok(next) => next,
                    Err(error) => {
                        let error = format!("the effect ledger could not be read: {error}");
                        return self.fail(&claim, error).await;
                    }
                },
            };
            if matches!(next, NextSegment::Finished) {
                let error = "the effect ledger has this run finished but its end was never \
                             recorded; its calls are in the ledger (`tinyagents show RUN`)";
                return self.fail(&claim, error.to_owned()).await;
            }
            let stop = self.interrupt.token();
            let keeper = Keeper::keep(
                Arc::clone(&self.stores.runs),
                &self.hold,
                run_id.clone(),
                claim.epoch,
                stop.clone(),
            );
            let result = self.segment(&agent, &claim, next, session, stop).await;
            drop(keeper);
            let ending = match &result {
                Ok(run) => Ending::of(run),
                Err(error) => Ending::Failed {
                    error: error.to_string(),
                },
            };
            if self.end(&claim, &ending).await
                && let Err(error) = ledger.finish_now().await
            {
                self.watch.note(&format!(
                    "warning: the ledger did not mark the run finished: {error}"
                ));
            }
            let run = match result {
                Ok(run) => run,
                Err(error) => return self.failed(run_id.as_str(), &error.to_string()),
            };
            let Some(suspended) = run.suspended.clone().filter(|_| self.interactive) else {
                self.watch.end();
                return self.report(&run);
            };
            self.watch.pause();
            let Some(decisions) =
                prompt::decide(&suspended, self.show_arguments(), self.interrupt).await
            else {
                // Ctrl-C at the prompt: the run stays waiting, recorded.
                self.watch.end();
                self.report(&run);
                return exit::AWAITING_APPROVAL;
            };
            match self.decide_and_claim(&suspended, &decisions).await {
                Ok(next) => claim = next,
                Err(error) => {
                    self.watch.note(&format!(
                        "error: {}",
                        tinyagents::core::error_chain(error.as_ref())
                    ));
                    return exit::FAILED;
                }
            }
        }
    }

    /// Runs one segment and waits for its end.
    async fn segment(
        &mut self,
        agent: &Agent,
        claim: &Claim,
        next: NextSegment,
        session: Option<&SessionScope>,
        stop: tinyagents::core::CancellationToken,
    ) -> Result<AgentRun, RunError> {
        let run_id = &claim.record.run_id;
        let options = |decisions| ResumeOptions {
            cancel: Some(stop.clone()),
            decisions,
            ..ResumeOptions::default()
        };
        let journal = &mut Journal::new(Arc::clone(&self.stores.runs), run_id.clone(), claim.epoch);
        match next {
            NextSegment::Start(request) => {
                let request = request.with_cancellation(stop.clone());
                let handle = match session {
                    Some(scope) => agent.start_in_session(scope, request),
                    None => agent.start(request),
                };
                drive(handle, self.watch, self.interrupt, journal).await
            }
            NextSegment::Resume { state, decisions } => {
                let handle = agent.start_resume(*state, &decisions, options(Vec::new()));
                drive(handle, self.watch, self.interrupt, journal).await
            }
            NextSegment::Recover { decisions } => {
                let handle = agent.start_recover(run_id, options(decisions));
                drive(handle, self.watch, self.interrupt, journal).await
            }
            // Handled by the caller before a segment starts.
            NextSegment::Finished => Err(RunError::Run {
                source: tinyagents::core::TinyAgentsError::State("the run has finished".to_owned()),
            }),
        }
    }

    /// Records a segment's end under the claim's epoch; true when
    /// recorded (false, and said, when another process took the run).
    async fn end(&mut self, claim: &Claim, ending: &Ending) -> bool {
        match self
            .stores
            .runs
            .end(&claim.record.run_id, claim.epoch, ending)
            .await
        {
            Ok(true) => true,
            Ok(false) => {
                self.watch.note(&format!(
                    "warning: run {} was taken by another process: this one's end of it is not recorded",
                    claim.record.run_id
                ));
                false
            }
            Err(error) => {
                self.watch
                    .note(&format!("error: recording the run's end: {error}"));
                false
            }
        }
    }

    /// Ends the claimed run as failed before a segment ran, and says why.
    async fn fail(&mut self, claim: &Claim, error: String) -> u8 {
        self.end(
            claim,
            &Ending::Failed {
                error: error.clone(),
            },
        )
        .await;
        self.failed(claim.record.run_id.as_str(), &error)
    }

    /// Records the person's decisions and takes the run again to resume it.
    async fn decide_and_claim(
        &mut self,
        suspended: &SuspendedRun,
        decisions: &[Decision],
    ) -> anyhow::Result<Claim> {
        let run = &suspended.run_id;
        let runs = &self.stores.runs;
        let decided = runs.decide(run, &person(None), decisions).await?;
        if !decided.is_complete() {
            anyhow::bail!(
                "run {run} still waits on {} call(s) decided elsewhere",
                decided.undecided.len()
            );
        }
        let record = runs
            .get(run)
            .await?
            .ok_or_else(|| anyhow::anyhow!("run {run} is no longer in the run store"))?;
        Ok(runs.claim(run, record.epoch, &self.hold).await?)
    }

    fn show_arguments(&self) -> bool {
        self.loaded.file.capture.tool_io
    }

    fn failed(&mut self, run_id: &str, error: &str) -> u8 {
        self.watch.end();
        if self.watch.mode() == Mode::Json {
            out(
                &json!({"type": "result", "run_id": run_id, "status": "failed",
                        "error": error, "exit_code": exit::FAILED})
                .to_string(),
            );
        } else {
            eprintln!("error: run {run_id} failed: {error}");
            eprintln!("it may be recovered: `tinyagents recover {run_id}`");
        }
        exit::FAILED
    }

    /// Prints how the run ended; returns the exit code.
    fn report(&mut self, run: &AgentRun) -> u8 {
        let code = exit_code(run.status);
        let status = RecordStatus::of(run.status);
        let pending: Vec<_> = run
            .suspended
            .iter()
            .flat_map(SuspendedRun::pending)
            .map(|p| json!({"call_id": p.call.id, "tool": p.call.name, "reason": p.reason}))
            .collect();
        if self.watch.mode() == Mode::Json {
            out(&json!({
                "type": "result",
                "run_id": run.run_id,
                "status": status.as_str(),
                "final_text": run.final_text,
                "usage": run.usage,
                "spent": run.budget.spent,
                "currency": self.watch.currency(),
                "pending": pending,
                "exit_code": code,
            })
            .to_string());
            return code;
        }
        // The run's own calls (its line of the spend report), then the
        // tree's when it delegated.
        let own = run.spend.own();
        out(&format!(
            "run {} {}{}",
            run.run_id,
            super::said(status),
            spend::run(&own, Some(&run.budget.spent), self.watch.currency())
        ));
        if let Some(suspended) = &run.suspended {
            out(&format!(
                "it waits for a person's decision on {} call(s):",
                pending.len()
            ));
            for pending in suspended.pending() {
                out(&format!(
                    "  {} {}: {}",
                    pending.call.id, pending.call.name, pending.reason
                ));
            }
            out(&format!(
                "decide with `tinyagents approve {0}` (or `--call ID`, `--deny-call ID`), then `tinyagents resume {0}`",
                run.run_id
            ));
        } else if !run.final_text.is_empty() {
            out("");
            out(&run.final_text);
        }
        code
    }
}

/// Shows `handle`'s events until its run ends, and keeps them in the run's
/// journal (written every `JOURNAL_FLUSH_EVERY` and at the end); the first
/// Ctrl-C cancels it (the run's token is a child of the interrupt's) and
/// says so.
pub(crate) async fn drive(
    mut handle: RunHandle<'_, RunError>,
    watch: &mut Watch,
    interrupt: &Interrupt,
    journal: &mut Journal,
) -> Result<AgentRun, RunError> {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut flush = tokio::time::interval(JOURNAL_FLUSH_EVERY);
    flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut warned = false;
    let mut told = interrupt.fired();
    if told {
        handle.cancellation().cancel();
    }
    loop {
        tokio::select! {
            event = handle.next_event() => match event {
                Some(event) => {
                    journal.record(&event);
                    watch.event(&event);
                }
                None => break,
            },
            _ = tick.tick(), if watch.mode() == Mode::Live => watch.tick(),
            _ = flush.tick() => journal_flush(journal, watch, &mut warned).await,
            () = interrupt.wait(), if !told => {
                told = true;
                handle.cancellation().cancel();
                watch.note("cancelling the run (Ctrl-C again exits at once)");
            }
        }
    }
    journal_flush(journal, watch, &mut warned).await;
    handle.wait().await
}

/// Writes the journal; the first error is said (the run goes on: the
/// journal is a view).
async fn journal_flush(journal: &mut Journal, watch: &mut Watch, warned: &mut bool) {
    if let Err(error) = journal.flush().await
        && !std::mem::replace(warned, true)
    {
        watch.note(&format!(
            "warning: the run's journal could not be written: {error}"
        ));
    }
}

/// The exit code for a run's end.
pub(crate) fn exit_code(status: RunStatus) -> u8 {
    match status {
        RunStatus::Completed | RunStatus::Terminated => exit::OK,
        RunStatus::LimitReached(_) => exit::LIMIT,
        RunStatus::Cancelled => exit::CANCELLED,
        RunStatus::AwaitingApproval => exit::AWAITING_APPROVAL,
    }
}
