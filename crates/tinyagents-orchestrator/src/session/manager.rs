//! `SessionManager`: the store, the in-memory side for incognito sessions,
//! one async lock per session, so two calls never mutate the same session
//! at once, and the conversations it wrote last, kept for the next call on
//! the same session.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use tinyagents_core::{Message, SessionId};
use tokio::sync::OwnedMutexGuard;

use super::kept::{Kept, Transcript};
use super::{
    ChatTurn, InMemorySessionStore, SessionError, SessionRecord, SessionScope, SessionStamp,
    SessionStore,
};

/// Dead lock entries are swept when the table grows past this.
const SWEEP_AT: usize = 1024;

/// Where sessions go: the host's store, or memory for incognito sessions.
///
/// It keeps in memory the conversations it appended to last (up to 256
/// sessions and 100,000 messages per store, the least recently written
/// going first), and hands one to the next call on its session instead of
/// reading the store, when the store's [`SessionStamp`] shows that nobody
/// wrote the session since.
pub struct SessionManager {
    store: Arc<dyn SessionStore>,
    incognito: InMemorySessionStore,
    locks: Mutex<HashMap<SessionId, Weak<tokio::sync::Mutex<()>>>>,
    kept: Mutex<Kept>,
    kept_incognito: Mutex<Kept>,
}

impl std::fmt::Debug for SessionManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionManager")
            .field("incognito_sessions", &self.incognito.len())
            .field("kept_conversations", &self.kept.lock().len())
            .finish_non_exhaustive()
    }
}

impl SessionManager {
    /// Sessions kept in `store` (incognito ones in memory).
    pub fn new(store: Arc<dyn SessionStore>) -> Self {
        Self {
            store,
            incognito: InMemorySessionStore::new(),
            locks: Mutex::new(HashMap::new()),
            kept: Mutex::new(Kept::default()),
            kept_incognito: Mutex::new(Kept::default()),
        }
    }

    /// The host's store.
    pub fn store(&self) -> &Arc<dyn SessionStore> {
        &self.store
    }

    fn store_for(&self, scope: &SessionScope) -> &dyn SessionStore {
        if scope.incognito {
            &self.incognito
        } else {
            self.store.as_ref()
        }
    }

    fn kept_for(&self, scope: &SessionScope) -> &Mutex<Kept> {
        if scope.incognito {
            &self.kept_incognito
        } else {
            &self.kept
        }
    }

    /// Waits until no one else holds the session `id`, and holds it until
    /// the guard is dropped.
    pub async fn lock(&self, id: &SessionId) -> OwnedMutexGuard<()> {
        let lock = {
            let mut locks = self.locks.lock();
            if locks.len() >= SWEEP_AT {
                locks.retain(|_, weak| weak.strong_count() > 0);
            }
            match locks.get(id).and_then(Weak::upgrade) {
                Some(lock) => lock,
                None => {
                    let lock = Arc::new(tokio::sync::Mutex::new(()));
                    locks.insert(id.clone(), Arc::downgrade(&lock));
                    lock
                }
            }
        };
        lock.lock_owned().await
    }

    /// The session of `scope`; an empty record when it was never saved.
    pub async fn load(&self, scope: &SessionScope) -> Result<SessionRecord, SessionError> {
        Ok(self
            .store_for(scope)
            .load(&scope.id)
            .await?
            .unwrap_or_else(|| SessionRecord::new(scope.id.clone())))
    }

    /// Saves `record` where `scope` keeps it.
    pub async fn save(
        &self,
        scope: &SessionScope,
        record: &SessionRecord,
    ) -> Result<u64, SessionError> {
        self.store_for(scope).save(record).await
    }

    /// Appends `messages` to the session of `scope`, stored at `revision`
    /// (see [`SessionStore::append`]).
    pub async fn append(
        &self,
        scope: &SessionScope,
        revision: u64,
        messages: &[Message],
    ) -> Result<SessionStamp, SessionError> {
        self.store_for(scope)
            .append(&scope.id, revision, messages)
            .await
    }

    /// The session of `scope` for one call on it, which holds its
    /// [`lock`](Self::lock): the conversation this manager kept, as the
    /// transcript of the run that wrote it, when the store's stamp is still
    /// the one its last write returned (`true`), else the stored one, or an
    /// empty one when it was never saved (`false`). The record's own
    /// `messages` are empty: the conversation is the transcript's. A kept
    /// conversation is handed out once; the call gives it back with
    /// [`write_back`](Self::write_back).
    pub(crate) async fn check_out(
        &self,
        scope: &SessionScope,
    ) -> Result<(SessionRecord, Transcript, bool), SessionError> {
        let kept = self.kept_for(scope).lock().take(&scope.id);
        if let Some((stamp, record, transcript)) = kept
            && self.store_for(scope).stamp(&scope.id).await? == Some(stamp)
        {
            return Ok((record, transcript, true));
        }
        let mut record = self.load(scope).await?;
        let conversation = std::mem::take(&mut record.messages);
        Ok((record, Transcript::conversation_only(conversation), false))
    }

    /// Stores the conversation of `transcript` as the session `record`
    /// (checked out at `record.revision`) after a call on it: with
    /// `new_from`, appends the transcript's messages from there on (the
    /// conversation before them is what the store holds) and keeps the
    /// transcript for the next [`check_out`](Self::check_out); without,
    /// saves the conversation whole.
    pub(crate) async fn write_back(
        &self,
        scope: &SessionScope,
        mut record: SessionRecord,
        transcript: Transcript,
        new_from: Option<usize>,
    ) -> Result<(), SessionError> {
        let Some(from) = new_from else {
            record.messages = transcript.into_conversation();
            self.save(scope, &record).await?;
            return Ok(());
        };
        let added = transcript.messages.get(from..).unwrap_or(&[]);
        let stamp = self.append(scope, record.revision, added).await?;
        record.revision = stamp.revision;
        self.kept_for(scope).lock().put(stamp, record, transcript);
        Ok(())
    }

    /// What a person may read of the session: user and assistant text.
    pub async fn transcript(&self, scope: &SessionScope) -> Result<Vec<ChatTurn>, SessionError> {
        Ok(self
            .store_for(scope)
            .load(&scope.id)
            .await?
            .map(|record| record.transcript())
            .unwrap_or_default())
    }

    /// The child sessions of `scope`'s session.
    pub async fn children(&self, scope: &SessionScope) -> Result<Vec<SessionRecord>, SessionError> {
        self.store_for(scope).children(&scope.id).await
    }
}
