//! For run store backends (SQLite here, PostgreSQL in
//! `tinyagents-postgres`): the seals and the checks every backend applies,
//! so that they all seal the same parts and refuse the same things with
//! the same errors. A backend reads what it stores, asks these functions,
//! and writes only on `Ok`; the conformance suite (feature `conformance`)
//! holds it to the same behaviour.

use serde_json::Value;
use tinyagents_core::{CallId, RunId, Usage, args_hash};
use tinyagents_harness::{SealedRun, SuspendedRun};
use tinyagents_ledger::Timestamp;

use crate::approval::{Decision, DecisionRecord, WaitingCall};
use crate::error::{RunStoreError, RunStoreResult};
use crate::record::{
    AgentsFile, Ending, Hold, Holder, NewRun, RecordStatus, RunRecord, StoredRequest,
};
use crate::seal::SealKey;

/// The parts of a record that decide what it runs, as the seal covers
/// them: the run, its agent, its agents file and hash, its session and the
/// exact stored text of its request.
#[derive(Debug, Clone, Copy)]
pub struct Identity<'a> {
    /// The run.
    pub run_id: &'a RunId,
    /// Its agent.
    pub agent: &'a str,
    /// Its agents file.
    pub file: Option<&'a AgentsFile>,
    /// Its session.
    pub session: Option<&'a str>,
    /// The stored JSON text of its request.
    pub request: &'a str,
}

impl Identity<'_> {
    fn parts(&self) -> [&[u8]; 7] {
        let (path, hash, has_file): (&[u8], &[u8], &[u8]) = match self.file {
            Some(file) => (file.path.as_bytes(), file.sha256.as_bytes(), b"file"),
            None => (b"", b"", b"code"),
        };
        [
            self.run_id.as_str().as_bytes(),
            self.agent.as_bytes(),
            has_file,
            path,
            hash,
            self.session.unwrap_or_default().as_bytes(),
            self.request.as_bytes(),
        ]
    }

    /// Its seal.
    pub fn seal(&self, key: &SealKey) -> String {
        let parts = self.parts();
        let mut message: Vec<&[u8]> = vec![b"record"];
        message.extend(parts);
        key.seal(&message)
    }

    /// Refuses a record whose seal does not match.
    pub fn check(&self, key: &SealKey, seal: &str) -> RunStoreResult<()> {
        let mut message: Vec<&[u8]> = vec![b"record"];
        message.extend(self.parts());
        if key.verify(&message, seal) {
            Ok(())
        } else {
            Err(tampered(self.run_id, "record"))
        }
    }
}

/// A waiting call as a backend writes it when a run suspends: read from
/// the suspended state, never from whoever decides.
#[derive(Debug, Clone, PartialEq)]
pub struct NewWaiting {
    /// Its place in the suspended turn.
    pub position: u32,
    /// The call.
    pub call_id: CallId,
    /// Its tool.
    pub tool: String,
    /// Why it waits.
    pub reason: String,
    /// The hash of its (stored) arguments, as the approval binds it.
    pub args_hash: String,
    /// Its stored arguments (redacted).
    pub arguments: Value,
}

/// `text` as every backend stores it: a NUL character (which
/// PostgreSQL's text cannot hold) becomes U+FFFD, so every backend stores,
/// seals and reads back the same text, and a model's answer holding one
/// cannot keep a run's end from being recorded.
pub fn clean(text: &str) -> String {
    text.replace('\0', "\u{FFFD}")
}

/// `run` with its texts [`clean`]ed (the request is stored as JSON, which
/// escapes a NUL).
pub fn cleaned_run(mut run: NewRun) -> NewRun {
    run.agent = clean(&run.agent);
    run.session = run.session.as_deref().map(clean);
    run
}

/// `hold` with its holder's names [`clean`]ed.
pub fn cleaned_hold(hold: &Hold) -> Hold {
    let mut hold = hold.clone();
    hold.holder.owner = clean(&hold.holder.owner);
    hold.holder.host = clean(&hold.holder.host);
    hold
}

