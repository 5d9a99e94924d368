//! Sessions grow by appending (issue 11, item 7): a delegated call appends
//! what it added to the child conversation instead of rewriting it, and the
//! conversation it leaves is the one a whole save left (AT-11, AT-13,
//! AT-16; other writers: `append_conflicts`).

use super::*;

/// What a session store was asked, in order: (session, operation).
#[derive(Default)]
pub(super) struct Counting {
    inner: InMemorySessionStore,
    log: Mutex<Vec<(String, String)>>,
}

impl Counting {
    fn record(&self, id: &SessionId, op: String) {
        self.log.lock().unwrap().push((id.to_string(), op));
    }

    /// The operations on `id`.
    pub(super) fn ops(&self, id: &SessionId) -> Vec<String> {
        let log = self.log.lock().unwrap();
        log.iter()
            .filter(|(s, _)| s == id.as_str())
            .map(|(_, op)| op.clone())
            .collect()
    }
}

#[async_trait]
impl SessionStore for Counting {
    async fn load(&self, id: &SessionId) -> Result<Option<SessionRecord>, SessionError> {
        self.record(id, "load".into());
        self.inner.load(id).await
    }

    async fn save(&self, record: &SessionRecord) -> Result<u64, SessionError> {
        self.record(&record.id, format!("save {}", record.messages.len()));
        self.inner.save(record).await
    }

    async fn append(
        &self,
        id: &SessionId,
        revision: u64,
        messages: &[Message],
    ) -> Result<SessionStamp, SessionError> {
        self.record(id, format!("append {}", messages.len()));
        self.inner.append(id, revision, messages).await
    }

    async fn stamp(&self, id: &SessionId) -> Result<Option<SessionStamp>, SessionError> {
        self.record(id, "stamp".into());
        self.inner.stamp(id).await
    }

    async fn children(&self, parent: &SessionId) -> Result<Vec<SessionRecord>, SessionError> {
        self.inner.children(parent).await
    }

    async fn delete(&self, id: &SessionId) -> Result<(), SessionError> {
        self.inner.delete(id).await
    }
}

/// The helper's answer: a probe call for a query that asks for the tool,
/// then (or else) text that counts the user messages it saw.
fn helper_answer(seen: &Seen) -> ChatResponse {
    match seen.last_tool() {
        Some(result) => ChatResponse {
            content: format!("found {result}"),
            reasoning: Some("private".into()),
            ..ChatResponse::default()
        },
        None if seen.last_user().contains("tool") => ChatResponse {
            reasoning: Some("a tool will do".into()),
            ..ScriptedModel::tool_call("probe", json!({"tag": seen.last_user()}))
        },
        None => ChatResponse::text(format!("helper #{}: {}", seen.users(), seen.last_user())),
    }
}

pub(super) fn helper_defs(helper: AgentDefinition) -> [AgentDefinition; 2] {
    [
        AgentDefinition::new("root", "Root")
            .instruction("You route.")
            .agent_tools(["helper"]),
        helper,
    ]
}

pub(super) async fn sqlite_store(dir: &tempfile::TempDir) -> Arc<dyn SessionStore> {
    Arc::new(
        SqliteSessionStore::open(dir.path().join("sessions.db"))
            .await
            .unwrap(),
    )
}

async fn root_with(
    store: &Arc<dyn SessionStore>,
    helper_def: AgentDefinition,
    helper: Arc<TestModel>,
) -> ActiveAgent {
    let models = by_agent(&[("root", delegating("Helper", None)), ("helper", helper)]);
    let orchestrator = AgentOrchestrator::new(Arc::clone(store));
    orchestrator
        .get_or_create_agent(
            request("root", &helper_defs(helper_def), &models)
                .tools(HostTools::new().with_shared(ok_tool("probe") as Arc<dyn Tool>)),
        )
        .await
        .unwrap()
}

fn without_instructions(messages: &[Message]) -> Vec<Message> {
    messages
        .iter()
        .filter(|m| !matches!(m, Message::System { .. }))
        .cloned()
        .collect()
}

