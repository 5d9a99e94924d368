//! One segment of a run, from start (or resume, or recovery) to its end:
//! its events shown as they come, Ctrl-C cancelling it, its end recorded,
//! and, on a terminal, a run that waits for a person asked about each
//! waiting call and resumed in the same process.

use std::time::Duration;

use serde_json::json;
use tinyagents::harness::{ApprovalDecision, SuspendedRun};
use tinyagents::orchestrator::{Agent, RunError};
use tinyagents::prelude::{AgentRun, ResumeOptions, RunHandle, RunStatus};

use super::prompt;
use crate::exit;
use crate::signal::Interrupt;
use crate::store::{RecordStatus, RunStore};
use crate::view::{Mode, Watch, out};

/// What a command needs to run segments.
pub(crate) struct Runner<'a> {
    /// The agent.
    pub(crate) agent: &'a Agent,
    /// The run records.
    pub(crate) records: &'a mut RunStore,
    /// The view.
    pub(crate) watch: &'a mut Watch,
    /// Ctrl-C.
    pub(crate) interrupt: &'a Interrupt,
    /// Ask a person at the terminal about waiting calls.
    pub(crate) interactive: bool,
    /// Show arguments of waiting calls (the file's `tool_io` capture).
    pub(crate) show_arguments: bool,
}

impl Runner<'_> {
    /// Drives `handle` to its end and then, while the run waits for a
    /// person and one can be asked here, resumes it with their decisions.
    /// Returns the exit code.
    pub(crate) async fn finish(&mut self, run_id: &str, handle: RunHandle<'_, RunError>) -> u8 {
        let mut result = drive(handle, self.watch, self.interrupt).await;
        loop {
            let run = match result {
                Ok(run) => run,
                Err(error) => return self.failed(run_id, &error),
            };
            let status = record_status(run.status);
            if let Err(error) =
                self.records
                    .finish(run_id, status, run.usage, run.suspended.as_ref(), None)
            {
                self.watch
                    .note(&format!("error: recording the run's end: {error:#}"));
                return exit::FAILED;
            }
            let Some(suspended) = run.suspended.clone().filter(|_| self.interactive) else {
                return self.report(&run);
            };
            let Some(decisions) =
                prompt::decide(&suspended, self.show_arguments, self.interrupt).await
            else {
                // Ctrl-C at the prompt: the run stays waiting, recorded.
                self.report(&run);
                return exit::CANCELLED;
            };
            if let Err(error) = self
                .records
                .decide(run_id, &decisions)
                .and_then(|()| self.records.mark_running(run_id))
            {
                self.watch
                    .note(&format!("error: recording the decisions: {error:#}"));
                return exit::FAILED;
            }
            result = self.resume(suspended, &decisions).await;
        }
    }

    async fn resume(
        &mut self,
        suspended: SuspendedRun,
        decisions: &[ApprovalDecision],
    ) -> Result<AgentRun, RunError> {
        let options = ResumeOptions {
            cancel: Some(self.interrupt.token()),
            ..ResumeOptions::default()
        };
        let handle = self.agent.start_resume(suspended, decisions, options);
        drive(handle, self.watch, self.interrupt).await
    }

    fn failed(&mut self, run_id: &str, error: &RunError) -> u8 {
        let text = format!("{error}");
        let _ = self.records.finish(
            run_id,
            RecordStatus::Failed,
            tinyagents::prelude::Usage::default(),
            None,
            Some(&text),
        );
        if self.watch.mode() == Mode::Json {
            out(
                &json!({"type": "result", "run_id": run_id, "status": "failed",
                        "error": text, "exit_code": exit::FAILED})
                .to_string(),
            );
        } else {
            eprintln!("error: run {run_id} failed: {text}");
        }
        exit::FAILED
    }

    /// Prints how the run ended; returns the exit code.
    fn report(&mut self, run: &AgentRun) -> u8 {
        let code = exit_code(run.status);
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
                "status": record_status(run.status).as_str(),
                "final_text": run.final_text,
                "usage": run.usage,
                "pending": pending,
                "exit_code": code,
            })
            .to_string());
            return code;
        }
        let status = record_status(run.status).as_str().replace('_', " ");
        out(&format!(
            "run {} {status} · {} tokens ({} in, {} out)",
            run.run_id,
            run.usage.total(),
            run.usage.input_tokens,
            run.usage.output_tokens
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
                "decide with `tinyagents approve {0}` (or `--call ID`, `--deny`), then `tinyagents resume {0}`",
                run.run_id
            ));
        } else if !run.final_text.is_empty() {
            out("");
            out(&run.final_text);
        }
        code
    }
}

/// Shows `handle`'s events until its run ends; the first Ctrl-C cancels
/// it (the run's token is a child of the interrupt's) and says so.
pub(crate) async fn drive(
    mut handle: RunHandle<'_, RunError>,
    watch: &mut Watch,
    interrupt: &Interrupt,
) -> Result<AgentRun, RunError> {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut told = interrupt.fired();
    if told {
        handle.cancellation().cancel();
    }
    loop {
        tokio::select! {
            event = handle.next_event() => match event {
                Some(event) => watch.event(&event),
                None => break,
            },
            _ = tick.tick(), if watch.mode() == Mode::Live => watch.tick(),
            () = interrupt.wait(), if !told => {
                told = true;
                handle.cancellation().cancel();
                watch.note("cancelling the run (Ctrl-C again exits at once)");
            }
        }
    }
    let result = handle.wait().await;
    watch.end_segment();
    result
}

/// The record's status for a run's end.
pub(crate) fn record_status(status: RunStatus) -> RecordStatus {
    match status {
        RunStatus::Completed => RecordStatus::Completed,
        RunStatus::Terminated => RecordStatus::Terminated,
        RunStatus::LimitReached(_) => RecordStatus::LimitReached,
        RunStatus::Cancelled => RecordStatus::Cancelled,
        RunStatus::AwaitingApproval => RecordStatus::AwaitingApproval,
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
