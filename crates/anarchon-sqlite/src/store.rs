//! The SQLite lease store on a local file, through `rusqlite` (bundled SQLite).
//!
//! One store owns one connection, driven by one dedicated thread: SQLite calls block
//! (file I/O, the busy handler sleeps while another process holds the write lock), so they
//! never run on the runtime's workers. Each call is queued to that thread with a deadline:
//! a call still queued when its deadline passed is dropped unexecuted, and the caller
//! stops waiting at the deadline with [`Error::Timeout`]. A statement waits for the
//! database's lock at most the busy timeout.

use std::collections::VecDeque;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

// The host clock in epoch ms: every process that opens the file shares this host. [B-20]
use anarchon_core::claim_only::host_now;
use anarchon_core::store::{
    BatchLimits, ClaimOutcome, EpochMs, Error, Finish, HistoryStore, JobName, Lease, LeaseClaim,
    LeaseStore, OwnerWrite, Prepare, Renewal, Result, Retention, RunKey, RunRecord, RunView, Store,
    Takeover, TakeoverOutcome,
};
use async_trait::async_trait;
use rusqlite::config::DbConfig;
use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, OpenFlags};
use tokio::sync::{broadcast, oneshot};

use crate::checkpoint::Checkpointer;
use crate::error::SqliteError;
use crate::releases;
use crate::sql::{self, Exec, Row, Sql, Tables, Value, ops, schema};

pub(crate) const KIND: &str = "sqlite";

/// How long a statement waits for another connection's write lock by default.
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest `busy_timeout` and `call_timeout` accepted: 365 days, the bound of the
/// core's own timeouts. A longer wait could not be told from a hang.
pub const MAX_TIMEOUT: Duration = anarchon_core::options::MAX_DURATION;

/// The shortest `call_timeout` accepted: a call cannot be answered in no time at all.
pub const MIN_CALL_TIMEOUT: Duration = Duration::from_millis(1);

/// How long after now a call given `after` ends. The options are bounded (see
/// [`MAX_TIMEOUT`]), so the sum always fits; the far fallback only keeps this free of
/// panics.
pub(crate) fn deadline_after(after: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(after)
        .or_else(|| now.checked_add(MAX_TIMEOUT))
        .unwrap_or(now)
}

/// The most claims, takeovers or results one transaction takes (`LeaseStore::claim_many`,
/// `take_over_many`, `finish_many`): enough to absorb the slots of thousands of jobs falling
/// due together in a few transactions, small enough that one transaction holds the write
/// lock for about a millisecond.
const BATCH_CLAIMS: usize = 256;

/// The most jobs one `unfinished_runs` call on the connection's thread reads (5 statements
/// of 200 jobs, a few milliseconds at 3 µs a job plus the runs found).
const UNFINISHED_PER_CALL: usize = 1000;

/// Options of a [`SqliteStore`], for [`SqliteStore::connect_with`].
///
/// ```no_run
/// # async fn demo() -> anarchon_core::Result<()> {
/// use std::time::Duration;
/// use anarchon_sqlite::{SqliteOptions, SqliteStore};
///
/// let options = SqliteOptions::default()
///     .table("myapp_runs")
///     .busy_timeout(Duration::from_secs(2))
///     .durable(true);
/// let store = SqliteStore::connect_with("/var/lib/myapp/anarchon.db", options).await?;
/// # let _ = store; Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    table: String,
    busy_timeout: Duration,
    call_timeout: Option<Duration>,
    full_sync: bool,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            table: sql::DEFAULT_PREFIX.to_owned(),
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
            call_timeout: None,
            full_sync: false,
        }
    }
}

impl SqliteOptions {
    /// The table prefix (default `anarchon_runs`): the tables are `<prefix>`,
    /// `<prefix>_attempts` and `<prefix>_meta`. An SQL identifier of ASCII letters, digits
    /// and `_`. [B-42, B-43]
    pub fn table(mut self, prefix: impl Into<String>) -> Self {
        self.table = prefix.into();
        self
    }

    /// How long a statement waits while another connection holds the write lock (default
    /// 5 s; 0 fails at once; at most [`MAX_TIMEOUT`], else `connect` answers
    /// [`Error::OutOfRange`]). Past it the call fails with [`Error::Timeout`]. A call's own
    /// deadline (`call_timeout`) ends the wait too, when it comes first.
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// The longest any call may take, queueing included (default: the busy timeout + 5 s;
    /// from [`MIN_CALL_TIMEOUT`] to [`MAX_TIMEOUT`], else `connect` answers
    /// [`Error::OutOfRange`]). The scheduler bounds its calls too; this bound also holds
    /// for direct use.
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = Some(timeout);
        self
    }

    /// `synchronous = FULL` instead of `NORMAL`: every commit is flushed to disk, so a power
    /// loss cannot undo a claim (nor lower a fence); claims get slower by an fsync each.
    /// With `NORMAL` (the default) a crash of the process loses nothing; a power loss or
    /// an OS crash may lose the last commits.
    pub fn durable(mut self, full_sync: bool) -> Self {
        self.full_sync = full_sync;
        self
    }
}

