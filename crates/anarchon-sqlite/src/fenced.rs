//! Fenced transactions: a handler's own writes to the store's file, committed only while
//! its attempt owns the run, optionally together with the run's success.
//!
//! A [`FencedTransaction`] is a `BEGIN IMMEDIATE` transaction on a connection to the
//! store's file. SQLite takes the file's write lock at `BEGIN`, so once the transaction has
//! checked the run row (this attempt, this owner, this fence, status `running`, lease not
//! ended on the host clock) nothing can change it before the commit: every claim, heartbeat,
//! takeover, handover and finish of every process waits for the lock (the store's busy
//! handler) and runs after the commit or the rollback. Either the transaction commits while
//! this attempt owns the run, or it fails with [`Error::Fenced`] and nothing of it is kept.
//!
//! Only the store's own file takes part: a connection with another database attached is
//! refused. The store runs its file in WAL mode, and in WAL mode SQLite commits each
//! attached file on its own: a commit that fails (or a crash) between two files keeps the
//! rows of one and loses those of the other.

use std::ops::Deref;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anarchon_core::JobContext;
use anarchon_core::claim_only::host_now;
use anarchon_core::store::{AttemptKey, EpochMs, Error, FenceLoss, Result};
use rusqlite::{Connection, OpenFlags, Transaction, TransactionBehavior};

use crate::sql::{Exec, Row, Sql, Value, ops};
use crate::store::{
    BUSY_UNTIL, KIND, SqliteStore, busy_wait, deadline_after, execute_rows, map_error, query_rows,
    ready,
};

/// A transaction on the store's file that holds this attempt's ownership of its run from
/// its start to its commit. Run your statements on it (it dereferences to the
/// [`rusqlite::Connection`]), then [`commit`](FencedTransaction::commit) or
/// [`commit_finished`](FencedTransaction::commit_finished); dropping it rolls back.
///
/// While it is open it holds the file's write lock: every other writer of the file (the
/// claims, heartbeats, takeovers and results of every process, this one's included) waits
/// for it, so a transaction open for N ms delays them all by N ms. Keep it short: no network
/// calls inside, and well under the store's busy timeout (5 s by default), past which the
/// waiting calls fail with [`Error::Timeout`] and are retried.
///
/// Do not run `BEGIN`, `COMMIT`, `END` or `ROLLBACK` yourself on it (use
/// [`savepoint`](FencedTransaction::savepoint) to undo a part). Only the store's file takes
/// part: a connection with another database attached is refused at the start, and a
/// database attached inside the transaction makes the commit refuse and roll back.
///
/// ```no_run
/// # fn handler(store: &anarchon_sqlite::SqliteStore, ctx: &anarchon_core::JobContext)
/// #     -> Result<(), anarchon_core::BoxError> {
/// use anarchon_sqlite::FencedTransaction;
///
/// let mut conn = store.open_connection()?;
/// let tx = FencedTransaction::begin(&mut conn, store, ctx)?; // Error::Fenced if not ours
/// tx.execute(
///     "INSERT INTO ledger (slot, amount) VALUES (?1, 10)",
///     [ctx.slot_ms()],
/// )?;
/// tx.commit_finished()?; // the row and the run `succeeded` (its history): one commit
/// # Ok(()) }
/// ```
pub struct FencedTransaction<'c> {
    tx: Transaction<'c>,
    key: AttemptKey,
    ctx: Option<JobContext>,
    sql: Arc<Sql>,
    busy_timeout: Duration,
}

impl std::fmt::Debug for FencedTransaction<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencedTransaction")
            .field("attempt", &self.key)
            .field("path", &self.sql.location)
            .finish_non_exhaustive()
    }
}

