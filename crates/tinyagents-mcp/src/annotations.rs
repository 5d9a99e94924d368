//! Annotations ↔ specs: what an MCP tool's hints mean to the policies, and
//! what a served tool's spec tells an MCP client.

use rmcp::model::ToolAnnotations;
use serde_json::Value;
use tinytools::{SideEffects, ToolReplay, ToolSpec};

/// The spec of an MCP tool from its name, description, input schema and
/// annotations.
///
/// Annotations are hints from an untrusted server, read with the defaults
/// the MCP specification gives a missing hint, which are the cautious ones:
///
/// | hint | absent means | maps to |
/// |---|---|---|
/// | `readOnlyHint: true` | false | read-only, concurrency-safe, replay-safe, no side effect but open world |
/// | `destructiveHint` (not read-only) | true | [`SideEffects::DESTRUCTIVE`] |
/// | `openWorldHint` | true | [`SideEffects::NETWORK_EGRESS`] (air-gapped runs omit the tool) |
/// | `idempotentHint: true` (not read-only) | false | [`ToolReplay::Safe`], else `Never` |
///
/// So a tool without annotations is exclusive, destructive, open-world and
/// never replayed: every policy that refuses side effects refuses it.
pub fn spec_from_annotations(
    name: &str,
    description: &str,
    parameters: Value,
    annotations: Option<&ToolAnnotations>,
) -> ToolSpec {
    let hint = |read: fn(&ToolAnnotations) -> Option<bool>, absent: bool| {
        annotations.and_then(read).unwrap_or(absent)
    };
    let read_only = hint(|a| a.read_only_hint, false);
    let open_world = hint(|a| a.open_world_hint, true);
    let mut spec = ToolSpec::new(name, description, parameters);
    if read_only {
        spec = spec.read_only();
    } else {
        if hint(|a| a.destructive_hint, true) {
            spec = spec.side_effects(SideEffects::DESTRUCTIVE);
        }
        if hint(|a| a.idempotent_hint, false) {
            spec = spec.replay(ToolReplay::Safe);
        }
    }
    if open_world {
        spec = spec.side_effects(SideEffects::NETWORK_EGRESS);
    }
    spec
}

/// The annotations a served tool's spec gives an MCP client: the same
/// table read the other way, every hint stated.
pub(crate) fn annotations_from_spec(spec: &ToolSpec) -> ToolAnnotations {
    let mut annotations = ToolAnnotations::new();
    annotations.read_only_hint = Some(spec.read_only);
    annotations.destructive_hint = Some(
        !spec.read_only
            && !spec
                .side_effects
                .intersection(SideEffects::DESTRUCTIVE.union(SideEffects::PAYMENT))
                .is_empty(),
    );
    annotations.idempotent_hint = Some(spec.read_only || spec.replay == ToolReplay::Safe);
    annotations.open_world_hint = Some(spec.side_effects.contains(SideEffects::NETWORK_EGRESS));
    annotations
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn hints(value: Value) -> ToolAnnotations {
        serde_json::from_value(value).unwrap_or_default()
    }

    #[test]
    fn no_annotations_fail_closed() {
        let spec = spec_from_annotations("t", "", json!({"type": "object"}), None);
        assert!(!spec.read_only && !spec.concurrency_safe);
        assert_eq!(spec.replay, ToolReplay::Never);
        assert!(spec.side_effects.contains(SideEffects::DESTRUCTIVE));
        assert!(spec.side_effects.contains(SideEffects::NETWORK_EGRESS));
    }

    #[test]
    fn each_hint_maps() {
        let read = hints(json!({"readOnlyHint": true, "openWorldHint": false}));
        let spec = spec_from_annotations("t", "", json!({}), Some(&read));
        assert!(spec.read_only && spec.concurrency_safe);
        assert_eq!(spec.replay, ToolReplay::Safe);
        assert!(spec.side_effects.is_empty());

        let write = hints(
            json!({"destructiveHint": false, "idempotentHint": true, "openWorldHint": false}),
        );
        let spec = spec_from_annotations("t", "", json!({}), Some(&write));
        assert!(!spec.read_only && !spec.concurrency_safe);
        assert_eq!(spec.replay, ToolReplay::Safe);
        assert!(spec.side_effects.is_empty());

        let web = hints(json!({"readOnlyHint": true}));
        let spec = spec_from_annotations("t", "", json!({}), Some(&web));
        assert_eq!(spec.side_effects, SideEffects::NETWORK_EGRESS);
    }

    #[test]
    fn a_spec_reads_back_through_its_annotations() {
        for spec in [
            ToolSpec::new("a", "", json!({})).read_only(),
            ToolSpec::new("b", "", json!({})).side_effects(SideEffects::DESTRUCTIVE),
            ToolSpec::new("c", "", json!({}))
                .replay(ToolReplay::Safe)
                .side_effects(SideEffects::NETWORK_EGRESS),
        ] {
            let back =
                spec_from_annotations("x", "", json!({}), Some(&annotations_from_spec(&spec)));
            assert_eq!(back.read_only, spec.read_only, "{}", spec.name);
            assert_eq!(back.replay, spec.replay, "{}", spec.name);
            assert_eq!(
                back.side_effects.contains(SideEffects::DESTRUCTIVE),
                spec.side_effects.contains(SideEffects::DESTRUCTIVE),
                "{}",
                spec.name
            );
        }
    }
}
