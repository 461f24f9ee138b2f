//! The command's one error type: each message names the input and says what to do, and each
//! error maps to an exit code (2 for bad input, 1 for a store that failed).

use std::time::Duration;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum CliError {
    /// Neither `--store` nor `ANARCHON_STORE` was given.
    #[error(
        "no store given: pass --store URL or set ANARCHON_STORE (a SQLite file path or \
         sqlite://PATH, postgres://, redis://, rediss://, libsql://, http(s)://, amqp://, nats://)"
    )]
    MissingStore,
    /// The URL's scheme names no store.
    #[error(
        "unknown store scheme {scheme:?} in {url}: use a SQLite file path or sqlite://PATH, \
         postgres://, postgresql://, redis://, rediss://, libsql://, http://, https://, \
         amqp://, amqps://, nats:// or tls://"
    )]
    UnknownScheme {
        /// The scheme as given.
        scheme: String,
        /// The URL, redacted.
        url: String,
    },
    /// The store's cargo feature was left out of this build.
    #[error(
        "{url} is a {store} store, which this build of anarchon leaves out: rebuild \
         anarchon-cli with the cargo feature `{feature}` (on by default)"
    )]
    StoreDisabled {
        /// The URL, redacted.
        url: String,
        /// The store's name.
        store: &'static str,
        /// The cargo feature that brings it in.
        feature: &'static str,
    },
    /// A SQLite path that is no file.
    #[error(
        "no SQLite database file at {path:?}: give the path of an existing anarchon database, \
         or a URL with a scheme (postgres://, redis://, libsql:// ...) for a server"
    )]
    NoSqliteFile {
        /// The path as given.
        path: String,
    },
    /// The store refused the URL or an option (`--table`, `--schema`, `--prefix`).
    #[error("the store URL {url} or an option cannot be used: {source}")]
    InvalidStore {
        /// The URL, redacted.
        url: String,
        /// What the store said.
        #[source]
        source: anarchon_core::Error,
    },
    /// A job name that no store could hold.
    #[error(
        "invalid job name {input:?}: use 1 to 128 ASCII letters, digits, '_' or '-' \
         (`anarchon jobs` lists the job names in the store)"
    )]
    InvalidJob {
        /// The name as given.
        input: String,
    },
    /// A slot or time that is neither RFC 3339 nor epoch milliseconds.
    #[error(
        "invalid {what} {input:?}: {reason}; give an RFC 3339 time with an offset such as \
         2026-11-30T18:00:00Z, or epoch milliseconds such as 1796061600000"
    )]
    InvalidTime {
        /// Which argument (`slot`, `--from`).
        what: &'static str,
        /// The input as given.
        input: String,
        /// Why it was refused.
        reason: String,
    },
    /// A schedule that is neither an interval nor a cron expression, or an unknown timezone.
    #[error("invalid schedule {input:?}: {source}")]
    InvalidSchedule {
        /// The schedule as given.
        input: String,
        /// What the slot parser said (it names the field or the timezone).
        #[source]
        source: anarchon_core::Error,
    },
    /// A store call failed.
    #[error(
        "{action} on the store {url} failed: {source} (check the URL, --schema / --table / \
         --prefix, and that the server is up)"
    )]
    Store {
        /// The URL, redacted.
        url: String,
        /// What the command asked of the store.
        action: &'static str,
        /// The store's error.
        #[source]
        source: anarchon_core::Error,
    },
    /// A store call took longer than `--timeout`.
    #[error(
        "{action} on the store {url} took longer than {after:?}: check that the server is \
         reachable, or raise --timeout"
    )]
    Timeout {
        /// The URL, redacted.
        url: String,
        /// What the command asked of the store.
        action: &'static str,
        /// The bound that passed.
        after: Duration,
    },
    /// Stdout could not be written.
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
    /// A value could not be turned into JSON.
    #[error("cannot write the output as JSON: {0}")]
    Json(#[from] serde_json::Error),
}

impl CliError {
    /// The process exit code: 2 for bad input, 1 for a store or output that failed.
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            CliError::Store { .. }
            | CliError::Timeout { .. }
            | CliError::Output(_)
            | CliError::Json(_) => 1,
            CliError::MissingStore
            | CliError::UnknownScheme { .. }
            | CliError::StoreDisabled { .. }
            | CliError::NoSqliteFile { .. }
            | CliError::InvalidStore { .. }
            | CliError::InvalidJob { .. }
            | CliError::InvalidTime { .. }
            | CliError::InvalidSchedule { .. } => 2,
        }
    }
}

/// The secrets in a store URL (the password of its user info, `password=` values): the
/// last line of defence, so that no error text shows them even if a driver repeats the URL.
pub(crate) fn secrets_of(url: &str) -> Vec<String> {
    let mut found = Vec::new();
    if let Some(rest) = url.split_once("://").map(|(_, rest)| rest) {
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        if let Some((userinfo, _)) = authority.rsplit_once('@')
            && let Some((_, password)) = userinfo.split_once(':')
        {
            found.push(password.to_owned());
        }
        // A `/` in the password hides the rest of the authority from the split above.
        if let Some(at) = rest.rfind('@')
            && let Some((_, password)) = rest[..at].split_once(':')
        {
            found.push(password.to_owned());
        }
    }
    for pair in url.split(['?', '&', ' ']) {
        if let Some(value) = pair.strip_prefix("password=") {
            found.push(value.trim_matches('\'').to_owned());
        }
    }
    found.retain(|s| s.len() >= 2);
    found
}

/// `text` with every secret of `url` replaced by `***`.
pub(crate) fn scrub(text: &str, url: Option<&str>) -> String {
    let mut text = text.to_owned();
    for secret in url.map(secrets_of).unwrap_or_default() {
        text = text.replace(&secret, "***");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrub_hides_passwords_of_urls() {
        let url = "postgres://app:hunter2@db:5432/x?password=other1";
        let text = format!("failed at {url} with hunter2 and other1");
        let out = scrub(&text, Some(url));
        assert!(!out.contains("hunter2") && !out.contains("other1"), "{out}");
        assert_eq!(
            scrub("redis://:s3cret@h", Some("redis://:s3cret@h")),
            "redis://:***@h"
        );
        assert_eq!(scrub("plain", Some("jobs.db")), "plain");
    }

    #[test]
    fn exit_codes_split_input_from_store_errors() {
        assert_eq!(CliError::MissingStore.exit_code(), 2);
        let timeout = CliError::Timeout {
            url: "redis://h".into(),
            action: "connect",
            after: Duration::from_secs(1),
        };
        assert_eq!(timeout.exit_code(), 1);
    }
}