/// A lease store on one SQLite file. Every process (and every store) that opens the same
/// file on one host coordinates with the others through SQLite's file locks. [B-43]
///
/// Clones share the connection; [`Store::close`] closes it for all of them.
///
/// ```no_run
/// # async fn f() -> anarchon_core::Result<()> {
/// use anarchon_sqlite::{SqliteOptions, SqliteStore};
/// let store = SqliteStore::connect_with(
///     "/var/lib/myapp/anarchon.db",
///     SqliteOptions::default().table("anarchon_runs"),
/// )
/// .await?;
/// # let _ = store; Ok(()) }
/// ```
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
    sql: Arc<Sql>,
    call_timeout: Duration,
    /// The scheduler's store timeout less a margin (ms, 0 until `prepare`): no call may
    /// outlast its caller, or a claim could commit after the caller gave up on it.
    caller_limit_ms: std::sync::atomic::AtomicU64,
    releases: Arc<broadcast::Sender<RunKey>>,
    watcher: crate::watcher::ReleaseWatcher,
    /// The file as the worker's connection resolved it (fenced transactions check that a
    /// connection is on it).
    canonical: PathBuf,
    busy_timeout: Duration,
    full_sync: bool,
}

impl Inner {
    fn call_timeout(&self) -> Duration {
        match self
            .caller_limit_ms
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            0 => self.call_timeout,
            limit => self.call_timeout.min(Duration::from_millis(limit)),
        }
    }
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.inner.sql.location)
            .field("table", &self.inner.sql.tables.runs)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens (or creates) the database file at `path` with the default options, turns on
    /// WAL, and creates or migrates the tables: the store is ready when this returns.
    ///
    /// # Errors
    ///
    /// Each names the path and changes nothing: a path that is no shared file (`""`,
    /// `":memory:"`, `file::memory:`: [`Error::InvalidOption`]), a missing directory, a file
    /// opened read-only, a file that is not a database ([`Error::Corrupt`]), a schema
    /// written by a newer anarchon ([`Error::SchemaTooNew`]), tables of this prefix with
    /// another shape.
    ///
    /// ```no_run
    /// # async fn demo() -> anarchon_core::Result<()> {
    /// use anarchon_core::Scheduler;
    /// use anarchon_sqlite::SqliteStore;
    ///
    /// let store = SqliteStore::connect("jobs.db").await?;
    /// let scheduler = Scheduler::leased(store).build()?;
    /// # let _ = scheduler; Ok(()) }
    /// ```
    pub async fn connect(path: impl AsRef<Path>) -> Result<SqliteStore> {
        Self::connect_with(path, SqliteOptions::default()).await
    }

    /// [`SqliteStore::connect`] with these options.
    ///
    /// # Errors
    ///
    /// As [`SqliteStore::connect`], and [`Error::InvalidOption`] for a bad table prefix.
    ///
    /// ```no_run
    /// # async fn demo() -> anarchon_core::Result<()> {
    /// use anarchon_sqlite::{SqliteOptions, SqliteStore};
    ///
    /// let store = SqliteStore::connect_with("jobs.db", SqliteOptions::default().table("myapp")).await?;
    /// # let _ = store; Ok(()) }
    /// ```
    pub async fn connect_with(
        path: impl AsRef<Path>,
        options: SqliteOptions,
    ) -> Result<SqliteStore> {
        let path = path.as_ref().to_owned();
        crate::error::check_duration(
            "busy_timeout",
            options.busy_timeout,
            Duration::ZERO,
            MAX_TIMEOUT,
        )?;
        if let Some(call) = options.call_timeout {
            crate::error::check_duration("call_timeout", call, MIN_CALL_TIMEOUT, MAX_TIMEOUT)?;
        }
        crate::error::check_shared_path(&path)?;
        let tables = Tables::new(&options.table).map_err(|reason| SqliteError::InvalidTable {
            table: options.table.clone(),
            reason,
        })?;
        let call_timeout = options
            .call_timeout
            .unwrap_or(options.busy_timeout.saturating_add(Duration::from_secs(5)));
        let location = path.display().to_string();
        let sql = Arc::new(Sql::new(KIND, location.clone(), tables));
        let (jobs_tx, jobs_rx) = mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = oneshot::channel::<Result<PathBuf>>();
        let worker_sql = sql.clone();
        let worker_path = path.clone();
        let (busy, full_sync) = (options.busy_timeout, options.full_sync);
        std::thread::Builder::new()
            .name("anarchon-sqlite".into())
            .spawn(move || {
                match Worker::open(worker_path, worker_sql, busy, call_timeout, full_sync) {
                    Ok(worker) => {
                        let canonical = worker.path.clone();
                        if ready_tx.send(Ok(canonical)).is_ok() {
                            worker.serve(jobs_rx);
                        }
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
            })
            .map_err(|e| SqliteError::Open {
                path: path.clone(),
                source: Box::new(e),
            })?;
        let canonical = match tokio::time::timeout(call_timeout, ready_rx).await {
            Ok(Ok(r)) => r?,
            Ok(Err(_)) => return Err(worker_died("open")),
            Err(_) => {
                return Err(Error::Timeout {
                    store: KIND,
                    operation: "open",
                    after: call_timeout,
                });
            }
        };
        let releases = releases::channel(&format!(
            "sqlite:{}#{}",
            canonical.display(),
            sql.tables.runs
        ));
        let watcher = crate::watcher::ReleaseWatcher::new(
            canonical.clone(),
            sql.tables.runs.clone(),
            releases.clone(),
        );
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                jobs: Mutex::new(Some(jobs_tx)),
                sql,
                call_timeout,
                caller_limit_ms: std::sync::atomic::AtomicU64::new(0),
                releases,
                watcher,
                canonical,
                busy_timeout: options.busy_timeout,
                full_sync: options.full_sync,
            }),
        })
    }

    /// The file, as given.
    pub fn path(&self) -> &str {
        &self.inner.sql.location
    }

    /// The table names.
    pub fn tables(&self) -> &Tables {
        &self.inner.sql.tables
    }

    /// The statements of this store's tables.
    pub(crate) fn sql(&self) -> &Arc<Sql> {
        &self.inner.sql
    }

    /// The file as the store's connection resolved it.
    pub(crate) fn canonical_path(&self) -> &Path {
        &self.inner.canonical
    }

    /// How long a statement waits for the write lock.
    pub(crate) fn busy_timeout(&self) -> Duration {
        self.inner.busy_timeout
    }

    /// Whether commits are flushed (`synchronous = FULL`).
    pub(crate) fn full_sync(&self) -> bool {
        self.inner.full_sync
    }

    /// The schema version in the file (the current one once opened).
    pub async fn schema_version(&self) -> Result<Option<i64>> {
        self.call("schema_version", |w, deadline| {
            let mut e = w.exec("schema_version", deadline);
            ready(schema::version(&mut e, &w.sql))
        })
        .await
    }

    /// Runs `BEGIN IMMEDIATE; COMMIT` on the store's connection: the cost of taking and
    /// releasing the write lock and nothing else (the benchmark's baseline). Test-only:
    /// behind the `testkit` feature.
    #[cfg(feature = "testkit")]
    #[cfg_attr(docsrs, doc(cfg(feature = "testkit")))]
    pub async fn empty_write(&self) -> Result<()> {
        self.call("empty_write", |w, deadline| {
            let mut e = w.exec("empty_write", deadline);
            ready(async {
                e.execute("BEGIN IMMEDIATE", &[]).await?;
                ops::finish_tx(&mut e, Ok(())).await
            })
        })
        .await
    }

    /// Sends `f` to the connection's thread and waits for its answer.
    ///
    /// The call has a deadline of now + the call timeout. On the thread it is not started
    /// after the deadline, waits for the write lock at most until the deadline, and does
    /// not commit after it (it rolls back and answers [`Error::Timeout`]), so a call whose
    /// caller was told "timeout" has had no effect. The caller waits a short grace past the
    /// deadline for that answer; only a thread stuck inside SQLite (hung I/O) outlasts it.
    async fn call<T, F>(&self, operation: &'static str, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Worker, Instant) -> Result<T> + Send + 'static,
    {
        let timeout = self.inner.call_timeout();
        let deadline = deadline_after(timeout);
        let (tx, rx) = oneshot::channel();
        let urgent = urgent(operation);
        let job = Job::Run(
            Box::new(move |w: &Worker| {
                // A call that waited in the queue past its deadline has been given up by its
                // caller: running it now could start a claim nobody waits for.
                let r = match deadline.checked_duration_since(Instant::now()) {
                    None => Err(Error::Timeout {
                        store: KIND,
                        operation,
                        after: timeout,
                    }),
                    Some(left) => {
                        BUSY_UNTIL.set(deadline_after(left.min(w.busy_timeout)));
                        f(w, deadline)
                    }
                };
                let _ = tx.send(r);
            }),
            urgent,
        );
        {
            let jobs = self.inner.jobs.lock().unwrap_or_else(|e| e.into_inner());
            let Some(jobs) = jobs.as_ref() else {
                return Err(closed(&self.inner.sql));
            };
            jobs.send(job).map_err(|_| worker_died(operation))?;
        }
        // Most calls take 5-50 µs on the thread. Parking this worker until the answer comes
        // costs a wake-up of the worker on top (tens of µs on a VM), so first poll for the
        // answer a little while, yielding between polls to the runtime's other tasks and to
        // other threads: on a busy machine a worker that only polled would keep the CPU from
        // the connection's thread until the OS preempts it (~50-100 µs per call measured).
        let mut rx = rx;
        let until = deadline_after(CALLER_SPIN);
        loop {
            match rx.try_recv() {
                Ok(r) => return r,
                Err(oneshot::error::TryRecvError::Closed) => return Err(worker_died(operation)),
                Err(oneshot::error::TryRecvError::Empty) if Instant::now() < until => {
                    std::thread::yield_now();
                    tokio::task::yield_now().await;
                }
                Err(oneshot::error::TryRecvError::Empty) => break,
            }
        }
        match tokio::time::timeout(timeout.saturating_add(ANSWER_GRACE), rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(worker_died(operation)),
            Err(_) => Err(Error::Timeout {
                store: KIND,
                operation,
                after: timeout,
            }),
        }
    }
}

