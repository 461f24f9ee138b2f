//! The scheduler runtime: registration, `start`/`stop`, and the driver task that turns the
//! pure parts (slot math, options) and a store into runs. [B-11..B-21, B-30..B-39]
//!
//! One driver task per scheduler owns every timer (a queue for all jobs, not a task per job),
//! the heartbeat of all held leases, the backups' watch and takeovers. Store calls run in
//! short tasks bounded by `store_timeout_ms` and report back to the driver, so a hung
//! connection never stops the loop; a watchdog thread reports a loop that stops turning.

mod core;
#[cfg(feature = "sim")]
pub(crate) use self::core::sim;
mod driver;
mod exec;
mod handler_task;
mod run;
mod telemetry;
mod wake;
mod watch;
mod watchdog;

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::future::BoxFuture;
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use chrono::{DateTime, Utc};

use crate::context::{Data, DataSource, JobContext};
use crate::error::{BoxError, Error, HandlerError, Result};
use crate::event::Event;
use crate::history::{HistoryRecord, RunRecord, to_datetime};
use crate::options::{CatchUp, JobConfig, JobKind, JobOptions, LeaseTiming, ms};
use crate::slot::{Schedule, parse_interval};
use crate::store::{ClaimStore, EpochMs, HistoryStore, JobName, LeaseStore, Overlap};

/// Marker: the scheduler runs on a lease store (takeover, handover, catch-up ...).
#[derive(Debug, Clone, Copy)]
pub struct Leased;
/// Marker: the scheduler runs on a claim-only store (one winner per slot, nothing more).
#[derive(Debug, Clone, Copy)]
pub struct ClaimOnly;

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Leased {}
    impl Sealed for super::ClaimOnly {}
}

/// The kind of store a scheduler runs on, fixed by its constructor. Lease-only options
/// exist only on `Leased` builders. [B-22]
pub trait Mode: sealed::Sealed + Send + Sync + 'static {
    /// True for lease stores.
    const LEASE: bool;
}
impl Mode for Leased {
    const LEASE: bool = true;
}
impl Mode for ClaimOnly {
    const LEASE: bool = false;
}

/// Markers for the kind of job a [`JobBuilder`] builds.
pub mod kind {
    /// `every`.
    #[derive(Debug)]
    pub struct Every;
    /// `cron`.
    #[derive(Debug)]
    pub struct Cron;
    /// `at`.
    #[derive(Debug)]
    pub struct At;
}

#[derive(Clone)]
pub(crate) enum Backend {
    Lease(Arc<dyn LeaseStore>),
    Claim(Arc<dyn ClaimStore>),
}

impl Backend {
    pub(crate) fn history(&self) -> &dyn HistoryStore {
        match self {
            Backend::Lease(s) => s.as_ref(),
            Backend::Claim(s) => s.as_ref(),
        }
    }
}

/// Where the scheduler reads the time for slots. [B-20]
#[derive(Debug, Clone, Copy)]
pub enum Clock {
    /// The system clock (keep instances NTP-synced).
    System,
    /// The system time at creation, then tokio's clock: for tests under
    /// `tokio::time::pause()`.
    Tokio {
        /// Epoch ms at the anchor.
        anchor_ms: EpochMs,
        /// Tokio's instant at the anchor.
        anchor: tokio::time::Instant,
    },
    /// The system clock shifted by `offset_ms` (positive: ahead), to show what a skewed
    /// instance does (the clock-skew scenario).
    SystemShifted {
        /// Added to the system clock, ms.
        offset_ms: i64,
    },
}

impl Clock {
    /// A tokio-driven clock starting at the system time now.
    pub fn tokio() -> Self {
        Clock::Tokio {
            anchor_ms: system_ms(),
            anchor: tokio::time::Instant::now(),
        }
    }

    /// Epoch ms now.
    pub fn now_ms(&self) -> EpochMs {
        match self {
            Clock::System => system_ms(),
            Clock::Tokio { anchor_ms, anchor } => {
                anchor_ms + anchor.elapsed().as_millis() as EpochMs
            }
            Clock::SystemShifted { offset_ms } => system_ms().saturating_add(*offset_ms),
        }
    }
}

impl Clock {
    /// Epoch µs now (timers are armed from this, so a slot's timer is not up to 1 ms late
    /// for a clock read in whole ms).
    pub(crate) fn now_micros(&self) -> i64 {
        match self {
            Clock::System => system_micros(),
            Clock::Tokio { anchor_ms, anchor } => anchor_ms
                .saturating_mul(1_000)
                .saturating_add(anchor.elapsed().as_micros() as i64),
            Clock::SystemShifted { offset_ms } => {
                system_micros().saturating_add(offset_ms.saturating_mul(1_000))
            }
        }
    }
}

fn system_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

fn system_ms() -> EpochMs {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as EpochMs)
        .unwrap_or(0)
}

pub(crate) type Handler =
    Arc<dyn Fn(JobContext) -> BoxFuture<'static, std::result::Result<(), BoxError>> + Send + Sync>;

pub(crate) struct Config {
    pub(crate) instance_id: Arc<str>,
    pub(crate) timing: LeaseTiming,
    pub(crate) defaults: JobOptions,
    pub(crate) data: Option<DataSource>,
    pub(crate) store_timeout: Duration,
    pub(crate) stall_after: Duration,
    pub(crate) skew_threshold_ms: u64,
    pub(crate) clock: Clock,
    /// How long a handler may outlive its timeout before its task is aborted.
    pub(crate) abort_grace: Duration,
    /// The stop timeout when the scheduler stops by itself (last handle dropped, parent
    /// token cancelled).
    pub(crate) default_stop_timeout: Duration,
}

pub(crate) struct JobDef {
    pub(crate) name: JobName,
    pub(crate) kind: JobKind,
    pub(crate) schedule: Schedule,
    pub(crate) opts: JobOptions,
    pub(crate) handler: Handler,
    pub(crate) data: Option<DataSource>,
}

