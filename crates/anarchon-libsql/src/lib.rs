//! libSQL lease store for anarchon: the SQLite store's schema and SQL on a remote libSQL
//! server (`sqld`, Turso), so instances on several machines share one database. [B-43]
//!
//! ```no_run
//! # async fn f() -> anarchon_core::Result<()> {
//! use anarchon_core::Scheduler;
//! use anarchon_libsql::{LibsqlOptions, LibsqlStore};
//!
//! let token = std::env::var("LIBSQL_AUTH_TOKEN").unwrap_or_default();
//! let options = LibsqlOptions::default().auth_token(token);
//! let store = LibsqlStore::connect_with("libsql://my-db.example.turso.io", options).await?;
//! let scheduler = Scheduler::leased(store).build()?;
//! # let _ = scheduler; Ok(()) }
//! ```
//!
//! # Building a store
//! The same three ways as in every anarchon store crate, each async and ready (tables
//! created or checked) when it returns: [`LibsqlStore::connect`]`(url)`,
//! [`LibsqlStore::connect_with`]`(url, `[`LibsqlOptions`]`)`, and
//! [`LibsqlStore::from_database`]`(database, options)` on your own remote
//! [`libsql::Database`].
//!
//! The statements, the schema (with its version and migrations) and the row mapping are
//! `anarchon_sqlite::sql`, the very code the local SQLite store runs; this crate only
//! carries them over the network. It uses `libsql`'s remote client alone
//! (`default-features = false, features = ["remote", "tls"]`): that client has no C
//! SQLite inside, so it can sit in one binary beside `anarchon-sqlite`'s bundled SQLite.
//! A local libSQL file is an SQLite file: open it with `anarchon-sqlite`.
//!
//! Lease times are the server's clock (`julianday('now')` on the server), read inside each
//! write transaction. Claims, results and takeovers (single or batched) are one Hrana
//! batch each: up to 64 items in one HTTP request that runs the single call's rules as
//! conditional statements inside `BEGIN IMMEDIATE ... COMMIT` on the server, then one
//! statement that reads the outcomes back (four HTTP requests per batch in all; see the
//! `batch` module in the source for why the `libsql` client allows no fewer). The other
//! writes are interactive `BEGIN IMMEDIATE` transactions (one HTTP request per statement).
//! Each call is bounded by the call timeout.
//!
//! # Versions
//! A libSQL server (`sqld`) or Turso; SQLite ≥ 3.35 semantics (`RETURNING`). MSRV: the
//! workspace's `rust-version`.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod batch;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anarchon_core::store::{
    BatchLimits, ClaimOutcome, EpochMs, Error, Finish, HistoryStore, JobName, Lease, LeaseClaim,
    LeaseStore, OwnerWrite, Prepare, Renewal, Result, Retention, RunKey, RunRecord, RunView, Store,
    Takeover, TakeoverOutcome, redact_url,
};
use anarchon_sqlite::releases;
use anarchon_sqlite::sql::{self, Exec, Row, Sql, Tables, Value, ops, schema};
use async_trait::async_trait;
use tokio::sync::broadcast;

const KIND: &str = "libsql";

/// The most claims (or takeovers) one Hrana batch takes (`LeaseStore::claim_many`,
/// `LeaseStore::take_over_many`): one HTTP request carries them all, then one statement
/// reads the outcomes back, so a batch costs four HTTP requests whatever its size. The SQL
/// of 64 claims of 64 jobs is about 140 KB (20-character job names); 64 claims of one job,
/// about 420 KB.
pub const BATCH_CLAIMS: usize = 64;

/// The most results one Hrana batch takes (`LeaseStore::finish_many`): four HTTP
/// requests per batch, like [`BATCH_CLAIMS`] (about 75 KB of SQL for 64 results).
pub const BATCH_FINISHES: usize = 64;

/// The default bound of one call.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The shortest `call_timeout` accepted: no call is answered in no time at all.
pub const MIN_CALL_TIMEOUT: Duration = Duration::from_millis(1);

/// The longest `call_timeout` accepted: 365 days, the bound of the core's own timeouts.
pub const MAX_CALL_TIMEOUT: Duration = anarchon_core::options::MAX_DURATION;

/// The store's clock on the server, epoch ms (`julianday` works on every SQLite version).
const NOW_SQL: &str = "SELECT CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)";

