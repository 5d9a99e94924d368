//! Sessions: the stored conversations of requested agents and of the child
//! agents they call.
//!
//! A child session lives inside its parent session and is identified by
//! (parent session id, child agent id, conversation name), the name trimmed
//! and compared without case; its [`SessionId`] is derived from that triple
//! ([`child_session_id`]), so a grandchild's session nests the same way.
//! Each record carries a revision, so a store shared by several processes
//! refuses a save based on a stale read instead of losing an update.
//!
//! A delegated call adds a few messages to a conversation that grows with
//! every call, so the store appends them ([`SessionStore::append`]) instead
//! of rewriting the conversation, and the [`SessionManager`] keeps the
//! conversation it last wrote, handing it to the next call on that session
//! when the store's [`SessionStamp`] says nobody else wrote since.

#[cfg(feature = "conformance")]
pub mod conformance;
mod kept;
mod manager;
mod memory;
#[cfg(feature = "sqlite")]
mod sqlite;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tinyagents_core::{AgentId, ErrorSource, Message, SessionId};

pub(crate) use kept::Transcript;
pub use manager::SessionManager;
pub use memory::InMemorySessionStore;
#[cfg(feature = "sqlite")]
pub use sqlite::{SESSION_APPLICATION_ID, SESSION_SCHEMA_VERSION, SqliteSessionStore};

/// The version of a stored session's message format.
pub const SESSION_FORMAT: u32 = 1;

/// The run property that names the session a run belongs to. The
/// orchestrator sets it; an agent tool reads it as the parent session and
/// replaces it with the child's in the child run. Defined by the harness,
/// which reads it as the spans' `gen_ai.conversation.id`.
pub use tinyagents_harness::SESSION_PROPERTY;

/// The run property that marks an incognito session (kept in memory only).
pub const INCOGNITO_PROPERTY: &str = "tinyagents.incognito";

/// Why a session could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The file is not a readable session store (damaged, or not SQLite).
    #[error("session store {path} is damaged or not a session store: {message}")]
    Corrupt {
        /// The file.
        path: String,
        /// What SQLite said.
        message: String,
        /// SQLite's or the decoder's error (`message` already says it),
        /// when one was met.
        #[source]
        source: Option<ErrorSource>,
    },
    /// The file belongs to another application.
    #[error("{path} is not a tinyagents session store (application id {found:#x})")]
    NotASessionStore {
        /// The file.
        path: String,
        /// Its application id.
        found: i32,
    },
    /// The file was written by a newer version.
    #[error(
        "session store {path} has schema version {found}; this version reads up to {supported}"
    )]
    TooNew {
        /// The file.
        path: String,
        /// Its version.
        found: i64,
        /// The newest this build reads.
        supported: i64,
    },
    /// A stored session has a format this version does not read.
    #[error("session {id} has format {found}; this version reads format {supported}")]
    Format {
        /// The session.
        id: SessionId,
        /// Its format.
        found: u32,
        /// The format this build reads.
        supported: u32,
    },
    /// Someone else saved the session since it was read.
    #[error(
        "session {id} was changed by someone else (expected revision {expected}, found {found})"
    )]
    Conflict {
        /// The session.
        id: SessionId,
        /// The revision the save was based on.
        expected: u64,
        /// The revision in the store.
        found: u64,
    },
    /// An append named a session that is not stored (a session is made by
    /// saving it whole).
    #[error("session {id} is not stored: there is nothing to append to")]
    NotStored {
        /// The session.
        id: SessionId,
    },
    /// The store failed.
    #[error("session store error: {message}")]
    Store {
        /// What went wrong.
        message: String,
        /// The store's, the task's or the encoder's error (`message`
        /// already says it), when one was met.
        #[source]
        source: Option<ErrorSource>,
    },
}

impl SessionError {
    /// Why an append based on `revision` found no session `id`: it was
    /// deleted since it was read ([`Conflict`](Self::Conflict), found 0),
    /// or it was never stored ([`NotStored`](Self::NotStored)).
    pub(crate) fn not_stored(id: &SessionId, revision: u64) -> Self {
        if revision == 0 {
            Self::NotStored { id: id.clone() }
        } else {
            Self::Conflict {
                id: id.clone(),
                expected: revision,
                found: 0,
            }
        }
    }
}