impl<'c> FencedTransaction<'c> {
    /// Starts a fenced transaction for the handler's attempt on `conn`, a connection to
    /// `store`'s file (see [`SqliteStore::open_connection`]): `BEGIN IMMEDIATE` (waiting for
    /// the write lock as the connection's busy handler allows), then the check of the run
    /// row in the tables of `store`'s configuration.
    ///
    /// This blocks the thread (the wait for the lock, the statements): call it from
    /// `tokio::task::spawn_blocking`, or use [`SqliteStore::fenced_transaction`] which does.
    ///
    /// # Errors
    ///
    /// - [`Error::Fenced`] when this attempt no longer owns the run, with the reason: the
    ///   run is missing, finished, taken over by another attempt or owner, handed over, or
    ///   its lease had ended on the host clock. Nothing was written; the lock is released.
    /// - [`Error::NotFenceable`] for a manual run (no lease to check).
    /// - [`Error::InvalidOption`] (option `connection`) for a connection on another file,
    ///   with another database attached, or already inside a transaction.
    /// - [`Error::Timeout`] when the write lock stayed taken past the connection's busy
    ///   timeout; other driver errors as [`Error::Store`].
    pub fn begin(
        conn: &'c mut Connection,
        store: &SqliteStore,
        ctx: &JobContext,
    ) -> Result<FencedTransaction<'c>> {
        let key = ctx.attempt_key()?;
        let mut tx = Self::begin_attempt(conn, store, &key)?;
        tx.ctx = Some(ctx.clone());
        Ok(tx)
    }

    /// [`FencedTransaction::begin`] for an attempt named by its key (the handler's context
    /// is the usual way: [`JobContext::attempt_key`]). `commit_finished` then tells no
    /// scheduler about the finish.
    pub(crate) fn begin_attempt(
        conn: &'c mut Connection,
        store: &SqliteStore,
        key: &AttemptKey,
    ) -> Result<FencedTransaction<'c>> {
        check_connection(conn, store)?;
        let sql = store.sql().clone();
        let busy_timeout = store.busy_timeout();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| map_error(&sql, busy_timeout, "fenced_begin", e))?;
        let loss = {
            let mut e = ConnExec::new(&tx, &sql, busy_timeout, "fenced_begin");
            ready(ops::check_attempt(&mut e, &sql, key))?
        };
        if let Some(loss) = loss {
            drop(tx); // rolls back: the lock is released at once
            tracing::debug!(path = %sql.location, attempt = %key, %loss, "fenced transaction refused");
            return Err(fenced(key, loss));
        }
        Ok(FencedTransaction {
            tx,
            key: key.clone(),
            ctx: None,
            sql,
            busy_timeout,
        })
    }

    /// The attempt this transaction holds.
    pub fn attempt(&self) -> &AttemptKey {
        &self.key
    }

    /// A savepoint inside the transaction, to undo a part of the handler's writes
    /// (`rollback` on it) without leaving the transaction.
    ///
    /// # Errors
    ///
    /// The driver's error.
    pub fn savepoint(&mut self) -> rusqlite::Result<rusqlite::Savepoint<'_>> {
        self.tx.savepoint()
    }

    /// Commits the handler's writes. The run stays `running`; the scheduler records the
    /// attempt's result when the handler returns, as for any run. (A lease that ended while
    /// the transaction was open is not renewed by it: the run may be taken over once the
    /// lock is free, and the next attempt sees these writes.)
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] (`connection`) when a database was attached inside the
    /// transaction, [`Error::Store`] when the handler ended the transaction itself (its
    /// writes after that were not fenced), the driver's error when the commit fails;
    /// nothing of the transaction is kept then.
    pub fn commit(self) -> Result<()> {
        self.check_open("fenced_commit")?;
        let FencedTransaction {
            tx,
            sql,
            busy_timeout,
            ..
        } = self;
        tx.commit()
            .map_err(|e| map_error(&sql, busy_timeout, "fenced_commit", e))
    }

    /// Records the run's success in the same commit as the handler's writes: the run row
    /// (the history of this attempt, or beside its history row where one was written)
    /// becomes `succeeded` (`finished_at` = the host clock
    /// now, as the store's `finish` writes them), then `COMMIT`, then the handler's context
    /// is told ([`JobContext::mark_finished_in_transaction`]) so the scheduler writes no
    /// result of its own. A backup that would take the run over finds it finished. Pruning
    /// the job's history to its retention is left to its next claims.
    ///
    /// # Errors
    ///
    /// [`Error::Fenced`] when the run row no longer matches this attempt (the handler's own
    /// statements changed it), and the errors of [`FencedTransaction::commit`]. Nothing of the transaction is
    /// kept then, and the scheduler records the handler's result as usual.
    pub fn commit_finished(self) -> Result<()> {
        self.check_open("fenced_commit")?;
        let FencedTransaction {
            tx,
            key,
            ctx,
            sql,
            busy_timeout,
        } = self;
        let loss = {
            let mut e = ConnExec::new(&tx, &sql, busy_timeout, "fenced_commit");
            ready(ops::finish_fenced(&mut e, &sql, &key))?
        };
        if let Some(loss) = loss {
            drop(tx);
            return Err(fenced(&key, loss));
        }
        tx.commit()
            .map_err(|e| map_error(&sql, busy_timeout, "fenced_commit", e))?;
        if let Some(ctx) = ctx {
            ctx.mark_finished_in_transaction();
        }
        tracing::debug!(path = %sql.location, attempt = %key, "fenced transaction committed the run's success");
        Ok(())
    }

    /// Refuses to commit a transaction the handler ended itself, or one that reached into
    /// an attached database (SQLite allows `ATTACH` inside a transaction, and refuses
    /// `DETACH` of a database written in it, so a written one is still listed here).
    fn check_open(&self, operation: &'static str) -> Result<()> {
        refuse_attached(&self.tx, &self.sql, self.busy_timeout, operation)?;
        if self.tx.is_autocommit() {
            return Err(Error::store(
                KIND,
                operation,
                format!(
                    "the fenced transaction of {} was ended by the handler's own COMMIT, END \
                     or ROLLBACK, so what it wrote after that was not fenced; run no \
                     transaction statements on a fenced transaction (use its savepoint())",
                    self.key
                ),
            ));
        }
        Ok(())
    }
}