/// Why a libSQL store could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LibsqlError {
    /// The URL is not a remote libSQL URL.
    #[error(
        "invalid libSQL URL {url:?}: {reason}; give libsql://, https:// or http:// and the \
         server's auth token (for a local file use anarchon-sqlite)"
    )]
    InvalidUrl {
        /// The URL, redacted.
        url: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// The `table` option is not a usable SQL identifier.
    #[error(
        "invalid table prefix {table:?}: {reason}; use an SQL identifier such as \"anarchon_runs\""
    )]
    InvalidTable {
        /// What was given.
        table: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// An option is outside the range the store can honour.
    #[error("`{option}` = {value} is out of range: {allowed}")]
    OutOfRange {
        /// The option's name, as its setter is named (`call_timeout`).
        option: &'static str,
        /// The value given.
        value: String,
        /// What is accepted, with the limits.
        allowed: String,
    },
    /// The auth token holds a character an HTTP header cannot carry. The token itself is
    /// never shown.
    #[error(
        "invalid auth token: {reason}; give the token exactly as the server issued it \
         (the token itself is not shown)"
    )]
    InvalidAuthToken {
        /// What is wrong with it.
        reason: String,
    },
}

impl From<LibsqlError> for Error {
    fn from(e: LibsqlError) -> Self {
        match e {
            LibsqlError::InvalidUrl { .. } => Error::invalid_option("url", e.to_string()),
            LibsqlError::InvalidTable { .. } => Error::invalid_option("table", e.to_string()),
            LibsqlError::InvalidAuthToken { .. } => {
                Error::invalid_option("auth_token", e.to_string())
            }
            LibsqlError::OutOfRange {
                option,
                value,
                allowed,
            } => Error::OutOfRange {
                option,
                value,
                allowed,
            },
        }
    }
}

/// Options of a [`LibsqlStore`], for [`LibsqlStore::connect_with`] and
/// [`LibsqlStore::from_database`]. `Debug` hides the auth token.
///
/// ```
/// use std::time::Duration;
/// use anarchon_libsql::LibsqlOptions;
///
/// let options = LibsqlOptions::default()
///     .auth_token("secret-token")
///     .table("myapp_runs")
///     .call_timeout(Duration::from_secs(5));
/// assert!(!format!("{options:?}").contains("secret-token"));
/// ```
#[derive(Clone)]
pub struct LibsqlOptions {
    auth_token: String,
    table: String,
    call_timeout: Duration,
}

impl Default for LibsqlOptions {
    fn default() -> Self {
        LibsqlOptions {
            auth_token: String::new(),
            table: sql::DEFAULT_PREFIX.to_owned(),
            call_timeout: DEFAULT_CALL_TIMEOUT,
        }
    }
}

impl std::fmt::Debug for LibsqlOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LibsqlOptions")
            .field(
                "auth_token",
                &if self.auth_token.is_empty() {
                    ""
                } else {
                    "***"
                },
            )
            .field("table", &self.table)
            .field("call_timeout", &self.call_timeout)
            .finish()
    }
}

impl LibsqlOptions {
    /// The server's auth token (default none, for a server without authentication), sent
    /// as `Authorization: Bearer <token>`: printable ASCII only, else the store is not
    /// built ([`Error::InvalidOption`], without the token). This is the only place for the
    /// token: a URL with credentials is refused, so no secret reaches the HTTP client's
    /// logs. Ignored by [`LibsqlStore::from_database`]: the database carries its own.
    pub fn auth_token(mut self, token: impl Into<String>) -> Self {
        self.auth_token = token.into();
        self
    }

    /// The table prefix (default `anarchon_runs`), as for the SQLite store. [B-42]
    pub fn table(mut self, prefix: impl Into<String>) -> Self {
        self.table = prefix.into();
        self
    }

    /// The longest any call may take (default 10 s; from [`MIN_CALL_TIMEOUT`] to
    /// [`MAX_CALL_TIMEOUT`], else the store is not built: [`Error::OutOfRange`]); past it
    /// the call fails with [`Error::Timeout`].
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }
}

/// A lease store on a remote libSQL server. Clones share the client.
#[derive(Clone)]
pub struct LibsqlStore {
    inner: Arc<Inner>,
}

struct Inner {
    db: libsql::Database,
    sql: Sql,
    call_timeout: Duration,
    /// The scheduler's store timeout less a margin (ms, 0 until `prepare`): no call may
    /// outlast its caller, or a claim could commit after the caller gave up on it.
    caller_limit_ms: std::sync::atomic::AtomicU64,
    releases: Arc<broadcast::Sender<RunKey>>,
    closed: AtomicBool,
}

impl Inner {
    fn call_timeout(&self) -> Duration {
        match self.caller_limit_ms.load(Ordering::Relaxed) {
            0 => self.call_timeout,
            limit => self.call_timeout.min(Duration::from_millis(limit)),
        }
    }
}

