//! Issue 30, the approval inbox: waiting calls across runs, decided one or
//! several at a time with a reason, recorded with who; the run resumed by
//! the host; payloads only as the run captured them; the host's errors
//! and panics said.

use std::time::Duration;

use tinyagents::console::{Console, ConsoleOptions, ConsoleStores};
use tinyagents::runs::{RecordStatus, RunStore as _, SqliteRunStore};

use crate::fixture::{Fixture, HostMode, payment, serve};
use crate::http::{form, send};

/// The inbox's section of run `run`.
fn section_of<'b>(body: &'b str, run: &str) -> &'b str {
    let start = body
        .find(&format!(
            "<section class=\"waiting-run\" data-run=\"{run}\""
        ))
        .expect("the run's section");
    let end = body[start..].find("</section>").unwrap();
    &body[start..start + end]
}

async fn decide(fx: &Fixture, fields: &[(&str, &str)]) -> crate::http::Answer {
    let bearer = fx.bearer();
    send(
        fx.addr,
        "POST",
        "/decide",
        &[("Authorization", &bearer)],
        &form(fields),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_decided_in_two_steps_with_reasons_are_recorded_with_who_and_the_host_resumes_the_run()
 {
    let fx = Fixture::new().await;
    let run = fx
        .suspended_run(true, &[payment("acme", 5), payment("mallory", 900)])
        .await;
    let other = fx.suspended_run(true, &[payment("globex", 7)]).await;
    let inbox = fx.get("/inbox").await;
    assert_eq!(inbox.status, 200);
    for id in [run.as_str(), other.as_str()] {
        assert!(
            inbox.body.contains(&format!("data-run=\"{id}\"")),
            "both runs wait"
        );
    }
    assert!(
        inbox.body.contains("asked by"),
        "the reason names what asked"
    );
    assert!(
        inbox.body.contains("mallory") && inbox.body.contains("900"),
        "captured arguments shown"
    );
    assert!(
        inbox
            .body
            .contains("Approvals <span class=\"count\">3</span>"),
        "{}",
        inbox.body
    );

    // p1 approved now, p2 left for later: nothing resumes yet.
    let first = decide(
        &fx,
        &[
            ("run", run.as_str()),
            ("call:p1", "approve"),
            ("call:p2", "later"),
            ("reason", "known payee"),
        ],
    )
    .await;
    assert_eq!(first.status, 303, "{}", first.body);
    assert!(fx.host.asked.lock().is_empty(), "a call still waits");
    let inbox = fx.get("/inbox").await;
    let section = section_of(&inbox.body, run.as_str());
    assert!(
        !section.contains("data-call=\"p1\"") && section.contains("data-call=\"p2\""),
        "only p2 still waits: {section}"
    );
    // A call is decided once.
    let again = decide(&fx, &[("run", run.as_str()), ("call:p1", "deny")]).await;
    assert_eq!(again.status, 409, "{}", again.body);
    let nothing = decide(&fx, &[("run", run.as_str()), ("call:p2", "later")]).await;
    assert_eq!(nothing.status, 400);

    let second = decide(
        &fx,
        &[
            ("run", run.as_str()),
            ("call:p2", "deny"),
            ("reason", "not a supplier"),
        ],
    )
    .await;
    assert_eq!(second.status, 303);
    assert_eq!(
        fx.host.asked.lock().as_slice(),
        [("resume".to_owned(), run.clone())]
    );
    fx.until(&run, RecordStatus::Completed).await;
    assert_eq!(
        fx.payments.lock().as_slice(),
        ["acme 5"],
        "only the approved call paid"
    );

    let calls = fx.runs.approvals(&run).await.unwrap();
    let decisions: Vec<_> = calls
        .iter()
        .map(|c| {
            let d = c.decision.as_ref().unwrap();
            (
                c.call_id.as_str().to_owned(),
                d.approved,
                d.by.clone(),
                d.reason.clone(),
            )
        })
        .collect();
    assert_eq!(
        decisions,
        [
            (
                "p1".to_owned(),
                true,
                "alice".to_owned(),
                Some("known payee".to_owned())
            ),
            (
                "p2".to_owned(),
                false,
                "alice".to_owned(),
                Some("not a supplier".to_owned())
            ),
        ]
    );
    let page = fx.get(&format!("/runs/{run}")).await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains(r#"data-call="p1" data-state="done""#),
        "{}",
        page.body
    );
    assert!(page.body.contains(r#"data-call="p2" data-state="failed""#));
    assert!(
        page.body.contains("not a supplier"),
        "the denial's reason in the tree"
    );
    assert!(
        page.body.contains("segment 2"),
        "the resumed segment in the same tree"
    );
    assert!(page.body.contains("resuming"), "what the host said");
    assert!(
        page.body
            .contains("<td class=\"denied\">denied</td><td>alice</td>")
    );
    let inbox = fx.get("/inbox").await;
    assert!(inbox.body.contains("Decided lately") && inbox.body.contains("known payee"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_capture_off_no_argument_value_is_rendered_anywhere() {
    let fx = Fixture::new().await;
    let secret = "acct-SECRET-991";
    let run = fx.suspended_run(false, &[payment(secret, 4)]).await;
    let shown = fx.suspended_run(true, &[payment("visible-payee", 4)]).await;
    let inbox = fx.get("/inbox").await;
    assert!(!inbox.body.contains(secret), "{}", inbox.body);
    assert!(inbox.body.contains("Arguments withheld"));
    assert!(
        inbox.body.contains("visible-payee"),
        "the capturing run's are shown"
    );
    decide(&fx, &[("run", run.as_str()), ("call:p1", "approve")]).await;
    fx.until(&run, RecordStatus::Completed).await;
    for path in [
        format!("/runs/{run}"),
        format!("/runs/{run}/tree"),
        "/".to_owned(),
        "/inbox".to_owned(),
    ] {
        let page = fx.get(&path).await;
        assert_eq!(page.status, 200, "{path}");
        assert!(!page.body.contains(secret), "{path} shows a withheld value");
    }
    let page = fx.get(&format!("/runs/{shown}")).await;
    assert!(page.body.contains("visible-payee"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_hook_that_errs_or_panics_is_said_and_the_console_goes_on() {
    let fx = Fixture::new().await;
    let run = fx.suspended_run(true, &[payment("acme", 5)]).await;
    *fx.host.mode.lock() = HostMode::Errs;
    let decided = decide(&fx, &[("run", run.as_str()), ("call:p1", "approve")]).await;
    assert_eq!(decided.status, 303);
    let page = fx.get(&format!("/runs/{run}")).await;
    assert!(
        page.body
            .contains("the host could not resume the run: no worker can build agent"),
        "{}",
        page.body
    );
    assert!(page.body.contains("decided, to resume") && page.body.contains("id=\"resume\""));
    let record = fx.runs.get(&run).await.unwrap().unwrap();
    assert_eq!(
        record.status,
        RecordStatus::Queued,
        "the decisions stand; nothing ran"
    );

    *fx.host.mode.lock() = HostMode::Panics;
    let bearer = fx.bearer();
    let resumed = send(
        fx.addr,
        "POST",
        &format!("/runs/{run}/resume"),
        &[("Authorization", &bearer)],
        "",
    )
    .await;
    assert_eq!(resumed.status, 303);
    let page = fx.get(&format!("/runs/{run}")).await;
    assert!(
        page.body.contains("the host&#39;s resume hook panicked"),
        "{}",
        page.body
    );
    assert!(fx.payments.lock().is_empty());

    *fx.host.mode.lock() = HostMode::Runs;
    let resumed = send(
        fx.addr,
        "POST",
        &format!("/runs/{run}/resume"),
        &[("Authorization", &bearer)],
        "",
    )
    .await;
    assert_eq!(resumed.status, 303);
    fx.until(&run, RecordStatus::Completed).await;
    assert_eq!(fx.payments.lock().as_slice(), ["acme 5"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_console_on_the_same_store_sees_the_same_state_and_without_a_host_leaves_runs_to_workers()
 {
    let fx = Fixture::new().await;
    let run = fx.suspended_run(true, &[payment("acme", 5)]).await;
    // Another process: its own handles on the same files, no host.
    let runs = SqliteRunStore::open(fx.dir.path().join("runs.db"))
        .await
        .unwrap();
    let ledger = std::sync::Arc::new(
        tinyagents::ledger::SqliteLedger::open(fx.dir.path().join("ledger.db"))
            .await
            .unwrap(),
    );
    let sessions = std::sync::Arc::new(
        tinyagents::orchestrator::SqliteSessionStore::open(fx.dir.path().join("sessions.db"))
            .await
            .unwrap(),
    );
    let stores = ConsoleStores {
        runs: std::sync::Arc::new(runs),
        ledger,
        sessions,
    };
    let options = ConsoleOptions {
        operator: "bob".into(),
        ..ConsoleOptions::default()
    };
    let second = Console::new(stores, options).unwrap();
    let (addr, _stop) = serve(&second).await;
    let bearer = format!("Bearer {}", second.token());
    let inbox = send(addr, "GET", "/inbox", &[("Authorization", &bearer)], "").await;
    assert!(inbox.body.contains(&format!("data-run=\"{run}\"")));
    let decided = send(
        addr,
        "POST",
        "/decide",
        &[("Authorization", &bearer)],
        &form(&[("run", run.as_str()), ("call:p1", "approve")]),
    )
    .await;
    assert_eq!(decided.status, 303);
    // The first console sees bob's decision; nothing resumed it.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let page = fx.get(&format!("/runs/{run}")).await;
    assert!(page.body.contains("<td>bob</td>"), "{}", page.body);
    assert!(page.body.contains("decided, to resume"));
    let inbox = fx.get("/inbox").await;
    assert!(inbox.body.contains("No call waits for a decision"));
    assert!(fx.host.asked.lock().is_empty());
    let page = send(
        addr,
        "GET",
        &format!("/runs/{run}"),
        &[("Authorization", &bearer)],
        "",
    )
    .await;
    assert!(
        page.body.contains("queued for a worker to resume"),
        "{}",
        page.body
    );
    assert!(
        !page.body.contains("id=\"resume\""),
        "no host: no resume button"
    );
    assert_eq!(
        fx.runs.get(&run).await.unwrap().unwrap().status,
        RecordStatus::Queued
    );
}
