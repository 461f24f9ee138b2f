//! Construction errors of this crate, and the mapping of driver errors onto
//! [`anarchon_core::Error`].

use std::time::Duration;

use anarchon_core::Error;
use deadpool_postgres::{PoolError, TimeoutType};
use tokio_postgres::error::SqlState;

pub(crate) const KIND: &str = "postgres";

/// Why a [`crate::PostgresStore`] could not be built. Converts into
/// [`anarchon_core::Error::InvalidOption`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PostgresError {
    /// The connection URL could not be parsed.
    #[error(
        "invalid PostgreSQL URL {url}: {reason}; write it like postgres://user:password@host:5432/database"
    )]
    InvalidUrl {
        /// The URL, with any password redacted.
        url: String,
        /// Why it was refused.
        reason: String,
    },
    /// The `table` option is not a plain SQL identifier.
    #[error(
        "invalid table prefix {name:?}: use 1 to 54 lowercase ASCII letters, digits or '_', starting with a letter or '_'"
    )]
    InvalidTable {
        /// What was given.
        name: String,
    },
    /// The `schema` option is not a plain SQL identifier.
    #[error(
        "invalid schema {name:?}: use 1 to 63 lowercase ASCII letters, digits or '_', starting with a letter or '_'"
    )]
    InvalidSchema {
        /// What was given.
        name: String,
    },
    /// An option (or the URL's `connect_timeout`) is outside the range the store can
    /// honour: PostgreSQL's `statement_timeout` is an `int4` of milliseconds, a pool of
    /// zero connections runs nothing.
    #[error("`{option}` = {value} is out of range: {allowed}")]
    OutOfRange {
        /// The option's name, as its setter is named (`timeout`, `pool_size`).
        option: &'static str,
        /// The value given.
        value: String,
        /// What is accepted, with the limits.
        allowed: String,
    },
    /// A text PostgreSQL cannot store as given (an instance id with a NUL byte: `text`
    /// holds no NUL).
    #[error(
        "the {input} {shown:?} holds a NUL byte, which PostgreSQL text cannot hold: give an \
         {input} without control characters"
    )]
    UnstorableText {
        /// What the text is (`instance id`).
        input: &'static str,
        /// The text as given (the message shows it escaped, each NUL as `\0`).
        shown: String,
    },
    /// The connection pool could not be built.
    #[error("could not build the PostgreSQL connection pool: {reason}")]
    Pool {
        /// Why.
        reason: String,
    },
}

impl From<PostgresError> for Error {
    fn from(e: PostgresError) -> Self {
        let option = match e {
            PostgresError::InvalidUrl { .. } | PostgresError::Pool { .. } => "url",
            PostgresError::InvalidTable { .. } => "table",
            PostgresError::InvalidSchema { .. } => "schema",
            PostgresError::UnstorableText { .. } => "instance_id",
            PostgresError::OutOfRange {
                option,
                value,
                allowed,
            } => {
                return Error::OutOfRange {
                    option,
                    value,
                    allowed,
                };
            }
        };
        Error::InvalidOption {
            option,
            reason: e.to_string(),
        }
    }
}

/// Hides the secrets of a connection string, URL or `key=value`: the one redactor of
/// anarchon, [`anarchon_core::redact_url`], under the name this crate has always used.
pub use anarchon_core::redact_url as redact;

/// The parameter names libpq knows (PostgreSQL 17), for [`shown`].
pub(crate) const LIBPQ_KEYS: &[&str] = &[
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "passfile",
    "require_auth",
    "channel_binding",
    "connect_timeout",
    "client_encoding",
    "options",
    "application_name",
    "fallback_application_name",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "tcp_user_timeout",
    "replication",
    "gssencmode",
    "sslmode",
    "sslnegotiation",
    "requiressl",
    "sslcompression",
    "sslcert",
    "sslkey",
    "sslcertmode",
    "sslpassword",
    "sslrootcert",
    "sslcrl",
    "sslcrldir",
    "sslsni",
    "requirepeer",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "krbsrvname",
    "gsslib",
    "gssdelegation",
    "service",
    "target_session_attrs",
    "load_balance_hosts",
];