impl std::fmt::Debug for LibsqlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LibsqlStore")
            .field("url", &self.inner.sql.location)
            .field("table", &self.inner.sql.tables.runs)
            .finish_non_exhaustive()
    }
}

impl LibsqlStore {
    /// Connects to the remote database at `url` (`libsql://`, `https://`, `http://`) with
    /// the default options (no auth token) and creates, checks or migrates the tables.
    ///
    /// # Errors
    ///
    /// As [`LibsqlStore::connect_with`].
    ///
    /// ```no_run
    /// # async fn demo() -> anarchon_core::Result<()> {
    /// use anarchon_core::Scheduler;
    /// use anarchon_libsql::LibsqlStore;
    ///
    /// let store = LibsqlStore::connect("http://127.0.0.1:8080").await?;
    /// let scheduler = Scheduler::leased(store).build()?;
    /// # let _ = scheduler; Ok(()) }
    /// ```
    pub async fn connect(url: impl Into<String>) -> Result<Self> {
        Self::connect_with(url, LibsqlOptions::default()).await
    }

    /// [`LibsqlStore::connect`] with these options (the auth token among them).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] for a URL that is not remote or a bad table prefix (the URL
    /// shown without its password), [`Error::Unavailable`] when the server cannot be
    /// reached or refuses the token, [`Error::Timeout`], [`Error::SchemaTooNew`].
    ///
    /// ```no_run
    /// # async fn demo() -> anarchon_core::Result<()> {
    /// use anarchon_libsql::{LibsqlOptions, LibsqlStore};
    ///
    /// let options = LibsqlOptions::default().auth_token(std::env::var("LIBSQL_AUTH_TOKEN").unwrap_or_default());
    /// let store = LibsqlStore::connect_with("libsql://my-db.example.turso.io", options).await?;
    /// # let _ = store; Ok(()) }
    /// ```
    pub async fn connect_with(url: impl Into<String>, options: LibsqlOptions) -> Result<Self> {
        let url = url.into();
        let shown = redact_url(&url);
        check_url(&url).map_err(|reason| LibsqlError::InvalidUrl {
            url: shown.clone(),
            reason,
        })?;
        check_auth_token(&options.auth_token)?;
        let tables = Self::tables_for(&options)?;
        let db = libsql::Builder::new_remote(url, options.auth_token)
            .build()
            .await
            .map_err(|e| Error::Unavailable {
                store: KIND,
                target: shown.clone(),
                source: Box::new(e),
            })?;
        Self::ready(db, shown, tables, options.call_timeout).await
    }

    /// A store on the user's own `libsql::Database` (a remote one, built with
    /// `libsql::Builder::new_remote`), creating, checking or migrating the tables. The
    /// options' auth token is not used: the database carries its own.
    ///
    /// # Errors
    ///
    /// As [`LibsqlStore::connect_with`], but for the URL.
    ///
    /// ```no_run
    /// # async fn demo() -> anarchon_core::Result<()> {
    /// use anarchon_libsql::{LibsqlOptions, LibsqlStore};
    ///
    /// let db = libsql::Builder::new_remote("http://127.0.0.1:8080".into(), String::new())
    ///     .build()
    ///     .await
    ///     .expect("database");
    /// let store = LibsqlStore::from_database(db, LibsqlOptions::default()).await?;
    /// # let _ = store; Ok(()) }
    /// ```
    pub async fn from_database(db: libsql::Database, options: LibsqlOptions) -> Result<Self> {
        let tables = Self::tables_for(&options)?;
        Self::ready(
            db,
            "the database given to LibsqlStore".into(),
            tables,
            options.call_timeout,
        )
        .await
    }

    /// Checks the table prefix and the call timeout (the options every constructor uses).
    fn tables_for(options: &LibsqlOptions) -> Result<Tables> {
        if !(MIN_CALL_TIMEOUT..=MAX_CALL_TIMEOUT).contains(&options.call_timeout) {
            return Err(LibsqlError::OutOfRange {
                option: "call_timeout",
                value: format!("{:?}", options.call_timeout),
                allowed: format!("from {MIN_CALL_TIMEOUT:?} to {MAX_CALL_TIMEOUT:?} (365 days)"),
            }
            .into());
        }
        Ok(
            Tables::new(&options.table).map_err(|reason| LibsqlError::InvalidTable {
                table: options.table.clone(),
                reason,
            })?,
        )
    }

