//! The writer's connection: its prepared statements (each SQL text
//! prepared once per connection), and how a failed statement is told
//! apart from a refusal of the ledger's rules.

use std::collections::HashMap;

use tinyagents_core::ErrorSource;
use tinyagents_ledger::LedgerError;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Row, Statement};

use crate::database::{Driver, driven};
use crate::error::{PgError, detail, is_read_only};

/// Why a step of a request did not happen.
#[derive(Debug)]
pub(crate) enum Fail {
    /// The ledger refused (a rule, or a row it cannot read): nothing was
    /// written and the open transaction is intact.
    Refused(LedgerError),
    /// A statement failed: PostgreSQL aborted the open transaction.
    Sql {
        /// The ledger operation.
        operation: &'static str,
        /// What the client or the server said.
        error: tokio_postgres::Error,
    },
}

impl From<LedgerError> for Fail {
    fn from(err: LedgerError) -> Self {
        Self::Refused(err)
    }
}

/// A storage error of `operation` that is not a failed statement.
pub(crate) fn storage(operation: &'static str, detail: impl ToString) -> LedgerError {
    LedgerError::Storage {
        operation,
        detail: detail.to_string(),
        source: None,
    }
}

/// Whether `err` means the connection is gone (closed, or the server is
/// shutting down or cannot accept it): the open transaction is lost.
pub(crate) fn is_lost(err: &tokio_postgres::Error) -> bool {
    if err.is_closed() {
        return true;
    }
    err.code().is_some_and(|code| {
        code.code().starts_with("08")
            || *code == SqlState::ADMIN_SHUTDOWN
            || *code == SqlState::CRASH_SHUTDOWN
            || *code == SqlState::CANNOT_CONNECT_NOW
    })
}

/// What a failed statement of `operation` on the database at `target`
/// tells its caller.
pub(crate) fn describe(
    target: &str,
    operation: &'static str,
    err: tokio_postgres::Error,
) -> LedgerError {
    let text = if is_read_only(&err) {
        PgError::ReadOnly {
            target: target.to_owned(),
            operation,
            detail: detail(&err),
        }
        .to_string()
    } else if is_lost(&err) {
        format!(
            "the connection to PostgreSQL at {target} was lost ({}); the transaction holding \
             this write was rolled back",
            detail(&err)
        )
    } else {
        format!("PostgreSQL at {target}: {}", detail(&err))
    };
    LedgerError::Storage {
        operation,
        detail: text,
        source: Some(ErrorSource::new(err)),
    }
}

/// The writer's own connection and the statements prepared on it.
pub(crate) struct Conn {
    client: Client,
    prepared: HashMap<&'static str, Statement>,
    /// The connection's I/O, polled while the writer waits on the client.
    driver: Option<Driver>,
}

impl Conn {
    pub(crate) fn new(client: Client, driver: Driver) -> Self {
        Self {
            client,
            prepared: HashMap::new(),
            driver: Some(driver),
        }
    }

    /// The client and the driver of its connection, borrowed apart: for
    /// statements sent together (pipelined), awaited through
    /// [`driven`](crate::database::driven).
    pub(crate) fn parts(&mut self) -> (&Client, &mut Option<Driver>) {
        (&self.client, &mut self.driver)
    }

    /// Whether the connection is known to be gone.
    pub(crate) fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// Runs `sql` by the simple protocol (BEGIN, COMMIT, ROLLBACK).
    pub(crate) async fn batch(&mut self, sql: &str) -> Result<(), tokio_postgres::Error> {
        driven(&mut self.driver, self.client.batch_execute(sql)).await
    }

    /// `sql` prepared on this connection (once).
    pub(crate) async fn statement(
        &mut self,
        sql: &'static str,
    ) -> Result<Statement, tokio_postgres::Error> {
        if let Some(statement) = self.prepared.get(sql) {
            return Ok(statement.clone());
        }
        let statement = driven(&mut self.driver, self.client.prepare(sql)).await?;
        self.prepared.insert(sql, statement.clone());
        Ok(statement)
    }

    /// Runs a prepared write; the number of rows it touched.
    pub(crate) async fn execute(
        &mut self,
        operation: &'static str,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, Fail> {
        let sql_fail = |error| Fail::Sql { operation, error };
        let statement = self.statement(sql).await.map_err(sql_fail)?;
        driven(&mut self.driver, self.client.execute(&statement, params))
            .await
            .map_err(sql_fail)
    }

    /// Runs a prepared query; its rows.
    pub(crate) async fn query(
        &mut self,
        operation: &'static str,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, Fail> {
        let sql_fail = |error| Fail::Sql { operation, error };
        let statement = self.statement(sql).await.map_err(sql_fail)?;
        driven(&mut self.driver, self.client.query(&statement, params))
            .await
            .map_err(sql_fail)
    }

    /// Runs a prepared query of at most one row.
    pub(crate) async fn query_opt(
        &mut self,
        operation: &'static str,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, Fail> {
        let sql_fail = |error| Fail::Sql { operation, error };
        let statement = self.statement(sql).await.map_err(sql_fail)?;
        driven(&mut self.driver, self.client.query_opt(&statement, params))
            .await
            .map_err(sql_fail)
    }

    /// Runs a prepared query of exactly one row.
    pub(crate) async fn query_one(
        &mut self,
        operation: &'static str,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, Fail> {
        let sql_fail = |error| Fail::Sql { operation, error };
        let statement = self.statement(sql).await.map_err(sql_fail)?;
        driven(&mut self.driver, self.client.query_one(&statement, params))
            .await
            .map_err(sql_fail)
    }
}

/// Column `index` of `row`, read as `T`; a column of another type is a row
/// the ledger cannot read (a refusal: the transaction is intact).
pub(crate) fn column<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a Row,
    index: usize,
    operation: &'static str,
) -> Result<T, Fail> {
    row.try_get(index).map_err(|err| {
        Fail::Refused(storage(
            operation,
            format!(
                "column {index} of a stored row is unreadable: {}",
                detail(&err)
            ),
        ))
    })
}
