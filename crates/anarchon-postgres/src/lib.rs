//! PostgreSQL lease store for anarchon: one-statement claims on the database clock, batched
//! heartbeats, and LISTEN/NOTIFY for fast handover. [B-42]
//!
//! ```no_run
//! # async fn demo() -> anarchon_core::Result<()> {
//! use anarchon_postgres::{PostgresOptions, PostgresStore};
//!
//! // Checks the connection and the server version at once (bounded by `connect_timeout`).
//! let store = PostgresStore::connect_with(
//!     "postgres://app:secret@db.internal:5432/app",
//!     PostgresOptions::default().table("anarchon_runs").schema("public"),
//! )
//! .await?;
//! # let _ = store; Ok(()) }
//! ```
//!
//! The same three ways to build a store as in every anarchon store crate:
//! [`PostgresStore::connect`]`(url)`, [`PostgresStore::connect_with`]`(url, options)`, and
//! [`PostgresStore::from_pool`]`(pool, options)` on your own [`deadpool_postgres::Pool`]; the
//! store then leaves the pool open on `close`, and listens for releases only when given a
//! URL for that one extra connection ([`PostgresOptions::listen_url`]).
//!
//! # Tables
//!
//! With the default prefix `anarchon_runs` in schema `public`: `anarchon_runs` (state and
//! lease of each run, and the history of its current attempt), `anarchon_runs_attempts`
//! (the history of attempts handed over or taken over, and of manual runs),
//! `anarchon_runs_jobs` (known jobs and each job's fencing counter), `anarchon_runs_cuts`
//! (each job's remembered pruning cut), `anarchon_runs_meta` (schema version) and the
//! function `anarchon_runs_retry`. `prepare` creates or migrates
//! them under a transaction-scoped advisory lock, so any number of instances may start at
//! once; a schema written by a newer anarchon is refused and left untouched.
//!
//! # Server versions and features
//!
//! PostgreSQL 9.5 or newer (for `INSERT ... ON CONFLICT`); tested on 15.
//!
//! - `tls` (default): TLS through rustls on the connections built from a URL (the pool and
//!   the LISTEN connection), as the URL's `sslmode` and `sslrootcert` ask, read as libpq
//!   reads them: `disable`; `prefer` (the default: TLS when the server offers it, else
//!   plain; the certificate is not checked unless a root CA is given); `require` (TLS
//!   always; the certificate is checked against the root CA only when one is given);
//!   `verify-ca` (the chain against the root CA); `verify-full` (the chain and the host
//!   name). The root CA is `sslrootcert=/path/ca.crt`, `sslrootcert=system`, or else
//!   `~/.postgresql/root.crt` when it exists. `sslmode=allow` and client certificates
//!   (`sslcert`, `sslkey`) are refused. Without the feature, `require` and the `verify-*`
//!   modes are refused and `prefer` connects in plain text.
//!
//! ```no_run
//! # async fn demo() -> anarchon_core::Result<()> {
//! use anarchon_postgres::{PostgresOptions, PostgresStore};
//!
//! let store = PostgresStore::connect_with(
//!     "postgres://app@db.internal/app?sslmode=verify-full&sslrootcert=/etc/ssl/db-ca.crt",
//!     PostgresOptions::default(),
//! )
//! .await?;
//! # let _ = store; Ok(()) }
//! ```
//!
//! # Fenced transactions
//!
//! A handler whose side effects are rows in this same database can write them in a
//! [`FencedTransaction`] ([`PostgresStore::fenced_transaction`]): it commits only while the
//! handler's attempt still owns its run, and can record the run's success in the same
//! commit, so those rows are written once per slot even across crashes and takeovers.
//!
//! # MSRV
//!
//! The workspace's `rust-version`; raising it is not a breaking change before 1.0.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod error;
mod fenced;
mod listen;
mod prune;
mod schema;
mod sql;
mod store;
mod tls;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anarchon_core::store::{Error, Result, RunKey};
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;
use tokio_postgres::Row;
use tokio_postgres::types::{ToSql, Type};
use tokio_util::sync::CancellationToken;

pub use deadpool_postgres;
pub use error::{PostgresError, redact};
pub use fenced::FencedTransaction;
pub use tokio_postgres;

use error::{KIND, is_connection_lost, is_retryable, map_pg, map_pool};
use sql::{Names, Sql};

/// The longest `timeout` accepted: PostgreSQL's `statement_timeout` is an `int4` of
/// milliseconds (24 days, 20 h, 31 min, 23.647 s).
pub const MAX_TIMEOUT: Duration = Duration::from_millis(i32::MAX as u64);

