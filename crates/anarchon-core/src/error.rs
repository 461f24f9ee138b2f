//! The one error type of `anarchon-core`, shared by every store crate through the traits.

use std::time::Duration;

use crate::cancel::CancelCause;

/// A boxed error from a handler, a data function or a driver.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What kind of failure an [`Error`] is, for code that reacts to it (retry, alert, give
/// up) without reading its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Bad input: an option, a schedule, a name, a URL.
    Input,
    /// The scheduler's state does not allow the call.
    State,
    /// The store cannot be reached.
    Unavailable,
    /// A store call did not answer in time.
    Timeout,
    /// The store's server or schema is not one anarchon can use.
    Incompatible,
    /// The store refused or failed a call.
    Store,
    /// A run's signal was cancelled, or its fenced transaction lost the run.
    Cancelled,
    /// A data function failed.
    Data,
}

/// The state of a scheduler, as [`Error::State`] names it.
///
/// ```
/// use anarchon_core::error::SchedulerState;
/// assert_eq!(SchedulerState::Stopped.to_string(), "stopped");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SchedulerState {
    /// Built, not started yet.
    NotStarted,
    /// Started and running.
    Running,
    /// `stop()` is handing over or finishing its runs.
    Stopping,
    /// Stopped: it runs nothing again.
    Stopped,
    /// Its driver task panicked (a bug in anarchon).
    Failed,
}

impl std::fmt::Display for SchedulerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SchedulerState::NotStarted => "not started",
            SchedulerState::Running => "running",
            SchedulerState::Stopping => "stopping",
            SchedulerState::Stopped => "stopped",
            SchedulerState::Failed => "failed",
        })
    }
}

