//! [`SchedulerBuilder`]: the scheduler's options and their defaults, checked when the
//! scheduler is built. The builder makes the state the handles and the driver share;
//! [`SchedulerBuilder::build`] itself lives beside the handle it returns (`handle.rs`), so
//! this file does not depend on the handle.

use std::marker::PhantomData;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::clock::Clock;
use super::convert::IntoTimezone;
use super::mode::{Leased, Mode};
use super::shared::{Backend, Config, DriverState, Shared};
use crate::context::DataSource;
use crate::error::{Error, Result};
use crate::options::{CatchUp, JobOptions, LeaseTiming, ms};
use crate::store::Overlap;

/// Builds a [`Scheduler`]; see [`Scheduler::leased`] and [`Scheduler::claim_only`].
///
/// Every option has a default; the job options set here are the defaults of every job, which
/// each [`JobBuilder`] may override. Lengths are `std::time::Duration`. Lease-only options
/// (`lease`, `heartbeat`, `overlap`, `max_attempts`, `catch_up*`, `history_ttl`) exist only
/// on the builder of a lease store. Nothing is checked before [`SchedulerBuilder::build`].
///
/// ```
/// use std::time::Duration;
/// use anarchon_core::{memory::MemoryStore, CatchUp, Scheduler};
///
/// let scheduler = Scheduler::leased(MemoryStore::new())
///     .instance_id("worker-1")
///     .lease(Duration::from_secs(30))
///     .heartbeat(Duration::from_secs(5))
///     .jitter(Duration::from_millis(500))
///     .max_late(Duration::from_secs(30))
///     .timeout(Duration::from_secs(600))
///     .timezone("Europe/Berlin")
///     .catch_up(CatchUp::Latest)
///     .store_timeout(Duration::from_secs(3))
///     .build()?;
/// assert_eq!(scheduler.instance_id(), "worker-1");
///
/// // A heartbeat too slow for its lease is refused, naming the option.
/// let err = Scheduler::leased(MemoryStore::new())
///     .lease(Duration::from_secs(10))
///     .heartbeat(Duration::from_secs(5))
///     .build()
///     .unwrap_err();
/// assert!(err.to_string().contains("heartbeat"), "{err}");
/// # Ok::<_, anarchon_core::Error>(())
/// ```
///
/// [`Scheduler`]: crate::Scheduler
/// [`Scheduler::leased`]: crate::Scheduler::leased
/// [`Scheduler::claim_only`]: crate::Scheduler::claim_only
/// [`JobBuilder`]: crate::JobBuilder
pub struct SchedulerBuilder<M> {
    backend: Backend,
    instance_id: Option<String>,
    timing: LeaseTiming,
    defaults: JobOptions,
    data: Option<DataSource>,
    store_timeout: Duration,
    stall_after: Duration,
    skew_threshold: Duration,
    clock: Clock,
    abort_grace: Duration,
    standby_delay: Duration,
    stop_timeout: Duration,
    event_capacity: usize,
    parent: Option<CancellationToken>,
    error: Option<Error>,
    _mode: PhantomData<M>,
}

impl<M: Mode> SchedulerBuilder<M> {
    pub(super) fn new(backend: Backend) -> Self {
        SchedulerBuilder {
            backend,
            instance_id: None,
            timing: LeaseTiming::default(),
            defaults: JobOptions::default(),
            data: None,
            store_timeout: Duration::from_secs(5),
            stall_after: Duration::from_secs(10),
            skew_threshold: Duration::from_secs(1),
            clock: Clock::System,
            abort_grace: Duration::from_secs(5),
            standby_delay: Duration::ZERO,
            stop_timeout: Duration::from_secs(30),
            event_capacity: 1024,
            parent: None,
            error: None,
            _mode: PhantomData,
        }
    }