/// The longest `connect_timeout` accepted (also in the URL): 365 days, the bound of the
/// core's own timeouts.
pub const MAX_CONNECT_TIMEOUT: Duration = anarchon_core::options::MAX_DURATION;

/// The shortest `timeout` and `connect_timeout` accepted: PostgreSQL counts whole
/// milliseconds, and its `statement_timeout = 0` would mean "no limit".
pub const MIN_TIMEOUT: Duration = Duration::from_millis(1);

/// The largest `pool_size` accepted. A server takes `max_connections` (100 by default,
/// 262 143 at most) from every instance together; the pool reserves its slots up front.
pub const MAX_POOL_SIZE: usize = 10_000;

/// The longest [`PostgresOptions::prune_window`]: an hour.
pub const MAX_PRUNE_WINDOW: Duration = Duration::from_secs(3600);

/// How often a statement is run again after a serialization failure or a deadlock before
/// the error is returned.
const MAX_RETRIES: u32 = 16;

/// Options of a [`PostgresStore`]. Build them with the setters:
/// `PostgresOptions::default().table("jobs_runs").schema("ops")`.
///
/// Its `Debug` output shows `listen_url` redacted, so logging the options never prints a
/// password.
#[derive(Clone)]
#[non_exhaustive]
pub struct PostgresOptions {
    /// Table prefix (default `anarchon_runs`).
    pub table: String,
    /// Schema (default `public`); created by `prepare` if missing.
    pub schema: String,
    /// Bound of every store call: the server's `statement_timeout` on connections the store
    /// opens, and a client-side timeout around every call (default 5 s; from
    /// [`MIN_TIMEOUT`] to [`MAX_TIMEOUT`], whole milliseconds on the server).
    pub timeout: Duration,
    /// Bound of opening a connection, when the URL sets no `connect_timeout` (default 5 s;
    /// from [`MIN_TIMEOUT`] to [`MAX_CONNECT_TIMEOUT`]).
    pub connect_timeout: Duration,
    /// Connections in the pool the store builds from a URL (default 8; from 1 to
    /// [`MAX_POOL_SIZE`]).
    pub pool_size: usize,
    /// LISTEN/NOTIFY for fast handover (default on).
    pub fast_handover: bool,
    /// The URL of the dedicated LISTEN connection when the store was given a pool (a pooled
    /// connection cannot receive notifications). Without it, backups poll.
    pub listen_url: Option<String>,
    /// `synchronous_commit` on the connections the store opens (default on). Read
    /// [`PostgresOptions::synchronous_commit`] before turning it off.
    pub synchronous_commit: bool,
    /// How long a fenced transaction may sit idle between statements before the server
    /// ends its session (`idle_in_transaction_session_timeout`, set for that transaction
    /// only; default 30 s, the default lease; from [`MIN_TIMEOUT`] to [`MAX_TIMEOUT`]).
    /// Read [`PostgresOptions::fenced_idle_timeout`].
    pub fenced_idle_timeout: Duration,
    /// How long the jobs that batches of claims and results found due to prune wait for
    /// their prune: until the next multiple of this window on the wall clock (default zero,
    /// no wait; up to [`MAX_PRUNE_WINDOW`]). Read [`PostgresOptions::prune_window`].
    pub prune_window: Duration,
}

impl std::fmt::Debug for PostgresOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresOptions")
            .field("table", &self.table)
            .field("schema", &self.schema)
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("pool_size", &self.pool_size)
            .field("fast_handover", &self.fast_handover)
            .field("listen_url", &self.listen_url.as_deref().map(error::shown))
            .field("synchronous_commit", &self.synchronous_commit)
            .field("fenced_idle_timeout", &self.fenced_idle_timeout)
            .field("prune_window", &self.prune_window)
            .finish()
    }
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            table: "anarchon_runs".into(),
            schema: "public".into(),
            timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            pool_size: 8,
            fast_handover: true,
            listen_url: None,
            synchronous_commit: true,
            fenced_idle_timeout: Duration::from_secs(30),
            prune_window: Duration::ZERO,
        }
    }
}

