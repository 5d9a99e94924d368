//! Issue 30, calls in doubt: listed with their idempotency key, a person's
//! finding recorded from the page with who, the run's recovery asked of
//! the host; a call in flight of a running run is not in doubt.

use tinyagents::ledger::{EffectLedger as _, ResolvedBy, StartedRow};
use tinyagents::prelude::*;
use tinyagents::runs::{Ending, NewRun, RunStore as _};

use crate::fixture::{Fixture, HostMode, hold};
use crate::http::{form, send};

/// A run whose call `p1` (`pay`) started and never settled; the run
/// failed (its process died) when `failed`, else it still runs.
async fn run_with_open_call(fx: &Fixture, failed: bool) -> RunId {
    let request = RunRequest::new("pay acme");
    let run = NewRun::new("payer", &request);
    let id = run.run_id.clone();
    fx.runs.create(run, Some(&hold())).await.unwrap();
    fx.ledger.begin_run(&id).await.unwrap();
    let started = StartedRow::new(
        id.clone(),
        CallId::new("p1"),
        "pay",
        "0".repeat(64),
        ToolReplay::Never,
    );
    fx.ledger.record_started(started).await.unwrap();
    if failed {
        let ending = Ending::Failed {
            error: "the process died".to_owned(),
        };
        assert!(fx.runs.end(&id, 1, &ending).await.unwrap());
    }
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_in_doubt_is_listed_with_its_key_and_a_persons_finding_is_recorded_with_who() {
    let fx = Fixture::new().await;
    let run = run_with_open_call(&fx, true).await;
    let flying = run_with_open_call(&fx, false).await;
    let key = fx
        .ledger
        .in_doubt()
        .await
        .unwrap()
        .into_iter()
        .find(|d| d.row.run_id == run)
        .unwrap()
        .idempotency_key
        .to_string();
    let page = fx.get("/doubt").await;
    assert_eq!(page.status, 200);
    assert!(
        page.body
            .contains(&format!("data-run=\"{run}\" data-call=\"p1\"")),
        "{}",
        page.body
    );
    assert!(page.body.contains(&key), "its idempotency key");
    assert!(
        !page.body.contains(&format!("data-run=\"{flying}\"")),
        "a call in flight is not in doubt"
    );
    assert!(
        page.body
            .contains("In doubt <span class=\"count\">1</span>")
    );
    let listed = fx.get("/?status=in-doubt").await;
    assert!(
        listed.body.contains(&format!("data-run=\"{run}\""))
            && !listed.body.contains(&format!("data-run=\"{flying}\""))
    );
    let tree = fx.get(&format!("/runs/{run}")).await;
    assert!(
        tree.body
            .contains(r#"data-call="p1" data-state="in-doubt""#),
        "{}",
        tree.body
    );
    assert!(tree.body.contains("id=\"recover\""));
    let running = fx.get(&format!("/runs/{flying}")).await;
    assert!(
        running
            .body
            .contains(r#"data-call="p1" data-state="running""#),
        "{}",
        running.body
    );

    // Ask the tool again: the host is asked to recover the run.
    *fx.host.mode.lock() = HostMode::Errs;
    let bearer = fx.bearer();
    let asked = send(
        fx.addr,
        "POST",
        &format!("/runs/{run}/recover"),
        &[("Authorization", &bearer)],
        "",
    )
    .await;
    assert_eq!(asked.status, 303);
    assert_eq!(
        fx.host.asked.lock().as_slice(),
        [("recover".to_owned(), run.clone())]
    );

    let resolve = |fields: Vec<(&'static str, String)>| {
        let body = form(
            &fields
                .iter()
                .map(|(k, v)| (*k, v.as_str()))
                .collect::<Vec<_>>(),
        );
        let bearer = bearer.clone();
        let addr = fx.addr;
        async move {
            send(
                addr,
                "POST",
                "/resolve",
                &[("Authorization", &bearer)],
                &body,
            )
            .await
        }
    };
    let vague = resolve(vec![("run", run.to_string()), ("call", "p1".into())]).await;
    assert_eq!(vague.status, 400, "{}", vague.body);
    let found = resolve(vec![
        ("run", run.to_string()),
        ("call", "p1".into()),
        ("effect", "happened".into()),
        ("result", "paid acme 5".into()),
        ("note", "seen in the bank's statement".into()),
    ])
    .await;
    assert_eq!(found.status, 303, "{}", found.body);
    let row = fx
        .ledger
        .get(&run, &CallId::new("p1"))
        .await
        .unwrap()
        .unwrap();
    let resolution = row.resolution.unwrap();
    assert_eq!(resolution.by, ResolvedBy::Person("alice".into()));
    assert_eq!(
        resolution.note.as_deref(),
        Some("seen in the bank's statement")
    );
    assert_eq!(row.result.unwrap().content, "paid acme 5");
    let page = fx.get("/doubt").await;
    assert!(page.body.contains("No call is in doubt"), "{}", page.body);
    let tree = fx.get(&format!("/runs/{run}")).await;
    assert!(tree.body.contains("found by alice"), "{}", tree.body);
    let twice = resolve(vec![
        ("run", run.to_string()),
        ("call", "p1".into()),
        ("effect", "not_happened".into()),
    ])
    .await;
    assert_eq!(
        twice.status, 409,
        "a settled call is not in doubt: {}",
        twice.body
    );
}
