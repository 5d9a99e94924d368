//! A console over real SQLite stores, with runs made by a real harness
//! (journaled as the command line and the workers journal them), and a
//! host that resumes and recovers runs in this process, or errs, or
//! panics, as a test asks.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{Value, json};
use tinyagents::console::{Console, ConsoleHost, ConsoleOptions, ConsoleStores, HostError};
use tinyagents::ledger::SqliteLedger;
use tinyagents::orchestrator::SqliteSessionStore;
use tinyagents::prelude::*;
use tinyagents::runs::{
    Ending, Hold, Journal, NewRun, NextSegment, RecordStatus, RunStore, SharedRunStore,
    SqliteRunStore, drive_journaled, next_segment,
};

/// What the test host does when asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HostMode {
    /// Resumes or recovers the run in this process.
    Runs,
    /// Answers with an error.
    Errs,
    /// Panics.
    Panics,
}

/// The payments the `pay` tool made, in order.
pub(crate) type Payments = Arc<Mutex<Vec<String>>>;

/// The runs made without payload capture: their later segments capture
/// nothing either (as a host building from the same agents file).
pub(crate) type Uncaptured = Arc<Mutex<Vec<RunId>>>;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Pay {
    to: String,
    amount: u64,
}

/// A harness whose model asks `calls` (tool `pay`, each waiting for a
/// person) at its first turn and then answers `done`; tool payloads
/// captured or not.
pub(crate) fn harness(
    ledger: Arc<dyn tinyagents::ledger::EffectLedger>,
    capture: bool,
    calls: &[Value],
    payments: &Payments,
) -> AgentHarness {
    let paid = Arc::clone(payments);
    let pay = FnTool::new("pay", "Pays.", move |args: Pay| {
        let paid = Arc::clone(&paid);
        async move {
            paid.lock().push(format!("{} {}", args.to, args.amount));
            anyhow::Ok(format!("paid {}", args.to))
        }
    })
    .map_spec(|spec| spec.replay(ToolReplay::Never).approval_required());
    let mut script = Vec::new();
    if !calls.is_empty() {
        script.push(ScriptedModel::tool_calls(
            calls.iter().map(|args| ("pay", args.clone())),
        ));
    }
    script.push(ChatResponse::text("done"));
    let mut builder = AgentHarness::builder(Arc::new(ScriptedModel::new(script)))
        .ledger(ledger)
        .payload_capture(PayloadCapture {
            model_io: capture,
            tool_io: capture,
        });
    builder.register(Arc::new(pay)).unwrap();
    builder.build().unwrap()
}

/// Stores, a console over them served on a loopback port, and its host.
pub(crate) struct Fixture {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) runs: SqliteRunStore,
    pub(crate) ledger: Arc<SqliteLedger>,
    pub(crate) console: Console,
    pub(crate) addr: SocketAddr,
    pub(crate) host: Arc<TestHost>,
    pub(crate) payments: Payments,
    uncaptured: Uncaptured,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The host of the fixture's console.
pub(crate) struct TestHost {
    pub(crate) mode: Mutex<HostMode>,
    pub(crate) asked: Mutex<Vec<(String, RunId)>>,
    runs: SqliteRunStore,
    ledger: Arc<SqliteLedger>,
    payments: Payments,
    uncaptured: Uncaptured,
}

#[async_trait]
impl ConsoleHost for TestHost {
    async fn resume(&self, run: &RunId) -> Result<String, HostError> {
        self.asked.lock().push(("resume".to_owned(), run.clone()));
        self.go(run)
    }

    async fn recover(&self, run: &RunId) -> Result<String, HostError> {
        self.asked.lock().push(("recover".to_owned(), run.clone()));
        self.go(run)
    }
}

impl TestHost {
    fn go(&self, run: &RunId) -> Result<String, HostError> {
        match *self.mode.lock() {
            HostMode::Errs => return Err(HostError::new("no worker can build agent 'payer' here")),
            HostMode::Panics => panic!("the host's hook panicked on purpose"),
            HostMode::Runs => {}
        }
        let (runs, ledger, payments, target) = (
            self.runs.clone(),
            Arc::clone(&self.ledger),
            Arc::clone(&self.payments),
            run.clone(),
        );
        let capture = !self.uncaptured.lock().contains(run);
        tokio::spawn(async move { continue_run(&runs, ledger, &payments, &target, capture).await });
        Ok(format!("resuming {run} here"))
    }
}

/// Claims `run` and runs its next segment as the store and ledger say,
/// journaled, its end recorded.
pub(crate) async fn continue_run(
    runs: &SqliteRunStore,
    ledger: Arc<SqliteLedger>,
    payments: &Payments,
    run: &RunId,
    capture: bool,
) {
    let record = runs.get(run).await.unwrap().unwrap();
    let claim = runs.claim(run, record.epoch, &hold()).await.unwrap();
    let next = next_segment(&claim, ledger.as_ref()).await.unwrap();
    let harness = harness(ledger as _, capture, &[], payments);
    let shared: SharedRunStore = Arc::new(runs.clone());
    let mut journal = Journal::new(shared, run.clone(), claim.epoch);
    let options = ResumeOptions::default();
    let result = match next {
        NextSegment::Resume { state, decisions } => {
            let mut handle = harness.start_resume(*state, &decisions, options);
            drive_journaled(&mut handle, &mut journal, |_| {}).await
        }
        NextSegment::Recover { decisions } => {
            let mut handle = harness.start_recover(
                run,
                ResumeOptions {
                    decisions,
                    ..options
                },
            );
            drive_journaled(&mut handle, &mut journal, |_| {}).await
        }
        other => panic!("unexpected next segment {other:?}"),
    };
    let ending = match &result {
        Ok(done) => Ending::of(done),
        Err(error) => Ending::Failed {
            error: error.to_string(),
        },
    };
    runs.end(run, claim.epoch, &ending).await.unwrap();
}

