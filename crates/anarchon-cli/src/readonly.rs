//! Reading a SQLite store without writing to it.
//!
//! `SqliteStore::connect` opens a file read-write, creates or migrates the tables and turns
//! on WAL: right for an application, wrong for a command that only looks. So the command
//! opens the file itself with `SQLITE_OPEN_READ_ONLY` (and `PRAGMA query_only`), checks that
//! the anarchon tables of the `--table` prefix are there at the schema version this build
//! reads, and then runs the store's own statements (`anarchon_sqlite::sql::ops`) through a
//! read-only [`Exec`]. A file that is not an anarchon store is refused and left as it was,
//! byte for byte.

#[cfg(feature = "sqlite")]
use std::path::Path;

use anarchon_core::store::{EpochMs, RunKey, RunRecord, RunView};
use anarchon_core::{Error, JobName};
use anarchon_sqlite::sql::{self, Exec, Row, Sql, Tables, Value};
#[cfg(feature = "sqlite")]
use rusqlite::types::{ToSqlOutput, ValueRef};
#[cfg(feature = "sqlite")]
use rusqlite::{Connection, OpenFlags};

use crate::error::CliError;

#[cfg(feature = "sqlite")]
const KIND: &str = "sqlite";

/// A SQLite anarchon store opened read-only.
#[cfg(feature = "sqlite")]
pub(crate) struct SqliteReader {
    conn: Connection,
    sql: Sql,
}

#[cfg(feature = "sqlite")]
impl std::fmt::Debug for SqliteReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteReader")
            .field("sql", &self.sql)
            .finish_non_exhaustive()
    }
}

/// Why a file cannot be read as an anarchon store: the text of [`CliError::NotAStore`].
pub(crate) fn not_a_store(path: &str, table: &str, reason: impl Into<String>) -> CliError {
    CliError::NotAStore {
        path: path.to_owned(),
        table: table.to_owned(),
        reason: reason.into(),
    }
}

#[cfg(feature = "sqlite")]
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
        block_on(check(&mut reader.exec(), &reader.sql, shown, prefix))?;
        Ok(reader)
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

/// Refuses a database that holds no anarchon tables of this prefix, or holds them at a
/// schema version this build does not read (`shown`: the store as errors show it).
pub(crate) async fn check<E: Exec>(
    e: &mut E,
    sql: &Sql,
    shown: &str,
    prefix: &str,
) -> Result<(), CliError> {
    let rows = e
        .query(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name",
            &[],
        )
        .await
        .map_err(|err| {
            not_a_store(
                shown,
                prefix,
                format!("it is not a SQLite database ({err}); give the path of an anarchon store"),
            )
        })?;
    let tables: Vec<String> = rows
        .into_iter()
        .filter_map(|mut r| match r.pop() {
            Some(Value::Text(name)) => Some(name),
            _ => None,
        })
        .collect();
    let has = |name: &str| tables.iter().any(|t| t.eq_ignore_ascii_case(name));
    let t = &sql.tables;
    if !has(&t.meta) {
        let ours: Vec<&str> = tables
            .iter()
            .filter_map(|name| name.strip_suffix("_meta"))
            .filter(|p| sql::validate_prefix(p).is_ok() && has(p))
            .collect();
        let hint = if ours.is_empty() {
            "the database holds no anarchon tables: check the path or URL (the command never \
             creates a store; the application does when it starts)"
                .to_owned()
        } else {
            format!(
                "the database holds anarchon tables with the prefix {}: pass --table {}",
                ours.join(", "),
                ours[0]
            )
        };
        return Err(not_a_store(
            shown,
            prefix,
            format!("it has no table {} ({hint})", t.meta),
        ));
    }
    let version = sql::schema::version(e, sql)
        .await
        .map_err(|err| not_a_store(shown, prefix, err.to_string()))?;
    match version {
        Some(v) if v == sql::schema::SCHEMA_VERSION => {}
        Some(v) if v > sql::schema::SCHEMA_VERSION => {
            return Err(not_a_store(
                shown,
                prefix,
                format!(
                    "its schema version is {v}, newer than this anarchon reads ({}): use the \
                     anarchon command of the release that wrote it",
                    sql::schema::SCHEMA_VERSION
                ),
            ));
        }
        found => {
            return Err(not_a_store(
                shown,
                prefix,
                format!(
                    "its schema version is {}, older than this anarchon reads ({}): start the \
                     application with this release once (it migrates the tables), or use the \
                     anarchon command of the release that wrote it",
                    found.map_or_else(|| "missing".to_owned(), |v| v.to_string()),
                    sql::schema::SCHEMA_VERSION
                ),
            ));
        }
    }
    for name in [&t.runs, &t.attempts] {
        if !has(name) {
            return Err(not_a_store(
                shown,
                prefix,
                format!("the table {name} is missing: restore it from a backup"),
            ));
        }
    }
    Ok(())
}

#[cfg(feature = "sqlite")]
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

#[cfg(feature = "sqlite")]
struct Param<'a>(&'a Value);

#[cfg(feature = "sqlite")]
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
#[cfg(feature = "sqlite")]
struct ReadExec<'r> {
    r: &'r SqliteReader,
}

