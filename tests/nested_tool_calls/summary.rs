//! NT-29..NT-32: the `nested_calls` summary in the parent's metadata.

use super::*;

/// rule NT-29: the parent's result metadata (on `ToolCompleted` and in
/// `AgentRun::tool_metadata`) gains the `nested_calls` summary: the
/// specification's example, reproduced.
#[tokio::test(start_paused = true)]
async fn nt_29_the_summary_matches_the_specs_example() {
    let node = Node::plain();
    let leaf = scripted(
        ToolSpec::new(
            "leaf",
            "A leaf.",
            json!({"type": "object", "properties": {"n": {"type": "integer"}}}),
        )
        .read_only(),
        |call| async move {
            tokio::time::sleep(Duration::from_millis(3)).await;
            Ok(ToolResult::text(format!("leaf {}", call.args["n"])))
        },
    );
    let tree = plan(vec![
        child("leaf", json!({"n": 7})),
        child("ghost", json!({})),
    ]);
    let (harness, _) = build(
        one_turn(&[("node", tree)]),
        vec![node.tool(), t(&leaf)],
        |b| {
            b.payload_capture(PayloadCapture {
                model_io: false,
                tool_io: true,
            })
        },
    );
    let (run, events) = run_checked(&harness).await;
    let expected = json!({
      "nested_calls": [
        {"id": "p1/1", "name": "leaf", "status": "ok", "duration_ms": 3,
         "args": "{\"n\":7}"},
        {"id": "p1/2", "name": "ghost", "status": "failed", "duration_ms": 0,
         "args": "{}", "error": "tool not found: ghost"}
      ]
    });
    assert_eq!(run.tool_metadata(&CallId::new("p1")), Some(&expected));
    assert_eq!(completed_metadata(&events, "p1"), Some(expected));
}

