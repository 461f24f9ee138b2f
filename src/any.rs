//! Any store from its URL: the scheme picks the store crate, each behind its cargo feature.
//!
//! | URL | store | feature |
//! |---|---|---|
//! | `sqlite:jobs.db`, `sqlite://jobs.db`, a bare path (`jobs.db`, `/var/lib/app/jobs.db`) | SQLite file | `sqlite` |
//! | `libsql://…`, `http://…`, `https://…` | libSQL server | `libsql` |
//! | `postgres://…`, `postgresql://…`, a libpq `key=value` string (`host=db user=app`) | PostgreSQL | `postgres` |
//! | `redis://…`, `rediss://…`, `valkey://…`, `redis-cluster://…`, `redis-sentinel://…` | Redis / Valkey (`lease`) | `redis` |
//! | `amqp://…`, `amqps://…` | RabbitMQ (claim-only) | `amqp` |
//! | `nats://…`, `tls://…` | NATS JetStream (claim-only) | `nats` |
//!
//! A scheme whose feature is off, or no store's scheme, is an [`Error::StoreUrl`] naming the
//! URL (its password hidden) and what to do. The store's namespace (a table prefix, a schema,
//! a key prefix) and a libSQL auth token go in [`AnyOptions`]; an option the store does not
//! take is refused rather than ignored.
//!
//! [`open_read_only`] opens a server store to read it (a dashboard, the `anarchon` command):
//! it writes nothing and refuses a namespace under which no store lives.
//!
//! ```no_run
//! # async fn demo() -> anarchon::Result<()> {
//! use anarchon::any::{self, AnyOptions, AnyStore};
//!
//! let url = std::env::var("STORE_URL").unwrap_or_else(|_| "sqlite:jobs.db".into());
//! let store = any::open_with(&url, AnyOptions::default().table("myapp")).await?;
//! let scheduler = match store {
//!     AnyStore::Lease(store) => anarchon::Scheduler::leased_shared(store).build()?,
//!     AnyStore::Claim(_) => panic!("this service wants a lease store"),
//! };
//! # let _ = scheduler; Ok(()) }
//! ```

mod read_only;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use anarchon_core::store::{ClaimStore, HistoryStore, LeaseStore};
use anarchon_core::{Error, Result, redact_url};

/// The store a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreKind {
    /// A SQLite file (`sqlite:`, a bare path).
    Sqlite,
    /// A libSQL server (`libsql://`, `http(s)://`).
    Libsql,
    /// PostgreSQL (`postgres://`, `postgresql://`, libpq `key=value`).
    Postgres,
    /// Redis or Valkey, the lease strategy (`redis://`, `rediss://`, `valkey://`,
    /// `redis-cluster://`, `redis-sentinel://`).
    Redis,
    /// RabbitMQ, claim-only (`amqp://`, `amqps://`).
    Amqp,
    /// NATS JetStream, claim-only (`nats://`, `tls://`).
    Nats,
}

/// The libpq keys that make a `key=value` string read as PostgreSQL.
const LIBPQ_KEYS: [&str; 9] = [
    "host",
    "hostaddr",
    "port",
    "user",
    "password",
    "dbname",
    "sslmode",
    "options",
    "application_name",
];

