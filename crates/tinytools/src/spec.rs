//! What a tool declares about itself.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
pub use tinyagents_core::ToolReplay;

/// What a tool's error does to the run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolErrorPolicy {
    /// The model gets an error result and the run goes on.
    #[default]
    ReturnToModel,
    /// The run ends with `TinyAgentsError::ToolFailed`.
    EndRun,
}

/// A set of side-effect classes, for policies that deny by class. Its
/// `Debug` names them: `SideEffects(destructive | payment)`.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SideEffects(u16);

impl std::fmt::Debug for SideEffects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = self.names();
        let known = Self::NAMED
            .iter()
            .fold(Self::NONE, |all, (class, _)| all.union(*class));
        let unknown = self.0 & !known.0;
        f.write_str("SideEffects(")?;
        if names.is_empty() && unknown == 0 {
            f.write_str("none")?;
        }
        f.write_str(&names.join(" | "))?;
        if unknown != 0 {
            let sep = if names.is_empty() { "" } else { " | " };
            write!(f, "{sep}{unknown:#x}")?;
        }
        f.write_str(")")
    }
}

impl SideEffects {
    /// No side effect: the tool only computes or reads.
    pub const NONE: Self = Self(0);
    /// Sends data off the machine (HTTP, email gateways, webhooks).
    pub const NETWORK_EGRESS: Self = Self(1);
    /// Writes or creates files.
    pub const FILE_WRITE: Self = Self(1 << 1);
    /// Deletes or overwrites what cannot be restored.
    pub const DESTRUCTIVE: Self = Self(1 << 2);
    /// Moves money.
    pub const PAYMENT: Self = Self(1 << 3);
    /// Runs code or processes.
    pub const CODE_EXECUTION: Self = Self(1 << 4);
    /// Sends messages to people.
    pub const MESSAGING: Self = Self(1 << 5);
    /// Reads or uses credentials and secrets.
    pub const CREDENTIALS: Self = Self(1 << 6);
    /// Changes infrastructure (deploys, scaling, DNS).
    pub const INFRASTRUCTURE: Self = Self(1 << 7);

    /// Every class, with its name.
    pub const NAMED: [(Self, &'static str); 8] = [
        (Self::NETWORK_EGRESS, "network_egress"),
        (Self::FILE_WRITE, "file_write"),
        (Self::DESTRUCTIVE, "destructive"),
        (Self::PAYMENT, "payment"),
        (Self::CODE_EXECUTION, "code_execution"),
        (Self::MESSAGING, "messaging"),
        (Self::CREDENTIALS, "credentials"),
        (Self::INFRASTRUCTURE, "infrastructure"),
    ];

    /// The union of two sets.
    #[must_use]
    pub const fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// The classes in both sets.
    #[must_use]
    pub const fn intersection(self, other: Self) -> Self {
        Self(self.0 & other.0)
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether every class of `other` is in `self`.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// The names of the classes in the set.
    pub fn names(self) -> Vec<&'static str> {
        Self::NAMED
            .iter()
            .filter(|(class, _)| self.contains(*class))
            .map(|(_, name)| *name)
            .collect()
    }
}

impl std::ops::BitOr for SideEffects {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        self.union(rhs)
    }
}

/// Everything a tool declares: its model-facing contract and the flags the
/// harness and the policies act on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The name the model calls it by.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema of the arguments, including host-injected ones.
    pub parameters: Value,
    /// A person must approve each call.
    #[serde(default)]
    pub approval_required: bool,
    /// The tool runs outside this process's control (a remote agent, a human
    /// task); it cannot run unattended inside another call.
    #[serde(default)]
    pub external: bool,
    /// Calls may run at the same time as other concurrency-safe calls.
    #[serde(default)]
    pub concurrency_safe: bool,
    /// The tool changes nothing (plan mode lets only these run).
    #[serde(default)]
    pub read_only: bool,
    /// Whether a call may run again after a crash.
    #[serde(default)]
    pub replay: ToolReplay,
    /// The side-effect classes of the tool.
    #[serde(default)]
    pub side_effects: SideEffects,
    /// Overrides the run's default tool timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Duration>,
    /// What the tool's error does to the run.
    #[serde(default)]
    pub error_policy: ToolErrorPolicy,
    /// Argument names the host supplies: hidden from the model's schema and
    /// overwritten with the host's values before validation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub injected: Vec<String>,
    /// The tool needs a sandbox to run.
    #[serde(default)]
    pub sandboxed: bool,
    /// With an effect ledger, a call's settled row is made durable before
    /// its result is folded (one more commit per call), so a crash after
    /// the call returned never leaves it in doubt. For tools whose effect
    /// must not repeat (`ToolReplay::Never`) and whose result matters.
    #[serde(default)]
    pub durable_settle: bool,
}

impl ToolSpec {
    /// A spec with the conservative defaults: not concurrency-safe, not
    /// read-only, never replayed.
    pub fn new(name: impl Into<String>, description: impl Into<String>, parameters: Value) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            parameters,
            approval_required: false,
            external: false,
            concurrency_safe: false,
            read_only: false,
            replay: ToolReplay::Never,
            side_effects: SideEffects::NONE,
            timeout: None,
            error_policy: ToolErrorPolicy::ReturnToModel,
            injected: Vec::new(),
            sandboxed: false,
            durable_settle: false,
        }
    }

    /// Declares the tool read-only, which also makes it concurrency-safe and
    /// safe to replay.
    #[must_use]
    pub fn read_only(mut self) -> Self {
        self.read_only = true;
        self.concurrency_safe = true;
        self.replay = ToolReplay::Safe;
        self
    }

    /// Sets whether calls may run alongside other concurrency-safe calls.
    #[must_use]
    pub fn concurrency_safe(mut self, safe: bool) -> Self {
        self.concurrency_safe = safe;
        self
    }

    /// Requires a person's approval for each call.
    #[must_use]
    pub fn approval_required(mut self) -> Self {
        self.approval_required = true;
        self
    }

    /// Marks the tool as external.
    #[must_use]
    pub fn external(mut self) -> Self {
        self.external = true;
        self
    }

    /// Whether the harness holds the tool's calls for a person: it is
    /// `approval_required` or `external`. A model-issued call waits for an
    /// approval bound to it; a nested one is refused; an agent called as a
    /// tool does not offer it.
    pub fn waits_for_person(&self) -> bool {
        self.approval_required || self.external
    }

    /// Sets the replay class.
    #[must_use]
    pub fn replay(mut self, replay: ToolReplay) -> Self {
        self.replay = replay;
        self
    }

    /// Adds side-effect classes.
    #[must_use]
    pub fn side_effects(mut self, classes: SideEffects) -> Self {
        self.side_effects = self.side_effects.union(classes);
        self
    }

    /// Sets the tool's own timeout.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sets what the tool's error does to the run.
    #[must_use]
    pub fn error_policy(mut self, policy: ToolErrorPolicy) -> Self {
        self.error_policy = policy;
        self
    }

    /// Declares an argument the host injects.
    #[must_use]
    pub fn injected(mut self, argument: impl Into<String>) -> Self {
        self.injected.push(argument.into());
        self
    }

    /// Declares that the tool needs a sandbox.
    #[must_use]
    pub fn sandboxed(mut self) -> Self {
        self.sandboxed = true;
        self
    }

    /// Makes each call's settled row durable before its result is folded
    /// ([`ToolSpec::durable_settle`]).
    #[must_use]
    pub fn durable_settle(mut self) -> Self {
        self.durable_settle = true;
        self
    }
}