impl PostgresOptions {
    /// Sets the table prefix.
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// Sets the schema.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// Sets the bound of every store call (from [`MIN_TIMEOUT`] to [`MAX_TIMEOUT`]; a value
    /// outside is refused when the store is built, with [`Error::OutOfRange`]).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the bound of opening a connection (from [`MIN_TIMEOUT`] to
    /// [`MAX_CONNECT_TIMEOUT`]; a value outside is refused when the store is built).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets the pool size (for a store built from a URL; from 1 to [`MAX_POOL_SIZE`]: a
    /// value outside, 0 among them, is refused when the store is built).
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size;
        self
    }

    /// Turns LISTEN/NOTIFY handover on or off.
    pub fn fast_handover(mut self, on: bool) -> Self {
        self.fast_handover = on;
        self
    }

    /// Sets the URL of the LISTEN connection (for a store given a pool).
    pub fn listen_url(mut self, url: impl Into<String>) -> Self {
        self.listen_url = Some(url.into());
        self
    }

    /// `false` opens the store's connections with `synchronous_commit = off`: a commit no
    /// longer waits for its WAL flush, which makes claims, heartbeats and finishes faster
    /// (the flush is most of a claim's time on many disks).
    ///
    /// **Warning:** after a database crash (not a mere client disconnect) the last commits
    /// may be lost although they were answered. A claim this instance won and started can
    /// then vanish, and the slot be claimed and started **a second time** by another
    /// instance; a finish can be forgotten and the run taken over and run again. Keep the
    /// default unless running a slot twice is harmless for every job.
    ///
    /// Applies to the connections the store opens from a URL; a pool given to
    /// [`PostgresStore::from_pool`] keeps its own settings.
    pub fn synchronous_commit(mut self, on: bool) -> Self {
        self.synchronous_commit = on;
        self
    }

    /// Sets how long a fenced transaction ([`PostgresStore::fenced_transaction`]) may sit
    /// idle between two statements before the server ends its session and rolls it back
    /// (from [`MIN_TIMEOUT`] to [`MAX_TIMEOUT`]; default 30 s).
    ///
    /// An open fenced transaction holds off every takeover of its run, so that a backup
    /// never starts the next attempt while this one may still commit. This bound is what
    /// frees the run when the owner freezes (a stopped process, a partitioned host) with
    /// its transaction open: the takeover then waits at most this long after the
    /// transaction's last statement, on top of the lease. Keep it near the lease, and do
    /// no slow work that is not a statement (an HTTP call, a sleep) inside the
    /// transaction, or the server ends it.
    pub fn fenced_idle_timeout(mut self, timeout: Duration) -> Self {
        self.fenced_idle_timeout = timeout;
        self
    }

    /// Sets the window of the background prunes (from zero to [`MAX_PRUNE_WINDOW`]; a value
    /// outside is refused when the store is built; default zero: each job is pruned as soon
    /// as it is found due).
    ///
    /// A job's history is pruned to its retention after the claims and results that find it
    /// due (every few won claims, see the store's documentation), by a statement of its own
    /// in the background. With a window, the due jobs wait for the next multiple of the
    /// window on the wall clock (since the Unix epoch), and are then pruned together, in
    /// job order: every instance prunes at the same moments, so the jobs claimed in the
    /// same seconds have the rows of the same slots deleted together, from the same table
    /// pages, in few full statements instead of many small ones (3 x 10,000 `every 1s`
    /// jobs, autovacuum on: the prunes' server time cut by 36-47 %). A job then holds up to
    /// one window's worth of runs more between prunes (pruning is never needed for
    /// correctness), and the prunes of all jobs come in one burst per window, which
    /// competes with the claims of that second: in the same runs the share of slots started
    /// in their second did not improve, so the window is off unless set (16 s was
    /// measured).
    ///
    /// ```
    /// use std::time::Duration;
    /// use anarchon_postgres::PostgresOptions;
    ///
    /// assert_eq!(PostgresOptions::default().prune_window, Duration::ZERO);
    /// let options = PostgresOptions::default().prune_window(Duration::from_secs(16));
    /// assert_eq!(options.prune_window, Duration::from_secs(16));
    /// ```
    pub fn prune_window(mut self, window: Duration) -> Self {
        self.prune_window = window;
        self
    }
}

/// PostgreSQL 9.5 brought `INSERT ... ON CONFLICT`, which every claim uses.
fn check_version(server_version_num: i32, server_version: String) -> Result<()> {
    if server_version_num < 90_500 {
        return Err(Error::ServerTooOld {
            store: KIND,
            found: server_version,
            required: "9.5".into(),
        });
    }
    Ok(())
}

