//! The session tables and the statements on them.
//!
//! `tinyagents_sessions` holds a row per session: everything of a record
//! but its conversation, plus its `mark`, drawn from the sequence
//! `tinyagents_session_marks` by every write (a sequence never gives a
//! value twice, not even after a rollback, so a mark tells writes apart
//! across deletions and across processes). The conversation is in
//! `tinyagents_session_messages`: one row per write that added messages,
//! keyed by the revision that write made, holding a JSON array of the
//! messages it added (as text: Postgres' `jsonb` refuses the NUL character
//! that tool output may carry). An append inserts one row and never reads
//! or rewrites the earlier ones; a save replaces them all. The rows of a
//! session go with it (`ON DELETE CASCADE`).
//!
//! Ids are compared and ordered as bytes (`COLLATE "C"`), as the other
//! stores do, whatever the database's collation.
//!
//! Every write is one statement: the revision check is the `WHERE` of its
//! `UPDATE` (or the `ON CONFLICT` of a first save's `INSERT`), so a stale
//! write changes nothing, and the messages are written by the same
//! statement, so a write lands whole or not at all.

/// The schema component of the session store in `tinyagents_schema`.
pub(crate) const COMPONENT: &str = "sessions";

/// One migration per version; append only.
pub(crate) const MIGRATIONS: &[&str] = &[
    // Version 1.
    "CREATE SEQUENCE tinyagents_session_marks AS BIGINT;
    CREATE TABLE tinyagents_sessions (
        id TEXT COLLATE \"C\" PRIMARY KEY,
        -- The parent session of a child session; not a foreign key: a child
        -- may be saved before its parent is.
        parent TEXT COLLATE \"C\",
        agent_id TEXT,
        conversation TEXT NOT NULL,
        -- The message format (`SESSION_FORMAT`) it was written in.
        format INTEGER NOT NULL,
        revision BIGINT NOT NULL CHECK (revision > 0),
        -- The mark of its last write (`nextval('tinyagents_session_marks')`).
        mark BIGINT NOT NULL,
        updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
    );
    CREATE INDEX tinyagents_sessions_by_parent ON tinyagents_sessions (parent, id)
        WHERE parent IS NOT NULL;
    CREATE INDEX tinyagents_sessions_top_level ON tinyagents_sessions (mark)
        WHERE parent IS NULL;
    CREATE TABLE tinyagents_session_messages (
        session_id TEXT COLLATE \"C\" NOT NULL
            REFERENCES tinyagents_sessions (id) ON DELETE CASCADE,
        -- The revision the write that added them made.
        revision BIGINT NOT NULL,
        -- A JSON array of messages.
        messages TEXT NOT NULL,
        PRIMARY KEY (session_id, revision)
    );",
];

/// The columns of a record, its conversation as the message rows' texts
/// in the order they were written (`decode` reads them in this order).
macro_rules! record_columns {
    () => {
        "s.id, s.parent, s.agent_id, s.conversation, s.format, s.revision,
        ARRAY(SELECT m.messages FROM tinyagents_session_messages m
              WHERE m.session_id = s.id ORDER BY m.revision) AS messages"
    };
}

/// A record, `$1` its id. One statement: its conversation is of the same
/// snapshot.
pub(crate) const LOAD: &str = concat!(
    "SELECT ",
    record_columns!(),
    " FROM tinyagents_sessions s WHERE s.id = $1"
);

/// The child sessions of `$1`, in byte order of their ids.
pub(crate) const CHILDREN: &str = concat!(
    "SELECT ",
    record_columns!(),
    " FROM tinyagents_sessions s WHERE s.parent = $1 ORDER BY s.id"
);

/// A first save: `$1` id, `$2` parent, `$3` agent, `$4` conversation,
/// `$5` format, `$6` the messages (`NULL`: none). Returns the revision
/// and mark, or no row when the id is stored already.
pub(crate) const CREATE: &str = "WITH written AS (
        INSERT INTO tinyagents_sessions
            (id, parent, agent_id, conversation, format, revision, mark)
        VALUES ($1, $2, $3, $4, $5, 1, nextval('tinyagents_session_marks'))
        ON CONFLICT (id) DO NOTHING
        RETURNING revision, mark
    ), added AS (
        INSERT INTO tinyagents_session_messages (session_id, revision, messages)
        SELECT $1, revision, $6 FROM written WHERE $6::text IS NOT NULL
    )
    SELECT revision, mark FROM written";

/// A save based on revision `$7` (other parameters as [`CREATE`]): the
/// record and its whole conversation replaced. No row when the stored
/// revision is not `$7`.
pub(crate) const REPLACE: &str = "WITH written AS (
        UPDATE tinyagents_sessions
        SET parent = $2, agent_id = $3, conversation = $4, format = $5,
            revision = revision + 1, mark = nextval('tinyagents_session_marks'),
            updated_at = now()
        WHERE id = $1 AND revision = $7
        RETURNING revision, mark
    ), cleared AS (
        DELETE FROM tinyagents_session_messages
        WHERE session_id = $1 AND EXISTS (SELECT 1 FROM written)
    ), added AS (
        INSERT INTO tinyagents_session_messages (session_id, revision, messages)
        SELECT $1, revision, $6 FROM written WHERE $6::text IS NOT NULL
    )
    SELECT revision, mark FROM written";

/// An append based on revision `$2` of `$1`, of the messages `$3` (`NULL`:
/// none): one message row, the record's other columns untouched. No row
/// when the stored revision is not `$2`.
pub(crate) const APPEND: &str = "WITH written AS (
        UPDATE tinyagents_sessions
        SET revision = revision + 1, mark = nextval('tinyagents_session_marks'),
            updated_at = now()
        WHERE id = $1 AND revision = $2
        RETURNING revision, mark
    ), added AS (
        INSERT INTO tinyagents_session_messages (session_id, revision, messages)
        SELECT $1, revision, $3 FROM written WHERE $3::text IS NOT NULL
    )
    SELECT revision, mark FROM written";

/// The revision and mark of `$1`.
pub(crate) const STAMP: &str = "SELECT revision, mark FROM tinyagents_sessions WHERE id = $1";

/// `$1` and every session nested in it, by the chain of parents (never by
/// the ids' text: a top-level session may be named like a child). One
/// statement, so of one snapshot: a child first saved while its parent is
/// being deleted can outlive it (an append to a session being deleted
/// waits, then conflicts with revision 0).
pub(crate) const DELETE: &str = "WITH RECURSIVE nested (id) AS (
        SELECT $1::text COLLATE \"C\"
        UNION
        SELECT s.id FROM tinyagents_sessions s JOIN nested n ON s.parent = n.id
    )
    DELETE FROM tinyagents_sessions WHERE id IN (SELECT id FROM nested)";

/// The sessions that are not a child session, the most recently written
/// first.
pub(crate) const TOP_LEVEL: &str =
    "SELECT id FROM tinyagents_sessions WHERE parent IS NULL ORDER BY mark DESC";
