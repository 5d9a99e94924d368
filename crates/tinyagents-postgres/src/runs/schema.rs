//! The run store's tables (component `runs` of `tinyagents_schema`), and
//! their migrations.
//!
//! Version 1 is the runs queue of the earlier build (`RunQueue`: one table
//! of runs as leased work). Version 2 is the run store
//! (`tinyagents_runs::RunStore`): the record of each run with its sealed
//! identity and suspended state, the calls each suspension waits on with
//! their decisions, each run's history, and the store's own sealing key.
//! Version 3 adds each run's journal (`tinyagents_runs::Journal`): the
//! events its segments emitted, as JSON text.
//! Its columns are those of the SQLite store's (`tinyagents-runs`,
//! `src/sqlite/schema.rs`), the run's id named `id` (the ledger's fence
//! reads `SELECT epoch FROM tinyagents_runs WHERE id = $1 FOR KEY SHARE`).
//!
//! Times are BIGINT milliseconds since the Unix epoch by the server's clock,
//! read once at the start of each transaction (a decision's seal covers its
//! time, so what is stored is what was sealed). The stored request, the
//! sealed state, a waiting call's arguments and a history entry are JSON as
//! TEXT, never JSONB: a seal covers the exact text, which JSONB would
//! reorder. Ids are `COLLATE "C"`, so runs sort by their bytes as in the
//! SQLite store, whatever the database's locale.

/// The schema component of the run store in `tinyagents_schema`.
pub(crate) const COMPONENT: &str = "runs";