/// N delegated calls (plain and with a tool turn): after each, the child
/// model saw exactly the stored conversation before the query, and the
/// store holds what a whole save held: the run's transcript without its
/// standing instruction. The parent session likewise.
async fn conversation_is_the_whole_save(store: Arc<dyn SessionStore>) {
    let helper = TestModel::new(|seen| Step::Reply(helper_answer(seen)));
    let helper_def = exposed("helper", "Helper")
        .instruction("You help.")
        .tools(["probe"]);
    let root = root_with(&store, helper_def, Arc::clone(&helper)).await;
    let scope = SessionScope::new("s");
    let child = child_session_id(&"s".into(), &"helper".into(), "");
    let mut stored: Vec<Message> = Vec::new();
    let queries = [
        "one",
        "use the tool",
        "three",
        "the tool again",
        "five",
        "six",
    ];
    for (k, query) in queries.into_iter().enumerate() {
        let run = root
            .run_in_session(&scope, RunRequest::new(query), &EventSink::none())
            .await
            .unwrap();
        let seen = helper.seen().pop().unwrap();
        let view = seen.conversation();
        assert_eq!(view[..stored.len()], stored[..], "call {k} saw the session");
        assert_eq!(view[stored.len()], Message::user(query));
        let answer = helper_answer(&seen);
        let mut whole = view;
        whole.push(Message::Assistant {
            content: answer.content,
            tool_calls: Vec::new(),
            reasoning: answer.reasoning,
        });
        let record = store.load(&child).await.unwrap().unwrap();
        assert_eq!(record.messages, whole, "call {k}");
        assert_eq!(record.revision, k as u64 + 1);
        let parent = store.load(&"s".into()).await.unwrap().unwrap();
        assert_eq!(parent.messages, without_instructions(&run.messages));
        stored = whole;
    }
    // One user and one assistant line per call, tool turns hidden.
    let turns = root
        .child_transcript(&scope, &"helper".into(), None)
        .await
        .unwrap();
    assert_eq!(turns.len(), 2 * queries.len());
    assert_eq!(turns[3].text, "found probe ok");
    assert_eq!(turns[11].text, "helper #6: six");
}

/// AT-13: the conversation after N delegated calls is the one whole saves left, in memory.
#[tokio::test]
async fn at_13_appended_conversation_equals_the_whole_save_in_memory() {
    conversation_is_the_whole_save(Arc::new(InMemorySessionStore::new())).await;
}

/// AT-13: the conversation after N delegated calls is the one whole saves left, in SQLite.
#[tokio::test]
async fn at_13_appended_conversation_equals_the_whole_save_in_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    conversation_is_the_whole_save(sqlite_store(&dir).await).await;
}

/// AT-13: a call writes only what it added: the first call saves the child
/// session whole, later calls append their query and answer, and a call
/// after the first append reads nothing but the stamp.
#[tokio::test]
async fn at_13_delegated_calls_append_only_their_new_messages() {
    let counting = Arc::new(Counting::default());
    let store = Arc::clone(&counting) as Arc<dyn SessionStore>;
    let root = root_with(
        &store,
        exposed("helper", "Helper").instruction("You help."),
        counting_model(),
    )
    .await;
    let scope = SessionScope::new("s");
    for query in ["a", "b", "c", "d", "e"] {
        root.run_in_session(&scope, RunRequest::new(query), &EventSink::none())
            .await
            .unwrap();
    }
    let child = child_session_id(&"s".into(), &"helper".into(), "");
    assert_eq!(
        counting.ops(&child),
        [
            "load", "save 2", "load", "append 2", "stamp", "append 2", "stamp", "append 2",
            "stamp", "append 2"
        ]
    );
    // The parent appends its query, the call, the result and the answer.
    let parent = counting.ops(&"s".into());
    assert_eq!(parent[..2], ["load", "save 4"]);
    assert_eq!(parent[2..], ["load", "append 4"].repeat(4)[..]);
    let record = store.load(&child).await.unwrap().unwrap();
    assert_eq!(record.revision, 5);
    assert_eq!(record.messages[9], Message::assistant("helper #5: e"));
}

fn counting_model() -> Arc<TestModel> {
    counting("helper")
}

