//! Errors of building a Redis store (before any connection is made).

use anarchon_core::Error;

/// A Redis store could not be built from what was given. Converts into
/// [`anarchon_core::Error::InvalidOption`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisError {
    /// The URL could not be parsed or has an unsupported scheme.
    #[error(
        "invalid Redis URL {url:?}: {reason}; write it like redis://[:password@]host:6379/0 or rediss://host:6380"
    )]
    InvalidUrl {
        /// The URL, with any password redacted.
        url: String,
        /// Why it was refused.
        reason: String,
    },
    /// The key prefix would break the per-job hash tags.
    #[error("invalid key prefix {prefix:?}: {reason}")]
    InvalidPrefix {
        /// The prefix given.
        prefix: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// An option is outside the range the store can honour.
    #[error("Redis store option `{option}` = {value} is out of range: {allowed}")]
    OutOfRange {
        /// The option.
        option: &'static str,
        /// The value given.
        value: String,
        /// What is accepted.
        allowed: String,
    },
    /// An option has a value that cannot work.
    #[error("invalid Redis store option `{option}`: {reason}")]
    InvalidOption {
        /// The option.
        option: &'static str,
        /// Why, and what to do.
        reason: String,
    },
}

impl From<RedisError> for Error {
    fn from(e: RedisError) -> Self {
        if let RedisError::OutOfRange {
            option,
            value,
            allowed,
        } = e
        {
            return Error::OutOfRange {
                option,
                value,
                allowed,
            };
        }
        let option = match &e {
            RedisError::InvalidUrl { .. } => "url",
            RedisError::InvalidPrefix { .. } => "prefix",
            RedisError::InvalidOption { option, .. } | RedisError::OutOfRange { option, .. } => {
                option
            }
        };
        Error::invalid_option(option, e.to_string())
    }
}