/// `ending` with its texts [`clean`]ed.
pub fn cleaned_ending(ending: &Ending) -> Ending {
    match ending {
        Ending::Ended {
            status,
            final_text,
            usage,
        } => Ending::Ended {
            status: *status,
            final_text: clean(final_text),
            usage: *usage,
        },
        Ending::Failed { error } => Ending::Failed {
            error: clean(error),
        },
        other => other.clone(),
    }
}

/// The record of `decision`, made by `by` at `at` (texts [`clean`]ed).
pub fn decision_record(decision: &Decision, by: &str, at: Timestamp) -> DecisionRecord {
    DecisionRecord {
        approved: decision.approved,
        reason: decision.reason.as_deref().map(clean),
        by: clean(by),
        at,
    }
}

/// Whether a candidate of a worker's claim that fails with `error` cannot
/// be run at all (a part edited outside the store, or unreadable): the
/// claim fails that run, saying why, and goes on with the others, so one
/// such run never keeps workers from every other.
pub fn unusable(error: &RunStoreError) -> bool {
    matches!(
        error,
        RunStoreError::Tampered { .. } | RunStoreError::Unreadable { .. }
    )
}

/// The waiting calls of `state`, in call order.
pub fn waiting_calls_of(state: &SuspendedRun) -> Vec<NewWaiting> {
    state
        .pending()
        .zip(0_u32..)
        .map(|(pending, position)| NewWaiting {
            position,
            call_id: pending.call.id.clone(),
            tool: clean(&pending.call.name),
            reason: clean(&pending.reason),
            args_hash: args_hash(&pending.call.arguments),
            arguments: pending.call.arguments.clone(),
        })
        .collect()
}

/// The message a waiting call's seal covers: run, suspension, call, tool,
/// arguments' hash and reason.
fn waiting_message(
    run: &RunId,
    suspension: u32,
    call: &CallId,
    tool: &str,
    hash: &str,
    reason: &str,
) -> Vec<Vec<u8>> {
    vec![
        b"waiting".to_vec(),
        run.as_str().as_bytes().to_vec(),
        suspension.to_string().into_bytes(),
        call.as_str().as_bytes().to_vec(),
        tool.as_bytes().to_vec(),
        hash.as_bytes().to_vec(),
        reason.as_bytes().to_vec(),
    ]
}

/// The message a decision's seal covers: its call's binding, the verdict,
/// the reason, who and when.
fn decision_message(call: &WaitingCall, decision: &DecisionRecord) -> Vec<Vec<u8>> {
    let mut message = waiting_message(
        &call.run_id,
        call.suspension,
        &call.call_id,
        &call.tool,
        &call.args_hash,
        &call.reason,
    );
    message[0] = b"decision".to_vec();
    message.extend([
        if decision.approved {
            b"approved".to_vec()
        } else {
            b"denied".to_vec()
        },
        decision.reason.clone().unwrap_or_default().into_bytes(),
        decision.by.clone().into_bytes(),
        decision.at.as_millis().to_string().into_bytes(),
    ]);
    message
}

fn framed(message: &[Vec<u8>]) -> Vec<&[u8]> {
    message.iter().map(Vec::as_slice).collect()
}

/// The seal of a waiting call's binding.
pub fn waiting_seal(key: &SealKey, run: &RunId, suspension: u32, call: &NewWaiting) -> String {
    let message = waiting_message(
        run,
        suspension,
        &call.call_id,
        &call.tool,
        &call.args_hash,
        &call.reason,
    );
    key.seal(&framed(&message))
}

/// The seal of a decision on a waiting call.
pub fn decision_seal(key: &SealKey, call: &WaitingCall, decision: &DecisionRecord) -> String {
    key.seal(&framed(&decision_message(call, decision)))
}