    /// This instance's id (default `hostname-pid-random`): checked by `build()` as
    /// [`InstanceId::new`](crate::InstanceId::new) checks it (1–200 bytes, no control
    /// character). [B-32]
    pub fn instance_id(mut self, id: impl Into<String>) -> Self {
        self.instance_id = Some(id.into());
        self
    }
    /// Default jitter for every job: a random delay from zero to this after each slot before
    /// claiming, so instances do not all hit the store at once (default 2 s, at most
    /// `max_late`). [B-09]
    pub fn jitter(mut self, jitter: Duration) -> Self {
        self.defaults.jitter = jitter;
        self
    }
    /// Default for how late after its slot a claim may still start a run; a later one is
    /// skipped as `late` (default 60 s). [B-10]
    pub fn max_late(mut self, max_late: Duration) -> Self {
        self.defaults.max_late = max_late;
        self
    }
    /// Default number of runs kept per job (default 100). [B-37]
    pub fn history_size(mut self, n: u32) -> Self {
        self.defaults.history_size = n;
        self
    }
    /// Default timeout of a handler: its signal is cancelled and the attempt failed after
    /// this (default none). [B-21]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.defaults.timeout = Some(timeout);
        self
    }
    /// Default IANA timezone for cron jobs (`"Europe/Berlin"` or a [`chrono_tz::Tz`]); an
    /// unknown name is an error at [`SchedulerBuilder::build`]. [B-06]
    pub fn timezone(mut self, tz: impl IntoTimezone) -> Self {
        match tz.into_timezone() {
            Ok(tz) => self.defaults.timezone = Some(tz),
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
        self
    }
    /// Scheduler-level data (fixed or a function), merged into every run's
    /// [`JobContext::data`]. [B-31]
    ///
    /// [`JobContext::data`]: crate::JobContext::data
    pub fn data(mut self, data: impl Into<DataSource>) -> Self {
        self.data = Some(data.into());
        self
    }
    /// Bound on every store call (default 5 s, at least 50 ms); `start()`'s `prepare` (the
    /// schema and every job registered, maybe while other instances do the same) gets four
    /// times it, and `start()` refuses a timeout not longer than the store's measured round
    /// trip plus 10 ms (every claim would be late). [G-04]
    pub fn store_timeout(mut self, timeout: Duration) -> Self {
        self.store_timeout = timeout;
        self
    }
    /// The watchdog reports a driver loop that has not turned for this long (default
    /// 10 s, at least 200 ms). [G-04]
    pub fn stall_after(mut self, after: Duration) -> Self {
        self.stall_after = after;
        self
    }
    /// Report a clock skew between this instance and the store above this (default 1 s).
    /// [B-20]
    pub fn clock_skew_threshold(mut self, threshold: Duration) -> Self {
        self.skew_threshold = threshold;
        self
    }
    /// Where slots read the time (tests use [`Clock::tokio`]).
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }
    /// How long a handler may go on after its timeout cancelled it before its task is
    /// aborted (default 5 s). The attempt is recorded failed ("timed out") at the timeout
    /// itself; the grace only bounds how long the stray task may live.
    pub fn abort_grace(mut self, grace: Duration) -> Self {
        self.abort_grace = grace;
        self
    }
    /// Stops the scheduler when `token` is cancelled, as `stop()` with the
    /// [stop timeout](SchedulerBuilder::stop_timeout) would.
    ///
    /// ```
    /// use anarchon_core::{memory::MemoryStore, CancellationToken, Scheduler};
    ///
    /// let shutdown = CancellationToken::new();
    /// let scheduler = Scheduler::leased(MemoryStore::new())
    ///     .stop_on(shutdown.child_token())
    ///     .build()?;
    /// // ... later, from a signal handler: shutdown.cancel();
    /// # Ok::<_, anarchon_core::Error>(())
    /// ```
    pub fn stop_on(mut self, token: CancellationToken) -> Self {
        self.parent = Some(token);
        self
    }
    /// The stop timeout used when the scheduler stops by itself: when the token given to
    /// [`SchedulerBuilder::stop_on`] is cancelled or the last [`Scheduler`] handle is
    /// dropped (default 30 s).
    ///
    /// [`Scheduler`]: crate::Scheduler
    pub fn stop_timeout(mut self, timeout: Duration) -> Self {
        self.stop_timeout = timeout;
        self
    }
    /// How many events the broadcast channel of [`Scheduler::events`] keeps for a receiver
    /// that falls behind (default 1024; taken within 1 ..= 1,048,576, since the channel
    /// allocates its whole buffer up front). A slower receiver gets
    /// `RecvError::Lagged(n)`: it lost the `n` oldest events and goes on with the next. With
    /// thousands of jobs, raise it or keep the receiver quick; the scheduler never waits for
    /// a receiver.
    ///
    /// [`Scheduler::events`]: crate::Scheduler::events
    pub fn event_capacity(mut self, events: usize) -> Self {
        self.event_capacity = events.clamp(1, 1 << 20);
        self
    }
    /// Checks the options and makes the state the scheduler's handles and driver share
    /// (see [`SchedulerBuilder::build`]).
    pub(super) fn into_shared(self) -> Result<Arc<Shared>> {
        if let Some(e) = self.error {
            return Err(e);
        }
        self.defaults.validate()?;
        if M::LEASE {
            self.timing.validate()?;
        }
        // (option, value, lower bound and why); every one of them is at most a year.
        for (option, value, least) in [
            (
                "store_timeout",
                self.store_timeout,
                Some((
                    MIN_STORE_TIMEOUT,
                    "a claim must commit before the call's timeout less the round trip and 10 \
                     ms of margin, so a shorter timeout makes every claim late",
                )),
            ),
            (
                "stall_after",
                self.stall_after,
                Some((
                    MIN_STALL_AFTER,
                    "the driver turns at least every stall_after / 4 (at least every 50 ms), \
                     so a shorter one reports a healthy loop as stalled",
                )),
            ),
            // Zero (the default) claims every slot at once: no lower bound.
            ("standby_delay", self.standby_delay, None),
        ] {
            if let Some((least, why)) = least
                && value < least
            {
                return Err(Error::OutOfRange {
                    option,
                    value: format!("{value:?}"),
                    allowed: format!("at least {least:?}: {why}"),
                });
            }
            if value > crate::options::MAX_DURATION {
                return Err(Error::OutOfRange {
                    option,
                    value: format!("{} ms", value.as_millis()),
                    allowed: format!(
                        "at most {} ms (365 days)",
                        crate::options::MAX_DURATION.as_millis()
                    ),
                });
            }
        }
        let instance_id = match self.instance_id {
            Some(id) => crate::ids::InstanceId::new(id)?,
            None => default_instance_id(),
        };
        let shutdown = match &self.parent {
            Some(parent) => parent.child_token(),
            None => CancellationToken::new(),
        };
        Ok(Arc::new(Shared {
            shutdown,
            backend: self.backend,
            cfg: Config {
                instance_id: instance_id.into_arc(),
                timing: self.timing,
                defaults: self.defaults,
                fixed_data: super::handler_task::fixed_data(self.data.as_ref(), None),
                data: self.data.map(Arc::new),
                store_timeout: self.store_timeout,
                stall_after: self.stall_after,
                skew_threshold_ms: ms(self.skew_threshold.min(crate::options::MAX_DURATION)),
                clock: self.clock,
                abort_grace: self.abort_grace,
                standby_delay: self.standby_delay,
                default_stop_timeout: self.stop_timeout,
            },
            jobs: Mutex::default(),
            events: broadcast::channel(self.event_capacity).0,
            driver: Mutex::new(DriverState::Idle),
            health: Arc::default(),
        }))
    }
}

