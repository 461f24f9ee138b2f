//! The dashboard's errors and how each becomes an HTTP answer.

use std::time::Duration;

use axum::http::StatusCode;

/// What can go wrong while answering a dashboard request.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A store call failed.
    #[error(
        "the store failed to answer `{call}`: {source}; check that the store is reachable \
         (GET /readyz tells)"
    )]
    Store {
        /// The store call (`history`, `known_jobs`, `unfinished_runs`, `now`).
        call: &'static str,
        /// The store's error.
        #[source]
        source: anarchon_core::Error,
    },
    /// A store call did not answer in time.
    #[error(
        "the store did not answer `{call}` within {after:?}; check the store, or raise \
         `Dashboard::store_timeout` if it is merely slow"
    )]
    Timeout {
        /// The store call.
        call: &'static str,
        /// The timeout it ran into.
        after: Duration,
    },
    /// The job name in the path breaks the naming rule.
    #[error(
        "{input:?} is not a job name (1-128 ASCII letters, digits, `_` and `-`); check the URL"
    )]
    InvalidJobName {
        /// The name as given.
        input: String,
    },
    /// No instance registered or ran a job of this name.
    #[error(
        "no job named `{job}` is known to the store or to this dashboard's scheduler; check \
         the name (the jobs page lists every known job)"
    )]
    UnknownJob {
        /// The job.
        job: String,
    },
    /// Run-now asked for a job that the dashboard's scheduler does not hold.
    #[error(
        "job `{job}` is not registered on the scheduler this dashboard was given, so it cannot \
         run it now: run-now runs a job on the scheduler that holds its handler (pass that \
         scheduler to `Dashboard::scheduler`)"
    )]
    NotRunnable {
        /// The job.
        job: String,
    },
    /// A run-now form was posted from another site.
    #[error(
        "run-now refused: the request comes from origin {origin:?}, not from this dashboard's \
         host {host:?}; post the form from the dashboard's own page"
    )]
    CrossOrigin {
        /// The `Origin` header.
        origin: String,
        /// The `Host` header.
        host: String,
    },
    /// A run-now request named a host the dashboard does not answer run-now for: the guard
    /// against DNS rebinding (a page on another site whose name resolves to this server).
    #[error(
        "run-now refused: the request was sent to the host {host:?}, which is not one of this \
         dashboard's allowed hosts (by default localhost and IP addresses); if that is the \
         dashboard's own name, allow it with `Dashboard::allowed_hosts`"
    )]
    HostNotAllowed {
        /// The `Host` header (shortened), empty when missing.
        host: String,
    },
    /// A query parameter that cannot be read, or is out of range.
    #[error("the query parameter `{parameter}` = {value:?} cannot be used: {reason}")]
    InvalidQuery {
        /// The parameter's name.
        parameter: &'static str,
        /// The value as given (shortened).
        value: String,
        /// What it takes.
        reason: &'static str,
    },
    /// A [`Dashboard`](crate::Dashboard) option outside the range it can honour (returned
    /// by the builder, never by a request).
    #[error("dashboard option `{option}` = {value} is out of range: {allowed}")]
    OutOfRange {
        /// The option.
        option: &'static str,
        /// The value given.
        value: String,
        /// What is accepted, and why.
        allowed: String,
    },
    /// A path or query string that cannot be read (not UTF-8 after percent-decoding).
    #[error("the {part} cannot be read: {reason}; check the URL")]
    Unreadable {
        /// `path` or `query string`.
        part: &'static str,
        /// Why (axum's words, shortened).
        reason: String,
    },
}

/// At most `max` characters of `text` (request input echoed in an error), with `…` when cut.
pub(crate) fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// The dashboard's `Result`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The HTTP status this error answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            Error::Store { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Error::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            Error::InvalidJobName { .. }
            | Error::InvalidQuery { .. }
            | Error::Unreadable { .. } => StatusCode::BAD_REQUEST,
            Error::UnknownJob { .. } | Error::NotRunnable { .. } => StatusCode::NOT_FOUND,
            Error::CrossOrigin { .. } | Error::HostNotAllowed { .. } => StatusCode::FORBIDDEN,
            Error::OutOfRange { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// Bounds a store call by `after`, naming the call in both errors.
pub(crate) async fn bounded<T>(
    call: &'static str,
    after: Duration,
    fut: impl Future<Output = anarchon_core::Result<T>>,
) -> Result<T> {
    match tokio::time::timeout(after, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(source)) => Err(Error::Store { call, source }),
        Err(_) => Err(Error::Timeout { call, after }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_slow_store_call_becomes_a_timeout_naming_the_call() {
        let err = bounded("history", Duration::from_secs(1), async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok(())
        })
        .await
        .unwrap_err();
        assert!(matches!(
            err,
            Error::Timeout {
                call: "history",
                ..
            }
        ));
        assert_eq!(err.status(), StatusCode::GATEWAY_TIMEOUT);
        assert!(err.to_string().contains("store_timeout"), "{err}");
    }
}