pub(crate) fn hold() -> Hold {
    Hold::this_process(Some("console-test"), Duration::from_secs(60))
}

impl Fixture {
    /// Fresh stores and a console over them, operated by `alice`.
    pub(crate) async fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let runs = SqliteRunStore::open(dir.path().join("runs.db"))
            .await
            .unwrap();
        let ledger = Arc::new(
            SqliteLedger::open(dir.path().join("ledger.db"))
                .await
                .unwrap(),
        );
        let sessions = Arc::new(
            SqliteSessionStore::open(dir.path().join("sessions.db"))
                .await
                .unwrap(),
        );
        let payments: Payments = Arc::default();
        let uncaptured: Uncaptured = Arc::default();
        let host = Arc::new(TestHost {
            uncaptured: Arc::clone(&uncaptured),
            mode: Mutex::new(HostMode::Runs),
            asked: Mutex::default(),
            runs: runs.clone(),
            ledger: Arc::clone(&ledger),
            payments: Arc::clone(&payments),
        });
        let stores = ConsoleStores {
            runs: Arc::new(runs.clone()),
            ledger: Arc::clone(&ledger) as _,
            sessions,
        };
        let options = ConsoleOptions {
            operator: "alice".to_owned(),
            store_shown: dir.path().display().to_string(),
            ..ConsoleOptions::default()
        };
        let console = Console::with_host(stores, options, Arc::clone(&host) as _).unwrap();
        let (addr, stop) = serve(&console).await;
        Self {
            dir,
            runs,
            ledger,
            console,
            addr,
            host,
            payments,
            uncaptured,
            stop: Some(stop),
        }
    }

    /// A run that pays `calls` (each waiting for a person), suspended:
    /// recorded, journaled, ended, as a host would.
    pub(crate) async fn suspended_run(&self, capture: bool, calls: &[Value]) -> RunId {
        let harness = harness(
            Arc::clone(&self.ledger) as _,
            capture,
            calls,
            &self.payments,
        );
        let request = RunRequest::new("pay the invoices");
        let run = NewRun::new("payer", &request);
        let run_id = run.run_id.clone();
        if !capture {
            self.uncaptured.lock().push(run_id.clone());
        }
        let claim = self.runs.create(run, Some(&hold())).await.unwrap();
        let shared: SharedRunStore = Arc::new(self.runs.clone());
        let mut journal = Journal::new(shared, run_id.clone(), claim.epoch);
        let mut handle = harness.start(request.with_run_id(run_id.clone()));
        let done = drive_journaled(&mut handle, &mut journal, |e| panic!("{e}"))
            .await
            .unwrap();
        assert_eq!(done.status, RunStatus::AwaitingApproval);
        assert!(
            self.runs
                .end(&run_id, claim.epoch, &Ending::of(&done))
                .await
                .unwrap()
        );
        run_id
    }

    /// Waits until `run` is in `status` (10 s at most).
    pub(crate) async fn until(&self, run: &RunId, status: RecordStatus) {
        for _ in 0..400 {
            if self.runs.get(run).await.unwrap().unwrap().status == status {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("run {run} never became {status:?}");
    }

    /// The console's cookie (as a `Cookie` header value), from opening
    /// the URL with its token.
    pub(crate) async fn cookie(&self) -> String {
        let answer = crate::http::send(
            self.addr,
            "GET",
            &format!("/?token={}", self.console.token()),
            &[],
            "",
        )
        .await;
        assert_eq!(answer.status, 303);
        let set = answer.header("set-cookie").unwrap();
        set.split(';').next().unwrap().to_owned()
    }

    /// `Authorization: Bearer` with the token.
    pub(crate) fn bearer(&self) -> String {
        format!("Bearer {}", self.console.token())
    }

    /// GET `path` with the token.
    pub(crate) async fn get(&self, path: &str) -> crate::http::Answer {
        let bearer = self.bearer();
        crate::http::send(self.addr, "GET", path, &[("Authorization", &bearer)], "").await
    }

    /// The form token of the page at `path`.
    pub(crate) async fn form_token(&self, path: &str) -> String {
        let page = self.get(path).await;
        let at = page
            .body
            .find("name=\"form_token\" value=\"")
            .expect("a form");
        let rest = &page.body[at + "name=\"form_token\" value=\"".len()..];
        rest[..rest.find('"').unwrap()].to_owned()
    }
}

/// Serves `console` on a loopback port until the sender is used or dropped.
pub(crate) async fn serve(console: &Console) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let console = console.clone();
    tokio::spawn(async move {
        console
            .serve(listener, async move {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    });
    (addr, stop)
}

/// Arguments of a payment.
pub(crate) fn payment(to: &str, amount: u64) -> Value {
    json!({"to": to, "amount": amount})
}
