//! Reading a SQLite store without writing to it.
//!
//! `SqliteStore::connect` opens a file read-write, creates or migrates the tables and turns
//! on WAL: right for an application, wrong for a command that only looks. So the command
//! opens the file itself with `SQLITE_OPEN_READ_ONLY` (and `PRAGMA query_only`), checks that
//! the anarchon tables of the `--table` prefix are there at the schema version this build
//! reads, and then runs the store's own statements (`anarchon_sqlite::sql::ops`) through a
//! read-only [`Exec`]. A file that is not an anarchon store is refused and left as it was,
//! byte for byte.

use std::path::Path;

use anarchon_core::store::{EpochMs, RunKey, RunRecord, RunView};
use anarchon_core::{Error, JobName};
use anarchon_sqlite::sql::{self, Exec, Row, Sql, Tables, Value};
use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, OpenFlags};

use crate::error::CliError;

const KIND: &str = "sqlite";

/// A SQLite anarchon store opened read-only.
pub(crate) struct SqliteReader {
    conn: Connection,
    sql: Sql,
}

impl std::fmt::Debug for SqliteReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteReader")
            .field("sql", &self.sql)
            .finish_non_exhaustive()
    }
}

/// Why a file cannot be read as an anarchon store: the text of [`CliError::NotAStore`].
fn not_a_store(path: &str, table: &str, reason: impl Into<String>) -> CliError {
    CliError::NotAStore {
        path: path.to_owned(),
        table: table.to_owned(),
        reason: reason.into(),
    }
}

impl SqliteReader {
    /// Opens `path` read-only and checks that it holds the anarchon tables of `prefix`.
    /// `shown` is the path as errors show it (redacted: a mistyped `--store` may hold a
    /// password).
    pub(crate) fn open(
        path: &str,
        shown: &str,
        prefix: Option<&str>,
        timeout: std::time::Duration,
    ) -> Result<Self, CliError> {
        // A missing path would be created by a read-write open; a read-only open refuses it
        // too, but with SQLite's words. Say it in ours.
        if path.is_empty() || !Path::new(path).is_file() {
            return Err(CliError::NoSqliteFile {
                path: shown.to_owned(),
            });
        }
        let prefix = prefix.unwrap_or(sql::DEFAULT_PREFIX);
        let tables = Tables::new(prefix).map_err(|reason| CliError::InvalidTable {
            table: prefix.to_owned(),
            reason,
        })?;
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags)
            .map_err(|e| not_a_store(shown, prefix, format!("SQLite cannot open it ({e})")))?;
        conn.busy_timeout(timeout)
            .and_then(|()| conn.pragma_update(None, "query_only", true))
            .map_err(|e| not_a_store(shown, prefix, format!("SQLite cannot open it ({e})")))?;
        let reader = SqliteReader {
            conn,
            sql: Sql::new(KIND, shown.to_owned(), tables),
        };
        reader.check(shown, prefix)?;
        Ok(reader)
    }

    /// The table names of the store, as `(name, type)` pairs: every table the file holds.
    fn objects(&self) -> rusqlite::Result<Vec<(String, String)>> {
        let mut stmt = self
            .conn
            .prepare("SELECT name, type FROM sqlite_master WHERE type = 'table' ORDER BY name")?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        rows.collect()
    }

    /// Refuses a file that is no database, holds no anarchon tables of this prefix, or
    /// holds them at a schema version this build does not read.
    fn check(&self, path: &str, prefix: &str) -> Result<(), CliError> {
        let tables = self.objects().map_err(|e| {
            not_a_store(
                path,
                prefix,
                format!("it is not a SQLite database ({e}); give the path of an anarchon store"),
            )
        })?;
        let has = |name: &str| tables.iter().any(|(t, _)| t.eq_ignore_ascii_case(name));
        let t = &self.sql.tables;
        if !has(&t.meta) {
            let ours: Vec<&str> = tables
                .iter()
                .filter_map(|(name, _)| name.strip_suffix("_meta"))
                .filter(|p| sql::validate_prefix(p).is_ok() && has(p))
                .collect();
            let hint = if ours.is_empty() {
                "the file holds no anarchon tables: check the path (the command never \
                 creates a store; the application does when it starts)"
                    .to_owned()
            } else {
                format!(
                    "the file holds anarchon tables with the prefix {}: pass --table {}",
                    ours.join(", "),
                    ours[0]
                )
            };
            return Err(not_a_store(
                path,
                prefix,
                format!("it has no table {} ({hint})", t.meta),
            ));
        }
        let mut e = self.exec();
        let version = block_on(sql::schema::version(&mut e, &self.sql))
            .map_err(|e| not_a_store(path, prefix, e.to_string()))?;
        match version {
            Some(v) if v == sql::schema::SCHEMA_VERSION => {}
            Some(v) if v > sql::schema::SCHEMA_VERSION => {
                return Err(not_a_store(
                    path,
                    prefix,
                    format!(
                        "its schema version is {v}, newer than this anarchon reads ({}): use \
                         the anarchon command of the release that wrote it",
                        sql::schema::SCHEMA_VERSION
                    ),
                ));
            }
            found => {
                return Err(not_a_store(
                    path,
                    prefix,
                    format!(
                        "its schema version is {}, older than this anarchon reads ({}): start \
                         the application with this release once (it migrates the tables), or \
                         use the anarchon command of the release that wrote it",
                        found.map_or_else(|| "missing".to_owned(), |v| v.to_string()),
                        sql::schema::SCHEMA_VERSION
                    ),
                ));
            }
        }
        for name in [&t.runs, &t.attempts] {
            if !has(name) {
                return Err(not_a_store(
                    path,
                    prefix,
                    format!("the table {name} is missing: restore the file from a backup"),
                ));
            }
        }
        Ok(())
    }

    fn exec(&self) -> ReadExec<'_> {
        ReadExec { r: self }
    }

    /// The names of the jobs the store knows, sorted.
    pub(crate) fn known_jobs(&self) -> anarchon_core::Result<Vec<JobName>> {
        block_on(sql::ops::known_jobs(&mut self.exec(), &self.sql))
    }

    /// The job's newest `count` attempts, newest first.
    pub(crate) fn history(
        &self,
        job: &JobName,
        count: usize,
    ) -> anarchon_core::Result<Vec<RunRecord>> {
        block_on(sql::ops::history(&mut self.exec(), &self.sql, job, count))
    }

    /// The runs of `jobs` that are not finished.
    pub(crate) fn unfinished_runs(&self, jobs: &[JobName]) -> anarchon_core::Result<Vec<RunView>> {
        block_on(sql::ops::unfinished_runs(&mut self.exec(), &self.sql, jobs))
    }

    /// The runs `keys` names, where the store has them.
    pub(crate) fn runs(&self, keys: &[RunKey]) -> anarchon_core::Result<Vec<RunView>> {
        block_on(sql::ops::runs(&mut self.exec(), &self.sql, keys))
    }
}

