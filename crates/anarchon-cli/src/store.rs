//! Opening a store from its URL: the scheme picks the store crate (each behind its cargo
//! feature), and every call goes through [`Opened::call`], which bounds it by `--timeout`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anarchon_core::JobName;
use anarchon_core::redact_url;
use anarchon_core::store::{ClaimStore, LeaseStore, RunKey, RunRecord, RunView};

use crate::error::CliError;

/// What the global options say about the store.
#[derive(Debug, Clone)]
pub(crate) struct StoreArgs {
    /// The URL or path as given (never printed: see [`Opened::shown`]).
    pub(crate) url: String,
    /// The bound of the connection and of each call.
    pub(crate) timeout: Duration,
    /// Key prefix (Redis), queue prefix (RabbitMQ) or stream name (NATS).
    pub(crate) prefix: Option<String>,
    /// Table prefix (SQLite, libSQL, PostgreSQL).
    pub(crate) table: Option<String>,
    /// PostgreSQL schema.
    pub(crate) schema: Option<String>,
    /// libSQL auth token.
    pub(crate) auth_token: Option<String>,
}

/// Which store a URL names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A SQLite file at this path.
    Sqlite(String),
    /// A libSQL server.
    Libsql,
    /// A PostgreSQL server.
    Postgres,
    /// A Redis or Valkey server (the lease strategy).
    Redis,
    /// A RabbitMQ server (claim-only).
    Amqp,
    /// A NATS server (claim-only).
    Nats,
}

