//! Appends and other writers (AT-14): an append based on a stale revision
//! is refused with Conflict and loses nothing, and a conversation the
//! session manager kept is never used once someone else wrote the session.

use std::sync::atomic::{AtomicBool, Ordering};

use super::appends::{helper_defs, sqlite_store};
use super::*;

/// A helper model that, once armed, changes its own session in the store
/// while its call runs (another writer), then answers like `counting`.
struct Interloper {
    store: Arc<dyn SessionStore>,
    session: SessionId,
    armed: AtomicBool,
}

#[async_trait]
impl ChatModel for Interloper {
    fn name(&self) -> &str {
        "interloper"
    }

    async fn chat(&self, request: ChatRequest<'_>) -> Result<ChatResponse, ModelError> {
        if self.armed.swap(false, Ordering::SeqCst) {
            let mut record = self.store.load(&self.session).await.unwrap().unwrap();
            record.messages.push(Message::user("written elsewhere"));
            record.messages.push(Message::assistant("noted"));
            self.store.save(&record).await.unwrap();
        }
        let seen = Seen {
            messages: request.messages.to_vec(),
            tools: Vec::new(),
            options: request.options.clone(),
        };
        Ok(ChatResponse::text(format!(
            "helper #{}: {}",
            seen.users(),
            seen.last_user()
        )))
    }
}

/// Another writer during a call, and a deletion and re-making of the
/// session between calls: the call's append is refused (Conflict) and
/// loses nothing, and the next call continues what the store holds, never
/// a conversation kept from before.
async fn other_writers_win(store: Arc<dyn SessionStore>) {
    let session = child_session_id(&"s".into(), &"helper".into(), "");
    let interloper = Arc::new(Interloper {
        store: Arc::clone(&store),
        session: session.clone(),
        armed: AtomicBool::new(false),
    });
    let models: Arc<dyn ModelFactory> = {
        let root = delegating("Helper", None);
        let helper = Arc::clone(&interloper);
        Arc::new(
            move |d: &AgentDefinition| -> Result<Arc<dyn ChatModel>, BuildError> {
                Ok(match d.id.as_str() {
                    "root" => Arc::clone(&root) as Arc<dyn ChatModel>,
                    _ => Arc::clone(&helper) as Arc<dyn ChatModel>,
                })
            },
        )
    };
    let orchestrator = AgentOrchestrator::new(Arc::clone(&store)).include_detailed_errors(true);
    let defs = helper_defs(exposed("helper", "Helper"));
    let root = build(&orchestrator, "root", &defs, &models).await;
    let scope = SessionScope::new("s");
    let ask = |query: &'static str| {
        let root = root.clone();
        let scope = scope.clone();
        async move {
            root.run_in_session(&scope, RunRequest::new(query), &EventSink::none())
                .await
                .unwrap()
        }
    };
    assert_eq!(ask("one").await.final_text, "helper #1: one");
    assert_eq!(ask("two").await.final_text, "helper #2: two");

    interloper.armed.store(true, Ordering::SeqCst);
    let refused = ask("three").await;
    let (_, text, is_error) = tinyagents_tests::tool_results(&refused.messages)
        .pop()
        .unwrap();
    assert!(is_error, "{text}");
    assert!(text.contains("was changed by someone else"), "{text}");
    let record = store.load(&session).await.unwrap().unwrap();
    assert_eq!(record.revision, 3, "the other writer's save stands");
    assert_eq!(record.messages.len(), 6);
    assert_eq!(record.messages[4], Message::user("written elsewhere"));

    assert_eq!(ask("four").await.final_text, "helper #4: four");
    let record = store.load(&session).await.unwrap().unwrap();
    assert_eq!((record.revision, record.messages.len()), (4, 8));

    // Deleted and made again up to the same revision, with other messages.
    store.delete(&session).await.unwrap();
    let mut remade = SessionRecord {
        parent: Some("s".into()),
        agent_id: Some("helper".into()),
        messages: vec![Message::user("reset"), Message::assistant("ok")],
        ..SessionRecord::new(session.clone())
    };
    for revision in 0..4 {
        remade.revision = revision;
        store.save(&remade).await.unwrap();
    }
    assert_eq!(ask("five").await.final_text, "helper #2: five");
    let record = store.load(&session).await.unwrap().unwrap();
    assert_eq!(
        record.messages,
        [
            Message::user("reset"),
            Message::assistant("ok"),
            Message::user("five"),
            Message::assistant("helper #2: five")
        ]
    );
}

/// AT-14: a stale append is refused with Conflict and loses nothing; other writers' changes are continued, in memory.
#[tokio::test]
async fn at_14_stale_appends_are_refused_and_other_writers_win_in_memory() {
    other_writers_win(Arc::new(InMemorySessionStore::new())).await;
}

/// AT-14: a stale append is refused with Conflict and loses nothing; other writers' changes are continued, in SQLite.
#[tokio::test]
async fn at_14_stale_appends_are_refused_and_other_writers_win_in_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    other_writers_win(sqlite_store(&dir).await).await;
}

/// AT-14: `SessionStore::append` based on a stale revision is refused with Conflict and writes nothing.
#[tokio::test]
async fn at_14_store_append_on_a_stale_revision_is_a_conflict() {
    let dir = tempfile::tempdir().unwrap();
    for store in [
        Arc::new(InMemorySessionStore::new()) as Arc<dyn SessionStore>,
        sqlite_store(&dir).await,
    ] {
        let record = SessionRecord {
            messages: vec![Message::user("q")],
            ..SessionRecord::new("p".into())
        };
        store.save(&record).await.unwrap();
        let first = store
            .append(&"p".into(), 1, &[Message::assistant("a")])
            .await
            .unwrap();
        assert_eq!(first.revision, 2);
        let stale = store
            .append(&"p".into(), 1, &[Message::assistant("lost?")])
            .await
            .unwrap_err();
        assert_eq!(
            stale,
            SessionError::Conflict {
                id: "p".into(),
                expected: 1,
                found: 2
            }
        );
        let stored = store.load(&"p".into()).await.unwrap().unwrap();
        assert_eq!(
            stored.messages,
            [Message::user("q"), Message::assistant("a")]
        );
        assert_eq!(store.stamp(&"p".into()).await.unwrap(), Some(first));
    }
}
