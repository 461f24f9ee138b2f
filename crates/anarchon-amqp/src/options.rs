//! Options of the RabbitMQ store.

use std::time::Duration;

use anarchon_core::claim_only;

use crate::error::AmqpError;

/// How a RabbitMQ store names its queues, how long a gate queue lives, how much history it
/// keeps on disk and how long it waits for the server.
///
/// ```
/// use std::time::Duration;
/// use anarchon_amqp::AmqpOptions;
/// let opts = AmqpOptions::default()
///     .prefix("billing")
///     .slot_ttl(Duration::from_secs(600));
/// assert_eq!(opts.queue_prefix(), "billing");
/// ```
#[derive(Debug, Clone)]
pub struct AmqpOptions {
    pub(crate) prefix: String,
    pub(crate) slot_ttl: Duration,
    pub(crate) history_max_bytes: u64,
    pub(crate) durable_gates: bool,
    pub(crate) operation_timeout: Duration,
    pub(crate) connect_timeout: Duration,
}

impl Default for AmqpOptions {
    fn default() -> Self {
        AmqpOptions {
            prefix: "anarchon".into(),
            slot_ttl: Duration::from_secs(300),
            history_max_bytes: 8 * 1024 * 1024,
            durable_gates: false,
            operation_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
        }
    }
}

impl AmqpOptions {
    /// The prefix of every queue the store declares (default `anarchon`):
    /// `anarchon.gate.<job>.<slot>`, `anarchon.history.<job>`, `anarchon.jobs`. 1 to 64
    /// ASCII letters, digits, `_` or `-`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The prefix in use.
    pub fn queue_prefix(&self) -> &str {
        &self.prefix
    }

    /// How long a run's gate queue lives after its last use (`x-expires`, default 5 min). A
    /// claim of the same slot after it would win again, so every job's
    /// `jitter_ms + max_late_ms` must be shorter; the scheduler checks that when a job is
    /// registered. All instances must use the same value: a gate queue declared with
    /// another one is refused by the server. From [`MIN_SLOT_TTL`](Self::MIN_SLOT_TTL) (1 s)
    /// to [`MAX_SLOT_TTL`](Self::MAX_SLOT_TTL) (about 49.7 days), and longer than
    /// [`operation_timeout`](Self::operation_timeout).
    pub fn slot_ttl(mut self, ttl: Duration) -> Self {
        self.slot_ttl = ttl;
        self
    }

    /// Upper bound of the bytes each job's history stream keeps on the server (default
    /// 8 MiB, `x-max-length-bytes`). History is kept by count (`history_size`); this bound
    /// only keeps the stream from growing without end, and should hold a few times
    /// `history_size` records. From 64 KiB to 1 TiB
    /// ([`MIN_HISTORY_MAX_BYTES`](Self::MIN_HISTORY_MAX_BYTES),
    /// [`MAX_HISTORY_MAX_BYTES`](Self::MAX_HISTORY_MAX_BYTES)).
    pub fn history_max_bytes(mut self, bytes: u64) -> Self {
        self.history_max_bytes = bytes;
        self
    }

    /// Whether gate queues and their message survive a broker restart (default `false`).
    ///
    /// Transient gate queues live in the broker's memory only: thousands of them cost no
    /// file handles or disk writes. Their price: a slot claimed shortly before a broker
    /// restart can be claimed a second time after it, if an instance claims it again within
    /// its `jitter_ms + max_late_ms`. Durable gate queues close that gap, but each one holds
    /// files open on a classic-queue broker, and a broker with a low open-file limit (1024
    /// is common) runs out of them with a job every second or two. Every instance must use
    /// the same value.
    pub fn durable_gates(mut self, durable: bool) -> Self {
        self.durable_gates = durable;
        self
    }

    /// Upper bound of every request to the server (default 5 s). A claim whose confirm does
    /// not come back within it is reported as unknown and its slot skipped. From 1 ms to 1 h
    /// ([`MIN_TIMEOUT`](Self::MIN_TIMEOUT), [`MAX_TIMEOUT`](Self::MAX_TIMEOUT)).
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// Upper bound of establishing a connection (default 5 s), from 1 ms to 1 h.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The shortest [`slot_ttl`](Self::slot_ttl): 1 s.
    pub const MIN_SLOT_TTL: Duration = Duration::from_secs(1);
    /// The longest [`slot_ttl`](Self::slot_ttl): 4 294 967 295 ms (about 49.7 days), the
    /// largest `x-expires` RabbitMQ accepts (an Erlang timer).
    pub const MAX_SLOT_TTL: Duration = Duration::from_millis(u32::MAX as u64);
    /// The smallest [`history_max_bytes`](Self::history_max_bytes): 64 KiB.
    pub const MIN_HISTORY_MAX_BYTES: u64 = 64 * 1024;
    /// The largest [`history_max_bytes`](Self::history_max_bytes): 1 TiB (RabbitMQ reads
    /// `x-max-length-bytes` as a signed 64-bit number; a history stream never needs more).
    pub const MAX_HISTORY_MAX_BYTES: u64 = 1 << 40;
    /// The shortest [`operation_timeout`](Self::operation_timeout) and
    /// [`connect_timeout`](Self::connect_timeout): 1 ms.
    pub const MIN_TIMEOUT: Duration = Duration::from_millis(1);
    /// The longest [`operation_timeout`](Self::operation_timeout) and
    /// [`connect_timeout`](Self::connect_timeout): 1 h.
    pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

    /// Checks every option against its bounds (the `MIN_*` and `MAX_*` constants); the
    /// constructors of [`AmqpStore`](crate::AmqpStore) call it first. An option out of
    /// range is an [`AmqpError::OutOfRange`] naming it, its value and the range.
    pub fn validate(&self) -> Result<(), AmqpError> {
        if let Err(reason) = claim_only::check_prefix(&self.prefix) {
            return Err(AmqpError::InvalidOption {
                option: "prefix",
                reason,
            });
        }
        within(
            "slot_ttl",
            self.slot_ttl,
            Self::MIN_SLOT_TTL,
            Self::MAX_SLOT_TTL,
        )?;
        if !(Self::MIN_HISTORY_MAX_BYTES..=Self::MAX_HISTORY_MAX_BYTES)
            .contains(&self.history_max_bytes)
        {
            return Err(AmqpError::OutOfRange {
                option: "history_max_bytes",
                value: self.history_max_bytes.to_string(),
                allowed: format!(
                    "from {} (64 KiB) to {} (1 TiB) bytes",
                    Self::MIN_HISTORY_MAX_BYTES,
                    Self::MAX_HISTORY_MAX_BYTES
                ),
            });
        }
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
        // A claim declares the gate queue and then publishes to it, within
        // `operation_timeout`; a queue that expired in between would be declared afresh by
        // the next claimer, and both would win.
        if self.slot_ttl <= self.operation_timeout {
            return Err(AmqpError::OutOfRange {
                option: "slot_ttl",
                value: format!("{:?}", self.slot_ttl),
                allowed: format!(
                    "longer than operation_timeout ({:?}): a run's gate queue must outlive a \
                     claim",
                    self.operation_timeout
                ),
            });
        }
        Ok(())
    }
}

/// Refuses a duration outside `min..=max`, naming the option, the value and the range.
fn within(
    option: &'static str,
    value: Duration,
    min: Duration,
    max: Duration,
) -> Result<(), AmqpError> {
    claim_only::check_within(value, min, max).map_err(|allowed| AmqpError::OutOfRange {
        option,
        value: format!("{value:?}"),
        allowed,
    })
}
