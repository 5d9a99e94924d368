//! The session-store conformance suite against the built-in stores: in
//! memory, and SQLite (fresh, reopened, and two handles on one file).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use tinyagents_orchestrator::{
    InMemorySessionStore, SessionError, SessionRecord, SessionStore, session_conformance,
};

#[tokio::test]
async fn the_memory_store_conforms() {
    session_conformance::run_all(&InMemorySessionStore::new()).await;
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use super::*;
    use tinyagents_core::Message;
    use tinyagents_orchestrator::SqliteSessionStore;

    #[tokio::test]
    async fn the_sqlite_store_conforms_fresh_and_reopened() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.db");
        let store = SqliteSessionStore::open(&path).await.unwrap();
        session_conformance::run_all(&store).await;
        drop(store);
        let again = SqliteSessionStore::open(&path).await.unwrap();
        session_conformance::run_all(&again).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_sqlite_handles_on_one_file_conform_and_see_each_others_writes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessions.db");
        let first = SqliteSessionStore::open(&path).await.unwrap();
        let second = SqliteSessionStore::open(&path).await.unwrap();
        session_conformance::run_all(&second).await;
        tokio::join!(
            session_conformance::run_all(&first),
            session_conformance::run_all(&second)
        );

        let id = "shared".into();
        let record = SessionRecord {
            messages: vec![Message::user("q")],
            ..SessionRecord::new(id)
        };
        assert_eq!(first.save(&record).await.unwrap(), 1);
        let read = second.load(&record.id).await.unwrap().unwrap();
        first
            .append(&record.id, 1, &[Message::assistant("a")])
            .await
            .unwrap();
        let stale = second.save(&read).await.unwrap_err();
        assert!(
            matches!(
                stale,
                SessionError::Conflict {
                    expected: 1,
                    found: 2,
                    ..
                }
            ),
            "{stale}"
        );
    }
}

/// The suite itself: a store with one flaw fails it.
mod flaws {
    use std::collections::BTreeSet;
    use std::sync::{Arc, Mutex};

    use async_trait::async_trait;
    use tinyagents_core::{Message, SessionId};
    use tinyagents_orchestrator::{SessionStamp, session_conformance};

    use super::*;

    #[derive(Debug, Clone, Copy)]
    enum Flaw {
        ChildrenWithGrandchildren,
        DeleteByIdPrefix,
        AppendWithoutCheck,
        SaveWithoutCheck,
        MarkIsRevision,
    }

    /// The memory store, but for `flaw`.
    struct Flawed {
        inner: InMemorySessionStore,
        flaw: Flaw,
        ids: Mutex<BTreeSet<SessionId>>,
    }

    #[async_trait]
    impl SessionStore for Flawed {
        async fn load(&self, id: &SessionId) -> Result<Option<SessionRecord>, SessionError> {
            self.inner.load(id).await
        }

        async fn save(&self, record: &SessionRecord) -> Result<u64, SessionError> {
            self.ids.lock().unwrap().insert(record.id.clone());
            let mut record = record.clone();
            if let Flaw::SaveWithoutCheck = self.flaw {
                record.revision = self
                    .inner
                    .stamp(&record.id)
                    .await?
                    .map_or(0, |s| s.revision);
            }
            self.inner.save(&record).await
        }

        async fn append(
            &self,
            id: &SessionId,
            revision: u64,
            messages: &[Message],
        ) -> Result<SessionStamp, SessionError> {
            let revision = match (self.flaw, self.inner.stamp(id).await?) {
                (Flaw::AppendWithoutCheck, Some(stamp)) => stamp.revision,
                _ => revision,
            };
            let stamp = self.inner.append(id, revision, messages).await?;
            Ok(self.flawed(stamp))
        }

        async fn stamp(&self, id: &SessionId) -> Result<Option<SessionStamp>, SessionError> {
            Ok(self.inner.stamp(id).await?.map(|s| self.flawed(s)))
        }

        async fn children(&self, parent: &SessionId) -> Result<Vec<SessionRecord>, SessionError> {
            let mut children = self.inner.children(parent).await?;
            if let Flaw::ChildrenWithGrandchildren = self.flaw {
                let mut k = 0;
                while k < children.len() {
                    let id = children[k].id.clone();
                    children.extend(self.inner.children(&id).await?);
                    k += 1;
                }
                children.sort_by(|a, b| a.id.cmp(&b.id));
            }
            Ok(children)
        }

        async fn delete(&self, id: &SessionId) -> Result<(), SessionError> {
            if let Flaw::DeleteByIdPrefix = self.flaw {
                let prefix = format!("{id}/");
                let ids: Vec<SessionId> = self.ids.lock().unwrap().iter().cloned().collect();
                for other in ids.iter().filter(|o| o.as_str().starts_with(&prefix)) {
                    self.inner.delete(other).await?;
                }
            }
            self.inner.delete(id).await
        }
    }

    impl Flawed {
        fn flawed(&self, stamp: SessionStamp) -> SessionStamp {
            match self.flaw {
                Flaw::MarkIsRevision => SessionStamp {
                    mark: stamp.revision,
                    ..stamp
                },
                _ => stamp,
            }
        }
    }

    async fn fails(flaw: Flaw) {
        let store = Arc::new(Flawed {
            inner: InMemorySessionStore::new(),
            flaw,
            ids: Mutex::default(),
        });
        let run = tokio::spawn(async move { session_conformance::run_all(&*store).await });
        let error = run.await.expect_err("the suite passed a flawed store");
        assert!(error.is_panic(), "{flaw:?}: {error}");
    }

    #[tokio::test]
    async fn the_suite_fails_stores_with_a_flaw() {
        for flaw in [
            Flaw::ChildrenWithGrandchildren,
            Flaw::DeleteByIdPrefix,
            Flaw::AppendWithoutCheck,
            Flaw::SaveWithoutCheck,
            Flaw::MarkIsRevision,
        ] {
            fails(flaw).await;
        }
    }
}
