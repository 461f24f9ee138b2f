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
    /// A server scheme followed by `:` but not `://` (`postgres:user:pw@host`).
    #[error(
        "the store {url:?} starts with {scheme:?} but not \"{scheme}://\": write it as a URL, \
         {scheme}://user:password@host:port/..."
    )]
    SchemeWithoutSlashes {
        /// The scheme as given.
        scheme: String,
        /// The value, redacted.
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
        /// The path, redacted (a mistyped `--store` may hold a password).
        path: String,
    },
    /// A SQLite file that is not an anarchon store (or not one with this table prefix).
    #[error(
        "{path:?} is not an anarchon store with the table prefix {table:?}: {reason}. The \
         command only reads: it changed nothing"
    )]
    NotAStore {
        /// The path, redacted.
        path: String,
        /// The `--table` prefix that was looked for.
        table: String,
        /// What is missing or wrong, and what to do.
        reason: String,
    },
    /// A Redis, RabbitMQ or NATS server that holds nothing under the `--prefix`.
    #[error(
        "{url} holds no anarchon {store} store under the prefix {prefix:?}: {reason}. The \
         command only reads: it created nothing"
    )]
    NothingStored {
        /// The URL, redacted.
        url: String,
        /// The store's name (`Redis`, `RabbitMQ`, `NATS`).
        store: &'static str,
        /// The prefix looked under.
        prefix: String,
        /// What is missing, and what to do (the prefixes that hold a store, where seen).
        reason: String,
    },
    /// A `--table` prefix no store could use.
    #[error(
        "invalid --table {table:?}: {reason}; a table prefix is 1 to 48 ASCII letters, digits \
         or '_', starting with a letter or '_'"
    )]
    InvalidTable {
        /// The prefix as given.
        table: String,
        /// Why it was refused.
        reason: &'static str,
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
            | CliError::SchemeWithoutSlashes { .. }
            | CliError::StoreDisabled { .. }
            | CliError::NoSqliteFile { .. }
            | CliError::NotAStore { .. }
            | CliError::NothingStored { .. }
            | CliError::InvalidTable { .. }
            | CliError::InvalidStore { .. }
            | CliError::InvalidJob { .. }
            | CliError::InvalidTime { .. }
            | CliError::InvalidSchedule { .. } => 2,
        }
    }
}

/// The secrets in a store URL: the password of its user info (with or without `://`, so
/// `postgres:user:pw@host` too), and the values of secret-looking `key=value` pairs, quoted
/// or not (`password='it is'`, `?password=x`, `token=...`). The last line of defence, so
/// that no error text shows them even if a driver repeats the URL.
pub(crate) fn secrets_of(url: &str) -> Vec<String> {
    let mut found = Vec::new();
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if let Some((userinfo, _)) = authority.rsplit_once('@')
        && let Some((_, password)) = userinfo.split_once(':')
    {
        found.push(password.to_owned());
    }
    // A `/` in the password hides the rest of the authority from the split above.
    if let Some(at) = rest.rfind('@') {
        let userinfo = &rest[..at];
        if let Some((_, password)) = userinfo.split_once(':') {
            found.push(password.to_owned());
        }
        if let Some((_, password)) = userinfo.rsplit_once(':') {
            found.push(password.to_owned());
        }
    }
    found.extend(pair_values(url));
    found.retain(|s| s.len() >= 2);
    // Longest first, so a secret that holds another one is replaced whole.
    found.sort_by_key(|s| std::cmp::Reverse(s.len()));
    found
}