impl StoreKind {
    /// Reads the store kind from a URL's scheme. A text without `://` is a SQLite path
    /// (`sqlite:` stripped), unless its first word is a libpq `key=` (PostgreSQL) or it
    /// starts with a server store's scheme and a colon (`redis:host`, refused: the `//` is
    /// missing).
    ///
    /// ```
    /// use anarchon::any::StoreKind;
    ///
    /// assert_eq!(StoreKind::of("jobs.db")?, StoreKind::Sqlite);
    /// assert_eq!(StoreKind::of("sqlite:/var/lib/app/jobs.db")?, StoreKind::Sqlite);
    /// assert_eq!(StoreKind::of("postgres://app@db/app")?, StoreKind::Postgres);
    /// assert_eq!(StoreKind::of("host=db user=app")?, StoreKind::Postgres);
    /// assert_eq!(StoreKind::of("redis-cluster://h:7000?node=h2:7001")?, StoreKind::Redis);
    /// assert_eq!(StoreKind::of("nats://127.0.0.1:4222")?, StoreKind::Nats);
    /// assert!(StoreKind::of("mysql://db/app").is_err());
    /// assert!(StoreKind::of("redis:127.0.0.1").is_err());
    /// # Ok::<_, anarchon::Error>(())
    /// ```
    pub fn of(url: &str) -> Result<StoreKind> {
        let text = url.trim();
        if text.is_empty() {
            return Err(url_error(
                url,
                "it is empty; give a URL or a SQLite file path",
            ));
        }
        let Some((scheme, _)) = text.split_once("://") else {
            if let Some((key, _)) = text.split_once('=')
                && LIBPQ_KEYS.contains(&key.trim().to_ascii_lowercase().as_str())
            {
                return Ok(StoreKind::Postgres);
            }
            if let Some((scheme, _)) = text.split_once(':')
                && let Ok(kind) = Self::of_scheme(scheme)
                && kind != StoreKind::Sqlite
            {
                return Err(url_error(
                    url,
                    &format!("the scheme `{scheme}:` needs `//` (write `{scheme}://host...`)"),
                ));
            }
            return Ok(StoreKind::Sqlite);
        };
        Self::of_scheme(scheme).map_err(|()| {
            url_error(
                url,
                &format!(
                    "no store has the scheme `{scheme}://`; use sqlite:, libsql://, http(s)://, \
                     postgres://, redis://, rediss://, valkey://, redis-cluster://, amqp://, \
                     amqps://, nats:// or tls://"
                ),
            )
        })
    }

    fn of_scheme(scheme: &str) -> std::result::Result<StoreKind, ()> {
        Ok(match scheme.to_ascii_lowercase().as_str() {
            "sqlite" => StoreKind::Sqlite,
            "libsql" | "http" | "https" => StoreKind::Libsql,
            "postgres" | "postgresql" => StoreKind::Postgres,
            "redis" | "rediss" | "valkey" | "valkeys" | "redis-cluster" | "redis-sentinel" => {
                StoreKind::Redis
            }
            "amqp" | "amqps" => StoreKind::Amqp,
            "nats" | "tls" => StoreKind::Nats,
            _ => return Err(()),
        })
    }

    /// The cargo feature of `anarchon` that brings this store.
    pub fn feature(self) -> &'static str {
        match self {
            StoreKind::Sqlite => "sqlite",
            StoreKind::Libsql => "libsql",
            StoreKind::Postgres => "postgres",
            StoreKind::Redis => "redis",
            StoreKind::Amqp => "amqp",
            StoreKind::Nats => "nats",
        }
    }

    /// Whether the store holds leases (takeover, handover, catch-up) or only claims.
    pub fn has_leases(self) -> bool {
        !matches!(self, StoreKind::Amqp | StoreKind::Nats)
    }

    /// Whether this build of `anarchon` has the store's feature on.
    pub fn is_enabled(self) -> bool {
        match self {
            StoreKind::Sqlite => cfg!(feature = "sqlite"),
            StoreKind::Libsql => cfg!(feature = "libsql"),
            StoreKind::Postgres => cfg!(feature = "postgres"),
            StoreKind::Redis => cfg!(feature = "redis"),
            StoreKind::Amqp => cfg!(feature = "amqp"),
            StoreKind::Nats => cfg!(feature = "nats"),
        }
    }
}

impl fmt::Display for StoreKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.feature())
    }
}

fn url_error(url: &str, reason: &str) -> Error {
    Error::StoreUrl {
        url: redact_url(url.trim()),
        reason: reason.to_owned(),
    }
}

/// What [`open_with`] passes on to the store: its namespace and credentials. Each option
/// applies to some stores only; given to another, it is an [`Error::InvalidOption`].
#[derive(Clone, Default)]
pub struct AnyOptions {
    table: Option<String>,
    schema: Option<String>,
    prefix: Option<String>,
    auth_token: Option<String>,
    timeout: Option<Duration>,
}