thread_local! {
    /// Until when the busy handler of the connection on this thread retries: each call sets
    /// it (the connection's thread runs one call at a time). The handler is a plain
    /// `FnMut(i32) -> bool` installed once; a thread-local saves it a lock.
    pub(crate) static BUSY_UNTIL: std::cell::Cell<Instant> = std::cell::Cell::new(Instant::now());
}

/// The waits between two tries for the write lock while another connection holds it, by
/// try (the last one repeats). SQLite's own busy timeout sleeps 1, 2, 5, 10, 15, 20, 25,
/// 25, 25, 50, 50, 100 ms: three processes that each hold the lock for a millisecond or two
/// then leave it idle while they sleep, and a waiter comes back up to 100 ms after it was
/// free.
const BUSY_STEPS_US: [u64; 6] = [50, 100, 200, 300, 500, 500];

/// The busy handler: sleeps the next step, bounded by [`BUSY_UNTIL`]; `false` (SQLite
/// answers `SQLITE_BUSY`) once that has passed.
pub(crate) fn busy_wait(tries: i32) -> bool {
    let until = BUSY_UNTIL.get();
    let now = Instant::now();
    if now >= until {
        return false;
    }
    let i = usize::try_from(tries)
        .unwrap_or(0)
        .min(BUSY_STEPS_US.len() - 1);
    std::thread::sleep(Duration::from_micros(BUSY_STEPS_US[i]).min(until - now));
    true
}

