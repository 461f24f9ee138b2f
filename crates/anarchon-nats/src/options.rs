//! Options of the NATS store.

use std::time::Duration;

use anarchon_core::claim_only;

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
    /// another window is refused by `prepare`. From 1 s to 365 days
    /// ([`MIN_DUPLICATE_WINDOW`](Self::MIN_DUPLICATE_WINDOW),
    /// [`MAX_DUPLICATE_WINDOW`](Self::MAX_DUPLICATE_WINDOW)).
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
    /// not come back within it is reported as unknown and its slot skipped. From 1 ms to 1 h
    /// ([`MIN_TIMEOUT`](Self::MIN_TIMEOUT), [`MAX_TIMEOUT`](Self::MAX_TIMEOUT)).
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// Upper bound of establishing the first connection (default 5 s), from 1 ms to 1 h.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The shortest [`duplicate_window`](Self::duplicate_window): 1 s.
    pub const MIN_DUPLICATE_WINDOW: Duration = Duration::from_secs(1);
    /// The longest [`duplicate_window`](Self::duplicate_window): 365 days (the longest
    /// `jitter_ms` or `max_late_ms` of a job; the server keeps every claim's id that long).
    pub const MAX_DUPLICATE_WINDOW: Duration = Duration::from_secs(365 * 86_400);
    /// The shortest [`operation_timeout`](Self::operation_timeout) and
    /// [`connect_timeout`](Self::connect_timeout): 1 ms.
    pub const MIN_TIMEOUT: Duration = Duration::from_millis(1);
    /// The longest [`operation_timeout`](Self::operation_timeout) and
    /// [`connect_timeout`](Self::connect_timeout): 1 h.
    pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

    /// Checks every option against its bounds (the `MIN_*` and `MAX_*` constants); the
    /// constructors of [`NatsStore`](crate::NatsStore) call it first. An option out of range
    /// is a [`NatsError::OutOfRange`] naming it, its value and the range.
    pub fn validate(&self) -> Result<(), NatsError> {
        if let Err(reason) = claim_only::check_prefix(&self.prefix) {
            return Err(NatsError::InvalidOption {
                option: "prefix",
                reason: format!("{reason} (it names a stream and starts every subject)"),
            });
        }
        within(
            "duplicate_window",
            self.duplicate_window,
            Self::MIN_DUPLICATE_WINDOW,
            Self::MAX_DUPLICATE_WINDOW,
        )?;
        within(
            "operation_timeout",
            self.operation_timeout,
            Self::MIN_TIMEOUT,
            Self::MAX_TIMEOUT,
        )?;
        within(
            "connect_timeout",
            self.connect_timeout,
            Self::MIN_TIMEOUT,
            Self::MAX_TIMEOUT,
        )?;
        Ok(())
    }
}

/// Refuses a duration outside `min..=max`, naming the option, the value and the range.
fn within(
    option: &'static str,
    value: Duration,
    min: Duration,
    max: Duration,
) -> Result<(), NatsError> {
    claim_only::check_within(value, min, max).map_err(|allowed| NatsError::OutOfRange {
        option,
        value: format!("{value:?}"),
        allowed,
    })
}