impl fmt::Debug for AnyOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnyOptions")
            .field("table", &self.table)
            .field("schema", &self.schema)
            .field("prefix", &self.prefix)
            .field("auth_token", &self.auth_token.as_ref().map(|_| "***"))
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl AnyOptions {
    /// The table prefix (SQLite, libSQL, PostgreSQL).
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = Some(table.into());
        self
    }

    /// The schema (PostgreSQL).
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = Some(schema.into());
        self
    }

    /// The key, queue or stream prefix (Redis, RabbitMQ, NATS).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// The auth token (libSQL).
    pub fn auth_token(mut self, token: impl Into<String>) -> Self {
        self.auth_token = Some(token.into());
        self
    }

    /// The bound of connecting and of each call to the store (every store: its connect and
    /// call or operation timeouts). Without it, each store's defaults apply.
    ///
    /// ```
    /// use std::time::Duration;
    /// let options = anarchon::any::AnyOptions::default().timeout(Duration::from_secs(3));
    /// assert!(format!("{options:?}").contains("3s"));
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Refuses an option `kind` does not take.
    fn check(&self, kind: StoreKind) -> Result<()> {
        let takes = |option: &str| match option {
            "table" => matches!(
                kind,
                StoreKind::Sqlite | StoreKind::Libsql | StoreKind::Postgres
            ),
            "schema" => kind == StoreKind::Postgres,
            "prefix" => matches!(kind, StoreKind::Redis | StoreKind::Amqp | StoreKind::Nats),
            _ => kind == StoreKind::Libsql,
        };
        for (option, given) in [
            ("table", self.table.is_some()),
            ("schema", self.schema.is_some()),
            ("prefix", self.prefix.is_some()),
            ("auth_token", self.auth_token.is_some()),
        ] {
            if given && !takes(option) {
                return Err(Error::invalid_option(
                    option,
                    format!(
                        "the {kind} store does not take `{option}` (table: SQLite, libSQL, \
                         PostgreSQL; schema: PostgreSQL; prefix: Redis, RabbitMQ, NATS; \
                         auth_token: libSQL); leave it out"
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// An open store: one with leases, or a claim-only one.
#[derive(Clone)]
pub enum AnyStore {
    /// SQLite, libSQL, PostgreSQL, Redis/Valkey: hand it to
    /// [`Scheduler::leased_shared`](crate::Scheduler::leased_shared).
    Lease(Arc<dyn LeaseStore>),
    /// RabbitMQ, NATS: hand it to
    /// [`Scheduler::claim_only_shared`](crate::Scheduler::claim_only_shared).
    Claim(Arc<dyn ClaimStore>),
}

impl fmt::Debug for AnyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (shape, kind) = match self {
            AnyStore::Lease(s) => ("Lease", s.kind()),
            AnyStore::Claim(s) => ("Claim", s.kind()),
        };
        write!(f, "AnyStore::{shape}({kind})")
    }
}

impl AnyStore {
    /// The store's short name (`"sqlite"`, `"redis"` ...).
    pub fn kind(&self) -> &'static str {
        match self {
            AnyStore::Lease(s) => s.kind(),
            AnyStore::Claim(s) => s.kind(),
        }
    }

    /// The store's history side, the same on both shapes (for readers such as a dashboard
    /// or the CLI).
    pub fn history(&self) -> Arc<dyn HistoryStore> {
        match self {
            AnyStore::Lease(s) => s.clone(),
            AnyStore::Claim(s) => s.clone(),
        }
    }

    /// The lease store, or an error naming the claim-only store.
    pub fn into_lease(self) -> Result<Arc<dyn LeaseStore>> {
        match self {
            AnyStore::Lease(s) => Ok(s),
            AnyStore::Claim(s) => Err(Error::invalid_option(
                "store",
                format!(
                    "the {} store is claim-only (no lease, takeover or catch-up); use \
                     SQLite, libSQL, PostgreSQL or Redis here",
                    s.kind()
                ),
            )),
        }
    }

    /// Closes what the store opened itself.
    pub async fn close(&self) -> Result<()> {
        match self {
            AnyStore::Lease(s) => s.close().await,
            AnyStore::Claim(s) => s.close().await,
        }
    }
}

/// Opens the store `url` names with its default options. See [`open_with`].
pub async fn open(url: &str) -> Result<AnyStore> {
    open_with(url, AnyOptions::default()).await
}

/// Opens the store `url` names as its `connect_with` does: connects and checks the server
/// (SQLite also creates its tables; the other stores create theirs when a scheduler starts,
/// through `prepare`).
///
/// # Errors
/// [`Error::StoreUrl`] for a URL no store takes or whose store's feature is off;
/// [`Error::InvalidOption`] for an option the store does not take; then whatever the store's
/// `connect` answers.
pub async fn open_with(url: &str, options: AnyOptions) -> Result<AnyStore> {
    let kind = StoreKind::of(url)?;
    if !kind.is_enabled() {
        return Err(url_error(
            url,
            &format!(
                "it names a {kind} store, and this build of anarchon has the `{}` feature off: \
                 add `features = [\"{}\"]` to anarchon in Cargo.toml",
                kind.feature(),
                kind.feature()
            ),
        ));
    }
    options.check(kind)?;
    connect(kind, url.trim(), options).await
}

#[allow(unused_variables, unreachable_code)]
async fn connect(kind: StoreKind, url: &str, options: AnyOptions) -> Result<AnyStore> {
    match kind {
        StoreKind::Sqlite => {
            #[cfg(feature = "sqlite")]
            {
                let path = url
                    .strip_prefix("sqlite://")
                    .or_else(|| url.strip_prefix("sqlite:"))
                    .unwrap_or(url);
                let mut o = anarchon_sqlite::SqliteOptions::default();
                if let Some(t) = options.table {
                    o = o.table(t);
                }
                if let Some(t) = options.timeout {
                    o = o.call_timeout(t);
                }
                let store = anarchon_sqlite::SqliteStore::connect_with(path, o).await?;
                return Ok(AnyStore::Lease(Arc::new(store)));
            }
        }
        StoreKind::Libsql => {
            #[cfg(feature = "libsql")]
            {
                let mut o = anarchon_libsql::LibsqlOptions::default();
                if let Some(t) = options.table {
                    o = o.table(t);
                }
                if let Some(t) = options.auth_token {
                    o = o.auth_token(t);
                }
                if let Some(t) = options.timeout {
                    o = o.call_timeout(t);
                }
                let store = anarchon_libsql::LibsqlStore::connect_with(url, o).await?;
                return Ok(AnyStore::Lease(Arc::new(store)));
            }
        }
        StoreKind::Postgres => {
            #[cfg(feature = "postgres")]
            {
                let store =
                    anarchon_postgres::PostgresStore::connect_with(url, postgres(&options)).await?;
                return Ok(AnyStore::Lease(Arc::new(store)));
            }
        }
        StoreKind::Redis => {
            #[cfg(feature = "redis")]
            {
                let store = anarchon_redis::RedisStore::connect_with(url, redis(&options)).await?;
                return Ok(AnyStore::Lease(Arc::new(store)));
            }
        }
        StoreKind::Amqp => {
            #[cfg(feature = "amqp")]
            {
                let store = anarchon_amqp::AmqpStore::connect_with(url, amqp(&options)).await?;
                return Ok(AnyStore::Claim(Arc::new(store)));
            }
        }
        StoreKind::Nats => {
            #[cfg(feature = "nats")]
            {
                let store = anarchon_nats::NatsStore::connect_with(url, nats(&options)).await?;
                return Ok(AnyStore::Claim(Arc::new(store)));
            }
        }
    }
    unreachable!("open_with checked that the {kind} feature is on")
}

/// The PostgreSQL options `options` give.
#[cfg(feature = "postgres")]
fn postgres(options: &AnyOptions) -> anarchon_postgres::PostgresOptions {
    let mut o = anarchon_postgres::PostgresOptions::default();
    if let Some(t) = &options.table {
        o = o.table(t.clone());
    }
    if let Some(s) = &options.schema {
        o = o.schema(s.clone());
    }
    if let Some(t) = options.timeout {
        o = o.timeout(t).connect_timeout(t);
    }
    o
}

/// The Redis options `options` give.
#[cfg(feature = "redis")]
fn redis(options: &AnyOptions) -> anarchon_redis::RedisOptions {
    let mut o = anarchon_redis::RedisOptions::default();
    if let Some(p) = &options.prefix {
        o = o.prefix(p.clone());
    }
    if let Some(t) = options.timeout {
        o = o.command_timeout(t).connect_timeout(t);
    }
    o
}

/// The RabbitMQ options `options` give.
#[cfg(feature = "amqp")]
fn amqp(options: &AnyOptions) -> anarchon_amqp::AmqpOptions {
    let mut o = anarchon_amqp::AmqpOptions::default();
    if let Some(p) = &options.prefix {
        o = o.prefix(p.clone());
    }
    if let Some(t) = options.timeout {
        o = o.operation_timeout(t).connect_timeout(t);
    }
    o
}

/// The NATS options `options` give.
#[cfg(feature = "nats")]
fn nats(options: &AnyOptions) -> anarchon_nats::NatsOptions {
    let mut o = anarchon_nats::NatsOptions::default();
    if let Some(p) = &options.prefix {
        o = o.prefix(p.clone());
    }
    if let Some(t) = options.timeout {
        o = o.operation_timeout(t).connect_timeout(t);
    }
    o
}

/// Opens the server store `url` names to read it, writing nothing: for a dashboard or the
/// `anarchon` command, beside (or instead of) the application that writes it.
///
/// - PostgreSQL: connects (reading the server version) and checks that the schema holds the
///   store's tables of the table prefix; the tables are never created.
/// - Redis: connects and checks that a store lives under the key prefix (its `meta` or
///   `jobs` key exists); when none does, the error names the prefixes of the anarchon
///   stores the server holds, nearest first.
/// - RabbitMQ and NATS: their `open_read_only`, which declares, creates and publishes
///   nothing and needs the store's queue of known jobs (RabbitMQ) or its stream (NATS).
///
/// The brokers' stores refuse every write (a claim, a record, `prepare`); the PostgreSQL and
/// Redis stores are the ordinary ones, whose reads write nothing: use them to read, not to
/// run a scheduler. SQLite and libSQL are refused: their `connect` creates and migrates the
/// tables (the `anarchon` command reads them with readers of its own).
///
/// # Errors
/// As [`open_with`]; a namespace under which no store lives is an
/// [`Error::InvalidOption`] for `prefix` (Redis, RabbitMQ, NATS) or `table` (PostgreSQL),
/// saying what is missing.
///
/// ```no_run
/// # async fn demo() -> anarchon::Result<()> {
/// use anarchon::any::{self, AnyOptions};
///
/// let store = any::open_read_only("nats://127.0.0.1:4222", AnyOptions::default().prefix("billing"))
///     .await?;
/// println!("{:?}", store.history().known_jobs().await?);
/// # Ok(()) }
/// ```
pub async fn open_read_only(url: &str, options: AnyOptions) -> Result<AnyStore> {
    let kind = StoreKind::of(url)?;
    if !kind.is_enabled() {
        return open_with(url, options).await;
    }
    options.check(kind)?;
    read(kind, url.trim(), options).await
}

#[allow(unused_variables, unreachable_code)]
async fn read(kind: StoreKind, url: &str, options: AnyOptions) -> Result<AnyStore> {
    match kind {
        StoreKind::Sqlite | StoreKind::Libsql => {
            return Err(url_error(
                url,
                &format!(
                    "the {kind} store cannot be opened read-only here: its connect creates and                      migrates the tables; open it with any::open_with to write, or read the                      file with the `anarchon` command"
                ),
            ));
        }
        StoreKind::Postgres => {
            #[cfg(feature = "postgres")]
            {
                // A reader needs no notifications and few connections.
                let o = postgres(&options).pool_size(2).fast_handover(false);
                let store = anarchon_postgres::PostgresStore::connect_with(url, o).await?;
                if let Err(e) = read_only::check_postgres_tables(&store).await {
                    let _ = anarchon_core::store::Store::close(&store).await;
                    return Err(e);
                }
                return Ok(AnyStore::Lease(Arc::new(store)));
            }
        }
        StoreKind::Redis => {
            #[cfg(feature = "redis")]
            {
                let o = redis(&options);
                let prefix = o.key_prefix().to_owned();
                let store = anarchon_redis::RedisStore::connect_with(url, o).await?;
                if let Err(e) = read_only::check_redis_prefix(&store, &prefix).await {
                    let _ = anarchon_core::store::Store::close(&store).await;
                    return Err(e);
                }
                return Ok(AnyStore::Lease(Arc::new(store)));
            }
        }
        StoreKind::Amqp => {
            #[cfg(feature = "amqp")]
            {
                // The gate queues' ttl is only checked against the timeout: a reader claims
                // nothing.
                let o = amqp(&options).slot_ttl(anarchon_amqp::AmqpOptions::MAX_SLOT_TTL);
                let store = anarchon_amqp::AmqpStore::open_read_only(url, o).await?;
                return Ok(AnyStore::Claim(Arc::new(store)));
            }
        }
        StoreKind::Nats => {
            #[cfg(feature = "nats")]
            {
                let store = anarchon_nats::NatsStore::open_read_only(url, nats(&options)).await?;
                return Ok(AnyStore::Claim(Arc::new(store)));
            }
        }
    }
    unreachable!("open_read_only checked that the {kind} feature is on")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_pick_the_store_and_bare_paths_are_sqlite() {
        for (url, kind) in [
            ("jobs.db", StoreKind::Sqlite),
            ("./data/jobs.db", StoreKind::Sqlite),
            ("sqlite:jobs.db", StoreKind::Sqlite),
            ("sqlite:///tmp/jobs.db", StoreKind::Sqlite),
            ("C:\\data\\jobs.db", StoreKind::Sqlite),
            ("libsql://db.example.com", StoreKind::Libsql),
            ("HTTPS://db.example.com", StoreKind::Libsql),
            ("postgresql://u:p@db/app", StoreKind::Postgres),
            ("host=db user=app password='a b'", StoreKind::Postgres),
            ("rediss://:pw@h:6380", StoreKind::Redis),
            ("valkey://h", StoreKind::Redis),
            ("redis-cluster://h:7000?node=h2:7001", StoreKind::Redis),
            ("amqps://guest:guest@h/%2f", StoreKind::Amqp),
            ("tls://h:4222", StoreKind::Nats),
        ] {
            assert_eq!(StoreKind::of(url).unwrap(), kind, "{url}");
        }
    }

    #[test]
    fn unknown_schemes_and_missing_slashes_are_refused_without_the_password() {
        for url in ["mysql://root:hunter2@db/app", "redis:hunter2@h", "", "   "] {
            let err = StoreKind::of(url).unwrap_err();
            let text = err.to_string();
            assert!(matches!(err, Error::StoreUrl { .. }), "{url}: {text}");
            assert!(!text.contains("hunter2"), "{url}: {text}");
        }
        let text = StoreKind::of("mysql://db").unwrap_err().to_string();
        assert!(
            text.contains("mysql://") && text.contains("postgres://"),
            "{text}"
        );
    }

    #[test]
    fn an_option_the_store_does_not_take_is_refused() {
        let o = AnyOptions::default().schema("s");
        assert!(o.check(StoreKind::Postgres).is_ok());
        let err = o.check(StoreKind::Redis).unwrap_err().to_string();
        assert!(err.contains("schema") && err.contains("redis"), "{err}");
        assert!(
            AnyOptions::default()
                .prefix("p")
                .check(StoreKind::Sqlite)
                .is_err()
        );
        let secret = AnyOptions::default().auth_token("tok-hunter2");
        assert!(!format!("{secret:?}").contains("hunter2"));
    }

    #[test]
    fn kinds_know_their_feature_and_shape() {
        assert_eq!(StoreKind::Postgres.feature(), "postgres");
        assert!(StoreKind::Redis.has_leases());
        assert!(!StoreKind::Nats.has_leases());
        assert_eq!(StoreKind::Sqlite.is_enabled(), cfg!(feature = "sqlite"));
    }

    #[cfg(not(feature = "nats"))]
    #[tokio::test]
    async fn a_store_whose_feature_is_off_names_the_feature() {
        let err = open("nats://user:hunter2@127.0.0.1:4222")
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("`nats` feature"), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
    }
}