#[cfg(feature = "sqlite")]
impl ReadExec<'_> {
    fn err(&self, e: rusqlite::Error) -> Error {
        Error::store(KIND, "read", e)
    }
}

#[cfg(feature = "sqlite")]
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

/// A libSQL server's anarchon tables, read through the store's statements over Hrana with a
/// driver that never writes (`LibsqlStore::connect` would create or migrate the tables).
#[cfg(feature = "libsql")]
pub(crate) struct LibsqlReader {
    conn: libsql::Connection,
    sql: Sql,
}

#[cfg(feature = "libsql")]
impl LibsqlReader {
    /// Connects to `url` (already checked to be `libsql://`, `http(s)://`) and checks the
    /// tables of `prefix`; `shown` is the URL redacted.
    pub(crate) async fn open(
        url: &str,
        shown: &str,
        auth_token: Option<&str>,
        prefix: Option<&str>,
    ) -> Result<Self, CliError> {
        let prefix = prefix.unwrap_or(sql::DEFAULT_PREFIX);
        let tables = Tables::new(prefix).map_err(|reason| CliError::InvalidTable {
            table: prefix.to_owned(),
            reason,
        })?;
        let unavailable = |e: libsql::Error| CliError::Store {
            url: shown.to_owned(),
            action: "connect",
            source: Error::Unavailable {
                store: "libsql",
                target: shown.to_owned(),
                source: e.to_string().into(),
            },
        };
        let db = libsql::Builder::new_remote(url.to_owned(), auth_token.unwrap_or("").to_owned())
            .build()
            .await
            .map_err(unavailable)?;
        let conn = db.connect().map_err(unavailable)?;
        let reader = LibsqlReader {
            conn,
            sql: Sql::new("libsql", shown.to_owned(), tables),
        };
        check(&mut reader.exec(), &reader.sql, shown, prefix).await?;
        Ok(reader)
    }

    fn exec(&self) -> RemoteReadExec<'_> {
        RemoteReadExec { r: self }
    }

    /// The names of the jobs the store knows, sorted.
    pub(crate) async fn known_jobs(&self) -> anarchon_core::Result<Vec<JobName>> {
        sql::ops::known_jobs(&mut self.exec(), &self.sql).await
    }

    /// The job's newest `count` attempts, newest first.
    pub(crate) async fn history(
        &self,
        job: &JobName,
        count: usize,
    ) -> anarchon_core::Result<Vec<RunRecord>> {
        sql::ops::history(&mut self.exec(), &self.sql, job, count).await
    }

    /// The runs of `jobs` that are not finished.
    pub(crate) async fn unfinished_runs(
        &self,
        jobs: &[JobName],
    ) -> anarchon_core::Result<Vec<RunView>> {
        sql::ops::unfinished_runs(&mut self.exec(), &self.sql, jobs).await
    }

    /// The runs `keys` names, where the store has them.
    pub(crate) async fn runs(&self, keys: &[RunKey]) -> anarchon_core::Result<Vec<RunView>> {
        sql::ops::runs(&mut self.exec(), &self.sql, keys).await
    }
}

/// The read-only driver over Hrana: reads run, writes are refused.
#[cfg(feature = "libsql")]
struct RemoteReadExec<'r> {
    r: &'r LibsqlReader,
}

#[cfg(feature = "libsql")]
impl Exec for RemoteReadExec<'_> {
    async fn now(&mut self) -> anarchon_core::Result<EpochMs> {
        // The server's clock, as the libSQL store judges leases by it.
        let rows = self
            .query(
                "SELECT CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)",
                &[],
            )
            .await?;
        match rows.first().and_then(|r| r.first()) {
            Some(Value::Integer(ms)) => Ok(*ms),
            other => Err(self
                .r
                .sql
                .corrupt("", format!("the server's clock read as {other:?}"))),
        }
    }

    async fn query(&mut self, sql: &str, params: &[Value]) -> anarchon_core::Result<Vec<Row>> {
        let err = |e: libsql::Error| Error::store("libsql", "read", e.to_string());
        let params = libsql::params::Params::Positional(
            params
                .iter()
                .map(|v| match v {
                    Value::Null => libsql::Value::Null,
                    Value::Integer(i) => libsql::Value::Integer(*i),
                    Value::Text(s) => libsql::Value::Text(s.clone()),
                })
                .collect(),
        );
        let mut rows = self.r.conn.query(sql, params).await.map_err(err)?;
        let n = rows.column_count();
        let mut out = Vec::new();
        while let Some(r) = rows.next().await.map_err(err)? {
            let mut row = Vec::new();
            for i in 0..n {
                row.push(match r.get_value(i).map_err(err)? {
                    libsql::Value::Null => Value::Null,
                    libsql::Value::Integer(v) => Value::Integer(v),
                    libsql::Value::Text(t) => Value::Text(t),
                    other => {
                        return Err(self
                            .r
                            .sql
                            .corrupt("", format!("column {i} of a result holds {other:?}")));
                    }
                });
            }
            out.push(row);
        }
        Ok(out)
    }

    async fn execute(&mut self, sql: &str, _params: &[Value]) -> anarchon_core::Result<u64> {
        Err(Error::store(
            "libsql",
            "read",
            format!("the anarchon command only reads, and refused to run {sql:?}"),
        ))
    }
}