    async fn ready(
        db: libsql::Database,
        shown: String,
        tables: Tables,
        call_timeout: Duration,
    ) -> Result<Self> {
        let sql = Sql::new(KIND, shown.clone(), tables);
        let releases = releases::channel(&format!("libsql:{shown}#{}", sql.tables.runs));
        let store = LibsqlStore {
            inner: Arc::new(Inner {
                db,
                sql,
                call_timeout,
                caller_limit_ms: std::sync::atomic::AtomicU64::new(0),
                releases,
                closed: AtomicBool::new(false),
            }),
        };
        store
            .run("open", |mut e, sql| async move {
                schema::ensure(&mut e, sql).await.map(drop)
            })
            .await?;
        Ok(store)
    }

    /// The table names.
    pub fn tables(&self) -> &Tables {
        &self.inner.sql.tables
    }

    /// The schema version on the server.
    pub async fn schema_version(&self) -> Result<Option<i64>> {
        self.run("schema_version", |mut e, sql| async move {
            schema::version(&mut e, sql).await
        })
        .await
    }

    /// Runs one operation on a connection of its own (a Hrana stream), bounded by the call
    /// timeout. A transaction cut off by the timeout is rolled back by the client (and by
    /// the server when the stream expires).
    async fn run<'s, T, F, Fut>(&'s self, operation: &'static str, f: F) -> Result<T>
    where
        F: FnOnce(RemoteExec, &'s Sql) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        if self.inner.closed.load(Ordering::SeqCst) {
            return Err(Error::Unavailable {
                store: KIND,
                target: self.inner.sql.location.clone(),
                source: "the store was closed".into(),
            });
        }
        let timeout = self.inner.call_timeout();
        let deadline = deadline_after(timeout);
        let conn = self
            .inner
            .db
            .connect()
            .map_err(|e| map_err(&self.inner.sql.location, operation, e))?;
        let exec = RemoteExec {
            conn,
            tx: None,
            operation,
            sql_location: self.inner.sql.location.clone(),
            deadline,
        };
        match tokio::time::timeout(timeout, guarded(operation, f(exec, &self.inner.sql))).await {
            Ok(r) => r,
            Err(_) => Err(Error::Timeout {
                store: KIND,
                operation,
                after: timeout,
            }),
        }
    }
}

impl LibsqlStore {
    /// Sends one batch script (see the `batch` module) as one Hrana batch, then reads and
    /// removes its stash rows with one statement; bounded by the call timeout. A batch that
    /// found the database locked did nothing (the failed step skips the rest, the closed
    /// stream rolls back) and is sent again until the deadline.
    async fn run_batch(
        &self,
        operation: &'static str,
        script: batch::Script,
    ) -> Result<batch::Stash> {
        if self.inner.closed.load(Ordering::SeqCst) {
            return Err(Error::Unavailable {
                store: KIND,
                target: self.inner.sql.location.clone(),
                source: "the store was closed".into(),
            });
        }
        let timeout = self.inner.call_timeout();
        let deadline = deadline_after(timeout);
        let location = self.inner.sql.location.as_str();
        let (from, to) = script.stash_range();
        let text = script.finish();
        let read = format!(
            "DELETE FROM \"{}\" WHERE key >= ?1 AND key < ?2 RETURNING key, value",
            self.inner.sql.tables.meta
        );
        let work = async {
            let connect = || {
                self.inner
                    .db
                    .connect()
                    .map_err(|e| map_err(location, operation, e))
            };
            let (conn, reader) = (connect()?, connect()?);
            // The read's `describe` goes out beside the batch, on a stream of its own, so
            // the call waits for two round trips (the batch, then the read's `cursor`).
            let (written, read) = tokio::join!(
                retry_busy(deadline, || async {
                    conn.execute_batch(&text)
                        .await
                        .map(drop)
                        .map_err(|e| map_err(location, operation, e))
                }),
                async {
                    reader
                        .prepare(&read)
                        .await
                        .map_err(|e| map_err(location, operation, e))
                }
            );
            written?;
            let read = read?;
            retry_busy(deadline, || async {
                let params = libsql::params::Params::Positional(vec![
                    libsql::Value::Text(from.clone()),
                    libsql::Value::Text(to.clone()),
                ]);
                let mut rows = read
                    .query(params)
                    .await
                    .map_err(|e| map_err(location, operation, e))?;
                let mut stash = batch::Stash::default();
                while let Some(row) = rows
                    .next()
                    .await
                    .map_err(|e| map_err(location, operation, e))?
                {
                    let key = match row.get_value(0) {
                        Ok(libsql::Value::Text(k)) => k,
                        other => {
                            return Err(self
                                .inner
                                .sql
                                .corrupt("", format!("a stash key of a batch read as {other:?}")));
                        }
                    };
                    let value = match row.get_value(1) {
                        Ok(libsql::Value::Integer(v)) => v,
                        other => {
                            return Err(self.inner.sql.corrupt(
                                "",
                                format!("stash row {key:?} of a batch holds {other:?}"),
                            ));
                        }
                    };
                    stash
                        .put(&from, &key, value)
                        .map_err(|reason| self.inner.sql.corrupt("", reason))?;
                }
                Ok(stash)
            })
            .await
        };
        match tokio::time::timeout(timeout, guarded(operation, work)).await {
            Ok(r) => r,
            Err(_) => Err(Error::Timeout {
                store: KIND,
                operation,
                after: timeout,
            }),
        }
    }