/// The values of the `key=value` pairs of `text` whose key looks secret.
fn pair_values(text: &str) -> Vec<String> {
    const SECRET: [&str; 6] = ["pass", "pwd", "token", "secret", "key", "auth"];
    let mut values = Vec::new();
    let mut rest = text;
    while let Some(eq) = rest.find('=') {
        let before = rest[..eq].trim_end();
        let key_text = before
            .rsplit(|c: char| c.is_whitespace() || matches!(c, '?' | '&' | ';' | ','))
            .next()
            .unwrap_or("");
        // What precedes the key tells the list: `&`, `;` or `,` end a value of a query
        // string or a `Key=value;` list; a libpq value ends at whitespace only.
        let in_list = before[..before.len() - key_text.len()]
            .chars()
            .next_back()
            .is_some_and(|c| matches!(c, '?' | '&' | ';' | ','));
        let key = key_text.to_ascii_lowercase();
        let after = rest[eq + 1..].trim_start();
        let (value, next) = match after.chars().next() {
            Some(q @ ('\'' | '"')) => {
                let body = &after[1..];
                let mut end = body.len();
                let mut escaped = false;
                for (i, c) in body.char_indices() {
                    if escaped {
                        escaped = false;
                    } else if c == '\\' {
                        escaped = true;
                    } else if c == q {
                        end = i;
                        break;
                    }
                }
                (&body[..end], &body[(end + 1).min(body.len())..])
            }
            _ if in_list => {
                let end = after
                    .find(|c: char| c.is_whitespace() || matches!(c, '&' | ';' | ','))
                    .unwrap_or(after.len());
                (&after[..end], &after[end..])
            }
            // Unquoted in a libpq string: up to the next `key=`, as `redact_url` reads it
            // (`password=two words user=app`: a password typed with a space).
            _ => {
                let end = unquoted_end(after);
                (&after[..end], &after[end..])
            }
        };
        if SECRET.iter().any(|word| key.contains(word)) {
            values.push(value.to_owned());
            // The raw form too (`it\'s` as typed), when the value held escapes.
            values.push(value.replace("\\", ""));
            // And each longer word of a value with spaces, which a driver may echo alone.
            let words: Vec<&str> = value.split_whitespace().collect();
            if words.len() > 1 {
                values.extend(
                    words
                        .iter()
                        .filter(|w| w.len() >= 4)
                        .map(|w| (*w).to_owned()),
                );
            }
        }
        rest = next;
    }
    values
}

/// Where an unquoted libpq value at the start of `text` ends: at the first whitespace that a
/// `key=` follows or that ends the text, else at the end.
fn unquoted_end(text: &str) -> usize {
    for (i, c) in text.char_indices() {
        if c.is_whitespace() {
            let rest = text[i..].trim_start();
            let key = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
                .unwrap_or(rest.len());
            if rest.is_empty() || (key > 0 && rest[key..].trim_start().starts_with('=')) {
                return i;
            }
        }
    }
    text.len()
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
    fn scrub_hides_each_word_of_an_unquoted_password_with_spaces() {
        // libpq reads `topsecret` as a parameter name and its error repeats it alone.
        let url = "host=db password=hunter2 topsecret user=app";
        let text = "invalid connection option \"topsecret\" (hunter2 topsecret)";
        let out = scrub(text, Some(url));
        assert!(
            !out.contains("topsecret") && !out.contains("hunter2"),
            "{out}"
        );
        // In a query string `&` ends the value: the next parameter stays readable.
        let url = "postgres://db/x?password=pw123&sslmode=require";
        assert_eq!(
            scrub("pw123 sslmode=require", Some(url)),
            "*** sslmode=require"
        );
    }

    #[test]
    fn scrub_hides_passwords_of_every_store_shape() {
        for (url, secret) in [
            ("host=db user=app password=hunter22", "hunter22"),
            ("host=db password='two words' user=x", "two words"),
            ("host=db password=two words user=x", "two words"),
            ("host=db password = \"dq secret\"", "dq secret"),
            ("password='it\\'s here' host=db", "it\\'s here"),
            ("postgres:user:pw1234@host", "pw1234"),
            ("postgres://u:pa/ss@h:5/db", "pa/ss"),
            ("redis://h/?token=tok987", "tok987"),
        ] {
            let text = format!("error at {url}: {secret} was wrong");
            let out = scrub(&text, Some(url));
            assert!(!out.contains(secret), "{url}: {out}");
        }
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
