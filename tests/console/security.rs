//! Issue 30, safety: the token on every request, the console's own `Host`
//! and `Origin`, forms protected against other sites, hardened answers.

use tinyagents::runs::{RecordStatus, RunStore as _};

use crate::fixture::{Fixture, payment};
use crate::http::{form, send};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_and_action_without_the_token_is_refused() {
    let fx = Fixture::new().await;
    for path in [
        "/",
        "/inbox",
        "/doubt",
        "/sessions",
        "/runs/x",
        "/runs/x/live",
        "/assets/console.js",
    ] {
        let answer = send(fx.addr, "GET", path, &[], "").await;
        assert_eq!(answer.status, 401, "{path}: {}", answer.body);
        assert!(
            answer.body.contains("This console needs its token"),
            "{path}"
        );
    }
    let wrong = "Bearer 0000000000000000000000000000000000000000000000000000000000000000";
    let answer = send(fx.addr, "GET", "/", &[("Authorization", wrong)], "").await;
    assert_eq!(answer.status, 401);
    let answer = send(fx.addr, "GET", "/?token=nope", &[], "").await;
    assert_eq!(
        answer.status, 401,
        "a wrong token in the address sets no cookie"
    );
    assert!(answer.header("set-cookie").is_none());
    let run = fx.suspended_run(true, &[payment("acme", 5)]).await;
    let body = form(&[("run", run.as_str()), ("call:p1", "approve")]);
    let answer = send(fx.addr, "POST", "/decide", &[], &body).await;
    assert_eq!(answer.status, 401);
    let record = fx.runs.get(&run).await.unwrap().unwrap();
    assert_eq!(
        record.status,
        RecordStatus::AwaitingApproval,
        "nothing decided"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_address_token_becomes_a_strict_cookie_and_leaves_the_address() {
    let fx = Fixture::new().await;
    let answer = send(
        fx.addr,
        "GET",
        &format!("/inbox?token={}&x=1", fx.console.token()),
        &[],
        "",
    )
    .await;
    assert_eq!(answer.status, 303);
    assert_eq!(answer.header("location"), Some("/inbox?x=1"));
    let cookie = answer.header("set-cookie").unwrap();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let cookie = fx.cookie().await;
    let page = send(fx.addr, "GET", "/inbox", &[("Cookie", &cookie)], "").await;
    assert_eq!(page.status, 200, "{}", page.body);
    for (header, value) in [
        ("x-frame-options", "DENY"),
        ("x-content-type-options", "nosniff"),
        ("cache-control", "no-store"),
        ("referrer-policy", "same-origin"),
    ] {
        assert_eq!(page.header(header), Some(value), "{header}");
    }
    let policy = page.header("content-security-policy").unwrap();
    assert!(policy.contains("script-src 'self'") && policy.contains("frame-ancestors 'none'"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_host_or_origin_is_refused_even_with_the_token() {
    let fx = Fixture::new().await;
    let bearer = fx.bearer();
    // DNS rebinding: another name that resolves to this address.
    let rebound = send(
        fx.addr,
        "GET",
        "/",
        &[("Host", "evil.example:80"), ("Authorization", &bearer)],
        "",
    )
    .await;
    assert_eq!(rebound.status, 421, "{}", rebound.body);
    let port = fx.addr.port().to_string();
    let local = send(
        fx.addr,
        "GET",
        "/",
        &[
            ("Host", &format!("localhost:{port}")),
            ("Authorization", &bearer),
        ],
        "",
    )
    .await;
    assert_eq!(local.status, 200, "localhost names the loopback console");
    let foreign = send(
        fx.addr,
        "GET",
        "/",
        &[
            ("Origin", "http://evil.example"),
            ("Authorization", &bearer),
        ],
        "",
    )
    .await;
    assert_eq!(foreign.status, 403);
    assert!(
        foreign.body.contains("http://evil.example"),
        "{}",
        foreign.body
    );
    let own = send(
        fx.addr,
        "GET",
        "/",
        &[
            ("Origin", &format!("http://{}", fx.addr)),
            ("Authorization", &bearer),
        ],
        "",
    )
    .await;
    assert_eq!(own.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_form_needs_its_origin_and_the_pages_form_token() {
    let fx = Fixture::new().await;
    let run = fx.suspended_run(true, &[payment("acme", 5)]).await;
    let cookie = fx.cookie().await;
    let origin = format!("http://{}", fx.addr);
    let token = fx.form_token("/inbox").await;
    let body = |with_token: bool| {
        let mut fields = vec![("run", run.as_str()), ("call:p1", "approve")];
        if with_token {
            fields.push(("form_token", token.as_str()));
        }
        form(&fields)
    };
    // The cookie alone (a cross-site form the browser attached it to).
    let no_origin = send(
        fx.addr,
        "POST",
        "/decide",
        &[("Cookie", &cookie)],
        &body(true),
    )
    .await;
    assert_eq!(no_origin.status, 403, "{}", no_origin.body);
    let foreign = send(
        fx.addr,
        "POST",
        "/decide",
        &[("Cookie", &cookie), ("Origin", "http://evil.example")],
        &body(true),
    )
    .await;
    assert_eq!(foreign.status, 403);
    let no_token = send(
        fx.addr,
        "POST",
        "/decide",
        &[("Cookie", &cookie), ("Origin", &origin)],
        &body(false),
    )
    .await;
    assert_eq!(no_token.status, 403);
    assert!(no_token.body.contains("form token"), "{}", no_token.body);
    let record = fx.runs.get(&run).await.unwrap().unwrap();
    assert_eq!(
        record.status,
        RecordStatus::AwaitingApproval,
        "nothing decided yet"
    );
    let sent = send(
        fx.addr,
        "POST",
        "/decide",
        &[("Cookie", &cookie), ("Origin", &origin)],
        &body(true),
    )
    .await;
    assert_eq!(sent.status, 303, "{}", sent.body);
    let calls = fx.runs.approvals(&run).await.unwrap();
    assert_eq!(calls[0].decision.as_ref().unwrap().by, "alice");
}

/// A run record edited outside the store (its request rewritten in the
/// SQLite file): its page says the store refused it, naming the part,
/// and shows nothing of it; another run's page stays readable; the
/// listing refuses rather than show the edited record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_record_is_refused_by_name_and_nothing_of_it_is_shown() {
    let fx = Fixture::new().await;
    let edited = fx.suspended_run(true, &[payment("acme", 5)]).await;
    let other = fx.suspended_run(true, &[payment("globex", 7)]).await;
    let conn = rusqlite::Connection::open(fx.dir.path().join("runs.db")).unwrap();
    let changed = conn
        .execute(
            "UPDATE runs SET request = ?2 WHERE run_id = ?1",
            (edited.as_str(), r#"{"input":"wire the money to mallory"}"#),
        )
        .unwrap();
    assert_eq!(changed, 1);
    let page = fx.get(&format!("/runs/{edited}")).await;
    assert_eq!(page.status, 500, "{}", page.body);
    assert!(
        page.body.contains("record") && page.body.contains("edited"),
        "{}",
        page.body
    );
    assert!(
        !page.body.contains("mallory"),
        "nothing of the edit is shown"
    );
    let fine = fx.get(&format!("/runs/{other}")).await;
    assert_eq!(fine.status, 200, "{}", fine.body);
    let listed = fx.get("/").await;
    assert_eq!(listed.status, 500, "{}", listed.body);
    assert!(!listed.body.contains("mallory"));
}