/// Runs a future of [`ReadExec`] calls, which never wait: every call is a synchronous
/// rusqlite call, so the future is ready when first polled.
fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(value) = future.as_mut().poll(&mut cx) {
            return value;
        }
    }
}

struct Param<'a>(&'a Value);

impl rusqlite::ToSql for Param<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match self.0 {
            Value::Null => ValueRef::Null,
            Value::Integer(v) => ValueRef::Integer(*v),
            Value::Text(s) => ValueRef::Text(s.as_bytes()),
        }))
    }
}

/// The read-only driver of the store's statements: reads run, writes are refused.
struct ReadExec<'r> {
    r: &'r SqliteReader,
}

impl ReadExec<'_> {
    fn err(&self, e: rusqlite::Error) -> Error {
        Error::store(KIND, "read", e)
    }
}

impl Exec for ReadExec<'_> {
    async fn now(&mut self) -> anarchon_core::Result<EpochMs> {
        // A local file's leases are judged on the host clock, as the store does.
        Ok(chrono::Utc::now().timestamp_millis())
    }

    async fn query(&mut self, sql: &str, params: &[Value]) -> anarchon_core::Result<Vec<Row>> {
        let mut stmt = self.r.conn.prepare(sql).map_err(|e| self.err(e))?;
        let n = stmt.column_count();
        let mut rows = stmt
            .query(rusqlite::params_from_iter(params.iter().map(Param)))
            .map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(|e| self.err(e))? {
            let mut row = Vec::with_capacity(n);
            for i in 0..n {
                row.push(match r.get_ref(i).map_err(|e| self.err(e))? {
                    ValueRef::Null => Value::Null,
                    ValueRef::Integer(v) => Value::Integer(v),
                    ValueRef::Text(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
                    other => {
                        return Err(self.r.sql.corrupt(
                            "",
                            format!(
                                "column {i} of a result holds a {:?} value",
                                other.data_type()
                            ),
                        ));
                    }
                });
            }
            out.push(row);
        }
        Ok(out)
    }

    async fn execute(&mut self, sql: &str, _params: &[Value]) -> anarchon_core::Result<u64> {
        // No read of the command writes; if one ever tried, refuse it rather than write.
        Err(Error::store(
            KIND,
            "read",
            format!("the anarchon command only reads, and refused to run {sql:?}"),
        ))
    }
}