/// The bytes of WAL kept on disk once a checkpoint restarts it (`journal_size_limit`): 64 MiB,
/// far above the ~4 MiB (1,000 pages) at which a checkpoint is due in steady use.
pub(crate) const WAL_SIZE_LIMIT: i64 = 64 * 1024 * 1024;

/// How long a caller polls for the answer (yielding between polls) before it parks.
const CALLER_SPIN: Duration = Duration::from_micros(50);

/// How long the connection's thread polls for the next call before it sleeps on the queue.
const THREAD_SPIN: Duration = Duration::from_micros(50);

/// How long a caller waits past a call's deadline for the thread's own answer.
const ANSWER_GRACE: Duration = Duration::from_secs(2);

fn closed(sql: &Sql) -> Error {
    Error::Unavailable {
        store: KIND,
        target: sql.location.clone(),
        source: "the store was closed".into(),
    }
}

fn worker_died(operation: &'static str) -> Error {
    Error::store(
        KIND,
        operation,
        "the SQLite connection thread stopped (a call panicked)",
    )
}

/// Polls a future that never waits (every [`Exec`] call on rusqlite completes at once).
pub(crate) fn ready<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => unreachable!("a rusqlite call returned Pending"),
    }
}

/// The next call: calls often come back to back (a claim, then its finish; a scheduler's
/// claims of several jobs), and waking a sleeping thread costs tens of µs, so the thread
/// polls the queue for [`THREAD_SPIN`] before it sleeps, yielding the CPU between polls so
/// that a caller waiting for its CPU runs. `None` once every sender is gone.
///
/// Of the calls already queued, a write of an owner (a result, a release, a heartbeat, a
/// takeover) goes before claims and reads: under load the queue holds a turn's claims of
/// thousands of jobs, and a result stuck behind them keeps its run's lease live, so the
/// job's next slot is skipped as an overlap (its claim sees the earlier run still running).
/// Calls in the queue are concurrent calls of independent tasks (a call that depends on
/// another is only sent after that one's answer), so their order is free; a close still
/// comes after every call queued before it.
fn next_job(jobs: &mpsc::Receiver<Job>, backlog: &mut VecDeque<Job>) -> Option<Job> {
    loop {
        match jobs.try_recv() {
            Ok(job) => backlog.push_back(job),
            Err(mpsc::TryRecvError::Disconnected) => break,
            Err(mpsc::TryRecvError::Empty) => break,
        }
    }
    let urgent = backlog
        .iter()
        .take_while(|j| !matches!(j, Job::Close(_)))
        .position(|j| matches!(j, Job::Run(_, true)));
    if let Some(i) = urgent {
        return backlog.remove(i);
    }
    if let Some(job) = backlog.pop_front() {
        return Some(job);
    }
    let until = deadline_after(THREAD_SPIN);
    loop {
        match jobs.try_recv() {
            Ok(job) => return Some(job),
            Err(mpsc::TryRecvError::Disconnected) => return None,
            Err(mpsc::TryRecvError::Empty) if Instant::now() < until => std::thread::yield_now(),
            Err(mpsc::TryRecvError::Empty) => return jobs.recv().ok(),
        }
    }
}