pub(crate) enum Command {
    Add(Arc<JobDef>),
    Remove(JobName),
    RunNow {
        job: Arc<JobDef>,
        data: Option<Data>,
        reply: oneshot::Sender<Result<RunRecord>>,
    },
    Stop {
        timeout: Duration,
        reply: oneshot::Sender<()>,
    },
}

enum DriverState {
    Idle,
    Running {
        tx: mpsc::UnboundedSender<Command>,
        handle: tokio::task::JoinHandle<()>,
    },
    Stopped,
}

pub(crate) struct Shared {
    /// Cancelled when the last handle is dropped or the parent token is cancelled.
    shutdown: CancellationToken,
    pub(crate) backend: Backend,
    pub(crate) cfg: Config,
    jobs: Mutex<BTreeMap<JobName, Arc<JobDef>>>,
    pub(crate) events: broadcast::Sender<Event>,
    driver: Mutex<DriverState>,
    pub(crate) health: Arc<HealthState>,
}

/// Liveness figures the driver updates and the watchdog reads.
#[derive(Debug, Default)]
pub(crate) struct HealthState {
    /// Milliseconds since the process-wide monotonic origin when the driver last turned.
    pub(crate) last_turn_ms: AtomicU64,
    pub(crate) stalled: std::sync::atomic::AtomicBool,
    pub(crate) leases_held: AtomicU64,
    pub(crate) last_error: Mutex<Option<String>>,
    /// Set after consecutive failed store calls, cleared by the next answer.
    pub(crate) store_unreachable: std::sync::atomic::AtomicBool,
    /// Slots not claimed in time (see [`Health::slots_late`]).
    pub(crate) slots_late: AtomicU64,
}

/// The driver ended by itself (stopped through the shutdown token): later `stop()` calls
/// and `health()` see a stopped scheduler.
pub(crate) fn driver_ended(shared: &Shared) {
    let mut d = shared.driver.lock().unwrap_or_else(|e| e.into_inner());
    if matches!(*d, DriverState::Running { .. }) {
        *d = DriverState::Stopped;
    }
}

/// Cancels the scheduler's shutdown token when the last [`Scheduler`] handle is dropped.
struct HandleGuard {
    shutdown: CancellationToken,
}

impl Drop for HandleGuard {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// A snapshot of the scheduler's health, for a health check endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    /// `start` ran and `stop` did not.
    pub running: bool,
    /// The watchdog saw the driver loop stop turning.
    pub stalled: bool,
    /// Time since the driver loop last turned.
    pub driver_idle: Duration,
    /// Runs this instance owns under a lease now (running, or writing their result).
    pub leases_held: u64,
    /// The last store error since the store last answered, if any (cleared when a store
    /// call succeeds again).
    pub last_error: Option<String>,
    /// False after several consecutive store calls failed; true again at the next answer.
    pub store_reachable: bool,
    /// Slots this instance could not claim in time since it was built: its timer fired after
    /// a newer slot was already due (an overloaded or paused process), or the store judged
    /// the claim late. Each is also reported as a `skip` event with reason `late`.
    pub slots_late: u64,
}

impl Health {
    /// Running, not stalled, and the store answers.
    pub fn is_healthy(&self) -> bool {
        self.running && !self.stalled && self.store_reachable
    }
}

/// A registered job, as [`Scheduler::jobs`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobInfo {
    /// The name.
    pub name: JobName,
    /// `every`, `cron` or `at`.
    pub kind: JobKind,
    /// The schedule as a person would write it: `every 10s`, `cron 0 9 * * * (Europe/Berlin)`,
    /// `at 2027-01-01T00:00:00Z`.
    pub schedule: String,
    /// The next slot after now, if any.
    pub next_run: Option<DateTime<Utc>>,
}

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
    stop_timeout: Duration,
    event_capacity: usize,
    parent: Option<CancellationToken>,
    error: Option<Error>,
    _mode: PhantomData<M>,
}