/// One stored session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// The session.
    pub id: SessionId,
    /// The parent session, for a child session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<SessionId>,
    /// The child agent, for a child session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<AgentId>,
    /// The normalised conversation name of a child session (empty for the
    /// default conversation).
    #[serde(default)]
    pub conversation: String,
    /// The conversation, without the standing instruction (compacted when
    /// the agent compacts).
    pub messages: Vec<Message>,
    /// How many times it was saved; a save must be based on the stored one.
    #[serde(default)]
    pub revision: u64,
}

impl SessionRecord {
    /// An empty, never-saved session.
    pub fn new(id: SessionId) -> Self {
        Self {
            id,
            parent: None,
            agent_id: None,
            conversation: String::new(),
            messages: Vec::new(),
            revision: 0,
        }
    }

    /// The text a person may read of it: user and assistant text, without
    /// tool calls, tool results, instructions or private reasoning.
    pub fn transcript(&self) -> Vec<ChatTurn> {
        transcript(&self.messages)
    }
}

/// What a store can tell of a stored session without reading its
/// conversation: its revision, and a mark the store gives every write of
/// any session anew (never the same twice, not even after the session was
/// deleted and made again), so an unchanged stamp means an unchanged
/// conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SessionStamp {
    /// The stored revision.
    pub revision: u64,
    /// The mark of the write that made that revision.
    pub mark: u64,
}

/// Keeps sessions. Object-safe; every method may be called concurrently.
#[async_trait]
pub trait SessionStore: Send + Sync {
    /// The session `id`, if stored.
    async fn load(&self, id: &SessionId) -> Result<Option<SessionRecord>, SessionError>;

    /// Stores `record` as revision `record.revision + 1`, when the stored
    /// revision is `record.revision` (0: not stored yet); otherwise
    /// [`SessionError::Conflict`]. Returns the new revision.
    async fn save(&self, record: &SessionRecord) -> Result<u64, SessionError>;

    /// Appends `messages` to the conversation of the stored session `id`,
    /// making it revision `revision + 1`, when its stored revision is
    /// `revision`; otherwise [`SessionError::Conflict`] and nothing is
    /// written ([`SessionError::NotStored`] for revision 0: a session is
    /// made with [`save`](Self::save)). Writes only `messages`: the stored
    /// conversation is neither read nor rewritten, and the record's other
    /// fields stay as they are. Returns the new stamp.
    async fn append(
        &self,
        id: &SessionId,
        revision: u64,
        messages: &[Message],
    ) -> Result<SessionStamp, SessionError>;

    /// The stamp of the stored session `id` (`None` when not stored),
    /// without reading its conversation.
    async fn stamp(&self, id: &SessionId) -> Result<Option<SessionStamp>, SessionError>;

    /// The child sessions of `parent`: the stored sessions whose `parent`
    /// it is (not their own children), whole, in the byte order of their
    /// ids.
    async fn children(&self, parent: &SessionId) -> Result<Vec<SessionRecord>, SessionError>;

    /// Deletes a session and every session nested in it (reached by the
    /// chain of `parent`s, whatever the ids look like). Deleting a session
    /// that is not stored is no error.
    async fn delete(&self, id: &SessionId) -> Result<(), SessionError>;
}

/// Who said a line of a transcript.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChatRole {
    /// The user (for a child session: the calling agent's query).
    User,
    /// The agent.
    Assistant,
}

/// One line of a transcript a host shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatTurn {
    /// Who.
    pub role: ChatRole,
    /// What.
    pub text: String,
}

/// User and assistant text of `messages`; assistant turns without text (tool
/// calls only) are skipped.
pub fn transcript(messages: &[Message]) -> Vec<ChatTurn> {
    messages
        .iter()
        .filter_map(|message| match message {
            Message::User { content } => Some(ChatTurn {
                role: ChatRole::User,
                text: content.clone(),
            }),
            Message::Assistant { content, .. } if !content.trim().is_empty() => Some(ChatTurn {
                role: ChatRole::Assistant,
                text: content.clone(),
            }),
            _ => None,
        })
        .collect()
}