/// Whether a call writes for an owner and goes before queued claims and reads (see
/// [`next_job`]).
fn urgent(operation: &str) -> bool {
    matches!(operation, "finish" | "release" | "heartbeat" | "take_over")
}

enum Job {
    /// A call, and whether it is [`urgent`].
    Run(Box<dyn FnOnce(&Worker) + Send>, bool),
    Close(oneshot::Sender<()>),
}

/// The connection and what its thread needs to map errors.
struct Worker {
    conn: Connection,
    sql: Arc<Sql>,
    path: PathBuf,
    busy_timeout: Duration,
    call_timeout: Duration,
    /// Checkpoints the WAL off this thread (see [`crate::checkpoint`]); `None`: the
    /// connection checkpoints in its commits, as SQLite does by default. Declared after
    /// `conn`, so it is dropped (and its thread joined) after the connection closed.
    checkpointer: Option<Checkpointer>,
}

impl Worker {
    fn open(
        path: PathBuf,
        sql: Arc<Sql>,
        busy_timeout: Duration,
        call_timeout: Duration,
        full_sync: bool,
    ) -> Result<Worker> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
            && !dir.is_dir()
        {
            let dir = dir.to_owned();
            return Err(SqliteError::MissingDirectory { path, dir }.into());
        }
        if path.is_dir() {
            return Err(SqliteError::Open {
                path,
                source: "it is a directory".into(),
            }
            .into());
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(&path, flags).map_err(|e| SqliteError::Open {
            path: path.clone(),
            source: Box::new(e),
        })?;
        let open_err = |path: &Path, e: rusqlite::Error| SqliteError::Open {
            path: path.to_owned(),
            source: Box::new(e),
        };
        // Our own busy handler instead of SQLite's busy timeout: it retries every 50-500 µs
        // up to the call's deadline (see `busy_wait`).
        let mut conn = conn;
        BUSY_UNTIL.set(deadline_after(busy_timeout));
        conn.busy_handler(Some(busy_wait))
            .map_err(|e| open_err(&path, e))?;
        conn.set_prepared_statement_cache_capacity(64);
        // The query planner stability guarantee: plans never depend on bound values. Without
        // it SQLite re-prepares (re-plans) the claim check and the pruning statement on every
        // run once it has looked at a bound value (partial index, `OFFSET ?`): 10-15 µs each,
        // more than the rest of the claim. With no statistics tables there is nothing
        // value-dependent to gain.
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
            .map_err(|e| open_err(&path, e))?;
        // The first read of the file: a file that is not a database fails here.
        if let Err(e) = conn.query_row("SELECT count(*) FROM sqlite_master", [], |_| Ok(())) {
            return Err(match e.sqlite_error_code() {
                Some(rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt) => {
                    SqliteError::NotADatabase {
                        path,
                        detail: e.to_string(),
                    }
                    .into()
                }
                Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => {
                    Error::Timeout {
                        store: KIND,
                        operation: "open",
                        after: busy_timeout,
                    }
                }
                _ => open_err(&path, e).into(),
            });
        }
        if conn
            .is_readonly(rusqlite::MAIN_DB)
            .map_err(|e| open_err(&path, e))?
        {
            return Err(SqliteError::ReadOnly { path }.into());
        }
        let canonical = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        let mut worker = Worker {
            conn,
            sql,
            path: canonical,
            busy_timeout,
            call_timeout,
            checkpointer: None,
        };
        {
            let mut e = worker.exec("open", deadline_after(call_timeout));
            let ensured = ready(schema::ensure(&mut e, &worker.sql))?;
            tracing::debug!(path = %worker.sql.location, ?ensured, "opened the SQLite store");
        }
        // WAL lets readers (history, backups' watches) run beside the writer. It is set
        // after the schema check, so a file we refuse keeps its journal mode.
        // Switching to WAL needs a moment of exclusive access, and SQLite answers BUSY at once
        // (its busy handler does not apply) while another process opens the same fresh file:
        // retry until the call's deadline instead of failing the open.
        let deadline = deadline_after(call_timeout);
        let mode: String = loop {
            match worker
                .conn
                .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
            {
                Ok(mode) => break mode,
                Err(e)
                    if matches!(
                        e.sqlite_error_code(),
                        Some(
                            rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                        )
                    ) && Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(worker.error("open", e)),
            }
        };
        if !mode.eq_ignore_ascii_case("wal") {
            tracing::warn!(
                path = %worker.sql.location,
                mode,
                "SQLite could not switch to WAL; claims still work, readers wait for writers"
            );
        }
        // `RETURNING` (claims, pruning, heartbeats) collects its rows in an ephemeral table,
        // and so do some sorts. With the default temp store each such statement creates and
        // deletes a temporary file: 70-80 µs a statement on the development VM, more than
        // the rest of a claim. These tables hold a few rows; keep them in memory.
        worker
            .conn
            .pragma_update(None, "temp_store", "MEMORY")
            .map_err(|e| worker.error("open", e))?;
        let sync = if full_sync { "FULL" } else { "NORMAL" };
        worker
            .conn
            .pragma_update(None, "synchronous", sync)
            .map_err(|e| worker.error("open", e))?;
        // While several processes read and write without a pause (a burst of catch-ups on
        // 5 instances), checkpoints cannot restart the WAL and it grows (measured: 1.4 GB
        // for a 90 MB file); SQLite reuses it from the start later but keeps its size on
        // disk. Cut it back to this size whenever it restarts.
        worker
            .conn
            .pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT)
            .map_err(|e| worker.error("open", e))?;
        // Checkpoints on a thread of their own, not in this connection's commits (see
        // `crate::checkpoint`). Only in WAL mode: a rollback journal has no checkpoints.
        if mode.eq_ignore_ascii_case("wal") {
            worker.checkpointer = Checkpointer::start(&worker.path, sync);
            if let Some(c) = &worker.checkpointer {
                c.hook(&mut worker.conn)
                    .map_err(|e| map_error(&worker.sql, busy_timeout, "open", e))?;
            }
        }
        Ok(worker)
    }

    fn serve(self, jobs: mpsc::Receiver<Job>) {
        let mut backlog = VecDeque::new();
        while let Some(job) = next_job(&jobs, &mut backlog) {
            match job {
                Job::Run(f, _) => {
                    if std::panic::catch_unwind(AssertUnwindSafe(|| f(&self))).is_err() {
                        tracing::error!(path = %self.sql.location, "an SQLite store call panicked");
                        if !self.conn.is_autocommit() {
                            let _ = self.conn.execute_batch("ROLLBACK");
                        }
                    }
                }
                Job::Close(done) => {
                    drop(self);
                    let _ = done.send(());
                    return;
                }
            }
        }
    }

    fn exec(&self, operation: &'static str, deadline: Instant) -> LocalExec<'_> {
        LocalExec {
            w: self,
            operation,
            deadline,
        }
    }

    /// Maps a driver error to the core error the contract names for it.
    fn error(&self, operation: &'static str, e: rusqlite::Error) -> Error {
        map_error(&self.sql, self.busy_timeout, operation, e)
    }
}

