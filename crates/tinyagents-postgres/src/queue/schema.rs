//! The runs table: runs as leased work.

/// The schema component of the runs queue in `tinyagents_schema`.
pub(crate) const COMPONENT: &str = "runs";

/// One migration per version; append only.
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
];