/// An [`PostgresError::OutOfRange`] for a duration outside `min..=max`.
fn duration_in(
    option: &'static str,
    value: Duration,
    min: Duration,
    max: Duration,
) -> std::result::Result<(), PostgresError> {
    if (min..=max).contains(&value) {
        return Ok(());
    }
    Err(PostgresError::OutOfRange {
        option,
        value: format!("{value:?}"),
        allowed: format!("from {min:?} to {max:?}"),
    })
}

/// Checks the options' ranges together: each timeout, the pool size, and the
/// `connect_timeout` a URL may set instead of the option's (`url_connect`).
fn check_options(
    options: &PostgresOptions,
    url_connect: Option<Duration>,
) -> std::result::Result<(), PostgresError> {
    duration_in("timeout", options.timeout, MIN_TIMEOUT, MAX_TIMEOUT)?;
    duration_in(
        "fenced_idle_timeout",
        options.fenced_idle_timeout,
        MIN_TIMEOUT,
        MAX_TIMEOUT,
    )?;
    duration_in(
        "prune_window",
        options.prune_window,
        Duration::ZERO,
        MAX_PRUNE_WINDOW,
    )?;
    duration_in(
        "connect_timeout",
        options.connect_timeout,
        MIN_TIMEOUT,
        MAX_CONNECT_TIMEOUT,
    )?;
    if let Some(from_url) = url_connect {
        duration_in(
            "connect_timeout (in the URL)",
            from_url,
            MIN_TIMEOUT,
            MAX_CONNECT_TIMEOUT,
        )?;
    }
    if !(1..=MAX_POOL_SIZE).contains(&options.pool_size) {
        return Err(PostgresError::OutOfRange {
            option: "pool_size",
            value: options.pool_size.to_string(),
            allowed: format!("from 1 to {MAX_POOL_SIZE}"),
        });
    }
    Ok(())
}

/// A plain lowercase SQL identifier of at most `max` bytes.
fn is_identifier(name: &str, max: usize) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= max
        && (b[0].is_ascii_lowercase() || b[0] == b'_')
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_')
}

/// The PostgreSQL lease store. Cheap to clone: clones share the pool and the listener.
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("target", &self.inner.target)
            .field("schema", &self.inner.names.schema)
            .field("table", &self.inner.names.table)
            .finish_non_exhaustive()
    }
}

pub(crate) struct Inner {
    pool: Pool,
    owns_pool: bool,
    /// What the store connects to, for messages (password redacted).
    target: String,
    names: Names,
    sql: Sql,
    timeout: Duration,
    /// `idle_in_transaction_session_timeout` of fenced transactions.
    fenced_idle_timeout: Duration,
    /// The configuration of the dedicated LISTEN connection and its TLS connector, if any.
    listen: Option<(tokio_postgres::Config, tls::Connector)>,
    connect_timeout: Duration,
    releases: broadcast::Sender<RunKey>,
    /// True while the LISTEN connection is up and listening.
    listening: watch::Sender<bool>,
    listener: Mutex<Option<JoinHandle<()>>>,
    shutdown: CancellationToken,
    closed: AtomicBool,
    /// Each job's count of won claims since the job was last found due to prune, as the
    /// last claim of the job this store sent saw it: it tells whether the next claim is due
    /// (see `sql::PRUNE_EVERY`).
    unpruned: Mutex<HashMap<String, i32>>,
    /// The jobs due to prune that won claims found, waiting for the background prune (see
    /// [`prune`]).
    pending_prunes: Mutex<prune::Pending>,
    /// See [`PostgresOptions::prune_window`].
    prune_window: Duration,
    /// Wakes the background prune before its window ends (a caller waits for pruning to
    /// settle).
    prune_wake: Arc<tokio::sync::Notify>,
    /// The scheduler's store timeout (`Prepare::call_timeout`) in ms, 0 until `prepare`: a
    /// claim or result batch gives up at the shorter of it and `timeout`.
    caller_limit_ms: AtomicU64,
    /// The round trips and statements of every request but the prunes, for tests.
    counted: Counters,
    /// Statements and batches run again after a serialization failure or a deadlock.
    retries: AtomicU64,
    /// The round trips and statements of the prunes (see [`prune`]), for tests.
    pruning: Counters,
}

/// What a store sent, for tests.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Requests sent and waited for (a statement, a pipelined batch): the round trips.
    round_trips: AtomicU64,
    /// Claim, result, takeover, prune and other data statements (transaction control, the
    /// job lock, settings and the deadline guard of a batch not counted).
    statements: AtomicU64,
}