/// Maps a driver error to the core error the contract names for it; `busy_timeout` is how
/// long the connection waited for the lock when the answer is "busy".
pub(crate) fn map_error(
    sql: &Sql,
    busy_timeout: Duration,
    operation: &'static str,
    e: rusqlite::Error,
) -> Error {
    use rusqlite::ErrorCode as C;
    let target = sql.location.clone();
    match e.sqlite_error_code() {
        Some(C::DatabaseBusy | C::DatabaseLocked) => Error::Timeout {
            store: KIND,
            operation,
            after: busy_timeout,
        },
        Some(C::NotADatabase | C::DatabaseCorrupt) => Error::Corrupt {
            store: KIND,
            location: target,
            reason: e.to_string(),
        },
        Some(
            C::CannotOpen
            | C::ReadOnly
            | C::DiskFull
            | C::SystemIoFailure
            | C::PermissionDenied
            | C::NoLargeFileSupport,
        ) => Error::Unavailable {
            store: KIND,
            target,
            source: Box::new(e),
        },
        _ => Error::store(KIND, operation, e),
    }
}

/// [`Exec`] on the worker's connection: statements are prepared once and cached by text.
struct LocalExec<'w> {
    w: &'w Worker,
    operation: &'static str,
    deadline: Instant,
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