impl<M: Mode> SchedulerBuilder<M> {
    fn new(backend: Backend) -> Self {
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
            stop_timeout: Duration::from_secs(30),
            event_capacity: 1024,
            parent: None,
            error: None,
            _mode: PhantomData,
        }
    }

    /// This instance's id (default `hostname-pid-random`). [B-32]
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
    pub fn data(mut self, data: impl Into<DataSource>) -> Self {
        self.data = Some(data.into());
        self
    }
    /// Bound on every store call (default 5 s); `start()`'s `prepare` (the schema and every
    /// job registered, maybe while other instances do the same) gets four times it. [G-04]
    pub fn store_timeout(mut self, timeout: Duration) -> Self {
        self.store_timeout = timeout;
        self
    }
    /// The watchdog reports a driver loop that has not turned for this long (default
    /// 10 s). [G-04]
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
    pub fn event_capacity(mut self, events: usize) -> Self {
        self.event_capacity = events.clamp(1, 1 << 20);
        self
    }

    /// Validates the options and builds the scheduler.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfRange`] or [`Error::InvalidOption`] naming the first bad option,
    /// [`Error::UnknownTimezone`].
    pub fn build(self) -> Result<Scheduler<M>> {
        if let Some(e) = self.error {
            return Err(e);
        }
        self.defaults.validate()?;
        if M::LEASE {
            self.timing.validate()?;
        }
        for (option, value) in [
            ("store_timeout", self.store_timeout),
            ("stall_after", self.stall_after),
        ] {
            if value < Duration::from_millis(1) {
                return Err(Error::invalid_option(option, "must be at least 1 ms"));
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
            Some(id) if id.is_empty() || id.len() > 200 => {
                return Err(Error::invalid_option(
                    "instance_id",
                    "must be 1 to 200 characters",
                ));
            }
            Some(id) => id,
            None => default_instance_id(),
        };
        let shutdown = match &self.parent {
            Some(parent) => parent.child_token(),
            None => CancellationToken::new(),
        };
        Ok(Scheduler {
            guard: Arc::new(HandleGuard {
                shutdown: shutdown.clone(),
            }),
            shared: Arc::new(Shared {
                shutdown,
                backend: self.backend,
                cfg: Config {
                    instance_id: instance_id.into(),
                    timing: self.timing,
                    defaults: self.defaults,
                    data: self.data,
                    store_timeout: self.store_timeout,
                    stall_after: self.stall_after,
                    skew_threshold_ms: ms(self.skew_threshold.min(crate::options::MAX_DURATION)),
                    clock: self.clock,
                    abort_grace: self.abort_grace,
                    default_stop_timeout: self.stop_timeout,
                },
                jobs: Mutex::default(),
                events: broadcast::channel(self.event_capacity).0,
                driver: Mutex::new(DriverState::Idle),
                health: Arc::default(),
            }),
            _mode: PhantomData,
        })
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

fn default_instance_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".into());
    format!(
        "{host}-{}-{:04x}",
        std::process::id(),
        rand::random::<u16>()
    )
}

/// The scheduler: register jobs, `start`, `stop`. Clone it freely (a handle).
///
/// ```
/// use std::time::Duration;
/// use anarchon_core::{memory::MemoryStore, Scheduler};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let scheduler = Scheduler::leased(MemoryStore::new())
///     .lease(Duration::from_secs(30))
///     .heartbeat(Duration::from_secs(5))
///     .build()?;
/// scheduler.every("sync", "10s").jitter(Duration::from_millis(500)).handler(|ctx| async move {
///     ctx.check_cancelled()?;
///     println!("slot {} attempt {}", ctx.slot, ctx.attempt);
///     Ok(())
/// })?;
/// scheduler.start().await?;
/// scheduler.stop(Duration::from_secs(30)).await?;
/// # Ok::<_, anarchon_core::Error>(())
/// # }).unwrap();
/// ```
///
/// Dropping the last handle stops the scheduler in the background, as `stop()` with the
/// builder's [stop timeout](SchedulerBuilder::stop_timeout) would (runs are handed over);
/// call `stop()` to wait for that.
pub struct Scheduler<M = Leased> {
    shared: Arc<Shared>,
    guard: Arc<HandleGuard>,
    _mode: PhantomData<M>,
}

impl<M> Clone for Scheduler<M> {
    fn clone(&self) -> Self {
        Scheduler {
            shared: self.shared.clone(),
            guard: self.guard.clone(),
            _mode: PhantomData,
        }
    }
}

impl<M> std::fmt::Debug for Scheduler<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("instance_id", &self.shared.cfg.instance_id)
            .finish_non_exhaustive()
    }
}

impl Scheduler<Leased> {
    /// A scheduler on a lease store (SQLite, libSQL, PostgreSQL, Redis `lease`, the memory
    /// store): takeover by a backup, handover on stop, overlap check, catch-up.
    ///
    /// ```
    /// use anarchon_core::{memory::MemoryStore, Scheduler};
    ///
    /// let scheduler = Scheduler::leased(MemoryStore::new()).build()?;
    /// # let _ = scheduler;
    /// # Ok::<_, anarchon_core::Error>(())
    /// ```
    pub fn leased<S: LeaseStore>(store: S) -> SchedulerBuilder<Leased> {
        SchedulerBuilder::new(Backend::Lease(Arc::new(store)))
    }

    /// A scheduler on a shared lease store handle.
    pub fn leased_shared(store: Arc<dyn LeaseStore>) -> SchedulerBuilder<Leased> {
        SchedulerBuilder::new(Backend::Lease(store))
    }
}

impl Scheduler<ClaimOnly> {
    /// A scheduler on a claim-only store (RabbitMQ, NATS, Redis naive strategies): one
    /// winner per slot and nothing more; the lease-only options do not exist on its builder.
    ///
    /// ```
    /// use anarchon_core::{memory::MemoryStore, Scheduler};
    ///
    /// let scheduler = Scheduler::claim_only(MemoryStore::new()).build()?;
    /// scheduler.every("ping", "30s").handler(|_ctx| async { Ok(()) })?;
    /// # Ok::<_, anarchon_core::Error>(())
    /// ```
    pub fn claim_only<S: ClaimStore>(store: S) -> SchedulerBuilder<ClaimOnly> {
        SchedulerBuilder::new(Backend::Claim(Arc::new(store)))
    }

    /// A scheduler on a shared claim-only store handle.
    pub fn claim_only_shared(store: Arc<dyn ClaimStore>) -> SchedulerBuilder<ClaimOnly> {
        SchedulerBuilder::new(Backend::Claim(store))
    }
}

/// An interval: `"10s"`, a `Duration`, or milliseconds. [B-01]
pub trait IntoInterval {
    /// The interval.
    fn into_interval(self) -> Result<Duration>;
}
impl IntoInterval for &str {
    fn into_interval(self) -> Result<Duration> {
        parse_interval(self)
    }
}
impl IntoInterval for String {
    fn into_interval(self) -> Result<Duration> {
        parse_interval(&self)
    }
}
impl IntoInterval for Duration {
    fn into_interval(self) -> Result<Duration> {
        if self.is_zero() {
            return Err(Error::InvalidInterval {
                input: format!("{self:?}"),
                reason: "must be positive".into(),
            });
        }
        Ok(self)
    }
}
impl IntoInterval for u64 {
    fn into_interval(self) -> Result<Duration> {
        crate::slot::interval_from_ms(self)
    }
}

