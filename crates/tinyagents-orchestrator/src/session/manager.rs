//! `SessionManager`: the store, the in-memory side for incognito sessions,
//! and one async lock per session, so two calls never mutate the same
//! session at once.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use tinyagents_core::SessionId;
use tokio::sync::OwnedMutexGuard;

use super::{
    ChatTurn, InMemorySessionStore, SessionError, SessionRecord, SessionScope, SessionStore,
};

/// Dead lock entries are swept when the table grows past this.
const SWEEP_AT: usize = 1024;

/// Where sessions go: the host's store, or memory for incognito sessions.
pub struct SessionManager {
    store: Arc<dyn SessionStore>,
    incognito: InMemorySessionStore,
    locks: Mutex<HashMap<SessionId, Weak<tokio::sync::Mutex<()>>>>,
}

impl std::fmt::Debug for SessionManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionManager")
            .field("incognito_sessions", &self.incognito.len())
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