    /// Claims, results or takeovers in batches of `limit`: each batch one script, its
    /// outcomes decoded from the stash in input order.
    async fn batched<I, T>(
        &self,
        operation: &'static str,
        items: &[I],
        limit: usize,
        add: impl Fn(&mut batch::Script, &[I]),
        outcome: impl Fn(&batch::Stash, usize, &I) -> std::result::Result<T, String>,
    ) -> Result<Vec<T>> {
        let mut out = Vec::with_capacity(items.len());
        for chunk in items.chunks(limit.max(1)) {
            let mut script = batch::Script::new(&self.inner.sql.tables);
            add(&mut script, chunk);
            let stash = self.run_batch(operation, script).await?;
            for (i, item) in chunk.iter().enumerate() {
                out.push(
                    outcome(&stash, i, item)
                        .map_err(|reason| self.inner.sql.corrupt("", reason))?,
                );
            }
        }
        Ok(out)
    }
}

/// Runs `f` again while it fails on a locked database (mapped to [`Error::Timeout`] with a
/// zero wait), until `deadline`.
async fn retry_busy<T, F, Fut>(deadline: Instant, f: F) -> Result<T>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut pause = Duration::from_millis(5);
    loop {
        match f().await {
            Err(Error::Timeout { after, .. })
                if after.is_zero()
                    && Instant::now()
                        .checked_add(pause)
                        .is_some_and(|t| t <= deadline) =>
            {
                tokio::time::sleep(pause).await;
                pause = pause.saturating_mul(2).min(Duration::from_millis(100));
            }
            other => return other,
        }
    }
}

/// Runs one call's work, turning a panic inside the `libsql` client into
/// [`Error::Store`]: the client unwraps some answers of the server (an error status whose
/// body is not UTF-8, as a proxy's binary error page), and a server's answer must not take
/// down the caller's task. The call's connection is dropped with the future.
async fn guarded<T>(operation: &'static str, work: impl Future<Output = Result<T>>) -> Result<T> {
    use futures::FutureExt as _;
    match std::panic::AssertUnwindSafe(work).catch_unwind().await {
        Ok(r) => r,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no message".to_owned());
            Err(Error::store(
                KIND,
                operation,
                std::io::Error::other(format!(
                    "the libSQL client panicked on the server's answer ({what}); the call \
                     failed"
                )),
            ))
        }
    }
}

/// Now + `after`. The call timeout is bounded ([`MAX_CALL_TIMEOUT`]), so the sum fits; the
/// fallbacks only keep this free of panics.
fn deadline_after(after: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(after)
        .or_else(|| now.checked_add(MAX_CALL_TIMEOUT))
        .unwrap_or(now)
}

/// Checks that `url` is a remote libSQL URL that carries no secret: the `libsql`, `https`
/// or `http` scheme, a host, no user information (`user:password@`), no query parameter
/// that names a secret (`authToken=`, `token=`, `password=` ...), no fragment. The HTTP
/// client under `libsql` logs the URLs it requests at TRACE, so a URL that reaches it must
/// hold nothing secret: the token goes in [`LibsqlOptions::auth_token`].
fn check_url(url: &str) -> std::result::Result<(), &'static str> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err("it is not a remote URL");
    };
    if !matches!(
        scheme.to_ascii_lowercase().as_str(),
        "libsql" | "https" | "http"
    ) {
        return Err("it is not a remote URL");
    }
    if rest.contains('@') {
        // A password may hold `/`, `?` or `#`, so any `@` may end one.
        return Err(
            "it carries credentials (`user:password@`): libSQL takes none in the URL; pass the \
             token with LibsqlOptions::auth_token",
        );
    }
    if rest.contains('#') {
        return Err("it has a fragment (`#...`), which a libSQL URL never has");
    }
    if rest.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err("it holds a space or a control character");
    }
    let host = rest.split(['/', '?']).next().unwrap_or("");
    if host.is_empty() {
        return Err("it names no host");
    }
    if let Some((_, query)) = rest.split_once('?') {
        for pair in query.split('&') {
            let key = pair.split('=').next().unwrap_or("").to_ascii_lowercase();
            if ["token", "password", "secret", "jwt", "key"]
                .iter()
                .any(|s| key.contains(s))
            {
                return Err(
                    "a query parameter carries a secret (a token, a password, a key): pass the \
                     token with LibsqlOptions::auth_token instead",
                );
            }
        }
    }
    Ok(())
}