/// Whether `text` reads as a libpq `key=value` connection string (`host=db user=app`)
/// rather than a file path: its first word is a known libpq key followed by `=`.
fn is_key_value(text: &str) -> bool {
    const KEYS: [&str; 9] = [
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
    let Some((key, _)) = text.split_once('=') else {
        return false;
    };
    KEYS.contains(&key.trim().to_ascii_lowercase().as_str())
}

/// The schemes of the server stores.
const SERVER_SCHEMES: [&str; 12] = [
    "libsql",
    "http",
    "https",
    "postgres",
    "postgresql",
    "redis",
    "rediss",
    "amqp",
    "amqps",
    "nats",
    "tls",
    "valkey",
];

/// Reads the scheme of `url` (a bare path is a SQLite file; a libpq `key=value` string is
/// PostgreSQL, unless a file of that name exists).
pub(crate) fn kind_of(url: &str) -> Result<Kind, CliError> {
    let url = url.trim();
    let Some((scheme, rest)) = url.split_once("://") else {
        let is_file = std::path::Path::new(url).is_file();
        if is_key_value(url) && !is_file {
            return Ok(Kind::Postgres);
        }
        if let Some((scheme, _)) = url.split_once(':')
            && !is_file
            && SERVER_SCHEMES.contains(&scheme.to_ascii_lowercase().as_str())
        {
            return Err(CliError::SchemeWithoutSlashes {
                scheme: scheme.to_owned(),
                url: redact_url(url),
            });
        }
        let path = url.strip_prefix("sqlite:").unwrap_or(url);
        return Ok(Kind::Sqlite(path.to_owned()));
    };
    Ok(match scheme.to_ascii_lowercase().as_str() {
        "sqlite" => Kind::Sqlite(rest.to_owned()),
        "libsql" | "http" | "https" => Kind::Libsql,
        "postgres" | "postgresql" => Kind::Postgres,
        "redis" | "rediss" => Kind::Redis,
        "amqp" | "amqps" => Kind::Amqp,
        "nats" | "tls" => Kind::Nats,
        _ => {
            return Err(CliError::UnknownScheme {
                scheme: scheme.to_owned(),
                url: redact_url(url),
            });
        }
    })
}

/// An open store: one with leases, or a claim-only one.
pub(crate) enum Handle {
    /// SQLite, libSQL, PostgreSQL, Redis (lease).
    Lease(Arc<dyn LeaseStore>),
    /// RabbitMQ, NATS.
    Claim(Arc<dyn ClaimStore>),
    /// A SQLite file, opened read-only.
    #[cfg(feature = "sqlite")]
    Sqlite(Box<crate::readonly::SqliteReader>),
    /// A libSQL server, read without writing.
    #[cfg(feature = "libsql")]
    Libsql(Box<crate::readonly::LibsqlReader>),
}

/// An open store with the URL to show and the bound of each call.
pub(crate) struct Opened {
    /// The store.
    pub(crate) handle: Handle,
    /// The URL, redacted.
    pub(crate) shown: String,
    timeout: Duration,
}

impl Opened {
    /// The store's kind (`sqlite`, `postgres`, `redis` ...).
    pub(crate) fn kind(&self) -> &'static str {
        match &self.handle {
            Handle::Lease(store) => store.kind(),
            Handle::Claim(store) => store.kind(),
            #[cfg(feature = "sqlite")]
            Handle::Sqlite(_) => "sqlite",
            #[cfg(feature = "libsql")]
            Handle::Libsql(_) => "libsql",
        }
    }

    /// Whether the store keeps leases (and so unfinished runs); claim-only stores do not.
    pub(crate) fn has_leases(&self) -> bool {
        !matches!(self.handle, Handle::Claim(_))
    }

    /// The names of the jobs the store knows, sorted.
    pub(crate) async fn known_jobs(&self) -> Result<Vec<JobName>, CliError> {
        match &self.handle {
            Handle::Lease(store) => self.call("known_jobs", store.known_jobs()).await,
            Handle::Claim(store) => self.call("known_jobs", store.known_jobs()).await,
            #[cfg(feature = "sqlite")]
            Handle::Sqlite(reader) => self.call("known_jobs", async { reader.known_jobs() }).await,
            #[cfg(feature = "libsql")]
            Handle::Libsql(reader) => self.call("known_jobs", reader.known_jobs()).await,
        }
    }

    /// The job's newest `count` attempts, newest first.
    pub(crate) async fn history(
        &self,
        job: &JobName,
        count: usize,
    ) -> Result<Vec<RunRecord>, CliError> {
        match &self.handle {
            Handle::Lease(store) => self.call("history", store.history(job, count)).await,
            Handle::Claim(store) => self.call("history", store.history(job, count)).await,
            #[cfg(feature = "sqlite")]
            Handle::Sqlite(reader) => {
                self.call("history", async { reader.history(job, count) })
                    .await
            }
            #[cfg(feature = "libsql")]
            Handle::Libsql(reader) => self.call("history", reader.history(job, count)).await,
        }
    }

    /// The job's newest attempt.
    pub(crate) async fn last_run(&self, job: &JobName) -> Result<Option<RunRecord>, CliError> {
        match &self.handle {
            Handle::Lease(store) => self.call("last_run", store.last_run(job)).await,
            Handle::Claim(store) => self.call("last_run", store.last_run(job)).await,
            #[cfg(feature = "sqlite")]
            Handle::Sqlite(_) => Ok(self.history(job, 1).await?.into_iter().next()),
            #[cfg(feature = "libsql")]
            Handle::Libsql(_) => Ok(self.history(job, 1).await?.into_iter().next()),
        }
    }

    /// The unfinished runs of `jobs`; `None` on a claim-only store.
    pub(crate) async fn unfinished_runs(
        &self,
        jobs: &[JobName],
    ) -> Result<Option<Vec<RunView>>, CliError> {
        match &self.handle {
            Handle::Lease(store) => self
                .call("unfinished_runs", store.unfinished_runs(jobs))
                .await
                .map(Some),
            Handle::Claim(_) => Ok(None),
            #[cfg(feature = "sqlite")]
            Handle::Sqlite(reader) => self
                .call("unfinished_runs", async { reader.unfinished_runs(jobs) })
                .await
                .map(Some),
            #[cfg(feature = "libsql")]
            Handle::Libsql(reader) => self
                .call("unfinished_runs", reader.unfinished_runs(jobs))
                .await
                .map(Some),
        }
    }

    /// The runs `keys` names; `None` on a claim-only store.
    pub(crate) async fn runs(&self, keys: &[RunKey]) -> Result<Option<Vec<RunView>>, CliError> {
        match &self.handle {
            Handle::Lease(store) => self.call("runs", store.runs(keys)).await.map(Some),
            Handle::Claim(_) => Ok(None),
            #[cfg(feature = "sqlite")]
            Handle::Sqlite(reader) => self
                .call("runs", async { reader.runs(keys) })
                .await
                .map(Some),
            #[cfg(feature = "libsql")]
            Handle::Libsql(reader) => self.call("runs", reader.runs(keys)).await.map(Some),
        }
    }

    /// Runs one store call within `--timeout`, naming `action` in its error.
    pub(crate) async fn call<T>(
        &self,
        action: &'static str,
        call: impl Future<Output = anarchon_core::Result<T>>,
    ) -> Result<T, CliError> {
        bounded(&self.shown, self.timeout, action, call).await
    }

    /// Closes the store (within `--timeout`); a failure to close is logged, not returned.
    pub(crate) async fn close(self) {
        let closed = match &self.handle {
            Handle::Lease(store) => self.call("close", store.close()).await,
            Handle::Claim(store) => self.call("close", store.close()).await,
            #[cfg(feature = "sqlite")]
            Handle::Sqlite(_) => Ok(()),
            #[cfg(feature = "libsql")]
            Handle::Libsql(_) => Ok(()),
        };
        if let Err(e) = closed {
            tracing::debug!("closing the store: {e}");
        }
    }
}

