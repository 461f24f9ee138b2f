//! Options of the NATS store.

use std::time::Duration;

use crate::error::NatsError;

/// Where the store keeps its stream's messages (JetStream storage).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Storage {
    /// On disk (default): history and claims survive a server restart.
    #[default]
    File,
    /// In memory: lost when the server restarts (the stream is then created again).
    Memory,
}

/// How a NATS store names its stream and subjects, how long it remembers a claim and how
/// long it waits for the server.
///
/// ```
/// use std::time::Duration;
/// use anarchon_nats::NatsOptions;
/// let opts = NatsOptions::default()
///     .prefix("billing")
///     .duplicate_window(Duration::from_secs(600));
/// assert_eq!(opts.stream_name(), "billing");
/// ```
#[derive(Debug, Clone)]
pub struct NatsOptions {
    pub(crate) prefix: String,
    pub(crate) duplicate_window: Duration,
    pub(crate) storage: Storage,
    pub(crate) operation_timeout: Duration,
    pub(crate) connect_timeout: Duration,
}

impl Default for NatsOptions {
    fn default() -> Self {
        NatsOptions {
            prefix: "anarchon".into(),
            duplicate_window: Duration::from_secs(300),
            storage: Storage::File,
            operation_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
        }
    }
}

impl NatsOptions {
    /// The prefix (default `anarchon`): the stream's name and the first token of every
    /// subject the store uses (`anarchon.claim.<job>`, `anarchon.hist.<job>...`,
    /// `anarchon.job.<job>`). 1 to 64 ASCII letters, digits, `_` or `-`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The stream's name (the prefix).
    pub fn stream_name(&self) -> &str {
        &self.prefix
    }

    /// How long the stream remembers a claim's message id (default 5 min). A claim of the
    /// same slot after it would win again, so every job's `jitter_ms + max_late_ms` must be
    /// shorter; the scheduler checks that when a job is registered. An existing stream with
    /// another window is refused by `prepare`.
    pub fn duplicate_window(mut self, window: Duration) -> Self {
        self.duplicate_window = window;
        self
    }

    /// Where the stream keeps its messages (default [`Storage::File`]); used only when the
    /// store creates the stream.
    pub fn storage(mut self, storage: Storage) -> Self {
        self.storage = storage;
        self
    }

    /// Upper bound of every request to the server (default 5 s). A claim whose answer does
    /// not come back within it is reported as unknown and its slot skipped.
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// Upper bound of establishing the first connection (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    pub(crate) fn validate(&self) -> Result<(), NatsError> {
        let p = &self.prefix;
        if p.is_empty()
            || p.len() > 64
            || !p
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(NatsError::InvalidOption {
                option: "prefix",
                reason: format!(
                    "{p:?} must be 1 to 64 ASCII letters, digits, '_' or '-' (it names a stream and \
                     starts every subject)"
                ),
            });
        }
        if self.duplicate_window < Duration::from_secs(1) {
            return Err(NatsError::InvalidOption {
                option: "duplicate_window",
                reason: "must be at least 1 s: it is how long a claimed slot stays claimed".into(),
            });
        }
        if self.operation_timeout.is_zero() {
            return Err(NatsError::InvalidOption {
                option: "operation_timeout",
                reason: "must be longer than zero".into(),
            });
        }
        if self.connect_timeout.is_zero() {
            return Err(NatsError::InvalidOption {
                option: "connect_timeout",
                reason: "must be longer than zero".into(),
            });
        }
        Ok(())
    }
}