/// The result type of anarchon.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in anarchon. Each message names the input or the store and
/// says what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An interval such as `"10s"` could not be parsed or is not positive. [B-01]
    #[error("invalid interval {input:?}: {reason}")]
    InvalidInterval {
        /// What was given.
        input: String,
        /// Why it was refused.
        reason: String,
    },
    /// A cron expression could not be parsed. [B-02]
    #[error("invalid cron expression {expression:?}: {reason}")]
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
    /// The process-wide registry has no scheduler of this name (or one of the other mode).
    #[error(
        "no scheduler named {name:?} is configured in this process; call \
         anarchon::registry::configure({name:?}, scheduler) first"
    )]
    UnknownScheduler {
        /// The name.
        name: String,
    },
    /// The process-wide registry already has a scheduler of this name.
    #[error(
        "a scheduler named {name:?} is already configured in this process; give each its own \
         name, or take it with registry::leased({name:?})"
    )]
    DuplicateScheduler {
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
    /// An option or input is outside the range anarchon accepts: it would overflow or could
    /// not make sense (a one-century `max_late_ms`, an `at` after the year 9999).
    #[error("`{option}` = {value} is out of range: {allowed}")]
    OutOfRange {
        /// The option's name, as in the docs (`max_late_ms`, `at`).
        option: &'static str,
        /// The value given.
        value: String,
        /// What is accepted, with the limit.
        allowed: String,
    },
    /// An `at` job names a time so far in the past that it could never start.
    #[error(
        "the `at` time {at} is in the past (now {now}; a run may start at most {} late), so \
         the job would never run: give a later time, or `allow_past(true)` for registration \
         code that runs again after the job ran",
        human_duration(*.grace)
    )]
    AtInThePast {
        /// The job's time, RFC 3339.
        at: String,
        /// The time of registration, RFC 3339.
        now: String,
        /// How late a run may still start (the late limit, or the catch-up window).
        grace: Duration,
    },
    /// The scheduler is in the wrong state for this call (started twice, stopped ...).
    #[error("the scheduler is {state}: {hint}")]
    State {
        /// The state it is in.
        state: SchedulerState,
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
    /// [`crate::JobContext::check_cancelled`], so a handler can stop before its next side
    /// effect. [B-30]
    #[error("run of job {job:?} was cancelled ({})", cause.map_or("cancelled", CancelCause::as_str))]
    Cancelled {
        /// The job.
        job: String,
        /// Why; `None` when the signal was cancelled from outside the scheduler.
        cause: Option<CancelCause>,
    },
    /// A store URL no store takes, or one whose store's feature is off
    /// (`anarchon::any::open`).
    #[error("cannot open a store from {url:?}: {reason}")]
    StoreUrl {
        /// The URL, its password hidden.
        url: String,
        /// Why, and what to do.
        reason: String,
    },
    /// A fenced transaction found that this attempt no longer owns its run; nothing of the
    /// transaction was kept. Another attempt does (or did) the work: return the error.
    #[error(
        "job {job:?} slot {slot} attempt {attempt}: this attempt no longer owns the run ({loss}); nothing of the fenced transaction was kept"
    )]
    Fenced {
        /// The job.
        job: String,
        /// The slot, epoch ms.
        slot: i64,
        /// The attempt that lost.
        attempt: u32,
        /// What the store found instead.
        loss: crate::fenced::FenceLoss,
    },
    /// A fenced transaction was asked for a run that holds no lease to check.
    #[error(
        "job {job:?}: a fenced transaction needs a run on a lease store ({why}); use a plain transaction"
    )]
    NotFenceable {
        /// The job.
        job: String,
        /// Why there is no lease.
        why: &'static str,
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

    /// What kind of failure this is.
    ///
    /// ```
    /// use anarchon_core::error::{Error, ErrorKind};
    /// let e = Error::Timeout { store: "redis", operation: "claim", after: std::time::Duration::from_secs(2) };
    /// assert_eq!(e.kind(), ErrorKind::Timeout);
    /// ```
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidInterval { .. }
            | Error::InvalidCron { .. }
            | Error::UnknownTimezone { .. }
            | Error::InvalidAt { .. }
            | Error::InvalidJobName { .. }
            | Error::DuplicateJob { .. }
            | Error::UnknownJob { .. }
            | Error::UnknownScheduler { .. }
            | Error::DuplicateScheduler { .. }
            | Error::InvalidOption { .. }
            | Error::OutOfRange { .. }
            | Error::AtInThePast { .. }
            | Error::StoreUrl { .. }
            | Error::NotFenceable { .. } => ErrorKind::Input,
            Error::State { .. } => ErrorKind::State,
            Error::Unavailable { .. } => ErrorKind::Unavailable,
            Error::Timeout { .. } => ErrorKind::Timeout,
            Error::ServerTooOld { .. } | Error::SchemaTooNew { .. } | Error::Corrupt { .. } => {
                ErrorKind::Incompatible
            }
            Error::Store { .. } => ErrorKind::Store,
            Error::Cancelled { .. } | Error::Fenced { .. } => ErrorKind::Cancelled,
            Error::Data { .. } => ErrorKind::Data,
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

/// What replaces a secret in redacted text.
const HIDDEN: &str = "***";

/// Hides the secrets in a connection string, so errors and logs never carry them. This is the
/// one redactor every anarchon crate uses.
///
/// It understands three shapes:
///
/// - **URLs** (`scheme://user:password@host/path?query#fragment`), read with the `url` crate:
///   the password, the values of query parameters whose name suggests a secret (`password`,
///   `token`, `authToken`, `api_key`, `secret` ...) and any fragment are replaced by `***`. A
///   user name alone is kept for the schemes where it is only a name (PostgreSQL, MySQL,
///   Redis, Valkey, AMQP, MongoDB) and hidden for the others, where it may be a token (NATS
///   `nats://token@host`, libSQL, HTTP).
/// - **PostgreSQL `key=value` strings** (`host=db password='two words' user=app`), with
///   libpq's quoting: values in single quotes with `\'` and `\\` escapes, spaces around `=`.
///   An unquoted secret value runs to the next `key=` (or the end): libpq would end it at the
///   first space, but `password=two words` is what a user types for a password with a space.
///   Any other text gets the same treatment for `key=value` pairs at word, `?`, `&`, `;`
///   or `,` boundaries.
/// - **`user:password@host`** without a scheme.
///
/// When a URL cannot be read without guessing (an `@` after a `/`, `?`, `#` or `\`, a space
/// after the host, a port that is not a number, several hosts), everything after the scheme
/// is hidden: a message then says less, but never too much.
///
/// ```
/// use anarchon_core::redact_url;
/// assert_eq!(redact_url("postgres://app:hunter2@db:5432/x"), "postgres://app:***@db:5432/x");
/// assert_eq!(redact_url("postgres://app@db/x?password=hunter2&sslmode=require"),
///            "postgres://app@db/x?password=***&sslmode=require");
/// assert_eq!(redact_url("redis://:secret@cache:6379"), "redis://:***@cache:6379");
/// assert_eq!(redact_url("host=db password='hunter2 topsecret' user=app"),
///            "host=db password=*** user=app");
/// assert_eq!(redact_url("host=db password=hunter2 topsecret user=app"),
///            "host=db password=*** user=app");
/// // A `/` in the password makes the URL ambiguous: all of it is hidden.
/// assert_eq!(redact_url("postgres://app:pa/ss@db"), "postgres://***");
/// ```
pub fn redact_url(input: &str) -> String {
    let text = input.trim();
    match scheme_end(text) {
        Some(end) => redact_pairs(&redact_scheme_url(text, end)),
        None => redact_pairs(&redact_bare_userinfo(text)),
    }
}

/// The index of `://` when `text` starts with a scheme (letters, digits, `+`, `-`, `.`, and
/// `:` for nested schemes such as `jdbc:postgresql://`).
fn scheme_end(text: &str) -> Option<usize> {
    let end = text.find("://")?;
    let scheme = &text[..end];
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.' | ':')))
    .then_some(end)
}

/// Redacts a URL whose `://` is at `end`.
fn redact_scheme_url(text: &str, end: usize) -> String {
    let scheme = &text[..end];
    // `jdbc:postgresql://...`: the URL is the part after the outer scheme.
    if let Some(colon) = scheme.rfind(':') {
        return format!(
            "{}{}",
            &text[..=colon],
            redact_scheme_url(&text[colon + 1..], end - colon - 1)
        );
    }
    let hidden = format!("{scheme}://{HIDDEN}");
    let rest = &text[end + 3..];
    // Where the user info ends is a guess when an `@` follows a character that ends the
    // authority (the password may hold a `/`): hide it all then.
    let after_userinfo = match rest.rfind('@') {
        Some(at) if rest[..at].contains(['/', '?', '#', '\\']) => return hidden,
        Some(at) => &rest[at + 1..],
        None => rest,
    };
    if after_userinfo.contains(char::is_whitespace) {
        return hidden;
    }
    let Ok(mut url) = url::Url::parse(text) else {
        return hidden;
    };
    if url.password().is_some() {
        if url.set_password(Some(HIDDEN)).is_err() {
            return hidden;
        }
    } else if !url.username().is_empty()
        && !USER_IS_A_NAME.contains(&scheme.to_ascii_lowercase().as_str())
        && url.set_username(HIDDEN).is_err()
    {
        return hidden;
    }
    if let Some(query) = url.query() {
        let redacted = redact_query(query);
        url.set_query(Some(&redacted));
    }
    if url.fragment().is_some_and(|f| !f.is_empty()) {
        url.set_fragment(Some(HIDDEN));
    }
    url.to_string()
}

/// Schemes whose user name, given without a password, is only a name.
const USER_IS_A_NAME: [&str; 11] = [
    "postgres",
    "postgresql",
    "mysql",
    "mariadb",
    "redis",
    "rediss",
    "valkey",
    "valkeys",
    "amqp",
    "amqps",
    "mongodb",
];

/// Hides the values of the secret parameters of a URL query (names compared decoded).
fn redact_query(query: &str) -> String {
    query
        .split('&')
        .map(|pair| {
            let Some((raw_key, _)) = pair.split_once('=') else {
                return pair.to_owned();
            };
            let key: String = url::form_urlencoded::parse(raw_key.as_bytes())
                .next()
                .map(|(k, _)| k.into_owned())
                .unwrap_or_default();
            if is_secret_key(&key) {
                format!("{raw_key}={HIDDEN}")
            } else {
                pair.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// Whether a parameter name suggests a secret. Generous on purpose: hiding a harmless value
/// costs a little clarity, showing a secret costs the secret.
fn is_secret_key(key: &str) -> bool {
    let key: String = key
        .chars()
        .filter(|c| !matches!(c, '_' | '-' | '.'))
        .flat_map(char::to_lowercase)
        .collect();
    [
        "pass",
        "pwd",
        "token",
        "secret",
        "key",
        "auth",
        "credential",
        "jwt",
        "signature",
    ]
    .iter()
    .any(|word| key.contains(word))
}

/// `user:password@host` without a scheme: hides the password.
fn redact_bare_userinfo(text: &str) -> String {
    if let Some(at) = text.rfind('@') {
        let userinfo = &text[..at];
        if let Some(colon) = userinfo.find(':')
            && !userinfo.contains(char::is_whitespace)
            && !userinfo.contains('=')
        {
            return format!("{}:{HIDDEN}@{}", &userinfo[..colon], &text[at + 1..]);
        }
    }
    text.to_owned()
}

/// Hides the values of secret `key=value` pairs anywhere in `text`: libpq connection strings
/// (`password = 'it\'s'`), query strings, `Password=...;` lists.
fn redact_pairs(text: &str) -> String {
    let bytes = text.as_bytes();
    let is_key = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.');
    let is_boundary = |b: u8| b.is_ascii_whitespace() || matches!(b, b'?' | b'&' | b';' | b',');
    let mut out = String::with_capacity(text.len());
    let (mut copied, mut i) = (0, 0);
    while i < bytes.len() {
        if !(is_key(bytes[i]) && (i == 0 || is_boundary(bytes[i - 1]))) {
            i += 1;
            continue;
        }
        let key_start = i;
        while i < bytes.len() && is_key(bytes[i]) {
            i += 1;
        }
        let key = &text[key_start..i];
        let mut j = i;
        while j < bytes.len() && matches!(bytes[j], b' ' | b'\t') {
            j += 1;
        }
        if j == bytes.len() || bytes[j] != b'=' || !is_secret_key(key) {
            continue;
        }
        j += 1;
        while j < bytes.len() && matches!(bytes[j], b' ' | b'\t') {
            j += 1;
        }
        // The separator before the key tells the list: `&` ends a value of a query
        // string, `;` one of a `Key=value;` list; a libpq value ends at whitespace only.
        let separator = match key_start.checked_sub(1).map(|at| bytes[at]) {
            Some(b'?' | b'&') => Some('&'),
            Some(b';') => Some(';'),
            _ => None,
        };
        let end = value_end(text, j, separator);
        out.push_str(&text[copied..j]);
        out.push_str(HIDDEN);
        copied = end;
        i = end;
    }
    out.push_str(&text[copied..]);
    out
}

/// Where the value starting at `start` ends: after its closing quote (`'` or `"`, with `\`
/// escaping the next character; the end of the text if the quote is never closed), else at
/// the list's `separator` (`&` in a query string, `;` in a `Key=value;` list), or at the
/// first whitespace that a `key=` follows (or that ends the text).
///
/// libpq ends an unquoted value at whitespace, so `password=two words` is no valid
/// connection string; but it is what a user types for a password with a space, and the
/// words after the first are as secret as it. Up to the next `key=` the text is taken as
/// the value's: a message then loses a few words, never a piece of a password.
fn value_end(text: &str, start: usize, separator: Option<char>) -> usize {
    let mut chars = text[start..].char_indices().peekable();
    let quote = match chars.peek() {
        Some((_, q @ ('\'' | '"'))) => {
            let q = *q;
            chars.next();
            Some(q)
        }
        _ => None,
    };
    while let Some((offset, c)) = chars.next() {
        match (c, quote) {
            ('\\', _) => {
                chars.next();
            }
            (c, Some(q)) if c == q => return start + offset + c.len_utf8(),
            (c, None) if Some(c) == separator => return start + offset,
            (c, None) if c.is_whitespace() && next_is_pair(&text[start + offset..]) => {
                return start + offset;
            }
            _ => {}
        }
    }
    text.len()
}

/// Whether `rest`, which starts with whitespace, goes on with a `key=` pair (spaces around
/// the `=` allowed, as libpq allows them) or ends with the whitespace.
fn next_is_pair(rest: &str) -> bool {
    let rest = rest.trim_start();
    let key_len = rest
        .bytes()
        .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        .count();
    rest.is_empty() || (key_len > 0 && rest[key_len..].trim_start().starts_with('='))
}

/// The error a job handler returns: any error type converts into it with `?`, so a handler
/// needs no type annotation.
///
/// Like `anyhow::Error`, it converts from every `std::error::Error + Send + Sync + 'static`
/// and for that reason does not implement `std::error::Error` itself. Text becomes an error
/// with [`HandlerError::msg`]; an error already boxed with [`HandlerError::from_boxed`]. The
/// run's history record keeps its message, and [`HandlerError::into_inner`] gives the
/// original error back.
///
/// ```
/// use anarchon_core::{HandlerError, JobContext};
///
/// async fn handler(ctx: JobContext) -> Result<(), HandlerError> {
///     ctx.check_cancelled()?; // anarchon's own error
///     let n: u32 = "42".parse()?; // any std error
///     if n != 42 {
///         return Err(HandlerError::msg(format!("unexpected {n}")));
///     }
///     Ok(())
/// }
/// # let _ = handler;
/// ```
pub struct HandlerError(BoxError);

impl HandlerError {
    /// An error carrying only a message.
    pub fn msg(message: impl std::fmt::Display) -> Self {
        HandlerError(message.to_string().into())
    }

    /// An error that is already boxed (a [`BoxError`]).
    pub fn from_boxed(error: BoxError) -> Self {
        HandlerError(error)
    }

    /// The error inside.
    pub fn into_inner(self) -> BoxError {
        self.0
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for HandlerError {
    fn from(error: E) -> Self {
        HandlerError(Box::new(error))
    }
}

impl std::fmt::Debug for HandlerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.0, f)
    }
}

impl std::fmt::Display for HandlerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl From<HandlerError> for BoxError {
    fn from(error: HandlerError) -> Self {
        error.0
    }
}

/// A length for messages: `"365 days"`, `"5m"`, `"1500 ms"`.
pub(crate) fn human_duration(d: Duration) -> String {
    human(d.as_millis())
}

/// A length in ms for messages: `"365 days"`, `"5m"`, `"1500 ms"`.
pub(crate) fn human(ms: u128) -> String {
    const DAY: u128 = 86_400_000;
    match ms {
        ms if ms >= DAY && ms % DAY == 0 => format!("{} days", ms / DAY),
        ms if ms >= 60_000 && ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        ms if ms >= 1_000 && ms % 1_000 == 0 => format!("{}s", ms / 1_000),
        ms => format!("{ms} ms"),
    }
}