/// A conversation name as sessions compare it: trimmed and lower-cased;
/// a missing or blank name is the default conversation (empty).
pub fn normalize_conversation(name: Option<&str>) -> String {
    name.map(|n| n.trim().to_lowercase()).unwrap_or_default()
}

/// The id of the child session of `agent` for `conversation` (already
/// normalised) inside `parent`: `<parent>/<agent>#<conversation>`, with
/// `%`, `/` and `#` escaped in the agent id and the name, so that distinct
/// triples never share an id whatever the parent id contains.
pub fn child_session_id(parent: &SessionId, agent: &AgentId, conversation: &str) -> SessionId {
    SessionId::from(format!(
        "{parent}/{}#{}",
        escape(agent.as_str()),
        escape(conversation)
    ))
}

fn escape(part: &str) -> String {
    let mut out = String::with_capacity(part.len());
    for c in part.chars() {
        match c {
            '%' => out.push_str("%25"),
            '/' => out.push_str("%2F"),
            '#' => out.push_str("%23"),
            other => out.push(other),
        }
    }
    out
}

/// The session a run belongs to, as it travels in the run's properties.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionScope {
    /// The session.
    pub id: SessionId,
    /// Whether it is kept in memory only.
    pub incognito: bool,
}

impl SessionScope {
    /// A stored session.
    pub fn new(id: impl Into<SessionId>) -> Self {
        Self {
            id: id.into(),
            incognito: false,
        }
    }

    /// An incognito session: continuity in memory, nothing written.
    pub fn incognito(id: impl Into<SessionId>) -> Self {
        Self {
            id: id.into(),
            incognito: true,
        }
    }

    /// The scope recorded in a run's properties, if any.
    pub fn from_properties(properties: &Map<String, Value>) -> Option<Self> {
        let id = properties.get(SESSION_PROPERTY)?.as_str()?;
        let incognito = properties
            .get(INCOGNITO_PROPERTY)
            .and_then(Value::as_bool)
            .unwrap_or(false);
        Some(Self {
            id: SessionId::new(id),
            incognito,
        })
    }

    /// Records the scope in a run's properties.
    pub fn write_to(&self, properties: &mut Map<String, Value>) {
        properties.insert(
            SESSION_PROPERTY.to_owned(),
            Value::String(self.id.as_str().to_owned()),
        );
        if self.incognito {
            properties.insert(INCOGNITO_PROPERTY.to_owned(), Value::Bool(true));
        } else {
            properties.remove(INCOGNITO_PROPERTY);
        }
    }

    /// The scope of the child session of `agent` for `conversation` (any
    /// form; it is normalised), incognito when this one is.
    pub fn child(&self, agent: &AgentId, conversation: Option<&str>) -> (Self, String) {
        let name = normalize_conversation(conversation);
        let id = child_session_id(&self.id, agent, &name);
        (
            Self {
                id,
                incognito: self.incognito,
            },
            name,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_trimmed_and_caseless_and_ids_unambiguous() {
        assert_eq!(normalize_conversation(Some("  Research ")), "research");
        assert_eq!(normalize_conversation(Some("   ")), "");
        assert_eq!(normalize_conversation(None), "");
        let a = child_session_id(&"p".into(), &"a/b".into(), "");
        let b = child_session_id(&"p/a".into(), &"b".into(), "");
        assert_ne!(a, b);
        assert_eq!(a.as_str(), "p/a%2Fb#");
    }

    #[test]
    fn transcripts_hide_tools_and_reasoning() {
        let messages = vec![
            Message::system("sys"),
            Message::user("q"),
            Message::Assistant {
                content: String::new(),
                tool_calls: vec![],
                reasoning: Some("secret".into()),
            },
            Message::Assistant {
                content: "a".into(),
                tool_calls: vec![],
                reasoning: Some("secret".into()),
            },
        ];
        let turns = transcript(&messages);
        assert_eq!(turns.len(), 2);
        assert_eq!(turns[1].text, "a");
    }
}