impl Counters {
    pub(crate) fn add(&self, round_trips: u64, statements: u64) {
        self.round_trips.fetch_add(round_trips, Ordering::Relaxed);
        self.statements.fetch_add(statements, Ordering::Relaxed);
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Parses a connection string into the driver's configuration and the TLS connector its
/// `sslmode` / `sslrootcert` ask for.
fn parse_url(
    url: &str,
) -> std::result::Result<(tokio_postgres::Config, tls::Connector), PostgresError> {
    let invalid = |reason: String| PostgresError::InvalidUrl {
        url: error::shown(url),
        reason,
    };
    // Read here first, so that the driver's messages (which name an unknown parameter by
    // its text: maybe a piece of a password) never show.
    if let Some(reason) = error::unreadable(url) {
        return Err(invalid(reason));
    }
    let (config, settings) = tls::parse(url).map_err(invalid)?;
    if config.get_hosts().is_empty() && config.get_hostaddrs().is_empty() {
        return Err(invalid("no host given".into()));
    }
    let connector = tls::connector(&settings).map_err(invalid)?;
    Ok((config, connector))
}

impl PostgresStore {
    /// Builds a store and its connection pool from a URL without connecting: only the URL
    /// and the options are checked (test-only, feature `testkit`: use
    /// [`PostgresStore::connect_with`]).
    ///
    /// # Errors
    ///
    /// [`PostgresError`] for a URL, table or schema that cannot be used.
    #[cfg(feature = "testkit")]
    #[cfg_attr(docsrs, doc(cfg(feature = "testkit")))]
    pub fn unconnected(
        url: &str,
        options: PostgresOptions,
    ) -> std::result::Result<Self, PostgresError> {
        Self::unconnected_with(url, options)
    }

    /// Builds a store and its connection pool from a URL (`postgres://user:pw@host/db` or
    /// `host=... user=...`). Nothing is sent yet.
    ///
    /// The store's connections get `statement_timeout` = `options.timeout` (and
    /// `synchronous_commit = off` if [`PostgresOptions::synchronous_commit`] asked for it),
    /// `application_name` = `anarchon` (unless the URL sets one) and `connect_timeout` =
    /// `options.connect_timeout` (unless the URL sets one).
    fn unconnected_with(
        url: &str,
        options: PostgresOptions,
    ) -> std::result::Result<Self, PostgresError> {
        let (mut config, connector) = parse_url(url)?;
        check_options(&options, config.get_connect_timeout().copied())?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(options.connect_timeout);
        }
        if config.get_application_name().is_none() {
            config.application_name("anarchon");
        }
        let listen = options.fast_handover.then(|| {
            let mut c = config.clone();
            // An idle LISTEN connection notices a dead peer only through keepalives.
            c.keepalives(true)
                .keepalives_idle(Duration::from_secs(15))
                .keepalives_interval(Duration::from_secs(5))
                .keepalives_retries(3);
            (c, tls::share(&connector))
        });
        // Whole milliseconds, rounded up: the server never cuts a statement before the
        // client-side timeout (at most `MAX_TIMEOUT`, an `int4`).
        let statement_ms = options
            .timeout
            .as_micros()
            .div_ceil(1_000)
            .clamp(1, MAX_TIMEOUT.as_millis());
        let mut ours = format!("-c statement_timeout={statement_ms}");
        if !options.synchronous_commit {
            ours.push_str(" -c synchronous_commit=off");
        }
        let opts = match config.get_options() {
            Some(o) if !o.trim().is_empty() => format!("{o} {ours}"),
            _ => ours,
        };
        config.options(opts);
        let connect_timeout = *config
            .get_connect_timeout()
            .unwrap_or(&options.connect_timeout);
        let manager = Manager::from_config(
            config,
            connector,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.pool_size.max(1))
            .wait_timeout(Some(options.timeout))
            .create_timeout(Some(
                connect_timeout.saturating_add(Duration::from_millis(500)),
            ))
            .recycle_timeout(Some(options.timeout))
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| PostgresError::Pool {
                reason: e.to_string(),
            })?;
        Self::build(
            pool,
            true,
            error::shown(url),
            listen,
            connect_timeout,
            options,
        )
    }