/// One migration per version: `MIGRATIONS[k]` takes the component from
/// version `k` to `k + 1`. Append only; never edit a released entry.
pub(crate) const MIGRATIONS: &[&str] = &[
    // Version 1.
    "CREATE TABLE tinyagents_runs (
        id TEXT PRIMARY KEY,
        status TEXT NOT NULL CHECK (status IN
            ('queued', 'running', 'awaiting_approval', 'completed', 'failed')),
        -- What to run: the request (input, session, properties), as JSON.
        request JSONB NOT NULL,
        -- The worker holding the lease, and until when (running only).
        owner TEXT,
        lease_until TIMESTAMPTZ,
        -- Incremented by every claim; every ledger write of the run's
        -- worker carries it (fencing).
        epoch BIGINT NOT NULL DEFAULT 0,
        -- Claims so far: a claim of a run claimed before recovers it.
        attempts INTEGER NOT NULL DEFAULT 0,
        queued_at TIMESTAMPTZ NOT NULL DEFAULT now(),
        started_at TIMESTAMPTZ,
        finished_at TIMESTAMPTZ,
        -- A run awaiting approval: its suspended state, then the decisions.
        suspended JSONB,
        decisions JSONB,
        -- How it ended: the answer, or the error.
        outcome JSONB,
        error TEXT
    );
    CREATE INDEX tinyagents_runs_queued ON tinyagents_runs (queued_at, id)
        WHERE status = 'queued';
    CREATE INDEX tinyagents_runs_leased ON tinyagents_runs (lease_until)
        WHERE status = 'running';",
    // Version 2: the run store.
    //
    // The runs queued by the earlier build are not carried over: their
    // requests were neither sealed nor tied to an agent, so nothing could
    // run them as the run store runs a run. Their table (with its key and
    // indexes) is kept aside as `tinyagents_runs_v1`, unread, for an
    // operator to look at or drop.
    "ALTER TABLE tinyagents_runs RENAME TO tinyagents_runs_v1;
    ALTER TABLE tinyagents_runs_v1 RENAME CONSTRAINT tinyagents_runs_pkey
        TO tinyagents_runs_v1_pkey;
    ALTER INDEX tinyagents_runs_queued RENAME TO tinyagents_runs_queued_v1;
    ALTER INDEX tinyagents_runs_leased RENAME TO tinyagents_runs_leased_v1;
    CREATE TABLE tinyagents_runs (
        id TEXT COLLATE \"C\" PRIMARY KEY,
        agent TEXT NOT NULL,
        file_path TEXT,
        file_sha256 TEXT,
        session TEXT,
        -- What it was asked (JSON text, as sealed).
        request TEXT NOT NULL,
        -- The seal of the identity above.
        seal TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('queued', 'running', 'awaiting_approval',
            'completed', 'terminated', 'limit_reached', 'cancelled', 'failed')),
        -- The holder (running only), and until when its lease runs (ms).
        owner TEXT,
        host TEXT,
        pid BIGINT,
        lease_until BIGINT,
        -- Raised by every claim; a holder's writes (and the ledger's fenced
        -- writes) name it.
        epoch BIGINT NOT NULL DEFAULT 0,
        created_at BIGINT NOT NULL,
        started_at BIGINT,
        updated_at BIGINT NOT NULL,
        ended_at BIGINT,
        input_tokens BIGINT NOT NULL DEFAULT 0,
        output_tokens BIGINT NOT NULL DEFAULT 0,
        final_text TEXT,
        error TEXT,
        -- Suspensions so far; the waiting calls of the last one count.
        suspension BIGINT NOT NULL DEFAULT 0,
        -- The state it waits in, sealed (JSON of a SealedRun), until the
        -- claim that resumes it.
        suspended TEXT
    );
    -- The listing by status, oldest first.
    CREATE INDEX tinyagents_runs_by_status ON tinyagents_runs (status, created_at, id);
    -- The queue: queued runs, in the order workers take them.
    CREATE INDEX tinyagents_runs_queued ON tinyagents_runs (updated_at, id)
        WHERE status = 'queued';
    -- Leases: running runs, the oldest lease (or none) first.
    CREATE INDEX tinyagents_runs_leased ON tinyagents_runs (lease_until NULLS FIRST, id)
        WHERE status = 'running';
    CREATE TABLE tinyagents_waiting_calls (
        run_id TEXT COLLATE \"C\" NOT NULL,
        suspension BIGINT NOT NULL,
        position BIGINT NOT NULL,
        call_id TEXT COLLATE \"C\" NOT NULL,
        tool TEXT NOT NULL,
        reason TEXT NOT NULL,
        args_hash TEXT NOT NULL,
        arguments TEXT NOT NULL,
        requested_at BIGINT NOT NULL,
        seal TEXT NOT NULL,
        approved BOOLEAN,
        decision_reason TEXT,
        decided_by TEXT,
        decided_at BIGINT,
        decision_seal TEXT,
        PRIMARY KEY (run_id, suspension, call_id)
    );
    -- The approval inbox: undecided calls, oldest first.
    CREATE INDEX tinyagents_waiting_calls_undecided
        ON tinyagents_waiting_calls (requested_at, run_id, position)
        WHERE approved IS NULL;
    CREATE TABLE tinyagents_run_history (
        seq BIGSERIAL PRIMARY KEY,
        run_id TEXT COLLATE \"C\" NOT NULL,
        at BIGINT NOT NULL,
        by TEXT NOT NULL,
        -- A RunEvent, as JSON text.
        event TEXT NOT NULL
    );
    CREATE INDEX tinyagents_run_history_by_run ON tinyagents_run_history (run_id, seq);
    -- The store's own sealing key, when the host gives none: one row,
    -- inserted once however many processes race.
    CREATE TABLE tinyagents_run_store_key (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        key BYTEA NOT NULL
    );",
    // Version 3: runs' journals, the events their holders emitted (a view:
    // not sealed, an unreadable entry is read back as such).
    "CREATE TABLE tinyagents_run_journal (
        seq BIGSERIAL PRIMARY KEY,
        run_id TEXT COLLATE \"C\" NOT NULL,
        at BIGINT NOT NULL,
        -- An AgentEvent, as JSON text.
        event TEXT NOT NULL
    );
    CREATE INDEX tinyagents_run_journal_by_run ON tinyagents_run_journal (run_id, seq);",
];