impl SchedulerBuilder<Leased> {
    /// Lease length (default 30 s): how long a silent owner keeps its run before a backup
    /// takes it over. [B-13]
    pub fn lease(mut self, lease: Duration) -> Self {
        self.timing.lease = lease;
        self
    }
    /// Heartbeat interval (default 5 s); `heartbeat * 2 < lease`. [B-13]
    pub fn heartbeat(mut self, heartbeat: Duration) -> Self {
        self.timing.heartbeat = heartbeat;
        self
    }
    /// How long after a slot this instance waits before it claims the slot when it lost the
    /// job's previous claim to another instance (default zero: every instance claims every
    /// slot at once, as jitter allows). [B-10]
    ///
    /// Every instance claims every slot and the store lets one win. Claiming in the same
    /// instant, the others queue behind the winner at the store (its lock, its thread) and
    /// the winner's start waits for them. With a delay, the instance that won a job's last
    /// slot claims the next one alone first; the others claim it this much later, are
    /// answered `taken` and back the run up as before. If the last winner is gone, one of
    /// them wins the slot this much late and claims first from then on. The delay is held to
    /// half the time to the job's next slot and half its `max_late`, so it never makes a
    /// claim late or meet the next slot. Under overload the standbys' claims wait behind the
    /// claims that may win; a standby whose claim could not be sent in time claims the next
    /// slot at once again, so the jobs of an instance that is gone still start.
    ///
    /// Measured (docs/performance.md, "Standbys"): 100 ms lowered the start lag of one job on
    /// three instances on Redis (p99 0.70-0.84 ms against 0.92-1.11) and SQLite, but
    /// 3 x 10,000 `every 1s` jobs started fewer slots in their second with it on PostgreSQL
    /// and SQLite once the store was saturated; hence off by default.
    ///
    /// ```
    /// use std::time::Duration;
    /// use anarchon_core::{memory::MemoryStore, Scheduler};
    ///
    /// let scheduler = Scheduler::leased(MemoryStore::new())
    ///     .standby_delay(Duration::from_millis(50))
    ///     .build()?;
    /// # Ok::<_, anarchon_core::Error>(())
    /// ```
    pub fn standby_delay(mut self, delay: Duration) -> Self {
        self.standby_delay = delay;
        self
    }
    /// Default overlap policy. [B-12]
    pub fn overlap(mut self, overlap: Overlap) -> Self {
        self.defaults.overlap = overlap;
        self
    }
    /// Default crash budget. [B-14]
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.defaults.max_attempts = n;
        self
    }
    /// Default catch-up window: how far back missed slots are looked for on start; zero
    /// turns catch-up off (default 5 min). [B-19]
    pub fn catch_up_window(mut self, window: Duration) -> Self {
        self.defaults.catch_up_window = window;
        self
    }
    /// Default catch-up policy. [G-05]
    pub fn catch_up(mut self, policy: CatchUp) -> Self {
        self.defaults.catch_up = policy;
        self
    }
    /// Default history TTL: finished runs older than this are pruned. [B-37]
    pub fn history_ttl(mut self, ttl: Duration) -> Self {
        self.defaults.history_ttl = Some(ttl);
        self
    }
}

/// The shortest `store_timeout`: a claim's deadline is the call's timeout less the round trip
/// and a 10 ms margin.
pub(crate) const MIN_STORE_TIMEOUT: Duration = Duration::from_millis(50);

/// The shortest `stall_after`: the driver turns at least every quarter of it but no more
/// often than every 50 ms, so below 4 × 50 ms a healthy loop would look stalled.
const MIN_STALL_AFTER: Duration = Duration::from_millis(200);

fn default_instance_id() -> crate::ids::InstanceId {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".into());
    // A hostname is at most 255 bytes of printable text; keep the id inside the rule.
    let host: String = host
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_HOST_CHARS)
        .collect();
    let id = format!(
        "{host}-{}-{:04x}",
        std::process::id(),
        rand::random::<u16>()
    );
    crate::ids::InstanceId::new(&id)
        .or_else(|_| crate::ids::InstanceId::new(format!("host-{}", std::process::id())))
        .expect("a short printable id")
}

/// The host part of the default instance id, in characters (at most 4 bytes each, so the
/// id stays under `MAX_INSTANCE_ID_LEN`).
const MAX_HOST_CHARS: usize = 40;