/// Refuses a waiting call read back whose seals (binding, and decision
/// when made) do not match, or whose stored arguments are not those its
/// binding hashed.
pub fn check_waiting(
    key: &SealKey,
    call: &WaitingCall,
    seal: &str,
    decision_seal: Option<&str>,
) -> RunStoreResult<()> {
    let binding = waiting_message(
        &call.run_id,
        call.suspension,
        &call.call_id,
        &call.tool,
        &call.args_hash,
        &call.reason,
    );
    if !key.verify(&framed(&binding), seal) || args_hash(&call.arguments) != call.args_hash {
        return Err(tampered(
            &call.run_id,
            &format!("waiting call {}", call.call_id),
        ));
    }
    let decided = match (&call.decision, decision_seal) {
        (None, None) => true,
        (Some(decision), Some(stored)) => {
            key.verify(&framed(&decision_message(call, decision)), stored)
        }
        _ => false,
    };
    if decided {
        Ok(())
    } else {
        Err(tampered(
            &call.run_id,
            &format!("decision on call {}", call.call_id),
        ))
    }
}

/// Checks a decision step against the calls of the run's last suspension:
/// each decision names a call that waits, undecided, and names it once.
/// Returns the calls each decision applies to, in the decisions' order.
pub fn check_decisions<'w>(
    run: &RunId,
    calls: &'w [WaitingCall],
    decisions: &[Decision],
) -> RunStoreResult<Vec<&'w WaitingCall>> {
    let mut chosen: Vec<&WaitingCall> = Vec::with_capacity(decisions.len());
    for decision in decisions {
        let Some(call) = calls.iter().find(|c| c.call_id == decision.call_id) else {
            return Err(RunStoreError::NotWaiting {
                run: run.clone(),
                call: decision.call_id.clone(),
                waiting: calls
                    .iter()
                    .filter(|c| c.decision.is_none())
                    .map(|c| c.call_id.clone())
                    .collect(),
            });
        };
        if let Some(made) = &call.decision {
            return Err(RunStoreError::AlreadyDecided {
                run: run.clone(),
                call: call.call_id.clone(),
                verdict: if made.approved { "approved" } else { "denied" },
                by: made.by.clone(),
            });
        }
        if chosen.iter().any(|c| c.call_id == call.call_id) {
            return Err(RunStoreError::AlreadyDecided {
                run: run.clone(),
                call: call.call_id.clone(),
                verdict: "decided twice in this step",
                by: "this step".to_owned(),
            });
        }
        chosen.push(call);
    }
    Ok(chosen)
}

/// Refuses a claim of a run in `status` with epoch `epoch` by a caller
/// that saw `seen`: only an unmoved epoch, and a run that may be taken.
pub fn check_claim(run: &RunId, status: RecordStatus, epoch: u64, seen: u64) -> RunStoreResult<()> {
    if epoch != seen {
        return Err(RunStoreError::Taken {
            run: run.clone(),
            expected: seen,
            found: epoch,
        });
    }
    match status {
        RecordStatus::Queued
        | RecordStatus::Running
        | RecordStatus::Failed
        | RecordStatus::Cancelled => Ok(()),
        other => Err(RunStoreError::WrongStatus {
            run: run.clone(),
            status: other,
            expected: "queued, running with its holder gone, failed or cancelled",
        }),
    }
}

/// The error of a part whose seal does not match.
pub fn tampered(run: &RunId, what: &str) -> RunStoreError {
    RunStoreError::Tampered {
        run: run.clone(),
        what: what.to_owned(),
    }
}

/// How a claim will run the run, for its history: a decided suspension is
/// resumed, a run taken before is recovered, a new one started.
pub fn segment_name(resume: bool, takeover: bool) -> &'static str {
    match (resume, takeover) {
        (true, _) => "resume",
        (false, true) => "recover",
        (false, false) => "start",
    }
}

/// The stored text of `run`'s request and the seal of its identity, as a
/// backend writes a new record.
pub fn sealed_request(run: &NewRun, key: &SealKey) -> RunStoreResult<(String, String)> {
    let request = serde_json::to_string(&run.request).map_err(|e| RunStoreError::Unreadable {
        run: run.run_id.clone(),
        what: "request",
        detail: e.to_string(),
        source: Some(e.into()),
    })?;
    let seal = Identity {
        run_id: &run.run_id,
        agent: &run.agent,
        file: run.file.as_ref(),
        session: run.session.as_deref(),
        request: &request,
    }
    .seal(key);
    Ok((request, seal))
}

