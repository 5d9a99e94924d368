//! `PostgresSessionStore`: the orchestrator's sessions in PostgreSQL,
//! shared by every process that opens the same database.
//!
//! The tables and statements are in `schema.rs`. A save or an append is
//! refused with [`SessionError::Conflict`] when the session's stored
//! revision is not the one it was based on, by the database itself (the
//! `WHERE revision = $n` of the statement that writes), so two processes
//! writing one session never lose an update. An append writes only the
//! messages it adds. A schema newer than this build is refused at
//! [`open`](PostgresSessionStore::open) ([`SessionError::TooNew`]); a
//! session written in a newer message format is refused when read
//! ([`SessionError::Format`]).

mod schema;

use std::fmt;

use async_trait::async_trait;
use deadpool_postgres::Object;
use tinyagents_core::{AgentId, Message, SessionId};
use tinyagents_orchestrator::{
    SESSION_FORMAT, SessionError, SessionRecord, SessionStamp, SessionStore,
};
use tokio_postgres::Row;

use crate::database::PgDatabase;
use crate::error::{PgError, is_read_only};
use crate::migrate::migrate;

/// How often a write that lost to a session deleted (and perhaps made
/// again) under it tries again before reporting the conflict it found.
const WRITE_ATTEMPTS: usize = 3;

/// Sessions in PostgreSQL. Cheap to clone (the database's pool is shared).
#[derive(Clone)]
pub struct PostgresSessionStore {
    db: PgDatabase,
}

impl fmt::Debug for PostgresSessionStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresSessionStore")
            .field("target", &self.db.target())
            .finish()
    }
}

impl PostgresSessionStore {
    /// The schema version of the session tables this build writes.
    pub const SCHEMA_VERSION: i64 = schema::MIGRATIONS.len() as i64;

    /// Opens the session store of `db`, creating or migrating its tables
    /// (component `sessions` of `tinyagents_schema`); a schema newer than
    /// this build is refused ([`SessionError::TooNew`]).
    pub async fn open(db: &PgDatabase) -> Result<Self, SessionError> {
        let mut client = db.pooled().await?;
        migrate(&mut client, schema::COMPONENT, schema::MIGRATIONS).await?;
        Ok(Self { db: db.clone() })
    }

    /// The ids of the stored sessions that are not a child session, the
    /// most recently written first (for hosts that list sessions; the
    /// [`SessionStore`] trait has no listing).
    pub async fn top_level_sessions(&self) -> Result<Vec<SessionId>, SessionError> {
        let client = self.client().await?;
        let rows = client
            .query(schema::TOP_LEVEL, &[])
            .await
            .map_err(|e| self.failed("list sessions", e))?;
        rows.iter()
            .map(|row| {
                row.try_get::<_, String>(0)
                    .map(SessionId::from)
                    .map_err(|e| self.failed("list sessions", e))
            })
            .collect()
    }

    async fn client(&self) -> Result<Object, SessionError> {
        Ok(self.db.pooled().await?)
    }

    /// A failed statement: the server gone, or the statement refused.
    fn failed(&self, operation: &'static str, err: tokio_postgres::Error) -> SessionError {
        if err.is_closed() {
            self.db.unreachable(err).into()
        } else if is_read_only(&err) {
            PgError::ReadOnly {
                target: self.db.target().to_owned(),
                operation,
                detail: crate::error::detail(&err),
            }
            .into()
        } else {
            PgError::query(operation, err).into()
        }
    }

    /// The stored revision of `id` (0: not stored), read after a write
    /// found no row to write.
    async fn found(&self, client: &Object, id: &SessionId) -> Result<u64, SessionError> {
        let statement = client
            .prepare_cached(schema::STAMP)
            .await
            .map_err(|e| self.failed("read a session's revision", e))?;
        let row = client
            .query_opt(&statement, &[&id.as_str()])
            .await
            .map_err(|e| self.failed("read a session's revision", e))?;
        row.map(|row| self.stamp_of(&row).map(|s| s.revision))
            .transpose()
            .map(|found| found.unwrap_or(0))
    }

    fn stamp_of(&self, row: &Row) -> Result<SessionStamp, SessionError> {
        let read = |k| {
            row.try_get::<_, i64>(k)
                .map(|v| u64::try_from(v).unwrap_or(0))
                .map_err(|e| self.failed("read a session's stamp", e))
        };
        Ok(SessionStamp {
            revision: read(0)?,
            mark: read(1)?,
        })
    }

    /// The record of a row of `schema::LOAD` or `schema::CHILDREN`.
    fn decode(&self, row: &Row) -> Result<SessionRecord, SessionError> {
        let column = |e| self.failed("read a session", e);
        let id = SessionId::from(row.try_get::<_, String>(0).map_err(column)?);
        let format = row.try_get::<_, i32>(4).map_err(column)?;
        let format = u32::try_from(format).unwrap_or(u32::MAX);
        if format != SESSION_FORMAT {
            return Err(SessionError::Format {
                id,
                found: format,
                supported: SESSION_FORMAT,
            });
        }
        let mut messages = Vec::new();
        for text in row.try_get::<_, Vec<String>>(6).map_err(column)? {
            let batch: Vec<Message> =
                serde_json::from_str(&text).map_err(|error| SessionError::Corrupt {
                    path: self.db.target().to_owned(),
                    message: format!("session {id} cannot be read: {error}"),
                    source: Some(error.into()),
                })?;
            messages.extend(batch);
        }
        Ok(SessionRecord {
            parent: row
                .try_get::<_, Option<String>>(1)
                .map_err(column)?
                .map(SessionId::from),
            agent_id: row
                .try_get::<_, Option<String>>(2)
                .map_err(column)?
                .map(AgentId::from),
            conversation: row.try_get(3).map_err(column)?,
            revision: u64::try_from(row.try_get::<_, i64>(5).map_err(column)?).unwrap_or(0),
            messages,
            id,
        })
    }
}