impl Deref for FencedTransaction<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        &self.tx
    }
}

fn fenced(key: &AttemptKey, loss: FenceLoss) -> Error {
    Error::Fenced {
        job: key.run.job.to_string(),
        slot: key.run.slot,
        attempt: key.attempt,
        loss,
    }
}

/// Refuses a connection that is not on the store's file, has another database attached,
/// or is inside a transaction already.
fn check_connection(conn: &Connection, store: &SqliteStore) -> Result<()> {
    let refuse = |reason: String| Error::invalid_option("connection", reason);
    let given = conn.path().unwrap_or("");
    if given.is_empty() {
        return Err(refuse(format!(
            "a fenced transaction needs a connection to the store's file {}, not to a \
             temporary or in-memory database: open it with SqliteStore::open_connection",
            store.path()
        )));
    }
    // SQLite reports the full path it opened: usually the store's own path already, so the
    // file system is asked only when the two differ (a symbolic link, a relative path).
    let same = Path::new(given) == store.canonical_path()
        || std::fs::canonicalize(given).is_ok_and(|c| c == store.canonical_path());
    if !same {
        return Err(refuse(format!(
            "the connection is on {given}, the store's file is {}: a fenced transaction \
             checks the run in the store's own file, so open the connection on it \
             (SqliteStore::open_connection)",
            store.path()
        )));
    }
    refuse_attached(conn, store.sql(), store.busy_timeout(), "fenced_begin")?;
    if !conn.is_autocommit() {
        return Err(refuse(
            "the connection is inside a transaction already; commit or roll it back first".into(),
        ));
    }
    Ok(())
}

/// Refuses a connection with a database attached: in WAL mode a commit is atomic per file
/// only.
fn refuse_attached(
    conn: &Connection,
    sql: &Sql,
    busy_timeout: Duration,
    operation: &'static str,
) -> Result<()> {
    let attached =
        attached_databases(conn).map_err(|e| map_error(sql, busy_timeout, operation, e))?;
    if attached.is_empty() {
        return Ok(());
    }
    Err(Error::invalid_option(
        "connection",
        format!(
            "the connection has {} attached; in WAL mode (the store's) SQLite commits each \
             database file on its own, so a failed commit or a crash could keep the rows of \
             one file and lose those of another: keep the handler's tables in the store's \
             file and attach no database to the connection of a fenced transaction (nothing \
             of the transaction was kept)",
            attached.join(", ")
        ),
    ))
}

/// The schema names of the databases attached to `conn` (not `main`, not `temp`).
fn attached_databases(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare_cached("SELECT name FROM pragma_database_list")?;
    let names = stmt.query_map([], |r| r.get::<_, String>(0))?;
    let mut out = Vec::new();
    for name in names {
        let name = name?;
        if name != "main" && name != "temp" {
            out.push(name);
        }
    }
    Ok(out)
}