/// The stored text of a history entry of `run`.
pub fn history_text(run: &RunId, event: &crate::history::RunEvent) -> RunStoreResult<String> {
    serde_json::to_string(event).map_err(|e| RunStoreError::Unreadable {
        run: run.clone(),
        what: "history entry",
        detail: e.to_string(),
        source: Some(e.into()),
    })
}

/// The calls of a suspension still undecided once `decided` are.
pub fn still_waiting(calls: Vec<WaitingCall>, decided: &[WaitingCall]) -> Vec<WaitingCall> {
    calls
        .into_iter()
        .filter(|c| c.decision.is_none() && !decided.iter().any(|d| d.call_id == c.call_id))
        .collect()
}

/// Each journal event's time (ms) and JSON text (serde_json escapes a
/// NUL, so the text holds none).
pub fn journal_texts(
    run: &RunId,
    events: &[crate::journal::NewJournalEvent],
) -> RunStoreResult<Vec<(i64, String)>> {
    events
        .iter()
        .map(|(at, event)| {
            let text = serde_json::to_string(event).map_err(|e| RunStoreError::Unreadable {
                run: run.clone(),
                what: "journal event",
                detail: e.to_string(),
                source: Some(e.into()),
            })?;
            Ok((to_i64(at.as_millis()), text))
        })
        .collect()
}

/// A stored journal entry: its event, or why its text is not one.
pub fn journal_entry(seq: u64, at_ms: u64, text: &str) -> crate::journal::JournalEntry {
    crate::journal::JournalEntry {
        seq,
        at: Timestamp::from_millis(at_ms),
        event: serde_json::from_str(text)
            .map_err(|e| format!("journal entry {seq} is not an event: {e}")),
    }
}

/// Until when a lease of `lease` taken at `at` runs (ms, as stored).
pub fn lease_end(at: Timestamp, lease: std::time::Duration) -> i64 {
    to_i64(
        at.as_millis()
            .saturating_add(u64::try_from(lease.as_millis()).unwrap_or(u64::MAX)),
    )
}

/// The time stamp of now, by the clock rows are stamped with.
pub fn now() -> Timestamp {
    Timestamp::now()
}

/// Milliseconds as a signed column value.
pub fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A signed column value as milliseconds (negative as zero).
pub fn to_u64(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// A record row as a backend stores it, before its seals are checked:
/// times in milliseconds, the request and the sealed state as stored text.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct StoredRecord {
    pub run_id: String,
    pub agent: String,
    pub file_path: Option<String>,
    pub file_sha256: Option<String>,
    pub session: Option<String>,
    pub request: String,
    pub seal: String,
    pub status: String,
    pub owner: Option<String>,
    pub host: Option<String>,
    pub pid: Option<i64>,
    pub lease_until: Option<i64>,
    pub epoch: i64,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub updated_at: i64,
    pub ended_at: Option<i64>,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub final_text: Option<String>,
    pub error: Option<String>,
    pub suspension: i64,
    pub suspended: Option<String>,
}