/// An instant for `at`: RFC 3339 text, a `SystemTime`, or epoch milliseconds (`i64`). [B-03]
pub trait IntoAt {
    /// The schedule.
    fn into_at(self) -> Result<Schedule>;
}
impl IntoAt for &str {
    fn into_at(self) -> Result<Schedule> {
        Schedule::at_str(self)
    }
}
impl IntoAt for SystemTime {
    fn into_at(self) -> Result<Schedule> {
        Schedule::at_system_time(self)
    }
}
impl IntoAt for i64 {
    fn into_at(self) -> Result<Schedule> {
        Ok(Schedule::at_ms(self))
    }
}
impl IntoAt for chrono::DateTime<chrono::Utc> {
    fn into_at(self) -> Result<Schedule> {
        Ok(Schedule::at_ms(self.timestamp_millis()))
    }
}

/// A timezone for cron jobs: an IANA name (`"Europe/Berlin"`, checked once, when the
/// builder is used) or a [`chrono_tz::Tz`].
pub trait IntoTimezone {
    /// The timezone.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTimezone`] naming the input.
    fn into_timezone(self) -> Result<chrono_tz::Tz>;
}
impl IntoTimezone for chrono_tz::Tz {
    fn into_timezone(self) -> Result<chrono_tz::Tz> {
        Ok(self)
    }
}
impl IntoTimezone for &str {
    fn into_timezone(self) -> Result<chrono_tz::Tz> {
        self.parse().map_err(|_| Error::UnknownTimezone {
            name: self.to_owned(),
        })
    }
}
impl IntoTimezone for String {
    fn into_timezone(self) -> Result<chrono_tz::Tz> {
        self.as_str().into_timezone()
    }
}

enum Spec {
    Every(Duration),
    Cron(String),
    At(Schedule),
}

/// Registers one job: options, data, then [`JobBuilder::handler`]. Methods exist only where
/// they apply: `overlap` not on `at` jobs, lease options only on lease stores, `offset`
/// only on `every`, `timezone` only on `cron`. [B-03, B-22, B-39]
///
/// Built by [`Scheduler::every`], [`Scheduler::cron`] and [`Scheduler::at`]; nothing is
/// registered until `.handler(...)`, which reports every bad input as an error naming it.
///
/// ```
/// use std::time::Duration;
/// use anarchon_core::{memory::MemoryStore, CatchUp, Overlap, Scheduler};
///
/// let scheduler = Scheduler::leased(MemoryStore::new()).build()?;
/// scheduler
///     .cron("report", "0 3 * * *")
///     .timezone("Europe/Berlin")
///     .timeout(Duration::from_secs(600))
///     .overlap(Overlap::Skip)
///     .catch_up(CatchUp::Latest)
///     .handler(|ctx| async move {
///         println!("report for {}", ctx.slot);
///         Ok(())
///     })?;
/// let err = scheduler.every("bad", "10s").jitter(Duration::MAX).handler(|_| async { Ok(()) });
/// assert!(err.is_err());
/// # Ok::<_, anarchon_core::Error>(())
/// ```
#[must_use = "a job is registered only by `.handler(...)`"]
pub struct JobBuilder<'s, M, K> {
    scheduler: &'s Scheduler<M>,
    name: String,
    spec: Result<Spec>,
    opts: JobOptions,
    config: Option<JobConfig>,
    data: Option<DataSource>,
    error: Option<Error>,
    _kind: PhantomData<K>,
}

impl<M: Mode, K> JobBuilder<'_, M, K> {
    /// Jitter for this job: a random delay from zero to this after each slot before
    /// claiming (at most `max_late`). [B-09]
    pub fn jitter(mut self, jitter: Duration) -> Self {
        self.opts.jitter = jitter;
        self
    }
    /// How late after its slot a claim may still start a run of this job. [B-10]
    pub fn max_late(mut self, max_late: Duration) -> Self {
        self.opts.max_late = max_late;
        self
    }
    /// Runs of this job kept in the history. [B-37]
    pub fn history_size(mut self, n: u32) -> Self {
        self.opts.history_size = n;
        self
    }
    /// Timeout of this job's handler: its signal is cancelled and the attempt failed after
    /// this. [B-21]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.opts.timeout = Some(timeout);
        self
    }
    /// Job-level data (fixed or a function). [B-31]
    pub fn data(mut self, data: impl Into<DataSource>) -> Self {
        self.data = Some(data.into());
        self
    }
    /// Options by name from configuration; those that do not apply are an error at
    /// [`JobBuilder::handler`]. [B-22]
    pub fn config(mut self, config: JobConfig) -> Self {
        self.config = Some(config);
        self
    }

    fn kind(&self) -> JobKind {
        match self.spec {
            Ok(Spec::Every(_)) => JobKind::Every,
            Ok(Spec::Cron(_)) => JobKind::Cron,
            Ok(Spec::At(_)) | Err(_) => JobKind::At,
        }
    }

    /// Registers the job with its handler: an async function of a [`JobContext`] returning
    /// `Result<(), HandlerError>`. Any error converts into [`HandlerError`] with `?`, so a
    /// closure `|ctx| async move { ...; Ok(()) }` needs no type annotation. Errors name the
    /// bad input. Jobs may be added while the scheduler runs. [B-04, B-30]
    ///
    /// # Errors
    ///
    /// The first bad input: the name, the interval, cron expression or `at` time, an option
    /// out of range ([`Error::OutOfRange`]), one that does not apply
    /// ([`Error::InvalidOption`]), an `at` time in the past ([`Error::AtInThePast`]), a
    /// name already registered ([`Error::DuplicateJob`]), a stopped scheduler
    /// ([`Error::State`]).
    pub fn handler<F, Fut>(self, f: F) -> Result<()>
    where
        F: Fn(JobContext) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = std::result::Result<(), HandlerError>> + Send + 'static,
    {
        if let Some(e) = self.error {
            return Err(e);
        }
        let name = JobName::new(&self.name)?;
        let kind = self.kind();
        let mut opts = self.opts;
        if let Some(cfg) = &self.config {
            cfg.validate(M::LEASE, self.scheduler.store_kind(), kind)?;
            cfg.apply(&mut opts);
        }
        opts.validate()?;
        if let Backend::Claim(store) = &self.scheduler.shared.backend {
            crate::store::check_claim_window(store.as_ref(), opts.jitter_ms(), opts.max_late_ms())?;
        }
        let schedule = match self.spec? {
            Spec::Every(interval) => Schedule::every(interval, opts.offset_ms())?,
            Spec::Cron(expr) => Schedule::cron(&expr, opts.timezone.map(|tz| tz.name()))?,
            Spec::At(s) => s,
        };
        opts.check_schedule(
            &schedule,
            self.scheduler.shared.cfg.clock.now_ms(),
            M::LEASE,
        )?;
        let handler: Handler = Arc::new(move |ctx| {
            let fut = f(ctx);
            Box::pin(async move { fut.await.map_err(BoxError::from) })
        });
        let def = Arc::new(JobDef {
            name: name.clone(),
            kind,
            schedule,
            opts,
            handler,
            data: self.data,
        });
        self.scheduler.add(def)
    }
}