/// rule NT-29: each entry has id, name, status (ok, error, failed,
/// abandoned) and duration_ms; a nested parent's own result carries its
/// children's summary.
#[tokio::test(start_paused = true)]
async fn nt_29_summary_statuses_are_ok_error_failed_and_abandoned() {
    let node = Node::plain();
    let slow = ProbeTool::new("slow", true, Behaviour::Sleep(Duration::from_secs(10)));
    let tree = with(
        plan(vec![
            child("leaf", json!({})),
            child("reports", json!({})),
            child("ghost", json!({})),
            child("raises", json!({})),
            child("slow", json!({})),
            child("node", plan(vec![child("leaf", json!({}))])),
        ]),
        "drop_after_ms",
        json!(100),
    );
    let (harness, _) = build(
        one_turn(&[("node", tree)]),
        vec![
            node.tool(),
            t(&new_leaf()),
            t(&reports()),
            t(&raises()),
            slow,
        ],
        |b| b,
    );
    let (run, events) = run_checked(&harness).await;
    let statuses: BTreeMap<String, String> = summary(&run, "p1")
        .iter()
        .map(|e| {
            (
                e["id"].as_str().unwrap().to_owned(),
                e["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let expected: BTreeMap<String, String> = [
        ("p1/1", "ok"),
        ("p1/2", "error"),
        ("p1/3", "failed"),
        ("p1/4", "failed"),
        ("p1/5", "abandoned"),
        ("p1/6", "ok"),
    ]
    .into_iter()
    .map(|(a, b)| (a.to_owned(), b.to_owned()))
    .collect();
    assert_eq!(statuses, expected);
    for e in summary(&run, "p1") {
        let keys: Vec<&str> = e.as_object().unwrap().keys().map(String::as_str).collect();
        assert!(
            ["id", "name", "status", "duration_ms"]
                .iter()
                .all(|k| keys.contains(k)),
            "{e}"
        );
        assert!(e["duration_ms"].is_u64(), "{e}");
    }
    assert_eq!(entry(&run, "p1", "p1/5")["duration_ms"], json!(100));
    let inner =
        completed_metadata(&events, "p1/6").expect("the nested parent's result has metadata");
    assert_eq!(inner["nested_calls"][0]["id"], "p1/6/1");
    assert_eq!(inner["nested_calls"][0]["status"], "ok");
}

/// rule NT-30: `args` (cut at 1 KiB) and `error` (cut at 256 bytes) appear
/// only under `PayloadCapture::tool_io`, except an abandoned call's error,
/// which is always kept; an empty error is omitted.
#[tokio::test(start_paused = true)]
async fn nt_30_args_and_errors_appear_only_under_tool_io_and_are_cut() {
    for capture in [false, true] {
        let node = Node::plain();
        let long_error = scripted(safe("long_error"), |_| async {
            anyhow::bail!("{}", "e".repeat(400))
        });
        let empty_error = scripted(safe("empty_error"), |_| async { Ok(ToolResult::error("")) });
        let slow = ProbeTool::new("slow", true, Behaviour::Sleep(Duration::from_secs(10)));
        let tree = with(
            plan(vec![
                child("leaf", json!({"blob": "x".repeat(2000)})),
                child("leaf", json!({"blob": "é".repeat(1000)})),
                child("long_error", json!({})),
                child("reports", json!({})),
                child("empty_error", json!({})),
                child("slow", json!({})),
            ]),
            "drop_after_ms",
            json!(100),
        );
        let (harness, _) = build(
            one_turn(&[("node", tree)]),
            vec![
                node.tool(),
                t(&new_leaf()),
                t(&long_error),
                t(&reports()),
                t(&empty_error),
                slow,
            ],
            |b| {
                b.payload_capture(PayloadCapture {
                    model_io: false,
                    tool_io: capture,
                })
                .include_detailed_errors(true)
            },
        );
        let (run, _) = run_checked(&harness).await;
        let e = |id: &str| entry(&run, "p1", id);
        if capture {
            let ascii = e("p1/1")["args"].as_str().unwrap().to_owned();
            assert_eq!(ascii.len(), 1024);
            assert!(
                json!({"blob": "x".repeat(2000)})
                    .to_string()
                    .starts_with(&ascii)
            );
            let multibyte = e("p1/2")["args"].as_str().unwrap().to_owned();
            assert!(
                multibyte.len() <= 1024 && multibyte.len() >= 1023,
                "{}",
                multibyte.len()
            );
            assert!(
                json!({"blob": "é".repeat(1000)})
                    .to_string()
                    .starts_with(&multibyte)
            );
            assert_eq!(e("p1/3")["error"], json!("e".repeat(256)));
            assert_eq!(e("p1/4")["error"], "no such file");
            assert_eq!(e("p1/6")["args"], "{}");
        } else {
            for id in ["p1/1", "p1/2", "p1/3", "p1/4", "p1/5", "p1/6"] {
                assert!(e(id).get("args").is_none(), "{capture}: {}", e(id));
            }
            for id in ["p1/3", "p1/4"] {
                assert!(e(id).get("error").is_none(), "{}", e(id));
            }
        }
        assert_eq!(e("p1/5")["status"], "error");
        assert!(
            e("p1/5").get("error").is_none(),
            "an empty error is omitted: {}",
            e("p1/5")
        );
        assert_eq!(e("p1/6")["status"], "abandoned");
        let abandoned = e("p1/6")["error"]
            .as_str()
            .unwrap_or_else(|| panic!("abandoned keeps its error: {}", e("p1/6")))
            .to_owned();
        assert!(
            abandoned.starts_with("parent settled: ") && abandoned.len() <= 256,
            "{abandoned}"
        );
    }
}

/// rule NT-31: at most 32 entries; `nested_calls_truncated` counts the rest
/// and appears only when more than 32 calls ran.
#[tokio::test]
async fn nt_31_the_summary_keeps_32_entries_and_counts_the_rest() {
    for (calls, truncated) in [(32usize, None), (33, Some(1u64)), (40, Some(8))] {
        let node = Node::plain();
        let tree = plan((0..calls).map(|i| child("leaf", json!({"i": i}))).collect());
        let (harness, _) = build(
            one_turn(&[("node", tree)]),
            vec![node.tool(), t(&new_leaf())],
            |b| b,
        );
        let (run, _) = run_checked(&harness).await;
        let metadata = run.tool_metadata(&CallId::new("p1")).unwrap();
        assert_eq!(
            metadata["nested_calls"].as_array().unwrap().len(),
            32,
            "{calls} calls"
        );
        assert_eq!(
            metadata
                .get("nested_calls_truncated")
                .and_then(Value::as_u64),
            truncated,
            "{calls} calls"
        );
        assert_eq!(run.budget.nested_tool_calls as usize, calls);
    }
}

/// rule NT-32: the summary is attached only when the parent's metadata is
/// absent or an object; other metadata is kept unchanged.
#[tokio::test]
async fn nt_32_the_summary_is_attached_only_to_absent_or_object_metadata() {
    let node = Node::plain();
    let calls = |metadata: Option<Value>| {
        let tree = plan(vec![child("leaf", json!({}))]);
        match metadata {
            Some(metadata) => with(tree, "metadata", metadata),
            None => tree,
        }
    };
    let model = one_turn(&[
        ("node", calls(None)),
        ("node", calls(Some(json!({"source": "cache"})))),
        ("node", calls(Some(json!([1, 2])))),
        ("node", calls(Some(json!("a note")))),
        ("node", plan(vec![])),
    ]);
    let (harness, _) = build(model, vec![node.tool(), t(&new_leaf())], |b| b);
    let (run, events) = run_checked(&harness).await;
    let metadata = |id: &str| run.tool_metadata(&CallId::new(id)).cloned();
    let absent = metadata("p1").unwrap();
    assert_eq!(
        absent.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["nested_calls"]
    );
    let object = metadata("p2").unwrap();
    assert_eq!(object["source"], "cache");
    assert_eq!(object["nested_calls"][0]["id"], "p2/1");
    assert_eq!(metadata("p3"), Some(json!([1, 2])));
    assert_eq!(metadata("p4"), Some(json!("a note")));
    assert_eq!(metadata("p5"), None, "no nested calls, no summary");
    assert_eq!(completed_metadata(&events, "p3"), Some(json!([1, 2])));
}