/// [`Exec`] on any connection to the store's file.
struct ConnExec<'a> {
    conn: &'a Connection,
    sql: &'a Sql,
    busy_timeout: Duration,
    operation: &'static str,
}

impl<'a> ConnExec<'a> {
    fn new(
        conn: &'a Connection,
        sql: &'a Sql,
        busy_timeout: Duration,
        operation: &'static str,
    ) -> Self {
        ConnExec {
            conn,
            sql,
            busy_timeout,
            operation,
        }
    }

    fn err(&self, e: rusqlite::Error) -> Error {
        map_error(self.sql, self.busy_timeout, self.operation, e)
    }
}

impl Exec for ConnExec<'_> {
    async fn now(&mut self) -> Result<EpochMs> {
        // The store's clock: the host's, as for every call of the store.
        Ok(host_now())
    }

    async fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>> {
        query_rows(self.conn, self.sql, sql, params, |e| self.err(e))
    }

    async fn execute(&mut self, sql: &str, params: &[Value]) -> Result<u64> {
        execute_rows(self.conn, sql, params, |e| self.err(e))
    }
}

impl SqliteStore {
    /// A new connection to the store's file, set up as the store's own: the store's busy
    /// timeout (SQLite's busy handler), the store's `synchronous` setting. For
    /// [`FencedTransaction::begin`]; the handler's tables belong in this same file.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] when the file cannot be opened.
    pub fn open_connection(&self) -> Result<Connection> {
        let conn = self.connection()?;
        conn.busy_timeout(self.busy_timeout())
            .map_err(|e| self.open_error(e))?;
        Ok(conn)
    }

    /// Runs `f` in a fenced transaction for the handler's attempt, on a new connection to
    /// the store's file, on tokio's blocking pool: the async form of
    /// [`FencedTransaction::begin`]. `f` runs the handler's statements and ends with
    /// [`FencedTransaction::commit_finished`] (or `commit`); returning without committing
    /// rolls back.
    ///
    /// ```no_run
    /// # async fn handler(store: anarchon_sqlite::SqliteStore, ctx: anarchon_core::JobContext)
    /// #     -> Result<(), anarchon_core::BoxError> {
    /// let slot = ctx.slot_ms();
    /// store
    ///     .fenced_transaction(&ctx, move |tx| -> Result<(), anarchon_core::BoxError> {
    ///         tx.execute("INSERT INTO ledger (slot, amount) VALUES (?1, 10)", [slot])?;
    ///         tx.commit_finished()?;
    ///         Ok(())
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// What [`FencedTransaction::begin`] answers, converted into `E`, and what `f` returns.
    /// A panic in `f` is resumed in the caller (the transaction was rolled back).
    pub async fn fenced_transaction<T, E, F>(
        &self,
        ctx: &JobContext,
        f: F,
    ) -> std::result::Result<T, E>
    where
        F: FnOnce(FencedTransaction<'_>) -> std::result::Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<Error> + Send + 'static,
    {
        let store = self.clone();
        let ctx = ctx.clone();
        let run = tokio::task::spawn_blocking(move || -> std::result::Result<T, E> {
            let mut conn = store.connection()?;
            // The store's own busy handler: tries every 50-500 µs up to the busy timeout,
            // where SQLite's sleeps up to 100 ms between tries.
            conn.busy_handler(Some(busy_wait))
                .map_err(|e| store.open_error(e))?;
            BUSY_UNTIL.set(deadline_after(store.busy_timeout()));
            let tx = FencedTransaction::begin(&mut conn, &store, &ctx)?;
            f(tx)
        });
        match run.await {
            Ok(r) => r,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => Err(Error::store(KIND, "fenced_transaction", e).into()),
        }
    }

    /// A connection to the store's file with the store's settings, without a busy handler.
    fn connection(&self) -> Result<Connection> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(self.canonical_path(), flags)
            .map_err(|e| self.open_error(e))?;
        let sync = if self.full_sync() { "FULL" } else { "NORMAL" };
        conn.pragma_update(None, "synchronous", sync)
            .map_err(|e| self.open_error(e))?;
        Ok(conn)
    }

    fn open_error(&self, e: rusqlite::Error) -> Error {
        Error::Unavailable {
            store: KIND,
            target: self.path().to_owned(),
            source: Box::new(e),
        }
    }
}