/// Checks that the token can travel in an HTTP header (`Bearer <token>`): printable ASCII.
fn check_auth_token(token: &str) -> std::result::Result<(), LibsqlError> {
    if let Some((i, c)) = token
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_graphic() || *c == ' '))
    {
        return Err(LibsqlError::InvalidAuthToken {
            reason: format!(
                "character {} of {} is {}, which an HTTP header cannot carry",
                token[..i].chars().count() + 1,
                token.chars().count(),
                if c.is_control() {
                    "a control character"
                } else {
                    "not printable ASCII"
                }
            ),
        });
    }
    Ok(())
}

/// Maps a libSQL client error to the core error the contract names for it.
fn map_err(location: &str, operation: &'static str, e: libsql::Error) -> Error {
    let text = e.to_string();
    let lower = text.to_ascii_lowercase();
    let code = match &e {
        libsql::Error::SqliteFailure(code, _) => Some(*code & 0xff),
        libsql::Error::RemoteSqliteFailure(code, _, _) => Some(*code & 0xff),
        _ => None,
    };
    if matches!(code, Some(5 | 6))
        || lower.contains("database is locked")
        || lower.contains("sqlite_busy")
    {
        return Error::Timeout {
            store: KIND,
            operation,
            after: Duration::ZERO,
        };
    }
    if matches!(code, Some(26 | 11)) || lower.contains("not a database") {
        return Error::Corrupt {
            store: KIND,
            location: location.to_owned(),
            reason: text,
        };
    }
    let unreachable = matches!(e, libsql::Error::ConnectionFailed(_))
        || [
            "http error",
            "connect",
            "dns",
            "unauthorized",
            "401",
            "403",
            "tls",
            "stream closed",
            "broken pipe",
        ]
        .iter()
        .any(|s| lower.contains(s));
    if unreachable {
        Error::Unavailable {
            store: KIND,
            target: location.to_owned(),
            source: Box::new(e),
        }
    } else {
        Error::store(KIND, operation, e)
    }
}

/// [`Exec`] on one remote connection. `BEGIN IMMEDIATE`, `COMMIT` and `ROLLBACK` go
/// through the client's transaction API, which keeps one server stream for the whole
/// transaction.
struct RemoteExec {
    conn: libsql::Connection,
    tx: Option<libsql::Transaction>,
    operation: &'static str,
    sql_location: String,
    deadline: Instant,
}

fn to_params(params: &[Value]) -> libsql::params::Params {
    libsql::params::Params::Positional(
        params
            .iter()
            .map(|v| match v {
                Value::Null => libsql::Value::Null,
                Value::Integer(i) => libsql::Value::Integer(*i),
                Value::Text(s) => libsql::Value::Text(s.clone()),
            })
            .collect(),
    )
}

impl RemoteExec {
    fn err(&self, e: libsql::Error) -> Error {
        map_err(&self.sql_location, self.operation, e)
    }

    fn conn(&self) -> &libsql::Connection {
        match &self.tx {
            Some(tx) => tx,
            None => &self.conn,
        }
    }

    /// `BEGIN IMMEDIATE`, retried while another writer holds the lock, until the deadline.
    async fn begin(&mut self) -> Result<()> {
        let mut pause = Duration::from_millis(5);
        loop {
            match self
                .conn
                .transaction_with_behavior(libsql::TransactionBehavior::Immediate)
                .await
            {
                Ok(tx) => {
                    self.tx = Some(tx);
                    return Ok(());
                }
                Err(e) => {
                    let err = self.err(e);
                    if !matches!(err, Error::Timeout { .. })
                        || Instant::now()
                            .checked_add(pause)
                            .is_none_or(|t| t > self.deadline)
                    {
                        return Err(err);
                    }
                    tokio::time::sleep(pause).await;
                    pause = pause.saturating_mul(2).min(Duration::from_millis(100));
                }
            }
        }
    }
}

impl Exec for RemoteExec {
    async fn now(&mut self) -> Result<EpochMs> {
        let rows = self.query(NOW_SQL, &[]).await?;
        match rows.first().and_then(|r| r.first()) {
            Some(Value::Integer(ms)) => Ok(*ms),
            other => Err(Error::Corrupt {
                store: KIND,
                location: self.sql_location.clone(),
                reason: format!("the server's clock read as {other:?}"),
            }),
        }
    }