impl StoredRecord {
    /// The record, its identity's seal and its state's seal checked.
    pub fn open(self, key: &SealKey) -> RunStoreResult<RunRecord> {
        let run_id = RunId::from(self.run_id);
        let file = match (self.file_path, self.file_sha256) {
            (Some(path), Some(sha256)) => Some(AgentsFile { path, sha256 }),
            _ => None,
        };
        Identity {
            run_id: &run_id,
            agent: &self.agent,
            file: file.as_ref(),
            session: self.session.as_deref(),
            request: &self.request,
        }
        .check(key, &self.seal)?;
        let unreadable = |what: &'static str, detail: String| RunStoreError::Unreadable {
            run: run_id.clone(),
            what,
            detail,
            source: None,
        };
        let undecodable =
            |what: &'static str, error: serde_json::Error| RunStoreError::Unreadable {
                run: run_id.clone(),
                what,
                detail: error.to_string(),
                source: Some(error.into()),
            };
        let request: StoredRequest =
            serde_json::from_str(&self.request).map_err(|e| undecodable("request", e))?;
        let status = RecordStatus::parse(&self.status)
            .ok_or_else(|| unreadable("status", format!("unknown status '{}'", self.status)))?;
        let suspended = match self.suspended {
            Some(text) => {
                let sealed: SealedRun =
                    serde_json::from_str(&text).map_err(|e| undecodable("suspended state", e))?;
                Some(key.open_state(&run_id, &sealed)?)
            }
            None => None,
        };
        let holder = match (self.owner, self.host) {
            (Some(owner), Some(host)) => Some(Holder {
                owner,
                host,
                pid: self.pid.and_then(|p| u32::try_from(p).ok()).unwrap_or(0),
            }),
            _ => None,
        };
        let stamp = |ms: i64| Timestamp::from_millis(to_u64(ms));
        Ok(RunRecord {
            agent: self.agent,
            file,
            session: self.session,
            request,
            status,
            holder,
            lease_until: self.lease_until.map(stamp),
            epoch: to_u64(self.epoch),
            created_at: stamp(self.created_at),
            started_at: self.started_at.map(stamp),
            updated_at: stamp(self.updated_at),
            ended_at: self.ended_at.map(stamp),
            usage: Usage::new(to_u64(self.input_tokens), to_u64(self.output_tokens)),
            final_text: self.final_text,
            error: self.error,
            suspension: u32::try_from(self.suspension).unwrap_or(0),
            suspended,
            run_id,
        })
    }
}

/// A waiting call's row as a backend stores it, before its seals are
/// checked.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct StoredWaiting {
    pub run_id: String,
    pub agent: String,
    pub suspension: i64,
    pub call_id: String,
    pub tool: String,
    pub reason: String,
    pub args_hash: String,
    pub arguments: String,
    pub requested_at: i64,
    pub seal: String,
    pub approved: Option<bool>,
    pub decision_reason: Option<String>,
    pub decided_by: Option<String>,
    pub decided_at: Option<i64>,
    pub decision_seal: Option<String>,
}

impl StoredWaiting {
    /// The waiting call, its binding's and decision's seals checked.
    pub fn open(self, key: &SealKey) -> RunStoreResult<WaitingCall> {
        let run_id = RunId::from(self.run_id);
        let arguments =
            serde_json::from_str(&self.arguments).map_err(|e| RunStoreError::Unreadable {
                run: run_id.clone(),
                what: "waiting call's arguments",
                detail: e.to_string(),
                source: Some(e.into()),
            })?;
        let decision = match (self.approved, self.decided_by, self.decided_at) {
            (Some(approved), Some(by), Some(at)) => Some(DecisionRecord {
                approved,
                reason: self.decision_reason,
                by,
                at: Timestamp::from_millis(to_u64(at)),
            }),
            _ => None,
        };
        let call = WaitingCall {
            run_id,
            agent: self.agent,
            suspension: u32::try_from(self.suspension).unwrap_or(0),
            call_id: CallId::new(self.call_id),
            tool: self.tool,
            reason: self.reason,
            args_hash: self.args_hash,
            arguments,
            requested_at: Timestamp::from_millis(to_u64(self.requested_at)),
            decision,
        };
        check_waiting(key, &call, &self.seal, self.decision_seal.as_deref())?;
        Ok(call)
    }
}

/// What a claim of `record` does: resume its decided state, recover it
/// (taken before), or start it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimPlan {
    /// The state to resume (the first claim after the last decision).
    pub resume: Option<SuspendedRun>,
    /// Whether it was taken before: recovered.
    pub takeover: bool,
    /// Its name in the history.
    pub segment: &'static str,
}

impl ClaimPlan {
    /// The plan of a claim of `record`.
    pub fn of(record: &RunRecord) -> Self {
        let resume = (record.status == RecordStatus::Queued)
            .then(|| record.suspended.clone())
            .flatten();
        let takeover =
            resume.is_none() && !(record.status == RecordStatus::Queued && record.epoch == 0);
        Self {
            segment: segment_name(resume.is_some(), takeover),
            resume,
            takeover,
        }
    }
}
