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
    /// the job's hash tag: `anarchon:{nightly}:run:1764460800000`. At most 256 bytes, without
    /// `{`, `}` or control characters.
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
    /// no effect. From 1 ms to 1 h ([`MIN_TIMEOUT`](Self::MIN_TIMEOUT),
    /// [`MAX_TIMEOUT`](Self::MAX_TIMEOUT)).
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// Upper bound of establishing a connection (default 5 s), from 1 ms to 1 h.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Reconnect delays of connections the store opens itself: exponential from `min` to
    /// `max` (default 100 ms to 5 s), forever. Both from 1 ms to 1 h, `max` at least `min`.
    pub fn reconnect_delay(mut self, min: Duration, max: Duration) -> Self {
        self.reconnect_min = min;
        self.reconnect_max = max;
        self
    }

    /// Approximate length the claim streams of the claim-only strategies are trimmed to
    /// (default 1000 entries per job), from 1 to
    /// [`MAX_STREAM_MAX_LEN`](Self::MAX_STREAM_MAX_LEN).
    pub fn stream_max_len(mut self, len: u64) -> Self {
        self.stream_max_len = len;
        self
    }

    /// The longest key prefix: 256 bytes.
    pub const MAX_PREFIX_BYTES: usize = 256;
    /// The shortest [`command_timeout`](Self::command_timeout),
    /// [`connect_timeout`](Self::connect_timeout) and
    /// [`reconnect_delay`](Self::reconnect_delay): 1 ms (the scripts' deadlines count whole
    /// milliseconds).
    pub const MIN_TIMEOUT: Duration = Duration::from_millis(1);
    /// The longest [`command_timeout`](Self::command_timeout),
    /// [`connect_timeout`](Self::connect_timeout) and
    /// [`reconnect_delay`](Self::reconnect_delay): 1 h.
    pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);
    /// The largest [`stream_max_len`](Self::stream_max_len): `i64::MAX`, the largest
    /// `MAXLEN` Redis accepts.
    pub const MAX_STREAM_MAX_LEN: u64 = i64::MAX as u64;

    /// Checks every option against its bounds (the `MIN_*` and `MAX_*` constants); every
    /// constructor of the stores calls it first. An option out of range is a
    /// [`RedisError::OutOfRange`] naming it, its value and the range.
    pub fn validate(&self) -> Result<(), RedisError> {
        if self.prefix.contains(['{', '}']) {
            return Err(RedisError::InvalidPrefix {
                prefix: self.prefix.chars().take(80).collect(),
                reason: "it must not contain '{' or '}': anarchon adds a hash tag per job after it",
            });
        }
        if self.prefix.contains(char::is_control) {
            return Err(RedisError::InvalidPrefix {
                prefix: self.prefix.chars().take(80).collect(),
                reason: "it must not contain control characters: keys appear in logs and errors",
            });
        }
        if self.prefix.len() > Self::MAX_PREFIX_BYTES {
            return Err(RedisError::OutOfRange {
                option: "prefix",
                value: format!("{} bytes", self.prefix.len()),
                allowed: format!("at most {} bytes", Self::MAX_PREFIX_BYTES),
            });
        }
        within("command_timeout", self.command_timeout)?;
        within("connect_timeout", self.connect_timeout)?;
        within("reconnect_delay (min)", self.reconnect_min)?;
        within("reconnect_delay (max)", self.reconnect_max)?;
        if self.reconnect_max < self.reconnect_min {
            return Err(RedisError::OutOfRange {
                option: "reconnect_delay (max)",
                value: format!("{:?}", self.reconnect_max),
                allowed: format!(
                    "at least the min, {:?}, and at most {:?}",
                    self.reconnect_min,
                    Self::MAX_TIMEOUT
                ),
            });
        }
        if !(1..=Self::MAX_STREAM_MAX_LEN).contains(&self.stream_max_len) {
            return Err(RedisError::OutOfRange {
                option: "stream_max_len",
                value: self.stream_max_len.to_string(),
                allowed: format!("from 1 to {}", Self::MAX_STREAM_MAX_LEN),
            });
        }
        Ok(())
    }
}

/// Refuses a duration outside `MIN_TIMEOUT..=MAX_TIMEOUT`, naming the option, the value
/// and the range.
fn within(option: &'static str, value: Duration) -> Result<(), RedisError> {
    let (min, max) = (RedisOptions::MIN_TIMEOUT, RedisOptions::MAX_TIMEOUT);
    if (min..=max).contains(&value) {
        return Ok(());
    }
    Err(RedisError::OutOfRange {
        option,
        value: format!("{value:?}"),
        allowed: format!("from {min:?} to {max:?}"),
    })
}
