//! `AgentDefinition`: what a host stores about one agent, and who may see it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tinyagents_core::{AgentId, ModelOptions, SpendCaps};

use crate::names::normalize_function_name;

/// What a definition says about one of its ordinary tools.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolPolicy {
    /// The tool runs as its spec says (a spec that requires approval still
    /// does).
    #[default]
    Default,
    /// The tool is never offered to this agent.
    Deny,
    /// Every call waits for a person. A delegated run has no route to a
    /// person, so there the tool is not offered at all.
    RequireApproval,
    /// The tool runs without asking, even when its spec asks for approval.
    AutoApprove,
}

/// How an agent keeps its conversation history short.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Compaction {
    /// The whole history is kept.
    #[default]
    None,
    /// Only the last `count` messages are kept (never starting with an
    /// orphaned tool result).
    KeepLastMessages {
        /// How many messages stay.
        count: usize,
    },
    /// A reducer the host registered on the orchestrator under `name`.
    Custom {
        /// The registered name.
        name: String,
    },
}

/// Who is asking: a user and the groups they belong to. An audience entry
/// of a definition matches the user's id or one of the groups.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Viewer {
    /// The user's id.
    pub user_id: String,
    /// The groups the user belongs to.
    #[serde(default)]
    pub groups: Vec<String>,
}

impl Viewer {
    /// A user without groups.
    pub fn user(user_id: impl Into<String>) -> Self {
        Self {
            user_id: user_id.into(),
            groups: Vec::new(),
        }
    }

    /// Adds a group.
    #[must_use]
    pub fn in_group(mut self, group: impl Into<String>) -> Self {
        self.groups.push(group.into());
        self
    }
}

/// One agent as a host defines it. Serialisable, so a host can keep its
/// definitions anywhere; the orchestrator reads nothing else about an agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentDefinition {
    /// The stable identity: sessions, caches and `agent_tool_ids` use it.
    pub id: AgentId,
    /// The name people see; its normalised form is the agent's function name.
    pub display_name: String,
    /// What the agent does; the description of its function.
    #[serde(default)]
    pub description: String,
    /// The standing instruction; `{{name}}` placeholders are replaced from
    /// [`AgentDefinition::variables`].
    #[serde(default)]
    pub system_instruction: String,
    /// Values of the instruction's placeholders.
    #[serde(default)]
    pub variables: BTreeMap<String, String>,
    /// The key of the model this agent uses; `None` for the app default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The options of its model calls.
    #[serde(default)]
    pub model_options: ModelOptions,
    /// The host's ordinary tools this agent may use, by name.
    #[serde(default)]
    pub tools: Vec<String>,
    /// Per-tool policies; a tool not named here has [`ToolPolicy::Default`].
    #[serde(default)]
    pub tool_policies: BTreeMap<String, ToolPolicy>,
    /// Whether other agents may call this one as a tool.
    #[serde(default)]
    pub is_exposed_as_tool: bool,
    /// The exposed agents this one may call, in the order its functions are
    /// offered.
    #[serde(default)]
    pub agent_tool_ids: Vec<AgentId>,
    /// The directories this agent's tools may touch.
    #[serde(default)]
    pub workspaces: Vec<std::path::PathBuf>,
    /// How its history is kept short.
    #[serde(default)]
    pub compaction: Compaction,
    /// Whether the agent must run air-gapped (no network-egress tools),
    /// whatever its caller's posture.
    #[serde(default)]
    pub is_local_only: bool,
    /// Whether memory attaches when the agent is the requested one.
    #[serde(default)]
    pub memory_enabled: bool,
    /// Skills assigned to it (attach only when it is the requested agent).
    #[serde(default)]
    pub skills: Vec<String>,
    /// Who may see it: user ids or group names; empty for everyone.
    #[serde(default)]
    pub audiences: Vec<String>,
    /// The host's main agent: exempt from the function-name collision check.
    #[serde(default)]
    pub is_main: bool,
    /// Its share of its tree's tokens and money: caps on what each of its
    /// runs and the runs they delegate to may spend together, lowering
    /// (never raising) the builder's `max_tokens` and `max_cost`. The caps
    /// of the runs above it still bind. None by default.
    #[serde(default, skip_serializing_if = "SpendCaps::is_unbounded")]
    pub budget: SpendCaps,
}

