//! Opening a store from its URL: the scheme picks the store crate (each behind its cargo
//! feature), and every call goes through [`Opened::call`], which bounds it by `--timeout`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anarchon_core::redact_url;
use anarchon_core::store::{ClaimStore, HistoryStore, LeaseStore};

use crate::error::CliError;

/// What the global options say about the store.
#[derive(Debug, Clone)]
pub(crate) struct StoreArgs {
    /// The URL or path as given (never printed: see [`Target::shown`]).
    pub(crate) url: String,
    /// The bound of the connection and of each call.
    pub(crate) timeout: Duration,
    /// Redis key prefix.
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

/// Reads the scheme of `url` (a bare path is a SQLite file).
pub(crate) fn kind_of(url: &str) -> Result<Kind, CliError> {
    let url = url.trim();
    let Some((scheme, rest)) = url.split_once("://") else {
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
    /// The store's history side.
    pub(crate) fn history(&self) -> &dyn HistoryStore {
        match &self.handle {
            Handle::Lease(store) => &**store,
            Handle::Claim(store) => &**store,
        }
    }

    /// The store's kind (`sqlite`, `postgres`, `redis` ...).
    pub(crate) fn kind(&self) -> &'static str {
        self.history().kind()
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
        if let Err(e) = self.call("close", self.history().close()).await {
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
                use anarchon_sqlite::{SqliteOptions, SqliteStore};
                // Opening a missing path would create an empty database: refuse it instead.
                if path.is_empty() || !std::path::Path::new(path).is_file() {
                    return Err(CliError::NoSqliteFile { path: path.clone() });
                }
                let mut options = SqliteOptions::default().call_timeout(timeout);
                if let Some(table) = &args.table {
                    options = options.table(table.clone());
                }
                let store = bounded(
                    shown,
                    timeout,
                    "open",
                    SqliteStore::connect_with(path, options),
                )
                .await?;
                Ok(Handle::Lease(Arc::new(store)))
            }
            #[cfg(not(feature = "sqlite"))]
            Err(disabled(shown, "SQLite", "sqlite"))
        }
        Kind::Libsql => {
            #[cfg(feature = "libsql")]
            {
                use anarchon_libsql::{LibsqlOptions, LibsqlStore};
                let mut options = LibsqlOptions::default().call_timeout(timeout);
                if let Some(token) = &args.auth_token {
                    options = options.auth_token(token.clone());
                }
                if let Some(table) = &args.table {
                    options = options.table(table.clone());
                }
                let store = bounded(
                    shown,
                    timeout,
                    "connect",
                    LibsqlStore::connect_with(url, options),
                )
                .await?;
                Ok(Handle::Lease(Arc::new(store)))
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
                let store = bounded(
                    shown,
                    timeout,
                    "connect",
                    PostgresStore::connect_with(url, options),
                )
                .await?;
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
                Ok(Handle::Lease(Arc::new(store)))
            }
            #[cfg(not(feature = "redis"))]
            Err(disabled(shown, "Redis", "redis"))
        }
        Kind::Amqp => {
            #[cfg(feature = "amqp")]
            {
                use anarchon_amqp::{AmqpOptions, AmqpStore};
                let options = AmqpOptions::default().connect_timeout(timeout);
                let store = bounded(shown, timeout, "connect", async {
                    AmqpStore::connect_with(url, options)
                        .await
                        .map_err(anarchon_core::Error::from)
                })
                .await?;
                Ok(Handle::Claim(Arc::new(store)))
            }
            #[cfg(not(feature = "amqp"))]
            Err(disabled(shown, "RabbitMQ", "amqp"))
        }
        Kind::Nats => {
            #[cfg(feature = "nats")]
            {
                use anarchon_nats::{NatsOptions, NatsStore};
                let options = NatsOptions::default().connect_timeout(timeout);
                let store = bounded(shown, timeout, "connect", async {
                    NatsStore::connect_with(url, options)
                        .await
                        .map_err(anarchon_core::Error::from)
                })
                .await?;
                Ok(Handle::Claim(Arc::new(store)))
            }
            #[cfg(not(feature = "nats"))]
            Err(disabled(shown, "NATS", "nats"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
