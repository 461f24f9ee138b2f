//! Options of the Redis stores.

use std::time::Duration;

use crate::error::RedisError;

/// How a Redis store names its keys and bounds its commands.
///
/// ```
/// use std::time::Duration;
/// use anarchon_redis::RedisOptions;
/// let opts = RedisOptions::default()
///     .prefix("billing:")
///     .command_timeout(Duration::from_secs(1));
/// assert_eq!(opts.key_prefix(), "billing:");
/// ```
#[derive(Debug, Clone)]
pub struct RedisOptions {
    pub(crate) prefix: String,
    pub(crate) command_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) reconnect_min: Duration,
    pub(crate) reconnect_max: Duration,
    pub(crate) stream_max_len: u64,
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            prefix: "anarchon:".into(),
            command_timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(5),
            reconnect_min: Duration::from_millis(100),
            reconnect_max: Duration::from_secs(5),
            stream_max_len: 1000,
        }
    }
}

impl RedisOptions {
    /// The key prefix (default `anarchon:`). Every key anarchon writes starts with it, then
    /// the job's hash tag: `anarchon:{nightly}:run:1764460800000`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The prefix in use.
    pub fn key_prefix(&self) -> &str {
        &self.prefix
    }

    /// Upper bound of every command (default 2 s). Writes that reach the server after it
    /// are refused by the scripts themselves, so a command replayed after a reconnect has
    /// no effect.
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// Upper bound of establishing a connection (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Reconnect delays of connections the store opens itself: exponential from `min` to
    /// `max` (default 100 ms to 5 s), forever.
    pub fn reconnect_delay(mut self, min: Duration, max: Duration) -> Self {
        self.reconnect_min = min;
        self.reconnect_max = max;
        self
    }

    /// Approximate length the claim streams of the claim-only strategies are trimmed to
    /// (default 1000 entries per job).
    pub fn stream_max_len(mut self, len: u64) -> Self {
        self.stream_max_len = len;
        self
    }

    pub(crate) fn validate(&self) -> Result<(), RedisError> {
        if self.prefix.contains(['{', '}']) {
            return Err(RedisError::InvalidPrefix {
                prefix: self.prefix.clone(),
                reason: "it must not contain '{' or '}': anarchon adds a hash tag per job after it",
            });
        }
        if self.command_timeout.is_zero() {
            return Err(RedisError::InvalidOption {
                option: "command_timeout",
                reason: "must be longer than zero".into(),
            });
        }
        if self.connect_timeout.is_zero() {
            return Err(RedisError::InvalidOption {
                option: "connect_timeout",
                reason: "must be longer than zero".into(),
            });
        }
        if self.reconnect_min.is_zero() || self.reconnect_max < self.reconnect_min {
            return Err(RedisError::InvalidOption {
                option: "reconnect_delay",
                reason: "min must be above zero and max at least min".into(),
            });
        }
        if self.stream_max_len == 0 {
            return Err(RedisError::InvalidOption {
                option: "stream_max_len",
                reason: "must be at least 1".into(),
            });
        }
        Ok(())
    }
}