    async fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>> {
        let mut rows = self
            .conn()
            .query(sql, to_params(params))
            .await
            .map_err(|e| self.err(e))?;
        let n = rows.column_count();
        let mut out = Vec::new();
        while let Some(r) = rows.next().await.map_err(|e| self.err(e))? {
            let mut row = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
            for i in 0..n {
                row.push(match r.get_value(i).map_err(|e| self.err(e))? {
                    libsql::Value::Null => Value::Null,
                    libsql::Value::Integer(v) => Value::Integer(v),
                    libsql::Value::Text(t) => Value::Text(t),
                    other => {
                        return Err(Error::Corrupt {
                            store: KIND,
                            location: self.sql_location.clone(),
                            reason: format!("column {i} of a result holds {other:?}"),
                        });
                    }
                });
            }
            out.push(row);
        }
        Ok(out)
    }

    async fn execute(&mut self, sql: &str, params: &[Value]) -> Result<u64> {
        match sql {
            "BEGIN IMMEDIATE" => self.begin().await.map(|()| 0),
            "COMMIT" => match self.tx.take() {
                Some(tx) => tx.commit().await.map(|()| 0).map_err(|e| self.err(e)),
                None => Ok(0),
            },
            "ROLLBACK" => match self.tx.take() {
                Some(tx) => tx.rollback().await.map(|()| 0).map_err(|e| self.err(e)),
                None => Ok(0),
            },
            _ => self
                .conn()
                .execute(sql, to_params(params))
                .await
                .map_err(|e| self.err(e)),
        }
    }
}

#[async_trait]
impl Store for LibsqlStore {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn prepare(&self, prepare: &Prepare) -> Result<()> {
        // Keep every later call inside the scheduler's timeout (10 ms short of it, so the
        // store's deadline falls before the caller's).
        let limit = prepare
            .call_timeout
            .saturating_sub(Duration::from_millis(10))
            .max(Duration::from_millis(1));
        self.inner.caller_limit_ms.store(
            u64::try_from(limit.as_millis()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        let jobs = prepare.jobs.clone();
        self.run("prepare", |mut e, sql| async move {
            // Another instance may have migrated the schema since this one opened it.
            schema::ensure(&mut e, sql).await?;
            ops::register_jobs(&mut e, sql, &jobs).await
        })
        .await
    }

    async fn now(&self) -> Result<EpochMs> {
        self.run("now", |mut e, _| async move { e.now().await })
            .await
    }

    async fn close(&self) -> Result<()> {
        // The remote client holds no open connection between calls.
        self.inner.closed.store(true, Ordering::SeqCst);
        Ok(())
    }
}

#[async_trait]
impl HistoryStore for LibsqlStore {
    async fn history(&self, job: &JobName, count: usize) -> Result<Vec<RunRecord>> {
        self.run("history", |mut e, sql| async move {
            ops::history(&mut e, sql, job, count).await
        })
        .await
    }

    async fn record_manual(&self, record: &RunRecord, retention: Retention) -> Result<()> {
        self.run("record_manual", |mut e, sql| async move {
            ops::record_manual(&mut e, sql, record, retention).await
        })
        .await
    }

    async fn known_jobs(&self) -> Result<Vec<JobName>> {
        self.run("known_jobs", |mut e, sql| async move {
            ops::known_jobs(&mut e, sql).await
        })
        .await
    }
}

#[async_trait]
impl LeaseStore for LibsqlStore {
    /// Up to [`BATCH_CLAIMS`] claims in one Hrana batch (one HTTP request, one
    /// `BEGIN IMMEDIATE ... COMMIT` on the server), each judged by statements that apply the
    /// single claim's rules in SQL on the server's clock, in the order given; then one
    /// statement reads the outcomes back (the client's `query`: a `describe` and a `cursor`
    /// request, and the stream's `close` after it). Four HTTP requests per batch, whatever
    /// its size; the call waits for two round trips (the `describe` goes out beside the
    /// batch).
    async fn claim_many(&self, claims: &[LeaseClaim]) -> Result<Vec<ClaimOutcome>> {
        self.batched(
            "claim",
            claims,
            BATCH_CLAIMS,
            |s, claims| s.claims(claims),
            |stash, i, c| stash.claim(i, c),
        )
        .await
    }

    /// One Hrana batch each: [`BATCH_CLAIMS`] claims or takeovers, [`BATCH_FINISHES`]
    /// results.
    fn limits(&self) -> BatchLimits {
        BatchLimits {
            claims: BATCH_CLAIMS,
            finishes: BATCH_FINISHES,
            takeovers: BATCH_CLAIMS,
            gather_batches: false,
            gather_results: false,
        }
    }