/// Why a connection string does not read as libpq parameters, naming a parameter by its
/// position only: a `key=value` list that does not split into pairs (a word without `=`, an
/// unclosed quote) or names a parameter libpq does not know; a URL whose query names one.
/// `None` when it reads cleanly (it may still be refused by the driver, whose messages are
/// then safe to show: they name only known parameters).
pub(crate) fn unreadable(conn: &str) -> Option<String> {
    let text = conn.trim();
    let keys: Vec<String> = match text.split_once("://") {
        Some((_, rest)) => match rest.split_once('?') {
            Some((_, query)) => query
                .split('&')
                .filter(|p| !p.is_empty())
                .map(|p| p.split('=').next().unwrap_or("").to_owned())
                .collect(),
            None => Vec::new(),
        },
        None => match crate::tls::key_values(text) {
            Ok(pairs) => pairs.into_iter().map(|(k, _)| k).collect(),
            Err(reason) => return Some(reason),
        },
    };
    keys.iter()
        .position(|k| !LIBPQ_KEYS.contains(&k.as_str()))
        .map(|i| {
            format!(
                "parameter {} is not a libpq parameter (quote a value that holds a space, \
                 password='two words', and percent-encode `&`, `=` and `#` in a URL's values)",
                i + 1
            )
        })
}

/// A connection string as errors, `Debug` and logs show it: [`redact`] when it reads as
/// libpq parameters. One that does not ([`unreadable`]) is not shown at all: a password
/// with a space left unquoted (`password=two words`), or with a raw `&` in a URL, would
/// otherwise show a piece of itself as a parameter name, which no redactor can tell from
/// one.
pub(crate) fn shown(conn: &str) -> String {
    if unreadable(conn).is_some() {
        return "(a connection string that does not read as libpq parameters; not shown, \
                since it may hold a password)"
            .into();
    }
    redact(conn)
}

/// A driver error whose message says what happened: tokio-postgres's own `Display` is only
/// "db error" or "error connecting to server", with the cause one `source()` away, where a
/// log line or `{err}` never looks. The original error stays reachable as the `source()`,
/// for code that wants [`tokio_postgres::Error::as_db_error`].
#[derive(Debug)]
struct DriverError {
    text: String,
    source: tokio_postgres::Error,
}

impl std::fmt::Display for DriverError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for DriverError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// What a driver error says, on one line: the server's severity, message, SQLSTATE, detail
/// and hint for an error the server sent; else the error and the text of its causes
/// ("error connecting to server: Connection refused (os error 111)").
fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut text = format!(
            "{}: {} (SQLSTATE {})",
            db.severity(),
            db.message(),
            db.code().code()
        );
        if let Some(detail) = db.detail() {
            text.push_str(&format!("; detail: {detail}"));
        }
        if let Some(hint) = db.hint() {
            text.push_str(&format!("; hint: {hint}"));
        }
        return text.replace('\n', " ");
    }
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let part = c.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        cause = c.source();
    }
    text.replace('\n', " ")
}

/// The driver error, boxed with a message that says what happened.
fn explained(e: tokio_postgres::Error) -> anarchon_core::BoxError {
    Box::new(DriverError {
        text: describe(&e),
        source: e,
    })
}

/// True for the errors after which the same statement should simply be run again.
pub(crate) fn is_retryable(e: &tokio_postgres::Error) -> bool {
    matches!(
        e.code(),
        Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED
    )
}

/// True when the connection that returned `e` cannot be used again: it is closed, or the
/// server said it is ending the session (terminated backend, shutdown, connection
/// exception). Such a connection is dropped instead of going back to the pool, where the
/// next call would meet the same dead socket.
pub(crate) fn is_connection_lost(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.code() {
        Some(code) => {
            code.code().starts_with("08")
                || *code == SqlState::ADMIN_SHUTDOWN
                || *code == SqlState::CRASH_SHUTDOWN
                || *code == SqlState::CANNOT_CONNECT_NOW
        }
        // No SQLSTATE: an I/O or protocol error of the connection (or a conversion error,
        // after which a fresh connection costs little).
        None => true,
    }
}

/// Maps a driver error of `operation` onto the core error.
pub(crate) fn map_pg(
    e: tokio_postgres::Error,
    operation: &'static str,
    target: &str,
    statement_timeout: Duration,
) -> Error {
    if let Some(code) = e.code() {
        let class = &code.code()[..2];
        if *code == SqlState::QUERY_CANCELED {
            return Error::Timeout {
                store: KIND,
                operation,
                after: statement_timeout,
            };
        }
        // 08 connection exception, 28 invalid authorization, 3D unknown database,
        // 53 insufficient resources, 57P01..57P03 shutdown / cannot connect now.
        let unavailable = matches!(class, "08" | "28" | "3D" | "53")
            || *code == SqlState::ADMIN_SHUTDOWN
            || *code == SqlState::CRASH_SHUTDOWN
            || *code == SqlState::CANNOT_CONNECT_NOW;
        if unavailable {
            return Error::Unavailable {
                store: KIND,
                target: target.to_owned(),
                source: explained(e),
            };
        }
        if *code == SqlState::UNDEFINED_TABLE || *code == SqlState::UNDEFINED_FUNCTION {
            let what = e
                .as_db_error()
                .map(|d| d.message().to_owned())
                .unwrap_or_default();
            return Error::Corrupt {
                store: KIND,
                location: target.to_owned(),
                reason: format!(
                    "{what}; the schema is missing: call `prepare` (the scheduler's `start`) first"
                ),
            };
        }
        return Error::Store {
            store: KIND,
            operation,
            source: explained(e),
        };
    }
    // No SQLSTATE: the connection failed or closed (refused, reset, TLS, timeout).
    Error::Unavailable {
        store: KIND,
        target: target.to_owned(),
        source: explained(e),
    }
}