impl<M: Mode> JobBuilder<'_, M, kind::Every> {
    /// Grid offset: slots at `k * interval + offset` (taken modulo the interval, so an
    /// offset of `interval - 5s` lays the grid 5 s early). [B-05]
    pub fn offset(mut self, offset: Duration) -> Self {
        self.opts.offset = offset;
        self
    }
}

impl<M: Mode> JobBuilder<'_, M, kind::At> {
    /// Registers the job even when its time lies too far in the past to run (default
    /// false: such a time is [`Error::AtInThePast`]), for registration code that runs
    /// again after the job ran. [B-03]
    pub fn allow_past(mut self, allow: bool) -> Self {
        self.opts.allow_past = allow;
        self
    }
}

impl<M: Mode> JobBuilder<'_, M, kind::Cron> {
    /// IANA timezone of the expression (`"Europe/Berlin"` or a [`chrono_tz::Tz`]); an
    /// unknown name is an error at [`JobBuilder::handler`]. [B-06]
    pub fn timezone(mut self, tz: impl IntoTimezone) -> Self {
        match tz.into_timezone() {
            Ok(tz) => self.opts.timezone = Some(tz),
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
        self
    }
}

impl<K> JobBuilder<'_, Leased, K> {
    /// Crash budget of a run. [B-14]
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.opts.max_attempts = n;
        self
    }
    /// Catch-up window on start: how far back missed slots are looked for; zero turns
    /// catch-up off. [B-19]
    pub fn catch_up_window(mut self, window: Duration) -> Self {
        self.opts.catch_up_window = window;
        self
    }
    /// Catch-up policy. [G-05]
    pub fn catch_up(mut self, policy: CatchUp) -> Self {
        self.opts.catch_up = policy;
        self
    }
    /// History TTL: finished runs older than this are pruned. [B-37]
    pub fn history_ttl(mut self, ttl: Duration) -> Self {
        self.opts.history_ttl = Some(ttl);
        self
    }
}

impl JobBuilder<'_, Leased, kind::Every> {
    /// Overlap policy. [B-12]
    pub fn overlap(mut self, overlap: Overlap) -> Self {
        self.opts.overlap = overlap;
        self
    }
}

impl JobBuilder<'_, Leased, kind::Cron> {
    /// Overlap policy. [B-12]
    pub fn overlap(mut self, overlap: Overlap) -> Self {
        self.opts.overlap = overlap;
        self
    }
}

