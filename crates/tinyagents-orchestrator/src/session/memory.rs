//! `InMemorySessionStore`: sessions in a map, for tests, incognito chats
//! and hosts that keep nothing.

use std::collections::{HashMap, HashSet};

use async_trait::async_trait;
use parking_lot::Mutex;
use tinyagents_core::SessionId;

use super::{SessionError, SessionRecord, SessionStore};

/// Sessions in process memory; gone when the process ends.
#[derive(Debug, Default)]
pub struct InMemorySessionStore {
    sessions: Mutex<HashMap<SessionId, SessionRecord>>,
}

impl InMemorySessionStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many sessions it holds.
    pub fn len(&self) -> usize {
        self.sessions.lock().len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.sessions.lock().is_empty()
    }
}

#[async_trait]
impl SessionStore for InMemorySessionStore {
    async fn load(&self, id: &SessionId) -> Result<Option<SessionRecord>, SessionError> {
        Ok(self.sessions.lock().get(id).cloned())
    }

    async fn save(&self, record: &SessionRecord) -> Result<u64, SessionError> {
        let mut sessions = self.sessions.lock();
        let found = sessions.get(&record.id).map_or(0, |stored| stored.revision);
        if found != record.revision {
            return Err(SessionError::Conflict {
                id: record.id.clone(),
                expected: record.revision,
                found,
            });
        }
        let revision = record.revision + 1;
        let mut stored = record.clone();
        stored.revision = revision;
        sessions.insert(record.id.clone(), stored);
        Ok(revision)
    }

    async fn children(&self, parent: &SessionId) -> Result<Vec<SessionRecord>, SessionError> {
        let mut children: Vec<SessionRecord> = self
            .sessions
            .lock()
            .values()
            .filter(|r| r.parent.as_ref() == Some(parent))
            .cloned()
            .collect();
        children.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(children)
    }

    async fn delete(&self, id: &SessionId) -> Result<(), SessionError> {
        let mut sessions = self.sessions.lock();
        let mut gone: HashSet<SessionId> = HashSet::from([id.clone()]);
        sessions.remove(id);
        loop {
            let next: Vec<SessionId> = sessions
                .values()
                .filter(|r| r.parent.as_ref().is_some_and(|p| gone.contains(p)))
                .map(|r| r.id.clone())
                .collect();
            if next.is_empty() {
                return Ok(());
            }
            for child in next {
                sessions.remove(&child);
                gone.insert(child);
            }
        }
    }
}