/// Maps a pool error (waiting for or creating a connection) onto the core error.
pub(crate) fn map_pool(
    e: PoolError,
    operation: &'static str,
    target: &str,
    statement_timeout: Duration,
    wait: Duration,
) -> Error {
    match e {
        PoolError::Timeout(TimeoutType::Wait) => Error::Timeout {
            store: KIND,
            operation,
            after: wait,
        },
        PoolError::Timeout(kind) => Error::Unavailable {
            store: KIND,
            target: target.to_owned(),
            source: format!(
                "timed out {} a connection",
                match kind {
                    TimeoutType::Create => "opening",
                    _ => "checking",
                }
            )
            .into(),
        },
        PoolError::Backend(e) => map_pg(e, operation, target, statement_timeout),
        PoolError::Closed => Error::Unavailable {
            store: KIND,
            target: target.to_owned(),
            source: "the connection pool is closed".into(),
        },
        other => Error::Unavailable {
            store: KIND,
            target: target.to_owned(),
            source: other.to_string().into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use anarchon_core::Error;
    use tokio_postgres::NoTls;

    use super::map_pg;

    const TIMEOUT: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn a_server_error_shows_its_message_and_sqlstate() {
        let Some(url) = anarchon_core::testkit::server_url("ANARCHON_POSTGRES_URL") else {
            return;
        };
        let (client, connection) = tokio_postgres::connect(&url, NoTls).await.unwrap();
        tokio::spawn(connection);
        let e = client
            .simple_query("SELECT 1 / 0")
            .await
            .expect_err("division by zero");
        let err = map_pg(e, "claim", "postgres://db", TIMEOUT);
        assert!(matches!(err, Error::Store { .. }), "{err:?}");
        let text = err.to_string();
        assert!(
            text.contains("division by zero") && text.contains("22012") && text.contains("claim"),
            "{text}"
        );
        // The driver's error is still there for code that wants it.
        let source = std::error::Error::source(&err).and_then(std::error::Error::source);
        let driver = source.and_then(|s| s.downcast_ref::<tokio_postgres::Error>());
        assert!(driver.and_then(|d| d.as_db_error()).is_some(), "{err:?}");

        let e = client
            .simple_query("SELECT * FROM anarchon_no_such_table")
            .await
            .expect_err("no such table");
        let text = map_pg(e, "claim", "postgres://db", TIMEOUT).to_string();
        assert!(
            text.contains("anarchon_no_such_table") && text.contains("does not exist"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_connection_error_shows_its_cause() {
        // Port 1 on localhost: nothing listens there.
        let Err(e) = tokio_postgres::connect("postgres://app@127.0.0.1:1/db", NoTls).await else {
            panic!("nothing listens on port 1");
        };
        let err = map_pg(e, "connect", "postgres://app@127.0.0.1:1/db", TIMEOUT);
        assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
        let text = err.to_string();
        assert!(
            text.contains("error connecting to server") && text.to_lowercase().contains("refused"),
            "{text}"
        );
    }

    #[test]
    fn bad_connection_strings_never_show_their_password() {
        for (url, secret) in [
            ("postgres://app:pa/ss@db/x", "pa/ss"),
            ("postgres://app:hunter2@db:notaport/x", "hunter2"),
            ("postgres://app:hunter2@/x", "hunter2"),
            (
                "host=db password='hunter2 topsecret' port=notaport",
                "topsecret",
            ),
            ("host=db password='hunter2 topsecret", "topsecret"),
            ("host=db password=hunter2 bogus_option=1", "hunter2"),
            ("postgres://db/x?password=hunter2&bogus=1", "hunter2"),
        ] {
            // tokio-postgres reads some of these (`pa/ss` is a password to it): then the
            // store's own description must hide it.
            let shown = match crate::PostgresStore::unconnected_with(
                url,
                crate::PostgresOptions::default(),
            ) {
                Ok(store) => format!("{store:?}"),
                Err(err) => format!("{err} {err:?}"),
            };
            assert!(!shown.contains(secret), "{url:?} → {shown}");
        }
    }
}
