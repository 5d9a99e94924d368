//! Kept conversations continued in place (issue 11, item 7): the session
//! manager keeps a child's conversation as its run's transcript, standing
//! instruction first, and the next call's run continues that transcript.
//! The child sees what it would see on the stored conversation (one
//! instruction, its own, first), call ids number on, and the store holds
//! what it held before: appended messages, never the instruction.

use super::appends::{Counting, helper_defs, sqlite_store};
use super::*;

/// A probe call for a query that asks for the tool, then (or else) text
/// that counts the user messages seen.
fn helper_model() -> Arc<TestModel> {
    TestModel::new(|seen| match seen.last_tool() {
        Some(result) => text(format!("found {result}")),
        None if seen.last_user().contains("tool") => {
            call("probe", json!({ "tag": seen.last_user() }))
        }
        None => text(format!("helper #{}: {}", seen.users(), seen.last_user())),
    })
}

fn helper_def(instruction: &str) -> AgentDefinition {
    exposed("helper", "Helper")
        .instruction(instruction)
        .tools(["probe"])
}

async fn root_with(
    orchestrator: &AgentOrchestrator,
    instruction: &str,
    helper: &Arc<TestModel>,
) -> ActiveAgent {
    let models = by_agent(&[
        ("root", delegating("Helper", None)),
        ("helper", Arc::clone(helper)),
    ]);
    orchestrator
        .get_or_create_agent(
            request("root", &helper_defs(helper_def(instruction)), &models)
                .tools(HostTools::new().with_shared(ok_tool("probe") as Arc<dyn Tool>)),
        )
        .await
        .unwrap()
}

fn child() -> SessionId {
    child_session_id(&"s".into(), &"helper".into(), "")
}

fn is_instruction(message: &Message) -> bool {
    matches!(message, Message::System { .. })
}

/// One delegated call of `query` in the session `s`: the child's first
/// request was its instruction (when it has one), exactly what the store
/// held, then the query; the store now holds that, what the call added,
/// and no instruction.
async fn call_checked(
    root: &ActiveAgent,
    store: &Arc<dyn SessionStore>,
    helper: &TestModel,
    instruction: &str,
    query: &str,
) {
    let before = match store.load(&child()).await.unwrap() {
        Some(record) => record.messages,
        None => Vec::new(),
    };
    let requests = helper.calls();
    root.run_in_session(
        &SessionScope::new("s"),
        RunRequest::new(query),
        &EventSink::none(),
    )
    .await
    .unwrap();
    let seen = helper.seen().swap_remove(requests).messages;
    let mut expected = Vec::new();
    if !instruction.is_empty() {
        expected.push(Message::system(instruction));
    }
    expected.extend(before.iter().cloned());
    expected.push(Message::user(query));
    assert_eq!(seen, expected, "{query}: what the child saw");
    let after = store.load(&child()).await.unwrap().unwrap().messages;
    assert_eq!(
        after[..=before.len()],
        expected[expected.len() - before.len() - 1..]
    );
    assert!(
        after.len() > before.len() + 1,
        "{query}: an answer was stored"
    );
    assert!(!after.iter().any(is_instruction), "{query}: {after:?}");
}

/// The ids of the calls in the stored conversation, in order.
async fn stored_call_ids(store: &Arc<dyn SessionStore>) -> Vec<String> {
    let record = store.load(&child()).await.unwrap().unwrap();
    record
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool { call_id, .. } => Some(call_id.to_string()),
            _ => None,
        })
        .collect()
}

async fn stores(dir: &tempfile::TempDir) -> [Arc<dyn SessionStore>; 2] {
    [
        Arc::new(InMemorySessionStore::new()) as Arc<dyn SessionStore>,
        sqlite_store(dir).await,
    ]
}