/// Runs a statement that returns rows on `conn` (prepared once and cached by text).
pub(crate) fn query_rows(
    conn: &Connection,
    sql: &Sql,
    text: &str,
    params: &[Value],
    err: impl Fn(rusqlite::Error) -> Error,
) -> Result<Vec<Row>> {
    let mut stmt = conn.prepare_cached(text).map_err(&err)?;
    let n = stmt.column_count();
    let mut rows = stmt
        .query(rusqlite::params_from_iter(params.iter().map(Param)))
        .map_err(&err)?;
    let mut out = Vec::new();
    while let Some(r) = rows.next().map_err(&err)? {
        let mut row = Vec::with_capacity(n);
        for i in 0..n {
            row.push(match r.get_ref(i).map_err(&err)? {
                ValueRef::Null => Value::Null,
                ValueRef::Integer(v) => Value::Integer(v),
                ValueRef::Text(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
                other => {
                    return Err(sql.corrupt(
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

/// Runs a statement on `conn` and returns the number of rows it changed.
pub(crate) fn execute_rows(
    conn: &Connection,
    text: &str,
    params: &[Value],
    err: impl Fn(rusqlite::Error) -> Error,
) -> Result<u64> {
    let mut stmt = conn.prepare_cached(text).map_err(&err)?;
    let n = stmt
        .execute(rusqlite::params_from_iter(params.iter().map(Param)))
        .map_err(&err)?;
    Ok(n as u64)
}

impl LocalExec<'_> {
    fn err(&self, e: rusqlite::Error) -> Error {
        self.w.error(self.operation, e)
    }

    fn query_now(&self, sql: &str, params: &[Value]) -> Result<Vec<Row>> {
        query_rows(&self.w.conn, &self.w.sql, sql, params, |e| self.err(e))
    }

    fn execute_now(&self, sql: &str, params: &[Value]) -> Result<u64> {
        if sql == "COMMIT" && Instant::now() > self.deadline {
            // The caller has been told "timeout" (or is about to be): keep it true.
            let _ = self.w.conn.execute_batch("ROLLBACK");
            return Err(Error::Timeout {
                store: KIND,
                operation: self.operation,
                after: self.w.call_timeout,
            });
        }
        execute_rows(&self.w.conn, sql, params, |e| self.err(e))
    }
}

impl Exec for LocalExec<'_> {
    async fn now(&mut self) -> Result<EpochMs> {
        Ok(host_now())
    }

    async fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>> {
        self.query_now(sql, params)
    }

    async fn execute(&mut self, sql: &str, params: &[Value]) -> Result<u64> {
        self.execute_now(sql, params)
    }
}

/// Runs one shared operation on the connection's thread.
macro_rules! on_worker {
    ($store:expr, $op:literal, |$e:ident, $sql:ident| $body:expr) => {
        $store
            .call($op, move |w: &Worker, deadline: Instant| {
                let mut $e = w.exec($op, deadline);
                let $sql: &Sql = &w.sql;
                ready($body)
            })
            .await
    };
}

#[async_trait]
impl Store for SqliteStore {
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
            std::sync::atomic::Ordering::Relaxed,
        );
        let jobs = prepare.jobs.clone();
        on_worker!(self, "prepare", |e, sql| async move {
            // Another process may have migrated the file since it was opened.
            schema::ensure(&mut e, sql).await?;
            ops::register_jobs(&mut e, sql, &jobs).await
        })
    }

    async fn now(&self) -> Result<EpochMs> {
        Ok(host_now())
    }

    async fn close(&self) -> Result<()> {
        let jobs = self
            .inner
            .jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let Some(jobs) = jobs else { return Ok(()) };
        let (tx, rx) = oneshot::channel();
        if jobs.send(Job::Close(tx)).is_ok() {
            // Calls queued before the close finish first; nothing runs after this returns.
            let _ = tokio::time::timeout(self.inner.call_timeout, rx).await;
        }
        Ok(())
    }
}

#[async_trait]
impl HistoryStore for SqliteStore {
    async fn history(&self, job: &JobName, count: usize) -> Result<Vec<RunRecord>> {
        let job = job.clone();
        on_worker!(self, "history", |e, sql| ops::history(
            &mut e, sql, &job, count
        ))
    }

    async fn record_manual(&self, record: &RunRecord, retention: Retention) -> Result<()> {
        let record = record.clone();
        on_worker!(self, "record_manual", |e, sql| ops::record_manual(
            &mut e, sql, &record, retention
        ))
    }

    async fn known_jobs(&self) -> Result<Vec<JobName>> {
        on_worker!(self, "known_jobs", |e, sql| ops::known_jobs(&mut e, sql))
    }
}

#[async_trait]
impl LeaseStore for SqliteStore {
    /// One transaction for the whole batch: one write lock and one commit.
    async fn claim_many(&self, claims: &[LeaseClaim]) -> Result<Vec<ClaimOutcome>> {
        let claims = claims.to_vec();
        on_worker!(self, "claim", |e, sql| ops::claim_many(
            &mut e, sql, &claims
        ))
    }

    /// `BATCH_CLAIMS` (256) of each: one transaction takes them. Results gather while two
    /// result calls are out ([`BatchLimits::gather_results`]): a transaction per turn's
    /// results was one per one or two results, and their commits held the file's write
    /// lock most of the time at 3 x 10,000 `every 1s` jobs (docs/performance.md). Claims
    /// leave as they fall due.
    fn limits(&self) -> BatchLimits {
        BatchLimits::all(BATCH_CLAIMS).gathering_results()
    }

    async fn heartbeat(&self, leases: &[Lease], lease_ms: u64) -> Result<Vec<Renewal>> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let leases = leases.to_vec();
        on_worker!(self, "heartbeat", |e, sql| ops::heartbeat(
            &mut e, sql, &leases, lease_ms
        ))
    }

    /// One transaction for the whole batch: one write lock and one commit.
    async fn finish_many(&self, writes: &[(Lease, Finish)]) -> Result<Vec<OwnerWrite>> {
        let writes = writes.to_vec();
        on_worker!(self, "finish", |e, sql| ops::finish_many(
            &mut e, sql, &writes
        ))
    }

    async fn release(&self, lease: &Lease) -> Result<OwnerWrite> {
        let l = lease.clone();
        let r = on_worker!(self, "release", |e, sql| ops::release(&mut e, sql, &l))?;
        if r == OwnerWrite::Done {
            // Receivers may all be gone; backups in other processes poll anyway.
            let _ = self.inner.releases.send(lease.run.clone());
        }
        Ok(r)
    }

    /// One transaction for the whole batch, like `claim_many`.
    async fn take_over_many(&self, takeovers: &[Takeover]) -> Result<Vec<TakeoverOutcome>> {
        if takeovers.is_empty() {
            return Ok(Vec::new());
        }
        let takeovers = takeovers.to_vec();
        on_worker!(self, "take_over", |e, sql| ops::take_over_many(
            &mut e, sql, &takeovers
        ))
    }

    async fn runs(&self, runs: &[RunKey]) -> Result<Vec<RunView>> {
        if runs.is_empty() {
            return Ok(Vec::new());
        }
        let runs = runs.to_vec();
        on_worker!(self, "runs", |e, sql| ops::runs(&mut e, sql, &runs))
    }

    /// `UNFINISHED_PER_CALL` jobs per call on the connection's thread, so a backup asking
    /// for 10,000 jobs holds the thread (and the claims queued behind it) for a few
    /// milliseconds at a time, not for the whole read; each job costs a probe of the
    /// partial index of running runs, never a walk of its history.
    async fn unfinished_runs(&self, jobs: &[JobName]) -> Result<Vec<RunView>> {
        let mut out = Vec::new();
        for chunk in jobs.chunks(UNFINISHED_PER_CALL) {
            let chunk = chunk.to_vec();
            out.extend(on_worker!(self, "unfinished_runs", |e, sql| {
                ops::unfinished_runs(&mut e, sql, &chunk)
            })?);
        }
        out.sort_by(|a, b| a.run.cmp(&b.run));
        out.dedup_by(|a, b| a.run == b.run);
        Ok(out)
    }

    /// An in-process broadcast shared by every store of this process opened on the same
    /// file and prefix: backups in this process hear of a release at once; releases by
    /// other processes are announced on it by the watcher (see `set_watching`).
    fn subscribe_releases(&self) -> Option<broadcast::Receiver<RunKey>> {
        Some(self.inner.releases.subscribe())
    }

    /// While a scheduler watches, a thread reads the file's `PRAGMA data_version` every
    /// 15 ms and announces runs released by other processes, so a handover reaches backups
    /// in other processes within tens of milliseconds; with nobody watching it stops.
    fn set_watching(&self, watching: bool) {
        self.inner.watcher.set(watching);
    }
}