/// AT-16: a compacting child still compacts: once the reducer cuts, the conversation is rewritten to the reduced one.
#[tokio::test]
async fn at_16_a_compacting_child_still_compacts_when_calls_append() {
    let dir = tempfile::tempdir().unwrap();
    let counting = Arc::new(Counting::default());
    for store in [
        Arc::clone(&counting) as Arc<dyn SessionStore>,
        sqlite_store(&dir).await,
    ] {
        let helper_def =
            exposed("helper", "Helper").compaction(Compaction::KeepLastMessages { count: 4 });
        let helper = counting_model();
        let root = root_with(&store, helper_def, Arc::clone(&helper)).await;
        let scope = SessionScope::new("s");
        for query in ["one", "two", "three", "four"] {
            root.run_in_session(&scope, RunRequest::new(query), &EventSink::none())
                .await
                .unwrap();
        }
        let child = child_session_id(&"s".into(), &"helper".into(), "");
        let stored = store.load(&child).await.unwrap().unwrap();
        assert_eq!(
            stored.messages,
            [
                Message::user("three"),
                Message::assistant("helper #3: three"),
                Message::user("four"),
                Message::assistant("helper #3: four")
            ]
        );
        assert_eq!(stored.revision, 4);
        assert_eq!(helper.seen()[3].conversation().len(), 5);
    }
    // Appended while the reducer keeps everything, rewritten once it cuts
    // (the last load is the test's own).
    let child = child_session_id(&"s".into(), &"helper".into(), "");
    assert_eq!(
        counting.ops(&child),
        [
            "load", "save 2", "load", "append 2", "stamp", "save 4", "load", "save 4", "load"
        ]
    );
}

/// AT-11, AT-13: a session store written by the previous schema version (a file of version 1, made by that version) migrates in place, keeps its sessions and continues them.
///
/// The fixture was written by `3ad57ee` (schema version 1): a root agent
/// delegating to `helper` (instruction "You help.", answering `helper #<user
/// messages seen>: <query>`), run twice in the session `chat` with "first"
/// and "second".
#[tokio::test]
async fn at_11_a_version_1_session_file_migrates_and_keeps_its_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/agent_as_tool/fixtures/sessions-v1.sqlite3"
    );
    std::fs::copy(fixture, &path).unwrap();
    let user_version = |path: &std::path::Path| {
        let bytes = std::fs::read(path).unwrap();
        u32::from_be_bytes(bytes[60..64].try_into().unwrap())
    };
    assert_eq!(user_version(&path), 1);

    let store: Arc<dyn SessionStore> = Arc::new(SqliteSessionStore::open(&path).await.unwrap());
    let child = child_session_id(&"chat".into(), &"helper".into(), "");
    let record = store.load(&child).await.unwrap().unwrap();
    assert_eq!(record.revision, 2);
    assert_eq!(record.parent, Some(SessionId::from("chat")));
    assert_eq!(
        record.messages,
        [
            Message::user("first"),
            Message::assistant("helper #1: first"),
            Message::user("second"),
            Message::assistant("helper #2: second")
        ]
    );
    let parent = store.load(&"chat".into()).await.unwrap().unwrap();
    assert_eq!((parent.revision, parent.messages.len()), (2, 8));
    assert_eq!(store.children(&"chat".into()).await.unwrap(), [record]);

    let root = root_with(
        &store,
        exposed("helper", "Helper").instruction("You help."),
        counting_model(),
    )
    .await;
    let run = root
        .run_in_session(
            &SessionScope::new("chat"),
            RunRequest::new("third"),
            &EventSink::none(),
        )
        .await
        .unwrap();
    assert_eq!(run.final_text, "helper #3: third");
    let record = store.load(&child).await.unwrap().unwrap();
    assert_eq!((record.revision, record.messages.len()), (3, 6));
    drop(root);
    drop(store);
    assert_eq!(user_version(&path), SESSION_SCHEMA_VERSION as u32);
    let store = SqliteSessionStore::open(&path).await.unwrap();
    assert_eq!(
        store.load(&"chat".into()).await.unwrap().unwrap().revision,
        3
    );
}