impl<M: Mode> Scheduler<M> {
    fn builder<K>(&self, name: &str, spec: Result<Spec>) -> JobBuilder<'_, M, K> {
        JobBuilder {
            scheduler: self,
            name: name.to_owned(),
            spec,
            opts: self.shared.cfg.defaults.clone(),
            config: None,
            data: None,
            error: None,
            _kind: PhantomData,
        }
    }

    /// Registers a job on the epoch grid: `every("sync", "10s")`. The interval is text
    /// (`"250ms"`, `"10s"`, `"1h30m"`), a `Duration` or milliseconds. [B-01, B-05]
    ///
    /// ```
    /// use std::time::Duration;
    /// use anarchon_core::{memory::MemoryStore, Scheduler};
    ///
    /// let scheduler = Scheduler::leased(MemoryStore::new()).build()?;
    /// scheduler.every("sync", "10s").handler(|_ctx| async { Ok(()) })?;
    /// scheduler
    ///     .every("poll", Duration::from_millis(1500))
    ///     .offset(Duration::from_millis(500)) // slots at ...00.5, ...02.0, ...03.5
    ///     .handler(|_ctx| async { Ok(()) })?;
    /// assert!(scheduler.every("bad", "10").handler(|_ctx| async { Ok(()) }).is_err());
    /// # Ok::<_, anarchon_core::Error>(())
    /// ```
    pub fn every(&self, name: &str, interval: impl IntoInterval) -> JobBuilder<'_, M, kind::Every> {
        self.builder(name, interval.into_interval().map(Spec::Every))
    }

    /// Registers a cron job: `cron("report", "0 3 * * *")`: five fields, or six with
    /// seconds first, in the job's timezone (default the scheduler's, else UTC). [B-02, B-06]
    ///
    /// ```
    /// use anarchon_core::{memory::MemoryStore, Error, Scheduler};
    ///
    /// let scheduler = Scheduler::leased(MemoryStore::new()).build()?;
    /// scheduler
    ///     .cron("report", "0 3 * * 1-5")
    ///     .timezone("America/New_York")
    ///     .handler(|_ctx| async { Ok(()) })?;
    /// let err = scheduler.cron("bad", "61 * * * *").handler(|_ctx| async { Ok(()) }).unwrap_err();
    /// assert!(matches!(err, Error::InvalidCron { .. }), "{err}");
    /// # Ok::<_, anarchon_core::Error>(())
    /// ```
    pub fn cron(&self, name: &str, expression: &str) -> JobBuilder<'_, M, kind::Cron> {
        self.builder(name, Ok(Spec::Cron(expression.to_owned())))
    }

    /// Registers a job that runs once: `at("migrate", "2026-12-01T09:00:00Z")`. The time is
    /// RFC 3339 text, a `chrono::DateTime<Utc>`, a `SystemTime` or epoch milliseconds; one
    /// too far in the past is refused unless [`JobBuilder::allow_past`]. [B-03]
    ///
    /// ```
    /// use std::time::Duration;
    /// use anarchon_core::{chrono::Utc, memory::MemoryStore, Error, Scheduler};
    ///
    /// let scheduler = Scheduler::leased(MemoryStore::new()).build()?;
    /// scheduler
    ///     .at("migrate", Utc::now() + Duration::from_secs(60))
    ///     .handler(|_ctx| async { Ok(()) })?;
    /// let err = scheduler.at("old", "2001-01-01T00:00:00Z").handler(|_ctx| async { Ok(()) });
    /// assert!(matches!(err, Err(Error::AtInThePast { .. })));
    /// # Ok::<_, anarchon_core::Error>(())
    /// ```
    pub fn at(&self, name: &str, when: impl IntoAt) -> JobBuilder<'_, M, kind::At> {
        self.builder(name, when.into_at().map(Spec::At))
    }

    fn store_kind(&self) -> &'static str {
        self.shared.backend.history().kind()
    }

    fn add(&self, def: Arc<JobDef>) -> Result<()> {
        if matches!(*self.driver(), DriverState::Stopped) {
            return Err(Error::State {
                state: "stopped",
                hint: "a stopped scheduler runs no job: register jobs before stop(), or build a new scheduler",
            });
        }
        let mut jobs = self.shared.jobs.lock().unwrap_or_else(|e| e.into_inner());
        if jobs.contains_key(&def.name) {
            return Err(Error::DuplicateJob {
                name: def.name.to_string(),
            });
        }
        jobs.insert(def.name.clone(), def.clone());
        drop(jobs);
        if let DriverState::Running { tx, .. } = &*self.driver() {
            let _ = tx.send(Command::Add(def));
        }
        Ok(())
    }

    fn driver(&self) -> std::sync::MutexGuard<'_, DriverState> {
        self.shared.driver.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn job(&self, name: &str) -> Result<Arc<JobDef>> {
        let name = JobName::new(name)?;
        self.shared
            .jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&name)
            .cloned()
            .ok_or_else(|| Error::UnknownJob {
                name: name.to_string(),
            })
    }

    /// This instance's id.
    pub fn instance_id(&self) -> &str {
        &self.shared.cfg.instance_id
    }

    /// Subscribes to the events of this instance (a `tokio::sync::broadcast` receiver: a
    /// receiver that falls more than [`SchedulerBuilder::event_capacity`] (1024) events
    /// behind loses the oldest and gets `RecvError::Lagged`). See [`Event`] for
    /// an example. [B-38]
    pub fn events(&self) -> broadcast::Receiver<Event> {
        self.shared.events.subscribe()
    }

    /// Checks the store (connection, version, schema), then schedules the jobs and, in the
    /// background, handles orphans and catch-up. [B-19, B-33]
    ///
    /// # Errors
    ///
    /// The store's error (unreachable, too old, a schema written by a newer anarchon) and
    /// [`Error::State`] when called twice or after `stop()`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use anarchon_core::{memory::MemoryStore, Error, Scheduler};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let scheduler = Scheduler::leased(MemoryStore::new()).build()?;
    /// scheduler.every("sync", "10s").handler(|_ctx| async { Ok(()) })?;
    /// scheduler.start().await?;
    /// assert!(matches!(scheduler.start().await, Err(Error::State { .. })));
    /// scheduler.stop(Duration::from_secs(5)).await?;
    /// // A stopped scheduler takes no new job.
    /// assert!(scheduler.every("late", "10s").handler(|_ctx| async { Ok(()) }).is_err());
    /// # Ok::<_, anarchon_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn start(&self) -> Result<()> {
        {
            let d = self.driver();
            match &*d {
                DriverState::Idle => {}
                DriverState::Running { .. } => {
                    return Err(Error::State {
                        state: "already started",
                        hint: "call start() once",
                    });
                }
                DriverState::Stopped => {
                    return Err(Error::State {
                        state: "stopped",
                        hint: "build a new scheduler to start again",
                    });
                }
            }
        }
        let jobs: Vec<Arc<JobDef>> = self
            .shared
            .jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        let clock = driver::prepare(&self.shared, &jobs).await?;
        let mut d = self.driver();
        if !matches!(*d, DriverState::Idle) {
            return Err(Error::State {
                state: "already started",
                hint: "call start() once",
            });
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let handle = tokio::spawn(driver::run(
            self.shared.clone(),
            jobs,
            clock,
            rx,
            self.shared.shutdown.clone(),
        ));
        *d = DriverState::Running { tx, handle };
        Ok(())
    }

    /// Stops scheduling, cancels the signals of running handlers, waits up to `timeout` for
    /// them (a handler that returns an error after cancellation hands its run over), closes
    /// the connections anarchon opened, and sends nothing to the store after it returns.
    ///
    /// A claim or takeover this instance wins while stopping is handed over before `stop()`
    /// returns, and result writes in flight are waited for within `timeout`. It returns an
    /// error only if the scheduler's driver task panicked (a bug).
    /// [B-17, B-34]
    ///
    /// # Errors
    ///
    /// [`Error::State`] if the driver task panicked.
    ///
    /// ```no_run
    /// # async fn demo(scheduler: anarchon_core::Scheduler) -> anarchon_core::Result<()> {
    /// use std::time::Duration;
    ///
    /// tokio::signal::ctrl_c().await.ok();
    /// scheduler.stop(Duration::from_secs(30)).await?; // running lease runs are handed over
    /// # Ok(()) }
    /// ```
    pub async fn stop(&self, timeout: Duration) -> Result<()> {
        let prev = std::mem::replace(&mut *self.driver(), DriverState::Stopped);
        match prev {
            DriverState::Running { tx, handle } => {
                let (reply, done) = oneshot::channel();
                let _ = tx.send(Command::Stop { timeout, reply });
                let _ = done.await;
                match handle.await {
                    Err(e) if e.is_panic() => Err(Error::State {
                        state: "failed",
                        hint: "the scheduler's driver task panicked (a bug in anarchon): \
                               its runs were not handed over; see the log",
                    }),
                    _ => Ok(()),
                }
            }
            DriverState::Idle => {
                let _ = self.shared.backend.history().close().await;
                Ok(())
            }
            DriverState::Stopped => Ok(()),
        }
    }

    /// Runs a job on this instance now: no deduplication, no retry, recorded as `manual`.
    /// Returns the finished run's record. [B-35]
    ///
    /// # Errors
    ///
    /// [`Error::UnknownJob`], [`Error::State`] before `start()` or after `stop()`, a store
    /// error writing the record.
    ///
    /// ```
    /// use std::time::Duration;
    /// use anarchon_core::{memory::MemoryStore, Data, Reason, RunStatus, Scheduler};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let scheduler = Scheduler::leased(MemoryStore::new()).build()?;
    /// scheduler.every("report", "1h").handler(|ctx| async move {
    ///     println!("requested by {:?}", ctx.value("by"));
    ///     Ok(())
    /// })?;
    /// scheduler.start().await?;
    /// let run = scheduler.run_now("report", Some(Data::new().with_key("by", "ops"))).await?;
    /// assert_eq!((run.status, run.reason, run.manual), (RunStatus::Succeeded, Reason::Manual, true));
    /// scheduler.stop(Duration::from_secs(5)).await?;
    /// # Ok::<_, anarchon_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn run_now(&self, name: &str, data: Option<Data>) -> Result<HistoryRecord> {
        let job = self.job(name)?;
        let (reply, done) = oneshot::channel();
        {
            let d = self.driver();
            let DriverState::Running { tx, .. } = &*d else {
                return Err(Error::State {
                    state: "not running",
                    hint: "call start() before run_now()",
                });
            };
            let _ = tx.send(Command::RunNow { job, data, reply });
        }
        done.await
            .map_err(|_| Error::State {
                state: "stopping",
                hint: "the run was abandoned by stop()",
            })?
            .map(HistoryRecord::from)
    }

    /// Stops scheduling a job on this instance; a running run of it continues. Other
    /// instances that registered the job keep running it. [B-35]
    ///
    /// # Errors
    ///
    /// [`Error::UnknownJob`] when no job of that name is registered here.
    ///
    /// ```
    /// use anarchon_core::{memory::MemoryStore, Error, Scheduler};
    ///
    /// let scheduler = Scheduler::leased(MemoryStore::new()).build()?;
    /// scheduler.every("sync", "10s").handler(|_ctx| async { Ok(()) })?;
    /// scheduler.remove("sync")?;
    /// assert!(scheduler.jobs().is_empty());
    /// assert!(matches!(scheduler.remove("sync"), Err(Error::UnknownJob { .. })));
    /// # Ok::<_, anarchon_core::Error>(())
    /// ```
    pub fn remove(&self, name: &str) -> Result<()> {
        let name = JobName::new(name)?;
        let removed = self
            .shared
            .jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&name);
        if removed.is_none() {
            return Err(Error::UnknownJob {
                name: name.to_string(),
            });
        }
        if let DriverState::Running { tx, .. } = &*self.driver() {
            let _ = tx.send(Command::Remove(name));
        }
        Ok(())
    }

    /// The latest `count` attempts of a job from all instances, newest first. Works in a
    /// process that registered no jobs once the store's tables exist. [B-36]
    ///
    /// # Errors
    ///
    /// An invalid job name, a store error or timeout.
    ///
    /// ```
    /// use std::time::Duration;
    /// use anarchon_core::{memory::MemoryStore, RunStatus, Scheduler};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let scheduler = Scheduler::leased(MemoryStore::new()).build()?;
    /// scheduler.every("sync", "1h").handler(|_ctx| async { Ok(()) })?;
    /// scheduler.start().await?;
    /// scheduler.run_now("sync", None).await?;
    /// let runs = scheduler.history("sync", 10).await?;
    /// assert_eq!(runs[0].status, RunStatus::Succeeded);
    /// println!("{} attempt {} took {:?}", runs[0].slot, runs[0].attempt, runs[0].duration());
    /// scheduler.stop(Duration::from_secs(5)).await?;
    /// # Ok::<_, anarchon_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn history(&self, name: &str, count: usize) -> Result<Vec<HistoryRecord>> {
        let name = JobName::new(name)?;
        let records = driver::bounded(
            &self.shared,
            "history",
            self.shared.backend.history().history(&name, count),
        )
        .await?;
        Ok(records.into_iter().map(HistoryRecord::from).collect())
    }

    /// The newest attempt of a job, as [`Scheduler::history`] with a count of 1. [B-36]
    ///
    /// # Errors
    ///
    /// An invalid job name, a store error or timeout.
    pub async fn last_run(&self, name: &str) -> Result<Option<HistoryRecord>> {
        let name = JobName::new(name)?;
        let record = driver::bounded(
            &self.shared,
            "last_run",
            self.shared.backend.history().last_run(&name),
        )
        .await?;
        Ok(record.map(HistoryRecord::from))
    }

    /// The next slot of a registered job after now; `None` for an `at` job whose time has
    /// passed. [B-36]
    ///
    /// # Errors
    ///
    /// [`Error::UnknownJob`].
    ///
    /// ```
    /// use anarchon_core::{memory::MemoryStore, Scheduler};
    ///
    /// let scheduler = Scheduler::leased(MemoryStore::new()).build()?;
    /// scheduler.every("sync", "10s").handler(|_ctx| async { Ok(()) })?;
    /// let next = scheduler.next_run("sync")?.expect("an every job always has a next slot");
    /// assert_eq!(next.timestamp_millis() % 10_000, 0);
    /// # Ok::<_, anarchon_core::Error>(())
    /// ```
    pub fn next_run(&self, name: &str) -> Result<Option<DateTime<Utc>>> {
        let job = self.job(name)?;
        Ok(job
            .schedule
            .next_after(self.shared.cfg.clock.now_ms())
            .map(to_datetime))
    }

    /// The jobs registered on this scheduler, by name. [B-36]
    ///
    /// ```
    /// use anarchon_core::{memory::MemoryStore, JobKind, Scheduler};
    ///
    /// let scheduler = Scheduler::leased(MemoryStore::new()).build()?;
    /// scheduler.cron("report", "0 3 * * *").handler(|_ctx| async { Ok(()) })?;
    /// let jobs = scheduler.jobs();
    /// assert_eq!((jobs[0].name.as_str(), jobs[0].kind), ("report", JobKind::Cron));
    /// assert!(jobs[0].next_run.is_some());
    /// # Ok::<_, anarchon_core::Error>(())
    /// ```
    pub fn jobs(&self) -> Vec<JobInfo> {
        let now = self.shared.cfg.clock.now_ms();
        self.shared
            .jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(|j| JobInfo {
                name: j.name.clone(),
                kind: j.kind,
                schedule: j.schedule.to_string(),
                next_run: j.schedule.next_after(now).map(to_datetime),
            })
            .collect()
    }

    /// Simulates a crash (SIGKILL) for tests: the driver stops at once without releasing,
    /// finishing or closing anything, so leases simply expire. Running handlers are left
    /// to themselves.
    #[doc(hidden)]
    pub fn crash(&self) {
        if let DriverState::Running { handle, .. } =
            std::mem::replace(&mut *self.driver(), DriverState::Stopped)
        {
            handle.abort();
        }
    }

    /// A snapshot of the scheduler's health, for a health check endpoint.
    ///
    /// ```
    /// use std::time::Duration;
    /// use anarchon_core::{memory::MemoryStore, Scheduler};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let scheduler = Scheduler::leased(MemoryStore::new()).build()?;
    /// assert!(!scheduler.health().is_healthy(), "not started yet");
    /// scheduler.start().await?;
    /// let health = scheduler.health();
    /// assert!(health.is_healthy(), "{health:?}");
    /// scheduler.stop(Duration::from_secs(5)).await?;
    /// assert!(!scheduler.health().running);
    /// # Ok::<_, anarchon_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn health(&self) -> Health {
        let h = &self.shared.health;
        let running =
            matches!(&*self.driver(), DriverState::Running { handle, .. } if !handle.is_finished());
        let last = h.last_turn_ms.load(Ordering::Relaxed);
        Health {
            running,
            stalled: h.stalled.load(Ordering::Relaxed),
            driver_idle: Duration::from_millis(if running {
                driver::mono_ms().saturating_sub(last)
            } else {
                0
            }),
            leases_held: h.leases_held.load(Ordering::Relaxed),
            last_error: h
                .last_error
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            store_reachable: !h.store_unreachable.load(Ordering::Relaxed),
            slots_late: h.slots_late.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
pub(crate) mod transition_tables {
    /// The table between `<!-- begin NAME -->` and `<!-- end NAME -->` in
    /// docs/architecture.md.
    fn documented(name: &str) -> Option<String> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/architecture.md");
        let doc = std::fs::read_to_string(path).expect("docs/architecture.md");
        let begin = format!("<!-- begin {name} -->\n");
        let end = format!("<!-- end {name} -->");
        let from = doc.find(&begin)? + begin.len();
        let to = doc[from..].find(&end)? + from;
        Some(doc[from..to].to_owned())
    }

    /// Fails when the table differs from `rendered`; with `UPDATE_EXPECT=1` writes
    /// `rendered` into docs/architecture.md instead (the bless).
    pub(crate) fn check(name: &str, rendered: String) {
        if documented(name).as_ref() == Some(&rendered) {
            return;
        }
        if std::env::var("UPDATE_EXPECT").is_ok_and(|v| v == "1") {
            let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/architecture.md");
            let doc = std::fs::read_to_string(path).expect("docs/architecture.md");
            let begin = format!("<!-- begin {name} -->\n");
            let end = format!("<!-- end {name} -->");
            let from = doc
                .find(&begin)
                .map(|i| i + begin.len())
                .unwrap_or_else(|| {
                    panic!("docs/architecture.md has no `{begin}` marker: add the markers first")
                });
            let to = doc[from..].find(&end).expect("the end marker") + from;
            let updated = format!("{}{rendered}{}", &doc[..from], &doc[to..]);
            std::fs::write(path, updated).expect("write docs/architecture.md");
            return;
        }
        panic!(
            "docs/architecture.md's {name} table differs from the machine; bless it with \
             `UPDATE_EXPECT=1 cargo test -p anarchon-core --lib transition` after checking \
             the change. The machine says:\n{rendered}"
        );
    }

    #[test]
    fn every_owner_transition_is_as_documented() {
        check("owner-transitions", super::run::table::render());
    }

    #[test]
    fn every_claim_outcome_is_as_documented() {
        check("claim-outcomes", super::core::table::render());
    }

    #[test]
    fn every_backup_transition_is_as_documented() {
        check("backup-transitions", super::watch::table::render());
    }
}
