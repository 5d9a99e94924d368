//! Names (AT-06, AT-07).

use super::*;

/// rule AT-06: one function per agent, named by its normalised display name, described by its description.
#[tokio::test]
async fn at_06_function_name_is_the_normalised_display_name_and_the_description_stays() {
    assert_eq!(normalize_function_name("Release Notes"), "Release_Notes");
    assert_eq!(normalize_function_name("Release-Notes"), "Release_Notes");
    assert_eq!(normalize_function_name("Q&A -- bot 2"), "Q_A_bot_2");
    assert_eq!(normalize_function_name("Ünïcode name"), "_n_code_name");

    let defs = [
        AgentDefinition::new("root", "Root").agent_tools(["notes"]),
        exposed("notes", "Release Notes").description("Writes release notes."),
    ];
    let root_model = delegating("Release_Notes", None);
    let models = by_agent(&[("root", Arc::clone(&root_model)), ("notes", echo("notes"))]);
    let (orchestrator, _) = orchestrator();
    let root = build(&orchestrator, "root", &defs, &models).await;
    root.run(RunRequest::new("v1.2"), &EventSink::none())
        .await
        .unwrap();
    let offered = root
        .harness()
        .tools()
        .model_dispatch()
        .definitions()
        .to_vec();
    assert_eq!(offered.len(), 1);
    assert_eq!(offered[0].name, "Release_Notes");
    assert_eq!(offered[0].description, "Writes release notes.");
    assert_eq!(root_model.seen()[0].tools, ["Release_Notes"]);
}

/// rule AT-07: saving rejects normalised-name collisions between non-main agents with overlapping audiences.
#[test]
fn at_07_save_rejects_normalised_name_collisions_with_overlapping_audiences() {
    let catalog = AgentCatalog::new();
    catalog
        .save(AgentDefinition::new("notes", "Release Notes").audience("eng"))
        .unwrap();
    let clash = catalog
        .save(AgentDefinition::new("notes2", "Release-Notes").audience("eng"))
        .unwrap_err();
    assert_eq!(
        clash,
        CatalogError::NameCollision {
            agent: "notes2".into(),
            other: "notes".into(),
            function_name: "Release_Notes".into(),
        }
    );
    // For everyone overlaps every audience.
    assert!(
        catalog
            .save(AgentDefinition::new("notes3", "Release  Notes"))
            .is_err()
    );
    // Disjoint audiences, the main agent, and re-saving the same agent pass.
    catalog
        .save(AgentDefinition::new("notes4", "Release-Notes").audience("ops"))
        .unwrap();
    catalog
        .save(AgentDefinition::new("main", "Release Notes").main())
        .unwrap();
    catalog
        .save(
            AgentDefinition::new("notes", "Release Notes")
                .audience("eng")
                .description("v2"),
        )
        .unwrap();
    assert_eq!(catalog.all().len(), 3);
}