async fn bounded<T>(
    shown: &str,
    timeout: Duration,
    action: &'static str,
    call: impl Future<Output = anarchon_core::Result<T>>,
) -> Result<T, CliError> {
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(source)) => Err(CliError::Store {
            url: shown.to_owned(),
            action,
            source,
        }),
        Err(_) => Err(CliError::Timeout {
            url: shown.to_owned(),
            action,
            after: timeout,
        }),
    }
}

/// Sorts a connection error: a refused URL or option is bad input, anything else a store
/// failure.
fn connect_error(shown: &str, err: CliError) -> CliError {
    match err {
        CliError::Store { source, .. }
            if matches!(
                source,
                anarchon_core::Error::InvalidOption { .. }
                    | anarchon_core::Error::OutOfRange { .. }
            ) =>
        {
            CliError::InvalidStore {
                url: shown.to_owned(),
                source,
            }
        }
        other => other,
    }
}

/// Opens the store `args.url` names.
pub(crate) async fn open(args: &StoreArgs) -> Result<Opened, CliError> {
    let kind = kind_of(&args.url)?;
    let shown = redact_url(&args.url);
    let handle = connect(&kind, args, &shown)
        .await
        .map_err(|e| connect_error(&shown, e))?;
    Ok(Opened {
        handle,
        shown,
        timeout: args.timeout,
    })
}

#[cfg_attr(
    all(
        feature = "sqlite",
        feature = "libsql",
        feature = "postgres",
        feature = "redis",
        feature = "amqp",
        feature = "nats"
    ),
    allow(dead_code, reason = "every store is in this build")
)]
fn disabled(shown: &str, store: &'static str, feature: &'static str) -> CliError {
    CliError::StoreDisabled {
        url: shown.to_owned(),
        store,
        feature,
    }
}