/// Messages as one message row's text; `None` for no messages (no row).
fn encode(id: &SessionId, messages: &[Message]) -> Result<Option<String>, SessionError> {
    if messages.is_empty() {
        return Ok(None);
    }
    serde_json::to_string(messages)
        .map(Some)
        .map_err(|error| SessionError::Store {
            message: format!("session {id} cannot be encoded: {error}"),
            source: Some(error.into()),
        })
}

/// A revision as the database stores it (one past the largest is never
/// stored, so it conflicts).
fn stored(revision: u64) -> i64 {
    i64::try_from(revision).unwrap_or(i64::MAX)
}

#[async_trait]
impl SessionStore for PostgresSessionStore {
    async fn load(&self, id: &SessionId) -> Result<Option<SessionRecord>, SessionError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(schema::LOAD)
            .await
            .map_err(|e| self.failed("load a session", e))?;
        let row = client
            .query_opt(&statement, &[&id.as_str()])
            .await
            .map_err(|e| self.failed("load a session", e))?;
        row.map(|row| self.decode(&row)).transpose()
    }

    async fn save(&self, record: &SessionRecord) -> Result<u64, SessionError> {
        let text = encode(&record.id, &record.messages)?;
        let expected = record.revision;
        let client = self.client().await?;
        let sql = if expected == 0 {
            schema::CREATE
        } else {
            schema::REPLACE
        };
        let statement = client
            .prepare_cached(sql)
            .await
            .map_err(|e| self.failed("save a session", e))?;
        let id = record.id.as_str();
        let parent = record.parent.as_ref().map(SessionId::as_str);
        let agent = record.agent_id.as_ref().map(AgentId::as_str);
        let format = i32::try_from(SESSION_FORMAT).unwrap_or(i32::MAX);
        let base = stored(expected);
        let mut found = expected;
        for _ in 0..WRITE_ATTEMPTS {
            let written = if expected == 0 {
                client
                    .query_opt(
                        &statement,
                        &[&id, &parent, &agent, &record.conversation, &format, &text],
                    )
                    .await
            } else {
                client
                    .query_opt(
                        &statement,
                        &[
                            &id,
                            &parent,
                            &agent,
                            &record.conversation,
                            &format,
                            &text,
                            &base,
                        ],
                    )
                    .await
            }
            .map_err(|e| self.failed("save a session", e))?;
            if let Some(row) = written {
                return Ok(self.stamp_of(&row)?.revision);
            }
            found = self.found(&client, &record.id).await?;
            // Stored at the revision the write found no row of: deleted (and
            // perhaps made again) meanwhile; try again.
            if found != expected {
                break;
            }
        }
        Err(SessionError::Conflict {
            id: record.id.clone(),
            expected,
            found,
        })
    }

    async fn append(
        &self,
        id: &SessionId,
        revision: u64,
        messages: &[Message],
    ) -> Result<SessionStamp, SessionError> {
        let text = encode(id, messages)?;
        let client = self.client().await?;
        let statement = client
            .prepare_cached(schema::APPEND)
            .await
            .map_err(|e| self.failed("append to a session", e))?;
        let base = stored(revision);
        let mut found = revision;
        for _ in 0..WRITE_ATTEMPTS {
            let written = client
                .query_opt(&statement, &[&id.as_str(), &base, &text])
                .await
                .map_err(|e| self.failed("append to a session", e))?;
            if let Some(row) = written {
                return self.stamp_of(&row);
            }
            found = self.found(&client, id).await?;
            // Stored at the revision the write found no row of: deleted and
            // made again meanwhile; try again. (Revision 0 is never stored.)
            if found != revision || revision == 0 {
                break;
            }
        }
        if found == 0 {
            return Err(not_stored(id, revision));
        }
        Err(SessionError::Conflict {
            id: id.clone(),
            expected: revision,
            found,
        })
    }

    async fn stamp(&self, id: &SessionId) -> Result<Option<SessionStamp>, SessionError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(schema::STAMP)
            .await
            .map_err(|e| self.failed("read a session's stamp", e))?;
        let row = client
            .query_opt(&statement, &[&id.as_str()])
            .await
            .map_err(|e| self.failed("read a session's stamp", e))?;
        row.map(|row| self.stamp_of(&row)).transpose()
    }

    async fn children(&self, parent: &SessionId) -> Result<Vec<SessionRecord>, SessionError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(schema::CHILDREN)
            .await
            .map_err(|e| self.failed("list child sessions", e))?;
        let rows = client
            .query(&statement, &[&parent.as_str()])
            .await
            .map_err(|e| self.failed("list child sessions", e))?;
        rows.iter().map(|row| self.decode(row)).collect()
    }

    async fn delete(&self, id: &SessionId) -> Result<(), SessionError> {
        let client = self.client().await?;
        client
            .execute(schema::DELETE, &[&id.as_str()])
            .await
            .map_err(|e| self.failed("delete a session", e))?;
        Ok(())
    }
}

/// Why an append based on `revision` found no session `id` (as the
/// orchestrator's stores say it).
fn not_stored(id: &SessionId, revision: u64) -> SessionError {
    if revision == 0 {
        SessionError::NotStored { id: id.clone() }
    } else {
        SessionError::Conflict {
            id: id.clone(),
            expected: revision,
            found: 0,
        }
    }
}