impl AgentDefinition {
    /// A definition with an id and a display name, everything else empty:
    /// not exposed, no tools, the app's default model.
    pub fn new(id: impl Into<AgentId>, display_name: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            display_name: display_name.into(),
            description: String::new(),
            system_instruction: String::new(),
            variables: BTreeMap::new(),
            model: None,
            model_options: ModelOptions::default(),
            tools: Vec::new(),
            tool_policies: BTreeMap::new(),
            is_exposed_as_tool: false,
            agent_tool_ids: Vec::new(),
            workspaces: Vec::new(),
            compaction: Compaction::None,
            is_local_only: false,
            memory_enabled: false,
            skills: Vec::new(),
            audiences: Vec::new(),
            is_main: false,
            budget: SpendCaps::default(),
        }
    }

    /// Sets the description.
    #[must_use]
    pub fn description(mut self, text: impl Into<String>) -> Self {
        self.description = text.into();
        self
    }

    /// Sets the standing instruction.
    #[must_use]
    pub fn instruction(mut self, text: impl Into<String>) -> Self {
        self.system_instruction = text.into();
        self
    }

    /// Sets one placeholder value.
    #[must_use]
    pub fn variable(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.variables.insert(name.into(), value.into());
        self
    }

    /// Uses the model registered under `key`, with `options`.
    #[must_use]
    pub fn model(mut self, key: impl Into<String>, options: ModelOptions) -> Self {
        self.model = Some(key.into());
        self.model_options = options;
        self
    }

    /// Allows these ordinary tools.
    #[must_use]
    pub fn tools<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.tools.extend(names.into_iter().map(Into::into));
        self
    }

    /// Sets the policy of one tool.
    #[must_use]
    pub fn tool_policy(mut self, name: impl Into<String>, policy: ToolPolicy) -> Self {
        self.tool_policies.insert(name.into(), policy);
        self
    }

    /// Gives the agent a share of its tree's tokens and money (see
    /// [`AgentDefinition::budget`]).
    #[must_use]
    pub fn budget(mut self, share: SpendCaps) -> Self {
        self.budget = share;
        self
    }

    /// Exposes the agent to other agents as a tool.
    #[must_use]
    pub fn exposed(mut self) -> Self {
        self.is_exposed_as_tool = true;
        self
    }

    /// Lets the agent call these exposed agents.
    #[must_use]
    pub fn agent_tools<S: Into<AgentId>>(mut self, ids: impl IntoIterator<Item = S>) -> Self {
        self.agent_tool_ids.extend(ids.into_iter().map(Into::into));
        self
    }

    /// Adds an allowed directory.
    #[must_use]
    pub fn workspace(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.workspaces.push(dir.into());
        self
    }

    /// Sets the compaction.
    #[must_use]
    pub fn compaction(mut self, compaction: Compaction) -> Self {
        self.compaction = compaction;
        self
    }

    /// Makes the agent local-only.
    #[must_use]
    pub fn local_only(mut self) -> Self {
        self.is_local_only = true;
        self
    }

    /// Enables memory.
    #[must_use]
    pub fn with_memory(mut self) -> Self {
        self.memory_enabled = true;
        self
    }

    /// Assigns a skill.
    #[must_use]
    pub fn skill(mut self, skill: impl Into<String>) -> Self {
        self.skills.push(skill.into());
        self
    }

    /// Limits who sees the agent (adds one user id or group).
    #[must_use]
    pub fn audience(mut self, who: impl Into<String>) -> Self {
        self.audiences.push(who.into());
        self
    }

    /// Marks the host's main agent.
    #[must_use]
    pub fn main(mut self) -> Self {
        self.is_main = true;
        self
    }

    /// The policy of the tool `name`.
    pub fn policy_of(&self, name: &str) -> ToolPolicy {
        self.tool_policies.get(name).copied().unwrap_or_default()
    }

    /// The function name other agents call it by: the display name
    /// normalised (the id when the display name normalises to nothing).
    pub fn function_name(&self) -> String {
        let name = normalize_function_name(&self.display_name);
        if name.chars().any(|c| c.is_ascii_alphanumeric()) {
            return name;
        }
        let from_id = normalize_function_name(self.id.as_str());
        if from_id.chars().any(|c| c.is_ascii_alphanumeric()) {
            from_id
        } else {
            "agent".to_owned()
        }
    }

    /// The standing instruction with its placeholders replaced. A
    /// placeholder without a value stays as written.
    pub fn resolved_instruction(&self) -> String {
        resolve_variables(&self.system_instruction, &self.variables)
    }

    /// Whether `viewer` may see the agent.
    pub fn is_visible_to(&self, viewer: &Viewer) -> bool {
        self.audiences.is_empty()
            || self
                .audiences
                .iter()
                .any(|a| *a == viewer.user_id || viewer.groups.iter().any(|g| g == a))
    }

    /// Whether some viewer could see both agents: either is for everyone,
    /// or they name a user or group in common.
    pub fn audiences_overlap(&self, other: &Self) -> bool {
        self.audiences.is_empty()
            || other.audiences.is_empty()
            || self.audiences.iter().any(|a| other.audiences.contains(a))
    }
}

/// Replaces each `{{name}}` (spaces inside the braces allowed) with its
/// value; unknown names and unclosed braces stay as written.
pub fn resolve_variables(text: &str, variables: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find("{{") {
        out.push_str(&rest[..open]);
        let after = &rest[open + 2..];
        let Some(close) = after.find("}}") else {
            out.push_str(&rest[open..]);
            return out;
        };
        let name = after[..close].trim();
        match variables.get(name) {
            Some(value) => out.push_str(value),
            None => out.push_str(&rest[open..open + 2 + close + 2]),
        }
        rest = &after[close + 2..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_resolve_and_unknown_ones_stay() {
        let vars = BTreeMap::from([("team".to_owned(), "billing".to_owned())]);
        assert_eq!(
            resolve_variables("You help {{ team }} with {{topic}} {{", &vars),
            "You help billing with {{topic}} {{"
        );
    }

    #[test]
    fn visibility_and_overlap() {
        let everyone = AgentDefinition::new("a", "A");
        let eng = AgentDefinition::new("b", "B").audience("eng");
        let alice = Viewer::user("alice").in_group("eng");
        let bob = Viewer::user("bob");
        assert!(everyone.is_visible_to(&bob));
        assert!(eng.is_visible_to(&alice));
        assert!(!eng.is_visible_to(&bob));
        assert!(everyone.audiences_overlap(&eng));
        let ops = AgentDefinition::new("c", "C").audience("ops");
        assert!(!ops.audiences_overlap(&eng));
    }

    #[test]
    fn function_name_falls_back_to_the_id() {
        assert_eq!(AgentDefinition::new("x-1", "").function_name(), "x_1");
        assert_eq!(AgentDefinition::new("!", "?").function_name(), "agent");
    }
}
