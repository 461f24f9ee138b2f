//! The one error type of `anarchon-core`, shared by every store crate through the traits.

use std::time::Duration;

/// A boxed error from a handler, a data function or a driver.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The result type of anarchon.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in anarchon. Each message names the input or the store and
/// says what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An interval such as `"10s"` could not be parsed or is not positive. [B-01]
    #[error(
        "invalid interval {input:?}: {reason}; write it like \"250ms\", \"10s\", \"1h30m\" or \"2d\""
    )]
    InvalidInterval {
        /// What was given.
        input: String,
        /// Why it was refused.
        reason: String,
    },
    /// A cron expression could not be parsed. [B-02]
    #[error(
        "invalid cron expression {expression:?}: {reason}; use 5 fields (minute hour day month weekday) or 6 with seconds first"
    )]
    InvalidCron {
        /// What was given.
        expression: String,
        /// Why it was refused.
        reason: String,
    },
    /// A timezone name is not an IANA timezone. [B-06]
    #[error("unknown timezone {name:?}: use an IANA name such as \"Europe/Berlin\" or \"UTC\"")]
    UnknownTimezone {
        /// What was given.
        name: String,
    },
    /// An `at` time could not be understood. [B-03]
    #[error(
        "invalid time {input:?} for an `at` job: {reason}; give RFC 3339 (\"2026-12-01T09:00:00Z\") or milliseconds since the epoch"
    )]
    InvalidAt {
        /// What was given.
        input: String,
        /// Why it was refused.
        reason: String,
    },
    /// A job name breaks the naming rule. [B-04]
    #[error("invalid job name {name:?}: use 1 to 128 ASCII letters, digits, '_' or '-'")]
    InvalidJobName {
        /// What was given.
        name: String,
    },
    /// A job with this name is already registered on this scheduler. [B-04]
    #[error("job {name:?} is already registered on this scheduler; give each job its own name")]
    DuplicateJob {
        /// The name.
        name: String,
    },
    /// No job with this name is registered on this scheduler.
    #[error("no job named {name:?} is registered on this scheduler")]
    UnknownJob {
        /// The name.
        name: String,
    },
    /// An option has a value that is invalid, contradicts another option or the store.
    #[error("invalid option `{option}`: {reason}")]
    InvalidOption {
        /// The option's name, as in the docs (`heartbeat_ms`).
        option: &'static str,
        /// Why, and what to do.
        reason: String,
    },
    /// The scheduler is in the wrong state for this call (started twice, stopped ...).
    #[error("scheduler {state}: {hint}")]
    State {
        /// What state it is in.
        state: &'static str,
        /// What to do.
        hint: &'static str,
    },
    /// The store cannot be reached (refused connection, DNS, authentication, closed pool).
    #[error("{store} store is unavailable ({target}): {source}")]
    Unavailable {
        /// The store kind (`"redis"`).
        store: &'static str,
        /// What was being reached, with any password redacted.
        target: String,
        /// The driver's error.
        #[source]
        source: BoxError,
    },
    /// A store call did not answer within its timeout.
    #[error(
        "{store} store did not answer `{operation}` within {after:?}; check the server and the network"
    )]
    Timeout {
        /// The store kind.
        store: &'static str,
        /// The operation (`"claim"`, `"heartbeat"` ...).
        operation: &'static str,
        /// The timeout that passed.
        after: Duration,
    },
    /// The server is older than anarchon supports.
    #[error("{store} server {found} is too old: anarchon needs {required} or newer")]
    ServerTooOld {
        /// The store kind.
        store: &'static str,
        /// The version found.
        found: String,
        /// The version required.
        required: String,
    },
    /// The store's schema was written by a newer anarchon.
    #[error(
        "{store} schema {location} has version {found}, newer than this anarchon supports ({supported}); upgrade anarchon, nothing was changed"
    )]
    SchemaTooNew {
        /// The store kind.
        store: &'static str,
        /// Where (a table prefix, a file path ...).
        location: String,
        /// Schema version found.
        found: i64,
        /// Highest version this build knows.
        supported: i64,
    },
    /// The store holds something anarchon did not write or cannot read (another table shape,
    /// a key of the wrong type, a file that is not a database).
    #[error("{store} store: {location} is not usable by anarchon: {reason}")]
    Corrupt {
        /// The store kind.
        store: &'static str,
        /// What (a table, a key, a path).
        location: String,
        /// Why, and what to do.
        reason: String,
    },
    /// Any other error from a store driver.
    #[error("{store} store failed during `{operation}`: {source}")]
    Store {
        /// The store kind.
        store: &'static str,
        /// The operation.
        operation: &'static str,
        /// The driver's error.
        #[source]
        source: BoxError,
    },
    /// The run's signal was cancelled (stop, timeout, lost lease); returned by
    /// [`crate::JobContext::check_cancelled`], the `throwIfAborted` equivalent. [B-30]
    #[error("run of job {job:?} was cancelled ({cause})")]
    Cancelled {
        /// The job.
        job: String,
        /// Why (`"stopping"`, `"timed out"`, `"lease lost"`).
        cause: &'static str,
    },
    /// A data function failed. [B-31]
    #[error("data function failed for job {job:?}: {source}")]
    Data {
        /// The job.
        job: String,
        /// Its error.
        #[source]
        source: BoxError,
    },
}

impl Error {
    /// Shorthand for an [`Error::InvalidOption`].
    pub fn invalid_option(option: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidOption {
            option,
            reason: reason.into(),
        }
    }

    /// Shorthand for an [`Error::Store`] wrapping a driver error.
    pub fn store(
        store: &'static str,
        operation: &'static str,
        source: impl Into<BoxError>,
    ) -> Self {
        Error::Store {
            store,
            operation,
            source: source.into(),
        }
    }

    /// True for errors that may pass when the call is tried again (unavailable, timeout).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Error::Unavailable { .. } | Error::Timeout { .. } | Error::Store { .. }
        )
    }
}

/// Replaces the password in a URL such as `redis://user:secret@host/` by `***`, so errors and
/// logs never carry it.
///
/// ```
/// use anarchon_core::redact_url;
/// assert_eq!(redact_url("postgres://app:hunter2@db:5432/x"), "postgres://app:***@db:5432/x");
/// assert_eq!(redact_url("postgres://app@db/x?password=hunter2&sslmode=require"),
///            "postgres://app@db/x?password=***&sslmode=require");
/// assert_eq!(redact_url("redis://:secret@cache:6379"), "redis://:***@cache:6379");
/// ```
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return redact_query(url);
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let out = match authority.rfind('@') {
        Some(at) => {
            let userinfo = &authority[..at];
            // A user name alone is not a secret; a password is.
            let redacted = match userinfo.find(':') {
                Some(colon) => format!("{}:***", &userinfo[..colon]),
                None => userinfo.to_owned(),
            };
            format!("{}://{}@{}", &url[..scheme_end], redacted, &rest[at + 1..])
        }
        None => url.to_owned(),
    };
    redact_query(&out)
}

/// Hides the values of `password=` / `token=` / `authToken=` query parameters.
fn redact_query(url: &str) -> String {
    let Some(q) = url.find('?') else {
        return url.to_owned();
    };
    let (head, query) = url.split_at(q + 1);
    let params: Vec<String> = query
        .split('&')
        .map(|p| match p.split_once('=') {
            Some((k, _))
                if ["password", "pass", "token", "authtoken", "auth_token"]
                    .contains(&k.to_ascii_lowercase().as_str()) =>
            {
                format!("{k}=***")
            }
            _ => p.to_owned(),
        })
        .collect();
    format!("{head}{}", params.join("&"))
}