    /// Builds a store and checks at once that the server answers and is new enough, within
    /// `connect_timeout + timeout`. Errors: [`Error::InvalidOption`] (URL, table, schema),
    /// [`Error::Unavailable`] (refused, unknown host, bad credentials, unknown database),
    /// [`Error::Timeout`], [`Error::ServerTooOld`].
    ///
    /// ```no_run
    /// # async fn demo() -> anarchon_core::Result<()> {
    /// use std::time::Duration;
    /// use anarchon_postgres::{PostgresOptions, PostgresStore};
    ///
    /// let options = PostgresOptions::default().schema("jobs").timeout(Duration::from_secs(3));
    /// let store = PostgresStore::connect_with("postgres://app@db/app", options).await?;
    /// # let _ = store; Ok(()) }
    /// ```
    pub async fn connect_with(url: &str, options: PostgresOptions) -> Result<Self> {
        let store = Self::unconnected_with(url, options)?;
        store.inner.check_server().await?;
        Ok(store)
    }

    /// Uses the caller's pool without checking the server (see [`PostgresStore::from_pool`]).
    fn on_pool(pool: Pool, options: PostgresOptions) -> std::result::Result<Self, PostgresError> {
        check_options(&options, None)?;
        let listen = match (&options.listen_url, options.fast_handover) {
            (Some(url), true) => {
                let (mut c, connector) = parse_url(url)?;
                if let Some(from_url) = c.get_connect_timeout() {
                    duration_in(
                        "connect_timeout (in the listen URL)",
                        *from_url,
                        MIN_TIMEOUT,
                        MAX_CONNECT_TIMEOUT,
                    )?;
                }
                if c.get_connect_timeout().is_none() {
                    c.connect_timeout(options.connect_timeout);
                }
                c.keepalives(true)
                    .keepalives_idle(Duration::from_secs(15))
                    .keepalives_interval(Duration::from_secs(5))
                    .keepalives_retries(3);
                Some((c, connector))
            }
            _ => None,
        };
        let connect_timeout = options.connect_timeout;
        Self::build(
            pool,
            false,
            "the pool given to PostgresStore".into(),
            listen,
            connect_timeout,
            options,
        )
    }