    /// Up to [`BATCH_CLAIMS`] takeovers in one Hrana batch and one read, like `claim_many`.
    async fn take_over_many(&self, takeovers: &[Takeover]) -> Result<Vec<TakeoverOutcome>> {
        self.batched(
            "take_over",
            takeovers,
            BATCH_CLAIMS,
            |s, takeovers| s.takeovers(takeovers),
            |stash, i, t| stash.take_over(i, t),
        )
        .await
    }

    async fn heartbeat(&self, leases: &[Lease], lease_ms: u64) -> Result<Vec<Renewal>> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        self.run("heartbeat", |mut e, sql| async move {
            ops::heartbeat(&mut e, sql, leases, lease_ms).await
        })
        .await
    }

    /// Up to [`BATCH_FINISHES`] results in one Hrana batch and one read, like `claim_many`:
    /// each written, fenced by (attempt, owner) and pruned as a single finish, in order.
    async fn finish_many(&self, writes: &[(Lease, Finish)]) -> Result<Vec<OwnerWrite>> {
        self.batched(
            "finish",
            writes,
            BATCH_FINISHES,
            |s, writes| s.finishes(writes),
            |stash, i, _| stash.finish(i),
        )
        .await
    }

    async fn release(&self, lease: &Lease) -> Result<OwnerWrite> {
        let r = self
            .run("release", |mut e, sql| async move {
                ops::release(&mut e, sql, lease).await
            })
            .await?;
        if r == OwnerWrite::Done {
            let _ = self.inner.releases.send(lease.run.clone());
        }
        Ok(r)
    }

    async fn runs(&self, runs: &[RunKey]) -> Result<Vec<RunView>> {
        if runs.is_empty() {
            return Ok(Vec::new());
        }
        self.run("runs", |mut e, sql| async move {
            ops::runs(&mut e, sql, runs).await
        })
        .await
    }

    async fn unfinished_runs(&self, jobs: &[JobName]) -> Result<Vec<RunView>> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        self.run("unfinished_runs", |mut e, sql| async move {
            ops::unfinished_runs(&mut e, sql, jobs).await
        })
        .await
    }

    /// An in-process broadcast shared by the stores of this process on the same server and
    /// prefix; backups elsewhere notice a release at their next poll (every heartbeat).
    fn subscribe_releases(&self) -> Option<broadcast::Receiver<RunKey>> {
        Some(self.inner.releases.subscribe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn b43_a_local_path_or_other_scheme_is_refused_with_a_clear_error() {
        for url in [
            "anarchon.db",
            "file:anarchon.db",
            "postgres://x/y",
            "redis://h",
        ] {
            let err = LibsqlStore::connect(url).await.unwrap_err();
            assert!(
                matches!(err, Error::InvalidOption { option: "url", .. }),
                "{url}: {err}"
            );
            assert!(err.to_string().contains("anarchon-sqlite"), "{err}");
        }
    }

    #[tokio::test]
    async fn b42_invalid_table_prefix_is_refused_before_connecting() {
        let err = LibsqlStore::connect_with(
            "http://127.0.0.1:9",
            crate::LibsqlOptions::default().table("a-b"),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(
                err,
                Error::InvalidOption {
                    option: "table",
                    ..
                }
            ),
            "{err}"
        );
    }

    #[tokio::test]
    async fn b43_an_unreachable_server_is_unavailable_and_names_the_url_without_secrets() {
        // Port 9 (discard) on loopback: nothing listens there on these machines.
        let err = LibsqlStore::connect_with(
            "http://127.0.0.1:9",
            crate::LibsqlOptions::default()
                .auth_token("hunter2")
                .call_timeout(Duration::from_secs(5)),
        )
        .await
        .unwrap_err();
        let msg = format!("{err} {err:?}");
        assert!(
            matches!(err, Error::Unavailable { .. } | Error::Timeout { .. }),
            "{err:?}"
        );
        assert!(
            !msg.contains("hunter2") && msg.contains("127.0.0.1:9"),
            "{msg}"
        );
        // Credentials in the URL are refused before anything is sent, without showing them.
        let err = LibsqlStore::connect("http://user:hunter2@127.0.0.1:9")
            .await
            .unwrap_err();
        let msg = format!("{err} {err:?}");
        assert!(
            matches!(err, Error::InvalidOption { option: "url", .. }),
            "{err:?}"
        );
        assert!(!msg.contains("hunter2"), "{msg}");
    }
}
