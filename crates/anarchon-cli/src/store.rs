//! Opening a store from its URL: the scheme picks the store through `anarchon::any` (each
//! store behind its cargo feature), the server stores open read-only there, SQLite and
//! libSQL through the command's own readers ([`crate::readonly`]); every call goes through
//! [`Opened::call`], which bounds it by `--timeout`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anarchon::any::{self, AnyOptions, AnyStore, StoreKind};
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

/// Reads which store `url` names ([`StoreKind::of`]): a bare path is a SQLite file, and so
/// is any text that names an existing file (a file called `host=db` too). A store this
/// build leaves out is refused here.
pub(crate) fn kind_of(url: &str) -> Result<StoreKind, CliError> {
    let url = url.trim();
    let kind = if std::path::Path::new(url).is_file() {
        StoreKind::Sqlite
    } else {
        StoreKind::of(url).map_err(|source| {
            let shown = redact_url(url);
            match (url.split_once("://"), url.split_once(':')) {
                (Some((scheme, _)), _) => CliError::UnknownScheme {
                    scheme: scheme.to_owned(),
                    url: shown,
                },
                (None, Some((scheme, _))) => CliError::SchemeWithoutSlashes {
                    scheme: scheme.to_owned(),
                    url: shown,
                },
                (None, None) => CliError::InvalidStore { url: shown, source },
            }
        })?
    };
    let enabled = match kind {
        StoreKind::Sqlite => cfg!(feature = "sqlite"),
        StoreKind::Libsql => cfg!(feature = "libsql"),
        // The server stores come with `anarchon`'s features, which this crate's turn on.
        server => server.is_enabled(),
    };
    if !enabled {
        return Err(CliError::StoreDisabled {
            url: redact_url(url),
            store: name(kind),
            feature: kind.feature(),
        });
    }
    Ok(kind)
}

/// The store's name in messages.
fn name(kind: StoreKind) -> &'static str {
    match kind {
        StoreKind::Sqlite => "SQLite",
        StoreKind::Libsql => "libSQL",
        StoreKind::Postgres => "PostgreSQL",
        StoreKind::Redis => "Redis",
        StoreKind::Amqp => "RabbitMQ",
        StoreKind::Nats => "NATS",
        _ => "unknown",
    }
}

/// The file path of a SQLite URL (`sqlite://PATH`, `sqlite:PATH` or a bare path).
fn sqlite_path(url: &str) -> &str {
    url.strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .unwrap_or(url)
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

/// Sorts the error of a read-only open: a namespace with no store under it names the flag
/// to pass, a refused URL or option is bad input, anything else a store failure.
fn open_error(
    kind: StoreKind,
    args: &StoreArgs,
    shown: &str,
    err: anarchon_core::Error,
) -> CliError {
    use anarchon_core::Error;
    match err {
        Error::InvalidOption {
            option: "prefix",
            reason,
        } if matches!(kind, StoreKind::Redis | StoreKind::Amqp | StoreKind::Nats) => {
            CliError::NothingStored {
                url: shown.to_owned(),
                store: name(kind),
                prefix: args
                    .prefix
                    .clone()
                    .unwrap_or_else(|| "(the default)".into()),
                reason: format!("{reason}; pass the application's --prefix"),
            }
        }
        Error::InvalidOption {
            option: "table",
            reason,
        } if kind == StoreKind::Postgres => CliError::NotAStore {
            path: shown.to_owned(),
            table: format!(
                "{}.{}",
                args.schema.as_deref().unwrap_or("public"),
                args.table.as_deref().unwrap_or("anarchon_runs")
            ),
            reason: format!(
                "{reason}; pass the application's --schema and --table (the defaults are public \
                 and anarchon_runs)"
            ),
        },
        source @ (Error::InvalidOption { .. }
        | Error::OutOfRange { .. }
        | Error::StoreUrl { .. }) => CliError::InvalidStore {
            url: shown.to_owned(),
            source,
        },
        Error::Timeout { .. } => CliError::Timeout {
            url: shown.to_owned(),
            action: "connect",
            after: args.timeout,
        },
        source => CliError::Store {
            url: shown.to_owned(),
            action: "connect",
            source,
        },
    }
}

/// Opens the store `args.url` names, to read it.
pub(crate) async fn open(args: &StoreArgs) -> Result<Opened, CliError> {
    let kind = kind_of(&args.url)?;
    let shown = redact_url(&args.url);
    let url = args.url.trim();
    let timeout = args.timeout;
    let handle = match kind {
        #[cfg(feature = "sqlite")]
        StoreKind::Sqlite => {
            // Read-only: the command never creates, migrates or switches a file to WAL.
            let reader = crate::readonly::SqliteReader::open(
                sqlite_path(url),
                &shown,
                args.table.as_deref(),
                timeout,
            )?;
            Handle::Sqlite(Box::new(reader))
        }
        #[cfg(feature = "libsql")]
        StoreKind::Libsql => {
            // Read without writing: `LibsqlStore::connect` would create the tables.
            let reader = tokio::time::timeout(
                timeout,
                crate::readonly::LibsqlReader::open(
                    url,
                    &shown,
                    args.auth_token.as_deref(),
                    args.table.as_deref(),
                ),
            )
            .await
            .map_err(|_| CliError::Timeout {
                url: shown.clone(),
                action: "connect",
                after: timeout,
            })??;
            Handle::Libsql(Box::new(reader))
        }
        _ => {
            let mut options = AnyOptions::default().timeout(timeout);
            if let Some(prefix) = &args.prefix {
                options = options.prefix(prefix.clone());
            }
            if let Some(table) = &args.table {
                options = options.table(table.clone());
            }
            if let Some(schema) = &args.schema {
                options = options.schema(schema.clone());
            }
            if let Some(token) = &args.auth_token {
                options = options.auth_token(token.clone());
            }
            // Connecting, then the check that a store lives there: a few round trips.
            let opened =
                tokio::time::timeout(timeout.saturating_mul(3), any::open_read_only(url, options))
                    .await
                    .map_err(|_| CliError::Timeout {
                        url: shown.clone(),
                        action: "connect",
                        after: timeout,
                    })?;
            match opened.map_err(|e| open_error(kind, args, &shown, e))? {
                AnyStore::Lease(store) => Handle::Lease(store),
                AnyStore::Claim(store) => Handle::Claim(store),
            }
        }
    };
    Ok(Opened {
        handle,
        shown,
        timeout,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_pick_the_store() {
        assert_eq!(kind_of("jobs.db").unwrap(), StoreKind::Sqlite);
        assert_eq!(sqlite_path("sqlite:///tmp/j.db"), "/tmp/j.db");
        assert_eq!(sqlite_path("sqlite://jobs.db"), "jobs.db");
        assert_eq!(kind_of("postgresql://a@b/c").unwrap(), StoreKind::Postgres);
        assert_eq!(kind_of("REDIS://h").unwrap(), StoreKind::Redis);
        assert_eq!(kind_of("rediss://h").unwrap(), StoreKind::Redis);
        assert_eq!(kind_of("https://db.example").unwrap(), StoreKind::Libsql);
        assert_eq!(kind_of("nats://h:4222").unwrap(), StoreKind::Nats);
        let err = kind_of("mysql://u:pw1234@h/db").unwrap_err().to_string();
        assert!(
            err.contains("\"mysql\"") && !err.contains("pw1234"),
            "{err}"
        );
        let err = kind_of("redis:pw1234@h").unwrap_err();
        assert!(
            matches!(err, CliError::SchemeWithoutSlashes { .. }),
            "{err}"
        );
    }
}