async fn connect(kind: &Kind, args: &StoreArgs, shown: &str) -> Result<Handle, CliError> {
    let timeout = args.timeout;
    let url = args.url.trim();
    match kind {
        Kind::Sqlite(path) => {
            #[cfg(feature = "sqlite")]
            {
                // Read-only: the command never creates, migrates or switches a file to WAL.
                let reader = crate::readonly::SqliteReader::open(
                    path,
                    shown,
                    args.table.as_deref(),
                    timeout,
                )?;
                Ok(Handle::Sqlite(Box::new(reader)))
            }
            #[cfg(not(feature = "sqlite"))]
            Err(disabled(shown, "SQLite", "sqlite"))
        }
        Kind::Libsql => {
            #[cfg(feature = "libsql")]
            {
                // Read without writing: `LibsqlStore::connect` would create the tables.
                let reader = tokio::time::timeout(
                    timeout,
                    crate::readonly::LibsqlReader::open(
                        url,
                        shown,
                        args.auth_token.as_deref(),
                        args.table.as_deref(),
                    ),
                )
                .await
                .map_err(|_| CliError::Timeout {
                    url: shown.to_owned(),
                    action: "connect",
                    after: timeout,
                })??;
                Ok(Handle::Libsql(Box::new(reader)))
            }
            #[cfg(not(feature = "libsql"))]
            Err(disabled(shown, "libSQL", "libsql"))
        }
        Kind::Postgres => {
            #[cfg(feature = "postgres")]
            {
                use anarchon_postgres::{PostgresOptions, PostgresStore};
                let mut options = PostgresOptions::default()
                    .timeout(timeout)
                    .connect_timeout(timeout)
                    .pool_size(2)
                    .fast_handover(false);
                if let Some(schema) = &args.schema {
                    options = options.schema(schema.clone());
                }
                if let Some(table) = &args.table {
                    options = options.table(table.clone());
                }
                // `connect_with` only reads the server version: the tables are created by
                // `prepare`, which the command never calls.
                let store = bounded(
                    shown,
                    timeout,
                    "connect",
                    PostgresStore::connect_with(url, options),
                )
                .await?;
                check_postgres_tables(&store, shown, timeout).await?;
                Ok(Handle::Lease(Arc::new(store)))
            }
            #[cfg(not(feature = "postgres"))]
            Err(disabled(shown, "PostgreSQL", "postgres"))
        }
        Kind::Redis => {
            #[cfg(feature = "redis")]
            {
                use anarchon_redis::{RedisOptions, RedisStore};
                let mut options = RedisOptions::default()
                    .command_timeout(timeout)
                    .connect_timeout(timeout);
                if let Some(prefix) = &args.prefix {
                    options = options.prefix(prefix.clone());
                }
                let store = bounded(
                    shown,
                    timeout,
                    "connect",
                    RedisStore::connect_with(url, options),
                )
                .await?;
                let prefix = args
                    .prefix
                    .clone()
                    .unwrap_or_else(|| RedisOptions::default().key_prefix().to_owned());
                check_redis_prefix(&store, &prefix, shown, timeout).await?;
                Ok(Handle::Lease(Arc::new(store)))
            }
            #[cfg(not(feature = "redis"))]
            Err(disabled(shown, "Redis", "redis"))
        }
        Kind::Amqp => {
            #[cfg(feature = "amqp")]
            {
                use anarchon_amqp::{AmqpError, AmqpOptions, AmqpStore};
                // The gate queues' ttl is only checked against the timeout: the command
                // claims nothing.
                let mut options = AmqpOptions::default()
                    .connect_timeout(timeout)
                    .operation_timeout(timeout)
                    .slot_ttl(AmqpOptions::MAX_SLOT_TTL);
                if let Some(prefix) = &args.prefix {
                    options = options.prefix(prefix.clone());
                }
                let prefix = options.queue_prefix().to_owned();
                // Read-only: looked up with passive declares; nothing is declared or
                // published.
                let opened = tokio::time::timeout(
                    timeout.saturating_mul(2),
                    AmqpStore::open_read_only(url, options),
                )
                .await
                .map_err(|_| CliError::Timeout {
                    url: shown.to_owned(),
                    action: "connect",
                    after: timeout,
                })?;
                match opened {
                    Ok(store) => Ok(Handle::Claim(Arc::new(store))),
                    Err(AmqpError::NotAStore { queue, .. }) => Err(CliError::NothingStored {
                        url: shown.to_owned(),
                        store: "RabbitMQ",
                        prefix,
                        reason: format!(
                            "the queue {queue:?} of its known jobs does not exist in this \
                             virtual host; pass the application's --prefix (default \
                             \"anarchon\") and virtual host"
                        ),
                    }),
                    Err(e) => Err(CliError::Store {
                        url: shown.to_owned(),
                        action: "connect",
                        source: e.into(),
                    }),
                }
            }
            #[cfg(not(feature = "amqp"))]
            Err(disabled(shown, "RabbitMQ", "amqp"))
        }
        Kind::Nats => {
            #[cfg(feature = "nats")]
            {
                use anarchon_nats::{NatsError, NatsOptions, NatsStore};
                let mut options = NatsOptions::default()
                    .connect_timeout(timeout)
                    .operation_timeout(timeout);
                if let Some(prefix) = &args.prefix {
                    options = options.prefix(prefix.clone());
                }
                let prefix = options.stream_name().to_owned();
                // Read-only: the stream is looked up, never created.
                let opened = tokio::time::timeout(
                    timeout.saturating_mul(3),
                    NatsStore::open_read_only(url, options),
                )
                .await
                .map_err(|_| CliError::Timeout {
                    url: shown.to_owned(),
                    action: "connect",
                    after: timeout,
                })?;
                match opened {
                    Ok(store) => Ok(Handle::Claim(Arc::new(store))),
                    Err(NatsError::NotAStore { stream, .. }) => Err(CliError::NothingStored {
                        url: shown.to_owned(),
                        store: "NATS",
                        prefix,
                        reason: format!(
                            "there is no JetStream stream {stream:?}; pass the application's \
                             --prefix (default \"anarchon\")"
                        ),
                    }),
                    Err(e) => Err(CliError::Store {
                        url: shown.to_owned(),
                        action: "connect",
                        source: e.into(),
                    }),
                }
            }
            #[cfg(not(feature = "nats"))]
            Err(disabled(shown, "NATS", "nats"))
        }
    }
}

