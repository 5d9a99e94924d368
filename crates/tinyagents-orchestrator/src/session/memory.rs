//! `InMemorySessionStore`: sessions in a map, for tests, incognito chats
//! and hosts that keep nothing.

use std::collections::{HashMap, HashSet};

use async_trait::async_trait;
use parking_lot::Mutex;
use tinyagents_core::{Message, SessionId};

use super::{SessionError, SessionRecord, SessionStamp, SessionStore};

/// Sessions in process memory; gone when the process ends.
#[derive(Debug, Default)]
pub struct InMemorySessionStore {
    sessions: Mutex<Sessions>,
}

/// The records, the mark of each one's last write, and the last mark given.
#[derive(Debug, Default)]
struct Sessions {
    records: HashMap<SessionId, (SessionRecord, u64)>,
    marks: u64,
}

impl Sessions {
    /// The stored revision of `id` (0: not stored), when it is `expected`.
    fn check(&self, id: &SessionId, expected: u64) -> Result<(), SessionError> {
        let found = self
            .records
            .get(id)
            .map_or(0, |(stored, _)| stored.revision);
        if found == expected {
            Ok(())
        } else {
            Err(SessionError::Conflict {
                id: id.clone(),
                expected,
                found,
            })
        }
    }

    fn next_mark(&mut self) -> u64 {
        self.marks += 1;
        self.marks
    }
}

impl InMemorySessionStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many sessions it holds.
    pub fn len(&self) -> usize {
        self.sessions.lock().records.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.sessions.lock().records.is_empty()
    }
}

#[async_trait]
impl SessionStore for InMemorySessionStore {
    async fn load(&self, id: &SessionId) -> Result<Option<SessionRecord>, SessionError> {
        Ok(self
            .sessions
            .lock()
            .records
            .get(id)
            .map(|(record, _)| record.clone()))
    }

    async fn save(&self, record: &SessionRecord) -> Result<u64, SessionError> {
        let mut sessions = self.sessions.lock();
        sessions.check(&record.id, record.revision)?;
        let revision = record.revision + 1;
        let mut stored = record.clone();
        stored.revision = revision;
        let mark = sessions.next_mark();
        sessions.records.insert(record.id.clone(), (stored, mark));
        Ok(revision)
    }

    async fn append(
        &self,
        id: &SessionId,
        revision: u64,
        messages: &[Message],
    ) -> Result<SessionStamp, SessionError> {
        let sessions = &mut *self.sessions.lock();
        let Some((stored, stored_mark)) = sessions.records.get_mut(id) else {
            return Err(SessionError::not_stored(id, revision));
        };
        if stored.revision != revision {
            return Err(SessionError::Conflict {
                id: id.clone(),
                expected: revision,
                found: stored.revision,
            });
        }
        stored.messages.extend_from_slice(messages);
        stored.revision = revision + 1;
        sessions.marks += 1;
        *stored_mark = sessions.marks;
        Ok(SessionStamp {
            revision: stored.revision,
            mark: sessions.marks,
        })
    }

    async fn stamp(&self, id: &SessionId) -> Result<Option<SessionStamp>, SessionError> {
        Ok(self
            .sessions
            .lock()
            .records
            .get(id)
            .map(|(record, mark)| SessionStamp {
                revision: record.revision,
                mark: *mark,
            }))
    }

    async fn children(&self, parent: &SessionId) -> Result<Vec<SessionRecord>, SessionError> {
        let mut children: Vec<SessionRecord> = self
            .sessions
            .lock()
            .records
            .values()
            .filter(|(r, _)| r.parent.as_ref() == Some(parent))
            .map(|(r, _)| r.clone())
            .collect();
        children.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(children)
    }

    async fn delete(&self, id: &SessionId) -> Result<(), SessionError> {
        let sessions = &mut self.sessions.lock().records;
        let mut gone: HashSet<SessionId> = HashSet::from([id.clone()]);
        sessions.remove(id);
        loop {
            let next: Vec<SessionId> = sessions
                .values()
                .filter(|(r, _)| r.parent.as_ref().is_some_and(|p| gone.contains(p)))
                .map(|(r, _)| r.id.clone())
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