/// Calls continuing a kept transcript give the child the stored
/// conversation after its one instruction, and tool calls of later calls
/// number on after the earlier ones (`p1`, `p2`, `p3`), in both stores.
#[tokio::test]
async fn i11_7_a_kept_transcript_is_continued_as_the_stored_conversation() {
    let dir = tempfile::tempdir().unwrap();
    for store in stores(&dir).await {
        let helper = helper_model();
        let orchestrator = AgentOrchestrator::new(Arc::clone(&store));
        let root = root_with(&orchestrator, "You help.", &helper).await;
        for query in [
            "use the tool",
            "two",
            "the tool again",
            "four",
            "a tool once more",
        ] {
            call_checked(&root, &store, &helper, "You help.", query).await;
        }
        assert_eq!(stored_call_ids(&store).await, ["p1", "p2", "p3"]);
        let record = store.load(&child()).await.unwrap().unwrap();
        assert_eq!(record.revision, 5);
        assert_eq!(
            record.messages.last(),
            Some(&Message::assistant("found probe ok"))
        );
    }
}

/// A child without an instruction keeps and continues its conversation
/// alike: it never sees a system message.
#[tokio::test]
async fn i11_7_a_child_without_an_instruction_continues_its_conversation() {
    let dir = tempfile::tempdir().unwrap();
    for store in stores(&dir).await {
        let helper = helper_model();
        let orchestrator = AgentOrchestrator::new(Arc::clone(&store));
        let root = root_with(&orchestrator, "", &helper).await;
        for query in ["one", "use the tool", "three", "the tool again"] {
            call_checked(&root, &store, &helper, "", query).await;
        }
        assert!(
            helper
                .seen()
                .iter()
                .all(|seen| !seen.messages.iter().any(is_instruction))
        );
        assert_eq!(stored_call_ids(&store).await, ["p1", "p2"]);
    }
}

/// The helper rebuilt with another instruction while its conversation is
/// kept (the orchestrator's sessions outlive builds): the kept transcript
/// leads with the old instruction, and the next call's child sees exactly
/// one instruction, the new one, before the stored conversation; the call
/// still continues the kept transcript (it reads only the stamp).
#[tokio::test]
async fn i11_7_a_kept_transcript_led_by_an_old_instruction_gets_the_new_one() {
    let counting = Arc::new(Counting::default());
    let store = Arc::clone(&counting) as Arc<dyn SessionStore>;
    let helper = helper_model();
    let orchestrator = AgentOrchestrator::new(Arc::clone(&store));
    let root = root_with(&orchestrator, "You help.", &helper).await;
    for query in ["one", "use the tool", "three"] {
        call_checked(&root, &store, &helper, "You help.", query).await;
    }
    let rebuilt = root_with(&orchestrator, "You help briefly.", &helper).await;
    assert!(!Arc::ptr_eq(rebuilt.agent(), root.agent()));
    let ops = counting.ops(&child()).len();
    call_checked(
        &rebuilt,
        &store,
        &helper,
        "You help briefly.",
        "the tool again",
    )
    .await;
    // The test's own loads aside, the call read the stamp and appended.
    let ops = counting.ops(&child())[ops..].to_vec();
    assert_eq!(ops, ["load", "stamp", "append 4", "load"]);
    call_checked(&rebuilt, &store, &helper, "You help briefly.", "five").await;
    assert_eq!(stored_call_ids(&store).await, ["p1", "p2"]);
}

/// Another writer changes the child session between two calls: the kept
/// transcript is not used (the stamp changed), the next call continues
/// what the store holds, and the one after continues in place again.
#[tokio::test]
async fn i11_7_after_another_writer_the_next_call_continues_the_store() {
    let dir = tempfile::tempdir().unwrap();
    for store in stores(&dir).await {
        let helper = helper_model();
        let orchestrator = AgentOrchestrator::new(Arc::clone(&store));
        let root = root_with(&orchestrator, "You help.", &helper).await;
        for query in ["one", "use the tool", "three"] {
            call_checked(&root, &store, &helper, "You help.", query).await;
        }
        let mut record = store.load(&child()).await.unwrap().unwrap();
        record.messages.push(Message::user("written elsewhere"));
        record.messages.push(Message::assistant("noted"));
        store.save(&record).await.unwrap();
        for query in ["the tool again", "five", "a tool at last"] {
            call_checked(&root, &store, &helper, "You help.", query).await;
        }
        let record = store.load(&child()).await.unwrap().unwrap();
        assert_eq!(record.revision, 7);
        assert_eq!(record.messages[8], Message::user("written elsewhere"));
        assert_eq!(stored_call_ids(&store).await, ["p1", "p2", "p3"]);
    }
}