    /// Connects to `url` (`postgres://user:pw@host/db` or `host=... user=...`) with default
    /// options and checks that the server answers and is new enough.
    ///
    /// # Errors
    ///
    /// As [`PostgresStore::connect_with`].
    ///
    /// ```no_run
    /// # async fn demo() -> anarchon_core::Result<()> {
    /// use anarchon_core::Scheduler;
    /// use anarchon_postgres::PostgresStore;
    ///
    /// let store = PostgresStore::connect("postgres://app:secret@db.internal:5432/app").await?;
    /// let scheduler = Scheduler::leased(store).build()?;
    /// # let _ = scheduler; Ok(()) }
    /// ```
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, PostgresOptions::default()).await
    }

    /// Uses the caller's pool and checks at once that the server answers and is new
    /// enough. `close` leaves the pool open. The pool's connections keep their own
    /// settings: give them a `statement_timeout` (the client-side `options.timeout` bounds
    /// every call in any case). Fast handover needs [`PostgresOptions::listen_url`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] (table, schema, listen URL), [`Error::Unavailable`],
    /// [`Error::Timeout`], [`Error::ServerTooOld`].
    ///
    /// ```no_run
    /// # async fn demo(pool: deadpool_postgres::Pool) -> anarchon_core::Result<()> {
    /// use anarchon_postgres::{PostgresOptions, PostgresStore};
    ///
    /// let store = PostgresStore::from_pool(pool.clone(), PostgresOptions::default()).await?;
    /// # let _ = store; Ok(()) }
    /// ```
    pub async fn from_pool(pool: Pool, options: PostgresOptions) -> Result<Self> {
        let store = Self::on_pool(pool, options)?;
        store.inner.check_server().await?;
        Ok(store)
    }

    fn build(
        pool: Pool,
        owns_pool: bool,
        target: String,
        listen: Option<(tokio_postgres::Config, tls::Connector)>,
        connect_timeout: Duration,
        options: PostgresOptions,
    ) -> std::result::Result<Self, PostgresError> {
        if !is_identifier(&options.table, 54) {
            return Err(PostgresError::InvalidTable {
                name: options.table,
            });
        }
        if !is_identifier(&options.schema, 63) {
            return Err(PostgresError::InvalidSchema {
                name: options.schema,
            });
        }
        let names = Names::new(&options.schema, &options.table);
        let sql = Sql::new(&names);
        Ok(PostgresStore {
            inner: Arc::new(Inner {
                pool,
                owns_pool,
                target,
                names,
                sql,
                timeout: options.timeout,
                fenced_idle_timeout: options.fenced_idle_timeout,
                listen,
                connect_timeout,
                releases: broadcast::channel(1024).0,
                listening: watch::channel(false).0,
                listener: Mutex::new(None),
                shutdown: CancellationToken::new(),
                closed: AtomicBool::new(false),
                unpruned: Mutex::new(HashMap::new()),
                pending_prunes: Mutex::new(prune::Pending::default()),
                prune_window: options.prune_window,
                prune_wake: Arc::new(tokio::sync::Notify::new()),
                caller_limit_ms: AtomicU64::new(0),
                counted: Counters::default(),
                retries: AtomicU64::new(0),
                pruning: Counters::default(),
            }),
        })
    }

    /// The pool the store uses.
    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// How many requests this store has sent and waited for so far (a statement, or a
    /// pipelined claim or result batch): its round trips to the server, counted for tests and
    /// benchmarks.
    #[doc(hidden)]
    pub fn round_trips(&self) -> u64 {
        self.inner.counted.round_trips.load(Ordering::Relaxed)
    }

    /// How many claim, result, takeover and other data statements this store has sent so
    /// far (a batch's `BEGIN`, job lock, deadline guard and `COMMIT` not counted; a statement
    /// run again counts again): a claim batch is one statement per round, for tests.
    #[doc(hidden)]
    pub fn statements(&self) -> u64 {
        self.inner.counted.statements.load(Ordering::Relaxed)
    }

    /// How many prune statements this store has sent so far (after claim and result
    /// batches and manual runs; not counted in [`PostgresStore::statements`] nor in
    /// [`PostgresStore::round_trips`]), for tests.
    #[doc(hidden)]
    pub fn prunes(&self) -> u64 {
        self.inner.pruning.statements.load(Ordering::Relaxed)
    }

    /// Waits until the jobs that claims and results found due to prune are pruned (they are
    /// pruned in the background after the batches returned; this does not wait for the
    /// prune window), for tests.
    #[doc(hidden)]
    pub async fn pruning_settled(&self) {
        self.inner.pruning_settled().await;
    }

    /// The statement of the backups' poll (`newest_unfinished_runs`; parameters: the job
    /// names, the runs per job), for tests that read its plan.
    #[doc(hidden)]
    pub fn sweep_statement(&self) -> &str {
        &self.inner.sql.newest_unfinished
    }

    /// The prune's statements, for tests that read its plan as the store has it made: the
    /// one that opens its transaction (the planner's settings) and the prune itself
    /// (parameters: the jobs, their retention sizes and TTLs in ms, one element per job).
    #[doc(hidden)]
    pub fn prune_statements(&self) -> [&str; 2] {
        let sql = &self.inner.sql;
        [&sql.prune_settings, &sql.prune]
    }

    /// How many times a statement or a batch was run again after a serialization failure
    /// or a deadlock, for tests.
    #[doc(hidden)]
    pub fn retries(&self) -> u64 {
        self.inner.retries.load(Ordering::Relaxed)
    }

    /// The NOTIFY channel on which releases are announced (payload `<job>:<slot>`).
    pub fn channel(&self) -> &str {
        &self.inner.names.channel
    }

    /// The schema the store's tables live in.
    pub fn schema(&self) -> &str {
        &self.inner.names.schema
    }

    /// The table prefix.
    pub fn table(&self) -> &str {
        &self.inner.names.table
    }
}

impl Inner {
    fn closed_error(&self) -> Error {
        Error::Unavailable {
            store: KIND,
            target: self.target.clone(),
            source: "the store was closed".into(),
        }
    }

    fn pg(&self, e: tokio_postgres::Error, operation: &'static str) -> Error {
        map_pg(e, operation, &self.target, self.timeout)
    }

