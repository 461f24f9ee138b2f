//! Errors of building or connecting a NATS store.

use anarchon_core::Error;

/// A NATS store could not be built or connected. Converts into [`anarchon_core::Error`]
/// (`InvalidOption` for bad input, `Unavailable` for a server that cannot be used).
///
/// No message carries a password or token: URLs are redacted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NatsError {
    /// The URL could not be parsed or has an unsupported scheme.
    #[error(
        "invalid NATS URL {url:?}: {reason}; write it like nats://[user:password@]host:4222 or tls://host:4222"
    )]
    InvalidUrl {
        /// The URL, with any password redacted.
        url: String,
        /// Why it was refused.
        reason: String,
    },
    /// An option has a value that cannot work.
    #[error("invalid NATS store option `{option}`: {reason}")]
    InvalidOption {
        /// The option.
        option: &'static str,
        /// Why, and what to do.
        reason: String,
    },
    /// An option is outside the range the store can honour.
    #[error("NATS store option `{option}` = {value} is out of range: {allowed}")]
    OutOfRange {
        /// The option.
        option: &'static str,
        /// The value given.
        value: String,
        /// What is accepted.
        allowed: String,
    },
    /// The server could not be reached or refused the connection (refused, DNS, TLS,
    /// credentials, timeout).
    #[error("cannot connect to NATS at {target}: {reason}")]
    Connect {
        /// The URL, with any password redacted.
        target: String,
        /// What went wrong and what to do (never the credentials).
        reason: String,
    },
    /// A read-only open ([`NatsStore::open_read_only`](crate::NatsStore::open_read_only))
    /// found no stream of the prefix's name: nothing is recorded under it. Nothing was
    /// created.
    #[error(
        "nothing is recorded under the prefix {stream:?} on NATS at {target}: there is no \
         JetStream stream {stream:?}; check the prefix and the account (an anarchon \
         application creates the stream when it starts). Nothing was created"
    )]
    NotAStore {
        /// The URL, with any password or token redacted.
        target: String,
        /// The stream (the prefix) looked for.
        stream: String,
    },
}

impl From<NatsError> for Error {
    fn from(e: NatsError) -> Self {
        match e {
            NatsError::InvalidUrl { .. } => Error::invalid_option("url", e.to_string()),
            NatsError::InvalidOption { option, .. } => Error::invalid_option(option, e.to_string()),
            NatsError::OutOfRange {
                option,
                value,
                allowed,
            } => Error::OutOfRange {
                option,
                value,
                allowed,
            },
            NatsError::NotAStore { .. } => Error::invalid_option("prefix", e.to_string()),
            NatsError::Connect { ref target, .. } => Error::Unavailable {
                store: crate::STORE,
                target: target.clone(),
                source: e.to_string().into(),
            },
        }
    }
}
