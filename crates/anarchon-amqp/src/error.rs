//! Errors of building or connecting a RabbitMQ store.

use anarchon_core::Error;

/// A RabbitMQ store could not be built or connected. Converts into
/// [`anarchon_core::Error`] (`InvalidOption` for bad input, `Unavailable` for a server that
/// cannot be used).
///
/// No message carries a password: URLs are redacted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AmqpError {
    /// The URL could not be parsed or has an unsupported scheme.
    #[error(
        "invalid AMQP URL {url:?}: {reason}; write it like amqp://user:password@host:5672/vhost"
    )]
    InvalidUrl {
        /// The URL, with any password redacted.
        url: String,
        /// Why it was refused.
        reason: String,
    },
    /// An option has a value that cannot work.
    #[error("invalid RabbitMQ store option `{option}`: {reason}")]
    InvalidOption {
        /// The option.
        option: &'static str,
        /// Why, and what to do.
        reason: String,
    },
    /// An option is outside the range the store can honour.
    #[error("RabbitMQ store option `{option}` = {value} is out of range: {allowed}")]
    OutOfRange {
        /// The option.
        option: &'static str,
        /// The value given.
        value: String,
        /// What is accepted.
        allowed: String,
    },
    /// The server could not be reached or refused the connection (refused, DNS,
    /// credentials, virtual host, timeout).
    #[error("cannot connect to RabbitMQ at {target}: {reason}")]
    Connect {
        /// The URL, with any password redacted.
        target: String,
        /// What went wrong and what to do (never the credentials).
        reason: String,
    },
    /// A read-only open ([`AmqpStore::open_read_only`](crate::AmqpStore::open_read_only))
    /// found no store under the prefix: its queue of known jobs does not exist. Nothing was
    /// declared.
    #[error(
        "nothing is recorded under the prefix {prefix:?} on RabbitMQ at {target}: the queue \
         {queue:?} does not exist; check the prefix and the virtual host (an anarchon \
         application declares it when it starts). Nothing was created"
    )]
    NotAStore {
        /// The URL, with any password redacted.
        target: String,
        /// The prefix looked under.
        prefix: String,
        /// The queue that is missing.
        queue: String,
    },
}

impl From<AmqpError> for Error {
    fn from(e: AmqpError) -> Self {
        match e {
            AmqpError::InvalidUrl { .. } => Error::invalid_option("url", e.to_string()),
            AmqpError::InvalidOption { option, .. } => Error::invalid_option(option, e.to_string()),
            AmqpError::OutOfRange {
                option,
                value,
                allowed,
            } => Error::OutOfRange {
                option,
                value,
                allowed,
            },
            AmqpError::NotAStore { .. } => Error::invalid_option("prefix", e.to_string()),
            AmqpError::Connect { ref target, .. } => Error::Unavailable {
                store: crate::STORE,
                target: target.clone(),
                source: e.to_string().into(),
            },
        }
    }
}
