//! Options of the RabbitMQ store.

use std::time::Duration;

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
    /// another one is refused by the server.
    pub fn slot_ttl(mut self, ttl: Duration) -> Self {
        self.slot_ttl = ttl;
        self
    }

    /// Upper bound of the bytes each job's history stream keeps on the server (default
    /// 8 MiB, `x-max-length-bytes`). History is kept by count (`history_size`); this bound
    /// only keeps the stream from growing without end, and should hold a few times
    /// `history_size` records.
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
    /// not come back within it is reported as unknown and its slot skipped.
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// Upper bound of establishing a connection (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    pub(crate) fn validate(&self) -> Result<(), AmqpError> {
        let p = &self.prefix;
        if p.is_empty()
            || p.len() > 64
            || !p
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(AmqpError::InvalidOption {
                option: "prefix",
                reason: format!("{p:?} must be 1 to 64 ASCII letters, digits, '_' or '-'"),
            });
        }
        if self.slot_ttl < Duration::from_secs(1) {
            return Err(AmqpError::InvalidOption {
                option: "slot_ttl",
                reason: "must be at least 1 s: it is how long a claimed slot stays claimed".into(),
            });
        }
        if self.history_max_bytes < 64 * 1024 {
            return Err(AmqpError::InvalidOption {
                option: "history_max_bytes",
                reason: "must be at least 64 KiB".into(),
            });
        }
        if self.operation_timeout.is_zero() || self.connect_timeout.is_zero() {
            return Err(AmqpError::InvalidOption {
                option: if self.operation_timeout.is_zero() {
                    "operation_timeout"
                } else {
                    "connect_timeout"
                },
                reason: "must be longer than zero".into(),
            });
        }
        Ok(())
    }
}