    /// A pooled connection, bounded by the store's timeout.
    async fn client(&self, operation: &'static str) -> Result<Object> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(self.closed_error());
        }
        let bound = self
            .timeout
            .max(self.connect_timeout)
            .saturating_add(Duration::from_secs(1));
        match tokio::time::timeout(bound, self.pool.get()).await {
            Ok(Ok(client)) => Ok(client),
            // A refused certificate says so, with what to change.
            Ok(Err(deadpool_postgres::PoolError::Backend(e))) => match tls::handshake_failed(e) {
                Ok(failed) => Err(Error::Unavailable {
                    store: KIND,
                    target: self.target.clone(),
                    source: failed.into(),
                }),
                Err(e) => Err(map_pool(
                    deadpool_postgres::PoolError::Backend(e),
                    operation,
                    &self.target,
                    self.timeout,
                    self.timeout,
                )),
            },
            Ok(Err(e)) => Err(map_pool(
                e,
                operation,
                &self.target,
                self.timeout,
                self.timeout,
            )),
            Err(_) => Err(Error::Timeout {
                store: KIND,
                operation,
                after: bound,
            }),
        }
    }

    /// Runs one prepared (and cached per connection) statement, again after a serialization
    /// failure or a deadlock, all within the store's timeout. A connection whose call timed
    /// out is dropped rather than returned to the pool, since it may still be busy.
    async fn query(
        &self,
        operation: &'static str,
        sql: &str,
        types: &[Type],
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>> {
        let client = self.client(operation).await?;
        let work = async {
            let mut tries = 0;
            loop {
                let cached = client.statement_cache.size();
                let statement = client.prepare_typed_cached(sql, types).await?;
                let prepared = client.statement_cache.size().saturating_sub(cached);
                self.counted.add(1 + prepared as u64, 1);
                match client.query(&statement, params).await {
                    Err(e) if is_retryable(&e) && tries < MAX_RETRIES => {
                        tries += 1;
                        self.retries.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(operation, tries, "postgres statement retried: {e}");
                        tokio::task::yield_now().await;
                    }
                    other => return other,
                }
            }
        };
        match tokio::time::timeout(self.timeout, work).await {
            Ok(Ok(rows)) => Ok(rows),
            Ok(Err(e)) => {
                if is_connection_lost(&e) {
                    drop(Object::take(client));
                }
                Err(self.pg(e, operation))
            }
            Err(_) => {
                drop(Object::take(client));
                Err(Error::Timeout {
                    store: KIND,
                    operation,
                    after: self.timeout,
                })
            }
        }
    }

    /// Checks that the server answers and is at least 9.5.
    async fn check_server(&self) -> Result<()> {
        let rows = self
            .query(
                "connect",
                "SELECT current_setting('server_version_num')::int4, current_setting('server_version')",
                &[],
                &[],
            )
            .await?;
        let row = rows
            .first()
            .ok_or_else(|| Error::store(KIND, "connect", "no version row"))?;
        // `try_get`: a server that only speaks the protocol (a proxy, a look-alike) may
        // answer other types; that is an error, not a panic.
        match (row.try_get(0), row.try_get(1)) {
            (Ok(num), Ok(version)) => check_version(num, version),
            (Err(e), _) | (_, Err(e)) => Err(Error::store(KIND, "connect", e)),
        }
    }

    /// Starts the LISTEN task and waits until it listens, at most `connect_timeout`: a
    /// release sent right after `prepare` then reaches this instance. When the connection
    /// cannot be made, backups poll, so this only logs.
    pub(crate) async fn start_listener(&self) {
        if self.listen.is_none() {
            return;
        }
        self.ensure_listener();
        let mut listening = self.listening.subscribe();
        let wait = listening.wait_for(|l| *l);
        if tokio::time::timeout(self.connect_timeout, wait)
            .await
            .is_err()
        {
            tracing::warn!(
                target_url = %self.target,
                "postgres release listener is not listening yet; backups poll until it is"
            );
        }
    }

    /// Starts the LISTEN task once, when a runtime is at hand.
    fn ensure_listener(&self) {
        let Some((config, connector)) = &self.listen else {
            return;
        };
        if self.closed.load(Ordering::SeqCst) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut guard = self.listener.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_none() {
            *guard = Some(runtime.spawn(listen::run(
                config.clone(),
                tls::share(connector),
                self.names.channel.clone(),
                self.releases.clone(),
                self.listening.clone(),
                self.target.clone(),
                self.connect_timeout,
                self.shutdown.clone(),
            )));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{check_version, is_identifier};
    use anarchon_core::Error;

    #[test]
    fn servers_older_than_9_5_are_refused_by_name() {
        let err = check_version(90_406, "9.4.6".into()).unwrap_err();
        assert!(matches!(err, Error::ServerTooOld { .. }), "{err:?}");
        assert!(
            err.to_string().contains("9.4.6") && err.to_string().contains("9.5"),
            "{err}"
        );
        assert!(check_version(90_500, "9.5.0".into()).is_ok());
        assert!(check_version(150_020, "15.20".into()).is_ok());
    }

    #[test]
    fn identifiers_are_plain_lowercase() {
        assert!(is_identifier("anarchon_runs", 54));
        assert!(is_identifier("_x1", 54));
        assert!(!is_identifier("Runs", 54));
        assert!(!is_identifier("1runs", 54));
        assert!(!is_identifier("a-b", 54));
        assert!(!is_identifier(&"a".repeat(55), 54));
    }
}