/// How many keys one `SCAN` of [`check_redis_prefix`] asks for, and how many pages it reads
/// at most (about 100,000 keys, a few ms each page): enough to name the prefixes of a server
/// that holds a few stores beside other data, without walking a large keyspace.
#[cfg(feature = "redis")]
const REDIS_SCAN: (u32, usize) = (1_000, 100);

/// The number of single-character edits between `a` and `b` (Levenshtein), to name the
/// prefixes nearest a mistyped one first.
#[cfg(feature = "redis")]
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (diagonal + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(above + 1);
            diagonal = above;
        }
    }
    row[b.len()]
}

/// Refuses a Redis prefix under which no anarchon store lives (neither `<prefix>meta`, which
/// every store writes when it starts, nor `<prefix>jobs` exists), so a `--prefix` typo says
/// so instead of answering "no jobs". It only reads: `EXISTS`, then a short `SCAN` for the
/// `*meta` keys of other prefixes to name them.
#[cfg(feature = "redis")]
async fn check_redis_prefix(
    store: &anarchon_redis::RedisStore,
    prefix: &str,
    shown: &str,
    timeout: Duration,
) -> Result<(), CliError> {
    use anarchon_redis::fred::interfaces::ClientLike;
    use anarchon_redis::fred::types::{ClusterHash, CustomCommand, Value};

    let client = store.client();
    let failed = |e: anarchon_redis::fred::error::Error| CliError::Store {
        url: shown.to_owned(),
        action: "check the prefix",
        source: anarchon_core::Error::store("redis", "check the prefix", e.to_string()),
    };
    let check = async {
        let mut found = 0i64;
        // One key at a time: in a cluster the two keys may live on different nodes.
        for key in [format!("{prefix}meta"), format!("{prefix}jobs")] {
            let n: i64 = client
                .custom(
                    CustomCommand::new_static("EXISTS", ClusterHash::FirstKey, false),
                    vec![key],
                )
                .await
                .map_err(failed)?;
            found += n;
        }
        if found > 0 {
            return Ok(());
        }
        let mut cursor = "0".to_owned();
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..REDIS_SCAN.1 {
            let page: Vec<Value> = client
                .custom(
                    CustomCommand::new_static("SCAN", ClusterHash::Random, false),
                    vec![
                        cursor.clone(),
                        "MATCH".into(),
                        "*meta".into(),
                        "COUNT".into(),
                        REDIS_SCAN.0.to_string(),
                    ],
                )
                .await
                .map_err(failed)?;
            let mut page = page.into_iter();
            cursor = page
                .next()
                .and_then(|v| v.into_string())
                .unwrap_or_else(|| "0".into());
            let keys: Vec<String> = match page.next() {
                Some(Value::Array(keys)) => {
                    keys.into_iter().filter_map(|k| k.into_string()).collect()
                }
                _ => Vec::new(),
            };
            for key in keys {
                if let Some(other) = key.strip_suffix("meta")
                    && !other.is_empty()
                    && other.len() <= 64
                {
                    seen.insert(other.to_owned());
                }
            }
            if cursor == "0" || seen.len() >= 1_000 {
                break;
            }
        }
        // The prefixes nearest the one given first (a typo is a few edits away), then only
        // the keys that are an anarchon store's meta hash (it holds `format`).
        let mut seen: Vec<String> = seen.into_iter().collect();
        seen.sort_by_key(|other| (edit_distance(other, prefix), other.clone()));
        let mut stores = Vec::new();
        for other in seen.into_iter().take(10) {
            let is_ours: i64 = client
                .custom(
                    CustomCommand::new_static("HEXISTS", ClusterHash::FirstKey, false),
                    vec![format!("{other}meta"), "format".to_owned()],
                )
                .await
                .unwrap_or(0);
            if is_ours == 1 {
                stores.push(format!("{:?}", crate::output::escape(&other)));
            }
        }
        let reason = if stores.is_empty() {
            "neither its meta nor its jobs key exists, and no other anarchon prefix was seen \
             on this server (database); check the URL's database number and the \
             application's key prefix"
                .to_owned()
        } else {
            format!(
                "neither its meta nor its jobs key exists; this server holds anarchon stores \
                 under {}: pass --prefix {}",
                stores.join(", "),
                stores[0]
            )
        };
        Err(CliError::NothingStored {
            url: shown.to_owned(),
            store: "Redis",
            prefix: prefix.to_owned(),
            reason,
        })
    };
    match tokio::time::timeout(timeout, check).await {
        Ok(result) => result,
        Err(_) => Err(CliError::Timeout {
            url: shown.to_owned(),
            action: "check the prefix",
            after: timeout,
        }),
    }
}

/// Refuses a PostgreSQL schema that holds no anarchon tables of the `--table` prefix, so a
/// typo says so instead of failing on the first query (or answering "no jobs").
#[cfg(feature = "postgres")]
async fn check_postgres_tables(
    store: &anarchon_postgres::PostgresStore,
    shown: &str,
    timeout: Duration,
) -> Result<(), CliError> {
    let (schema, table) = (store.schema(), store.table());
    let names: Vec<String> = ["_meta", "", "_attempts"]
        .iter()
        .map(|suffix| format!("\"{schema}\".\"{table}{suffix}\""))
        .collect();
    let failed = |e: String| CliError::Store {
        url: shown.to_owned(),
        action: "check the tables",
        source: anarchon_core::Error::store("postgres", "check the tables", e),
    };
    let check = async {
        let client = store
            .pool()
            .get()
            .await
            .map_err(|e| failed(e.to_string()))?;
        let row = client
            .query_one(
                "SELECT to_regclass($1)::text, to_regclass($2)::text, to_regclass($3)::text",
                &[&names[0], &names[1], &names[2]],
            )
            .await
            .map_err(|e| failed(e.to_string()))?;
        for (i, name) in names.iter().enumerate() {
            if row.get::<_, Option<String>>(i).is_none() {
                return Err(CliError::NotAStore {
                    path: shown.to_owned(),
                    table: format!("{schema}.{table}"),
                    reason: format!(
                        "it has no table {name}: pass the --schema and --table of the store \
                         (the defaults are public and anarchon_runs); the command never \
                         creates tables, the application does when it starts"
                    ),
                });
            }
        }
        Ok(())
    };
    match tokio::time::timeout(timeout, check).await {
        Ok(result) => result,
        Err(_) => Err(CliError::Timeout {
            url: shown.to_owned(),
            action: "check the tables",
            after: timeout,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "redis")]
    #[test]
    fn prefixes_nearest_a_typo_come_first() {
        assert_eq!(edit_distance("myapp:", "myapp:"), 0);
        assert_eq!(edit_distance("myap:", "myapp:"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        let mut seen = ["zzz:", "other:", "myapp:"];
        seen.sort_by_key(|o| edit_distance(o, "mypp:"));
        assert_eq!(seen[0], "myapp:");
    }

    #[test]
    fn schemes_pick_the_store() {
        assert_eq!(kind_of("jobs.db").unwrap(), Kind::Sqlite("jobs.db".into()));
        assert_eq!(
            kind_of("sqlite:///tmp/j.db").unwrap(),
            Kind::Sqlite("/tmp/j.db".into())
        );
        assert_eq!(
            kind_of("sqlite://jobs.db").unwrap(),
            Kind::Sqlite("jobs.db".into())
        );
        assert_eq!(kind_of("postgresql://a@b/c").unwrap(), Kind::Postgres);
        assert_eq!(kind_of("REDIS://h").unwrap(), Kind::Redis);
        assert_eq!(kind_of("rediss://h").unwrap(), Kind::Redis);
        assert_eq!(kind_of("https://db.example").unwrap(), Kind::Libsql);
        assert_eq!(kind_of("nats://h:4222").unwrap(), Kind::Nats);
        let err = kind_of("mysql://u:pw1234@h/db").unwrap_err().to_string();
        assert!(
            err.contains("\"mysql\"") && !err.contains("pw1234"),
            "{err}"
        );
    }
}
