//! The driver task: one loop per scheduler that owns every timer, task and store call, and
//! interprets the run state machines ([`super::run`] for runs this instance owns,
//! [`super::watch`] for runs it backs up).
//!
//! The loop never awaits the store: each store call runs in a task of its own, bounded by
//! `store_timeout`, and reports back as a [`Msg`]. So a hung connection delays one answer,
//! never the heartbeats of other runs or the watchdog's view of the loop. Decisions about a
//! run are made by its machine; this module turns inputs (timers, answers, commands) into
//! machine inputs and the machines' effects into store calls, tasks, timers and events.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::{mpsc, oneshot};
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::run::{InterruptCause, Note, OwnerEffect, OwnerInput, OwnerRun, Write, WriteAnswer};
use super::telemetry;
use super::wake::PreciseWake;
use super::watch::{Facts, Watch, WatchEffect, WatchInput, WatchNote, WatchState};
use super::{Backend, Command, JobDef, Shared};
use crate::context::{Data, JobContext, RunControl};
use crate::error::{BoxError, Error, Result};
use crate::event::{Event, RunInfo, SkipReason};
use crate::history::{Reason, RunRecord, RunStatus, to_datetime};
use crate::ids::{EpochMs, JobName, RunKey};
use crate::options::CatchUp;
use crate::slot::Schedule;
use crate::store::{
    ClaimOutcome, Finish, Lease, LeaseClaim, OwnerWrite, Prepare, Renewal, RunView, SlotClaim,
    SlotOutcome, Takeover, TakeoverOutcome,
};

/// `start()`'s `prepare` call may take this many store timeouts (see `prepare`).
const PREPARE_BOUND_FACTOR: u32 = 4;

/// Messages the loop handles in one turn beyond the first (see `run`).
const INBOX_DRAIN: usize = 1024;

/// Consecutive failed store calls after which `health()` reports the store unreachable.
pub(crate) const UNREACHABLE_AFTER: u32 = 3;

/// Milliseconds on a process-wide monotonic clock (real time, also under a paused tokio
/// clock), for the watchdog.
pub(crate) fn mono_ms() -> u64 {
    static ORIGIN: OnceLock<std::time::Instant> = OnceLock::new();
    ORIGIN
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
}

/// Runs a store call under the scheduler's store timeout.
pub(crate) async fn bounded<T>(
    shared: &Shared,
    operation: &'static str,
    fut: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    match tokio::time::timeout(shared.cfg.store_timeout, fut).await {
        Ok(r) => r,
        Err(_) => Err(Error::Timeout {
            store: shared.backend.history().kind(),
            operation,
            after: shared.cfg.store_timeout,
        }),
    }
}

/// The difference between the store's clock and this instance's, measured from one answer
/// that carried the store's time. Its error is at most half the round trip.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClockSample {
    /// Store clock minus instance clock, ms.
    offset_ms: i64,
    /// Round trip of the call that measured it, ms.
    rtt_ms: i64,
}

impl ClockSample {
    /// From the store time `store_ms` read by a call sent at `sent` and answered now.
    pub(crate) fn measure(shared: &Shared, store_ms: EpochMs, sent: Instant) -> Self {
        let rtt = sent.elapsed().as_millis() as i64;
        let local_mid = shared.cfg.clock.now_ms().saturating_sub(rtt / 2);
        ClockSample {
            offset_ms: store_ms.saturating_sub(local_mid),
            rtt_ms: rtt,
        }
    }
}

/// `start()`'s synchronous part: prepare the store and check the clocks. [B-20, B-33]
pub(crate) async fn prepare(shared: &Arc<Shared>, jobs: &[Arc<JobDef>]) -> Result<ClockSample> {
    let store = shared.backend.history();
    let prep = Prepare {
        jobs: jobs.iter().map(|j| j.name.clone()).collect(),
        instance_id: shared.cfg.instance_id.to_string(),
        call_timeout: shared.cfg.store_timeout,
    };
    // Preparing creates the schema and registers every job, possibly waiting for other
    // instances doing the same at once (thousands of jobs on a few instances): it gets
    // `PREPARE_BOUND_FACTOR` store timeouts, every other call one.
    let after = shared
        .cfg
        .store_timeout
        .saturating_mul(PREPARE_BOUND_FACTOR);
    match tokio::time::timeout(after, store.prepare(&prep)).await {
        Ok(r) => r?,
        Err(_) => {
            return Err(Error::Timeout {
                store: store.kind(),
                operation: "prepare",
                after,
            });
        }
    }
    let sent = Instant::now();
    let store_now = bounded(shared, "now", store.now()).await?;
    check_skew(shared, store_now, 0);
    Ok(ClockSample::measure(shared, store_now, sent))
}

fn check_skew(shared: &Shared, store_now: EpochMs, allowance: i64) {
    let skew = shared.cfg.clock.now_ms().saturating_sub(store_now);
    if skew.saturating_abs() - allowance > shared.cfg.skew_threshold_ms as i64 {
        tracing::warn!(
            skew_ms = skew,
            "this instance's clock differs from the store's by {skew} ms: slots follow the \
             instance clock and leases the store's, keep clocks NTP-synced"
        );
        let _ = shared.events.send(Event::ClockSkew {
            skew: chrono::TimeDelta::try_milliseconds(skew).unwrap_or(chrono::TimeDelta::MIN),
        });
    }
}

enum Timer {
    Due { job: Arc<JobDef>, slot: EpochMs },
    Heartbeat,
    Watch,
    Timeout { id: u64 },
    AbortGrace { id: u64 },
    StopDeadline,
    Tick,
}

enum Msg {
    ClaimedMany {
        items: Vec<(Arc<JobDef>, EpochMs, Reason)>,
        sent: Instant,
        result: Result<Vec<ClaimOutcome>>,
    },
    Claimed {
        job: Arc<JobDef>,
        slot: EpochMs,
        reason: Reason,
        sent: Instant,
        result: Result<ClaimOutcome>,
    },
    SlotClaimed {
        job: Arc<JobDef>,
        slot: EpochMs,
        result: Result<SlotOutcome>,
    },
    Heartbeat {
        ids: Vec<u64>,
        sent: Instant,
        result: Result<Vec<Renewal>>,
    },
    Watched {
        asked: Vec<RunKey>,
        poll: bool,
        sent: Instant,
        result: Result<Vec<RunView>>,
    },
    TookOver {
        key: RunKey,
        result: Result<TakeoverOutcome>,
    },
    Unfinished {
        result: Result<Vec<RunView>>,
    },
    HandlerDone {
        id: u64,
        result: std::result::Result<(), BoxError>,
    },
    Written {
        id: u64,
        result: Result<OwnerWrite>,
    },
    /// A batch of finishes was answered (one call).
    WrittenMany {
        ids: Vec<u64>,
        result: Result<Vec<OwnerWrite>>,
    },
    /// A batch of takeovers was answered (one call).
    TookOverMany {
        keys: Vec<RunKey>,
        result: Result<Vec<TakeoverOutcome>>,
    },
    /// A release sent on the side (won while stopping, an orphan of ours) was answered.
    SideReleased {
        key: RunKey,
        result: Result<OwnerWrite>,
    },
    /// A result sent once more after its first write failed was answered.
    SideFinished {
        info: RunInfo,
        finish: Finish,
        duration: Duration,
        result: Result<OwnerWrite>,
    },
}

/// A run this instance owns: its machine and what the driver needs to carry out effects.
struct Active {
    job: Arc<JobDef>,
    info: RunInfo,
    lease: Option<Lease>,
    machine: OwnerRun,
    control: Arc<RunControl>,
    handler: Option<AbortHandle>,
    started: Instant,
    started_at: EpochMs,
    scheduled_at: EpochMs,
    /// The run's `anarchon.run` span: its store writes are children of it.
    span: tracing::Span,
    last_renewed: Instant,
    /// Resolves when the `running` history record of a manual or claim-only run is written,
    /// so its final record is never written before it (a pooled store could reorder them).
    start_written: Option<oneshot::Receiver<()>>,
    manual_reply: Option<oneshot::Sender<Result<RunRecord>>>,
    /// The result last sent for this leased run: sent once more on the side if that write
    /// fails (see `retry_finish`).
    sent_finish: Option<Finish>,
}

impl Active {
    fn record(
        &self,
        status: RunStatus,
        error: Option<String>,
        finished_at: Option<EpochMs>,
    ) -> RunRecord {
        RunRecord {
            job: self.info.job.clone(),
            slot: self.info.slot_ms(),
            scheduled_at: self.scheduled_at,
            instance_id: self.info.instance_id.clone(),
            manual: self.info.manual,
            attempt: self.info.attempt,
            reason: self.info.reason,
            status,
            fence: self.info.fence,
            started_at: self.started_at,
            finished_at,
            error,
        }
    }
}

struct Driver {
    shared: Arc<Shared>,
    jobs: HashMap<JobName, Arc<JobDef>>,
    timers: BTreeMap<(Instant, u64), Timer>,
    seq: u64,
    active: HashMap<u64, Active>,
    next_id: u64,
    /// Leased runs owned here, by key.
    held: HashMap<RunKey, u64>,
    /// Claims and takeovers in flight, by key.
    in_flight: HashMap<RunKey, u32>,
    /// Releases sent on the side, in flight.
    side_writes: u32,
    watches: BTreeMap<RunKey, Watch>,
    heartbeat_armed: bool,
    heartbeat_in_flight: bool,
    watch_armed: bool,
    watch_in_flight: bool,
    catch_up: HashMap<JobName, VecDeque<EpochMs>>,
    msgs: mpsc::UnboundedSender<Msg>,
    tasks: JoinSet<()>,
    stopping: bool,
    stop_forced: bool,
    stop_replies: Vec<oneshot::Sender<()>>,
    last_skew_event: Option<Instant>,
    clock: ClockSample,
    /// Consecutive failed store calls.
    failures: u32,
    /// Jobs whose claim failed since the store last answered: caught up on recovery.
    missed: HashSet<JobName>,
    /// What the store was last told by `set_watching`.
    watching: bool,
    /// Runs owned and watched as last published to the metrics gauges.
    gauges: (usize, usize),
    /// Claims of this loop turn, sent together at its end (stores that batch claims).
    claim_queue: Vec<(Arc<JobDef>, EpochMs, Reason, LeaseClaim)>,
    /// Watched runs to read at once (release notifications of this turn), sent together.
    read_queue: Vec<RunKey>,
    /// Results of this loop turn, sent together at its end (stores that batch finishes).
    finish_queue: Vec<(u64, Lease, Finish)>,
    /// Takeovers of this loop turn, sent together at its end (stores that batch them).
    takeover_queue: Vec<Takeover>,
}

/// How many slots from `from` (included) to `to` (excluded): counted one by one up to a cap,
/// so a process paused for a day costs bounded work (the count then says "at least").
fn slots_between(schedule: &Schedule, from: EpochMs, to: EpochMs) -> u64 {
    const CAP: u64 = 100_000;
    let mut n = 0;
    let mut at = from;
    while at < to && n < CAP {
        n += 1;
        match schedule.next_after(at) {
            Some(next) if next > at => at = next,
            _ => break,
        }
    }
    n
}

/// `queue` in chunks of at most `limit` (at least 1), in order.
fn in_batches<T>(queue: Vec<T>, limit: usize) -> Vec<Vec<T>> {
    let limit = limit.max(1);
    let mut out = Vec::with_capacity(queue.len().div_ceil(limit));
    let mut queue = queue.into_iter().peekable();
    while queue.peek().is_some() {
        out.push(queue.by_ref().take(limit).collect());
    }
    out
}

/// The answer of a batch call, one per item: the item's outcome, or the batch's error text
/// for each item when the call failed or answered the wrong number of items.
fn per_item<T>(
    items: usize,
    what: &str,
    result: Result<Vec<T>>,
) -> Vec<std::result::Result<T, String>> {
    let failed = |message: String| (0..items).map(|_| Err(message.clone())).collect();
    match result {
        Ok(outcomes) if outcomes.len() == items => outcomes.into_iter().map(Ok).collect(),
        Ok(outcomes) => failed(format!(
            "a batch of {items} {what} was answered with {} outcomes",
            outcomes.len()
        )),
        Err(e) => failed(telemetry::error_chain(&e)),
    }
}

/// The driver task's body.
pub(crate) async fn run(
    shared: Arc<Shared>,
    jobs: Vec<Arc<JobDef>>,
    clock: ClockSample,
    mut commands: mpsc::UnboundedReceiver<Command>,
    shutdown: CancellationToken,
) {
    let (msgs, mut inbox) = mpsc::unbounded_channel();
    let watchdog_stop = Arc::new(AtomicBool::new(false));
    spawn_watchdog(&shared, watchdog_stop.clone());
    let mut releases = match &shared.backend {
        Backend::Lease(s) => s.subscribe_releases(),
        Backend::Claim(_) => None,
    };
    let mut d = Driver {
        shared,
        jobs: HashMap::new(),
        timers: BTreeMap::new(),
        seq: 0,
        active: HashMap::new(),
        next_id: 0,
        held: HashMap::new(),
        in_flight: HashMap::new(),
        side_writes: 0,
        watches: BTreeMap::new(),
        heartbeat_armed: false,
        heartbeat_in_flight: false,
        watch_armed: false,
        watch_in_flight: false,
        catch_up: HashMap::new(),
        msgs,
        tasks: JoinSet::new(),
        stopping: false,
        stop_forced: false,
        stop_replies: Vec::new(),
        last_skew_event: None,
        clock,
        failures: 0,
        missed: HashSet::new(),
        watching: false,
        gauges: (usize::MAX, usize::MAX),
        claim_queue: Vec::new(),
        read_queue: Vec::new(),
        finish_queue: Vec::new(),
        takeover_queue: Vec::new(),
    };
    d.begin(jobs);
    let tick = (d.shared.cfg.stall_after / 4).max(Duration::from_millis(50));
    d.arm(Instant::now() + tick, Timer::Tick);
    // On the system clock a thread wakes the driver at its timers to the tens of µs; tokio's
    // wheel (1 ms, rounded up) stays armed beside it. See `wake`.
    let mut precise = match d.shared.cfg.clock {
        super::Clock::System | super::Clock::SystemShifted { .. } => PreciseWake::start(),
        super::Clock::Tokio { .. } => None,
    };
    loop {
        d.shared
            .health
            .last_turn_ms
            .store(mono_ms(), Ordering::Relaxed);
        let next = d.timers.keys().next().map(|(t, _)| *t);
        if let Some(p) = precise.as_mut() {
            p.set(next);
        }
        tokio::select! {
            biased;
            Some(cmd) = commands.recv() => d.command(cmd),
            _ = shutdown.cancelled(), if !d.stopping => {
                // The last handle was dropped, or the parent token was cancelled.
                let timeout = d.shared.cfg.default_stop_timeout;
                d.begin_stop(timeout);
            }
            Some(msg) = inbox.recv() => {
                d.message(msg);
                // Answers that arrived together are handled in one turn, so what they
                // cause (results to write, claims) goes out in one batch. Bounded, so
                // commands and timers wait at most one such turn.
                for _ in 0..INBOX_DRAIN {
                    match inbox.try_recv() {
                        Ok(msg) => d.message(msg),
                        Err(_) => break,
                    }
                }
            }
            Some(key) = recv_release(&mut releases) => d.released(key),
            _ = sleep_until(next) => d.timers_due(tick),
            _ = precise_due(precise.as_ref()), if next.is_some() => d.timers_due(tick),
            // Let joined store tasks go (their results came through `inbox`).
            Some(_) = d.tasks.join_next(), if !d.tasks.is_empty() => {
                while d.tasks.try_join_next().is_some() {}
            }
        }
        d.flush_claims();
        d.flush_reads();
        d.flush_takeovers();
        d.flush_finishes();
        d.announce_watching();
        d.publish_gauges();
        if d.stopping && (d.stop_forced || d.settled()) {
            break;
        }
    }
    if d.watching
        && let Backend::Lease(store) = &d.shared.backend
    {
        store.set_watching(false);
    }
    // Stop: nothing may reach the store after `stop()` returns. [B-34]
    d.tasks.shutdown().await;
    for a in d.active.values() {
        if let Some(h) = &a.handler {
            h.abort();
        }
    }
    let _ = bounded(&d.shared, "close", d.shared.backend.history().close()).await;
    watchdog_stop.store(true, Ordering::Relaxed);
    d.shared.health.leases_held.store(0, Ordering::Relaxed);
    super::driver_ended(&d.shared);
    for reply in d.stop_replies.drain(..) {
        let _ = reply.send(());
    }
}

async fn precise_due(wake: Option<&PreciseWake>) {
    match wake {
        Some(w) => w.due().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn recv_release(rx: &mut Option<tokio::sync::broadcast::Receiver<RunKey>>) -> Option<RunKey> {
    let Some(r) = rx.as_mut() else {
        return std::future::pending().await;
    };
    loop {
        match r.recv().await {
            Ok(k) => return Some(k),
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
            Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                *rx = None;
                return std::future::pending().await;
            }
        }
    }
}

fn spawn_watchdog(shared: &Arc<Shared>, stop: Arc<AtomicBool>) {
    let weak = Arc::downgrade(shared);
    let stall = shared.cfg.stall_after;
    let period = (stall / 4).max(Duration::from_millis(50));
    let spawned = std::thread::Builder::new()
        .name("anarchon-watchdog".into())
        .spawn(move || {
            loop {
                std::thread::sleep(period);
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let Some(shared) = weak.upgrade() else { return };
                if !matches!(
                    *shared.driver.lock().unwrap_or_else(|e| e.into_inner()),
                    super::DriverState::Running { .. }
                ) {
                    return;
                }
                let idle =
                    mono_ms().saturating_sub(shared.health.last_turn_ms.load(Ordering::Relaxed));
                let stalled = idle > stall.as_millis() as u64;
                if stalled && !shared.health.stalled.swap(true, Ordering::Relaxed) {
                    tracing::error!(
                        idle_ms = idle,
                        "anarchon driver loop has not turned for {idle} ms"
                    );
                    let _ = shared.events.send(Event::Stalled {
                        idle: Duration::from_millis(idle),
                    });
                } else if !stalled {
                    shared.health.stalled.store(false, Ordering::Relaxed);
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("could not start the anarchon watchdog thread: {e}");
    }
}

impl Driver {
    fn now_ms(&self) -> EpochMs {
        self.shared.cfg.clock.now_ms()
    }

    /// The tokio instant at which the instance clock reads `epoch_ms`, or `None` when that
    /// is too far ahead to represent (never due).
    fn instant_at(&self, epoch_ms: EpochMs) -> Option<Instant> {
        // In µs: a clock read in whole ms would put the timer up to 1 ms after the instant.
        let delta = epoch_ms
            .saturating_mul(1_000)
            .saturating_sub(self.shared.cfg.clock.now_micros())
            .max(0) as u64;
        Instant::now().checked_add(Duration::from_micros(delta))
    }

    /// Handles the timers that are due now (the tick re-arms itself).
    fn timers_due(&mut self, tick: Duration) {
        let now = Instant::now();
        while let Some(entry) = self.timers.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let timer = entry.remove();
            if let Timer::Tick = timer {
                self.arm(now + tick, Timer::Tick);
            } else {
                self.timer(timer);
            }
        }
    }

    fn arm(&mut self, at: Instant, timer: Timer) {
        self.seq += 1;
        self.timers.insert((at, self.seq), timer);
    }

    fn arm_after(&mut self, after: Duration, timer: Timer) {
        if let Some(at) = Instant::now().checked_add(after) {
            self.arm(at, timer);
        }
    }

    fn lease_ms(&self) -> u64 {
        self.shared.cfg.timing.lease_ms()
    }

    fn heartbeat_every(&self) -> Duration {
        Duration::from_millis(self.shared.cfg.timing.heartbeat_ms())
    }

    /// How long after its last confirmed renewal a lease can no longer be counted on: the
    /// lease less one heartbeat. Self-fencing and the handler's lease deadline use it.
    fn lease_margin(&self) -> Duration {
        Duration::from_millis(
            self.lease_ms()
                .saturating_sub(self.shared.cfg.timing.heartbeat_ms()),
        )
    }

    /// The store-clock moment this instance stops waiting for a call sent now, less the
    /// error of the clock measurement, so the store can refuse to commit after it.
    fn call_deadline(&self) -> EpochMs {
        let budget = self.shared.cfg.store_timeout.as_millis() as i64;
        let margin = self.clock.rtt_ms.saturating_add(10);
        self.now_ms()
            .saturating_add(self.clock.offset_ms)
            .saturating_add(budget)
            .saturating_sub(margin)
    }

    fn note_clock(&mut self, store_ms: EpochMs, sent: Instant) {
        self.clock = ClockSample::measure(&self.shared, store_ms, sent);
    }

    /// Tells the store when this instance starts or stops watching runs (SQLite polls for
    /// other processes' releases only meanwhile).
    fn announce_watching(&mut self) {
        let want = !self.watches.is_empty() && !self.stopping;
        if want != self.watching
            && let Backend::Lease(store) = &self.shared.backend
        {
            store.set_watching(want);
            self.watching = want;
        }
    }

    /// Nothing is left in flight: stop may return.
    fn settled(&self) -> bool {
        self.active.is_empty() && self.in_flight.is_empty() && self.side_writes == 0
    }

    fn emit(&self, event: Event) {
        telemetry::event(&self.shared.cfg.instance_id, &event);
        match &event {
            Event::Error {
                operation,
                job,
                message,
            } => {
                *self
                    .shared
                    .health
                    .last_error
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = Some(message.clone());
                if self.shared.events.receiver_count() == 0 {
                    tracing::error!(operation, job = ?job, "anarchon store error: {message}");
                } else {
                    tracing::warn!(operation, job = ?job, "anarchon store error: {message}");
                }
            }
            Event::Skip { job, slot, reason } => {
                tracing::debug!(%job, %slot, reason = reason.as_str(), "skip")
            }
            // One line per event at debug: at thousands of jobs, info would flood the log.
            other => tracing::debug!(event = other.name(), "{other}"),
        }
        let _ = self.shared.events.send(event);
    }

    fn error(&self, operation: &'static str, job: Option<&JobName>, e: &Error) {
        self.emit(Event::Error {
            operation,
            job: job.cloned(),
            // The whole source chain: "claim: connection reset: os error 104".
            message: telemetry::error_chain(e),
        });
    }

    /// A store call answered. After failures, the store is back: report it healthy and
    /// catch up the jobs whose claims failed meanwhile, by their catch-up policy.
    fn store_answered(&mut self) {
        if self.failures == 0 {
            return;
        }
        self.failures = 0;
        self.shared
            .health
            .store_unreachable
            .store(false, Ordering::Relaxed);
        *self
            .shared
            .health
            .last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
        let missed: Vec<JobName> = self.missed.drain().collect();
        for name in missed {
            if let Some(job) = self.jobs.get(&name).cloned() {
                self.catch_up_job(&job);
            }
        }
    }

    fn store_failed(&mut self) {
        self.failures = self.failures.saturating_add(1);
        if self.failures >= UNREACHABLE_AFTER {
            self.shared
                .health
                .store_unreachable
                .store(true, Ordering::Relaxed);
        }
    }

    /// Publishes runs owned and watched when they changed (two map lengths: O(1)).
    fn publish_gauges(&mut self) {
        let now = (self.held.len(), self.watches.len());
        if now != self.gauges {
            self.gauges = now;
            telemetry::gauges(&self.shared.cfg.instance_id, now.0, now.1);
        }
    }

    /// `count` slots of `job` not claimed in time: counted for `health()` and metrics.
    fn note_late(&self, job: &JobName, count: u64) {
        self.shared
            .health
            .slots_late
            .fetch_add(count, Ordering::Relaxed);
        telemetry::slots_late(&self.shared.cfg.instance_id, job.as_str(), count);
    }

    fn count(&mut self, ok: bool) {
        if ok {
            self.store_answered();
        } else {
            self.store_failed();
        }
    }

    /// Spawns a bounded store call whose answer comes back as a message.
    fn call<T, F, M>(&mut self, operation: &'static str, fut: F, to_msg: M)
    where
        T: Send + 'static,
        F: std::future::Future<Output = Result<T>> + Send + 'static,
        M: FnOnce(Result<T>) -> Msg + Send + 'static,
    {
        self.call_in(tracing::Span::none(), operation, fut, to_msg);
    }

    /// [`Self::call`] inside a `anarchon.store` span (at debug) whose parent is `parent`
    /// (the run's span for a run's own writes).
    fn call_in<T, F, M>(
        &mut self,
        parent: tracing::Span,
        operation: &'static str,
        fut: F,
        to_msg: M,
    ) where
        T: Send + 'static,
        F: std::future::Future<Output = Result<T>> + Send + 'static,
        M: FnOnce(Result<T>) -> Msg + Send + 'static,
    {
        use tracing::Instrument;
        let shared = self.shared.clone();
        let tx = self.msgs.clone();
        let span = tracing::debug_span!(
            parent: &parent,
            "anarchon.store",
            operation,
            store = shared.backend.history().kind(),
            error = tracing::field::Empty,
        );
        self.tasks.spawn(
            async move {
                let sent = Instant::now();
                let result = bounded(&shared, operation, fut).await;
                telemetry::store_call(&shared.cfg.instance_id, operation, sent.elapsed());
                if let Err(e) = &result {
                    tracing::Span::current().record("error", telemetry::error_chain(e).as_str());
                }
                let _ = tx.send(to_msg(result));
            }
            .instrument(span),
        );
    }

    fn is_here(&self, key: &RunKey) -> bool {
        self.held.contains_key(key) || self.in_flight.contains_key(key)
    }

    fn flight_start(&mut self, key: &RunKey) {
        *self.in_flight.entry(key.clone()).or_default() += 1;
    }

    fn flight_end(&mut self, key: &RunKey) {
        if let Some(n) = self.in_flight.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                self.in_flight.remove(key);
            }
        }
    }

    /// Publishes the number of leased runs owned here (O(1): the `held` map).
    fn update_leases_held(&self) {
        self.shared
            .health
            .leases_held
            .store(self.held.len() as u64, Ordering::Relaxed);
    }

    // ----- start -------------------------------------------------------------------------

    fn begin(&mut self, jobs: Vec<Arc<JobDef>>) {
        let names: Vec<JobName> = jobs.iter().map(|j| j.name.clone()).collect();
        for job in jobs {
            self.jobs.insert(job.name.clone(), job.clone());
            self.schedule_next(&job, self.now_ms());
        }
        if let Backend::Lease(store) = &self.shared.backend {
            // Orphans first, then catch-up. [B-19]
            let store = store.clone();
            self.call(
                "unfinished_runs",
                async move { store.unfinished_runs(&names).await },
                |result| Msg::Unfinished { result },
            );
        }
    }

    fn start_catch_up(&mut self) {
        let jobs: Vec<Arc<JobDef>> = self.jobs.values().cloned().collect();
        for job in jobs {
            self.catch_up_job(&job);
        }
    }

    /// Queues the job's missed slots by its catch-up policy and claims the first. [B-19]
    fn catch_up_job(&mut self, job: &Arc<JobDef>) {
        if self.stopping || !matches!(self.shared.backend, Backend::Lease(_)) {
            return;
        }
        let now = self.now_ms();
        let window = job.opts.catch_up_ms().min(i64::MAX as u64) as EpochMs;
        if window == 0 {
            return;
        }
        let slots: VecDeque<EpochMs> = match job.opts.catch_up {
            CatchUp::None => return,
            CatchUp::Latest => job
                .schedule
                .newest_due(now)
                .filter(|s| now.saturating_sub(*s) <= window)
                .into_iter()
                .collect(),
            CatchUp::All { max } => job
                .schedule
                .due_between(now.saturating_sub(window).saturating_sub(1), now, max)
                .into(),
        };
        if !slots.is_empty() && !self.catch_up.contains_key(&job.name) {
            self.catch_up.insert(job.name.clone(), slots);
            self.advance_catch_up(job);
        }
    }

    /// Claims the next queued catch-up slot of a job, one at a time.
    fn advance_catch_up(&mut self, job: &Arc<JobDef>) {
        if self.stopping {
            return;
        }
        let Some(queue) = self.catch_up.get_mut(&job.name) else {
            return;
        };
        let Some(slot) = queue.pop_front() else {
            self.catch_up.remove(&job.name);
            return;
        };
        let not_after = slot.saturating_add(job.opts.catch_up_ms().min(i64::MAX as u64) as EpochMs);
        self.claim(job.clone(), slot, Reason::CatchUp, not_after);
    }

    // ----- scheduling --------------------------------------------------------------------

    fn schedule_next(&mut self, job: &Arc<JobDef>, after: EpochMs) {
        let Some(slot) = job.schedule.next_after(after) else {
            return;
        };
        let mut jitter = job.opts.jitter_ms();
        if let Schedule::Every { interval_ms, .. } = job.schedule {
            // Never jitter past the next slot: a fast job would skip slots.
            jitter = jitter.min(interval_ms / 2);
        }
        let jitter = crate::slot::jitter(jitter).min(i64::MAX as u64) as EpochMs;
        // A slot too far ahead to represent is simply never due.
        if let Some(at) = self.instant_at(slot.saturating_add(jitter)) {
            self.arm(
                at,
                Timer::Due {
                    job: job.clone(),
                    slot,
                },
            );
        }
    }

    /// The last moment (instance clock) any instance may still claim `slot`: a scheduled
    /// claim until `max_late`, a catch-up until `catch_up`, plus one lease of slack for a
    /// claim in flight. Instances claim only the newest due slot (and catch-up `Latest`
    /// only the newest too), so unless the job replays every missed slot (`CatchUp::All`)
    /// nobody claims `slot` once the next one is due: a job keeps at most a couple of
    /// pending watches however often its slots are skipped.
    fn claimable_until(&self, job: &JobDef, slot: EpochMs) -> EpochMs {
        let slack = self.lease_ms().min(i64::MAX as u64) as EpochMs;
        let catch_up = match job.opts.catch_up {
            CatchUp::None => 0,
            _ => job.opts.catch_up_ms(),
        };
        let window = job.opts.max_late_ms().max(catch_up).min(i64::MAX as u64) as EpochMs;
        let by_window = slot.saturating_add(window).saturating_add(slack);
        match (job.opts.catch_up, job.schedule.next_after(slot)) {
            (CatchUp::All { .. }, _) | (_, None) => by_window,
            (_, Some(next)) => by_window.min(next.saturating_add(slack)),
        }
    }

    fn claim(&mut self, job: Arc<JobDef>, slot: EpochMs, reason: Reason, not_after: EpochMs) {
        let run = RunKey::new(job.name.clone(), slot);
        match self.shared.backend.clone() {
            Backend::Lease(store) => {
                let claim = LeaseClaim {
                    run: run.clone(),
                    scheduled_at: slot,
                    instance_id: self.shared.cfg.instance_id.to_string(),
                    lease_ms: self.lease_ms(),
                    // Never commit after this instance stopped waiting. [B-10]
                    not_after: not_after.min(self.call_deadline()),
                    overlap: job.opts.overlap,
                    reason,
                    retention: job.opts.retention(),
                };
                self.flight_start(&run);
                if store.claim_batch_limit() > 1 {
                    // Claims that fall due in one turn of the loop go out together.
                    self.claim_queue.push((job, slot, reason, claim));
                    return;
                }
                let sent = Instant::now();
                self.call(
                    "claim",
                    async move { store.claim(&claim).await },
                    move |result| Msg::Claimed {
                        job,
                        slot,
                        reason,
                        sent,
                        result,
                    },
                );
            }
            Backend::Claim(store) => {
                let claim = SlotClaim {
                    run,
                    instance_id: self.shared.cfg.instance_id.to_string(),
                    not_after,
                };
                self.call(
                    "claim",
                    async move { store.claim_slot(&claim).await },
                    move |result| Msg::SlotClaimed { job, slot, result },
                );
            }
        }
    }

    /// Sends the claims queued in this turn, in batches the store takes in one round trip.
    fn flush_claims(&mut self) {
        if self.claim_queue.is_empty() {
            return;
        }
        let Backend::Lease(store) = self.shared.backend.clone() else {
            return;
        };
        // By job (a stable sort: one job's slots keep their order). Every instance has the
        // same jobs fall due together, so their batches then hold the same jobs in the same
        // order: a store that locks a batch's jobs (PostgreSQL) makes a batch wait for its
        // twin on the other instances only, not for several overlapping ones.
        let mut queue = std::mem::take(&mut self.claim_queue);
        queue.sort_by(|a, b| a.3.run.job.cmp(&b.3.run.job));
        for batch in in_batches(queue, store.claim_batch_limit()) {
            let (items, claims): (Vec<_>, Vec<_>) = batch
                .into_iter()
                .map(|(job, slot, reason, claim)| ((job, slot, reason), claim))
                .unzip();
            let store = store.clone();
            let sent = Instant::now();
            self.call(
                "claim",
                async move { store.claim_many(&claims).await },
                move |result| Msg::ClaimedMany {
                    items,
                    sent,
                    result,
                },
            );
        }
    }

    fn claimed_many(
        &mut self,
        items: Vec<(Arc<JobDef>, EpochMs, Reason)>,
        sent: Instant,
        result: Result<Vec<ClaimOutcome>>,
    ) {
        match result {
            Ok(outcomes) if outcomes.len() == items.len() => {
                for ((job, slot, reason), outcome) in items.into_iter().zip(outcomes) {
                    self.claimed(job, slot, reason, sent, Ok(outcome));
                }
            }
            Ok(outcomes) => {
                let e = Error::store(
                    self.shared.backend.history().kind(),
                    "claim",
                    format!(
                        "a batch of {} claims was answered with {} outcomes",
                        items.len(),
                        outcomes.len()
                    ),
                );
                self.batch_failed(items, sent, &e);
            }
            Err(e) => self.batch_failed(items, sent, &e),
        }
    }

    /// Every claim of a failed batch has an unknown outcome: each is handled as a failed
    /// claim (reported once, then watched).
    fn batch_failed(
        &mut self,
        items: Vec<(Arc<JobDef>, EpochMs, Reason)>,
        sent: Instant,
        e: &Error,
    ) {
        let message = e.to_string();
        // One failed call, however many claims it carried: health counts calls.
        let failures_before = self.failures;
        for (i, (job, slot, reason)) in items.into_iter().enumerate() {
            let err = if i == 0 {
                Error::store(
                    self.shared.backend.history().kind(),
                    "claim",
                    message.clone(),
                )
            } else {
                Error::store(
                    self.shared.backend.history().kind(),
                    "claim",
                    "the batch this claim was in failed (reported above)",
                )
            };
            self.claimed(job, slot, reason, sent, Err(err));
        }
        self.failures = failures_before.saturating_add(1);
        self.shared
            .health
            .store_unreachable
            .store(self.failures >= UNREACHABLE_AFTER, Ordering::Relaxed);
    }

    fn claimed(
        &mut self,
        job: Arc<JobDef>,
        slot: EpochMs,
        reason: Reason,
        sent: Instant,
        result: Result<ClaimOutcome>,
    ) {
        let key = RunKey::new(job.name.clone(), slot);
        self.flight_end(&key);
        self.count(result.is_ok());
        let outcome = match &result {
            Ok(ClaimOutcome::Won(_)) => "won",
            Ok(ClaimOutcome::Taken) => "taken",
            Ok(ClaimOutcome::Late { .. }) => "late",
            Ok(ClaimOutcome::Overlap { .. }) => "overlap",
            Err(_) => "error",
        };
        telemetry::claim(&self.shared.cfg.instance_id, job.name.as_str(), outcome);
        let catching_up = reason == Reason::CatchUp;
        let skip = |reason| Event::Skip {
            job: job.name.clone(),
            slot: to_datetime(slot),
            reason,
        };
        match result {
            Ok(ClaimOutcome::Won(lease)) => {
                self.note_clock(lease.started_at, sent);
                if self.stopping {
                    // Won while stopping: hand it straight over before stop returns. [B-34]
                    self.side_release(lease);
                    return;
                }
                self.start_leased(job, lease);
                return;
            }
            Ok(ClaimOutcome::Taken) => {
                self.emit(skip(SkipReason::Taken));
                // A backup watches the run it lost. [B-14]
                self.watch(key, Watch::live());
            }
            Ok(ClaimOutcome::Late { .. }) => {
                self.note_late(&job.name, 1);
                self.emit(skip(SkipReason::Late));
                // Another instance may have claimed it in time, or may still (catch-up).
                let until = self.claimable_until(&job, slot);
                self.watch(key, Watch::pending(until));
            }
            Ok(ClaimOutcome::Overlap { running_slot }) => {
                self.emit(skip(SkipReason::Overlap));
                self.watch(RunKey::new(job.name.clone(), running_slot), Watch::live());
                // The skipped slot may still be started by another instance's catch-up.
                let until = self.claimable_until(&job, slot);
                self.watch(key, Watch::pending(until));
            }
            Err(e) => {
                // Unknown outcome: the claim may have committed. Watch the run; if it is
                // ours, it is released to a backup at once. [B-14]
                self.error("claim", Some(&job.name), &e);
                self.missed.insert(job.name.clone());
                let until = self.claimable_until(&job, slot);
                self.watch(key, Watch::pending(until));
            }
        }
        if catching_up {
            self.advance_catch_up(&job);
        }
    }

    fn slot_claimed(&mut self, job: Arc<JobDef>, slot: EpochMs, result: Result<SlotOutcome>) {
        self.count(result.is_ok());
        let outcome = match &result {
            Ok(SlotOutcome::Won) => "won",
            Ok(SlotOutcome::Late) => "late",
            Ok(SlotOutcome::Unknown) => "unknown",
            Ok(_) => "taken",
            Err(_) => "error",
        };
        telemetry::claim(&self.shared.cfg.instance_id, job.name.as_str(), outcome);
        if matches!(result, Ok(SlotOutcome::Late)) {
            self.note_late(&job.name, 1);
        }
        match result {
            Ok(SlotOutcome::Won) => {
                if self.stopping {
                    return;
                }
                let info = RunInfo {
                    job: job.name.clone(),
                    slot: to_datetime(slot),
                    attempt: 1,
                    fence: 0,
                    reason: Reason::Scheduled,
                    manual: false,
                    instance_id: self.shared.cfg.instance_id.to_string(),
                };
                let now = self.now_ms();
                let id = self.start_run(job.clone(), info, None, now, None);
                self.record_start(id);
            }
            Ok(outcome) => {
                let reason = match outcome {
                    SlotOutcome::Late => SkipReason::Late,
                    SlotOutcome::Unknown => SkipReason::Unknown,
                    _ => SkipReason::Taken,
                };
                self.emit(Event::Skip {
                    job: job.name.clone(),
                    slot: to_datetime(slot),
                    reason,
                });
            }
            Err(e) => {
                // [B-29] The answer is lost: skip rather than risk a duplicate.
                self.error("claim", Some(&job.name), &e);
                self.emit(Event::Skip {
                    job: job.name.clone(),
                    slot: to_datetime(slot),
                    reason: SkipReason::Unknown,
                });
            }
        }
    }

    fn timer(&mut self, timer: Timer) {
        match timer {
            Timer::Due { job, slot } => {
                let current = self
                    .jobs
                    .get(&job.name)
                    .is_some_and(|j| Arc::ptr_eq(j, &job));
                if !current || self.stopping {
                    return;
                }
                // Only the newest due slot is ever claimed. [B-10]
                let now = self.now_ms();
                let newest = job.schedule.newest_due(now).map_or(slot, |n| n.max(slot));
                if newest > slot {
                    // The timer fired after a newer slot was due (an overloaded or paused
                    // process): the armed slot and any between are not claimed here. Say so,
                    // and back the armed slot up in case another instance claimed it. [B-10]
                    let skipped = slots_between(&job.schedule, slot, newest);
                    self.note_late(&job.name, skipped);
                    self.emit(Event::Skip {
                        job: job.name.clone(),
                        slot: to_datetime(slot),
                        reason: SkipReason::Late,
                    });
                    if matches!(self.shared.backend, Backend::Lease(_)) {
                        let until = self.claimable_until(&job, slot);
                        self.watch(RunKey::new(job.name.clone(), slot), Watch::pending(until));
                    }
                }
                let slot = newest;
                let not_after =
                    slot.saturating_add(job.opts.max_late_ms().min(i64::MAX as u64) as EpochMs);
                self.claim(job.clone(), slot, Reason::Scheduled, not_after);
                self.schedule_next(&job, slot.max(now));
            }
            Timer::Heartbeat => self.heartbeat(),
            Timer::Watch => self.watch_tick(),
            Timer::Timeout { id } => self.feed_owner(id, OwnerInput::TimeoutElapsed),
            Timer::AbortGrace { id } => self.feed_owner(id, OwnerInput::AbortGraceElapsed),
            Timer::StopDeadline => self.stop_deadline(),
            Timer::Tick => {}
        }
    }

    // ----- commands ----------------------------------------------------------------------

    fn command(&mut self, cmd: Command) {
        match cmd {
            Command::Add(job) => {
                if !self.stopping {
                    self.jobs.insert(job.name.clone(), job.clone());
                    self.schedule_next(&job, self.now_ms());
                }
            }
            Command::Remove(name) => {
                self.jobs.remove(&name);
                self.catch_up.remove(&name);
                self.missed.remove(&name);
                self.watches
                    .retain(|k, w| k.job != name || w.state == WatchState::TakingOver);
            }
            Command::RunNow { job, data, reply } => {
                if self.stopping {
                    let _ = reply.send(Err(Error::State {
                        state: "stopping",
                        hint: "run_now after stop()",
                    }));
                    return;
                }
                let now = self.now_ms();
                let info = RunInfo {
                    job: job.name.clone(),
                    slot: to_datetime(now),
                    attempt: 1,
                    fence: 0,
                    reason: Reason::Manual,
                    manual: true,
                    instance_id: self.shared.cfg.instance_id.to_string(),
                };
                let id = self.start_run(job.clone(), info, None, now, data);
                if let Some(a) = self.active.get_mut(&id) {
                    a.manual_reply = Some(reply);
                }
                self.record_start(id);
            }
            Command::Stop { timeout, reply } => {
                self.stop_replies.push(reply);
                if !self.stopping {
                    self.begin_stop(timeout);
                }
            }
        }
    }

    /// Stops scheduling and watching, cancels every run; claims and takeovers in flight are
    /// waited for (a win is handed straight over), and so are result writes, until the
    /// stop timeout. [B-17, B-34]
    fn begin_stop(&mut self, timeout: Duration) {
        self.stopping = true;
        self.timers
            .retain(|_, t| !matches!(t, Timer::Due { .. } | Timer::Watch));
        self.watch_armed = false;
        self.watches
            .retain(|_, w| w.state == WatchState::TakingOver);
        self.catch_up.clear();
        self.missed.clear();
        let ids: Vec<u64> = self.active.keys().copied().collect();
        for id in ids {
            self.feed_owner(id, OwnerInput::Stop);
        }
        // A timeout too long to represent waits as long as it takes.
        if let Some(at) = Instant::now().checked_add(timeout) {
            self.arm(at, Timer::StopDeadline);
        }
    }

    /// Stop's timeout passed: runs still going are no longer heartbeated (a backup takes
    /// over after the lease) and their handlers are aborted; nothing else is waited for.
    fn stop_deadline(&mut self) {
        let ids: Vec<u64> = self.active.keys().copied().collect();
        for id in ids {
            self.feed_owner(id, OwnerInput::StopDeadline);
        }
        self.stop_forced = true;
    }

    // ----- runs this instance owns --------------------------------------------------------

    fn start_run(
        &mut self,
        job: Arc<JobDef>,
        info: RunInfo,
        lease: Option<Lease>,
        started_at: EpochMs,
        manual_data: Option<Data>,
    ) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        let now = Instant::now();
        let deadline = lease
            .as_ref()
            .and_then(|_| now.checked_add(self.lease_margin()));
        let control = Arc::new(RunControl::new(deadline));
        let scheduled_at = lease.as_ref().map_or(info.slot_ms(), |l| l.scheduled_at);
        if let Some(l) = &lease {
            self.held.insert(l.run.clone(), id);
        }
        let leased = lease.is_some();
        // Every run executes in a span naming it; its store writes are child spans.
        let span = tracing::info_span!(
            "anarchon.run",
            job = %info.job,
            slot = %info.slot.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            attempt = info.attempt,
            fence = info.fence,
            reason = info.reason.as_str(),
            instance = %info.instance_id,
            status = tracing::field::Empty,
        );
        if !info.manual {
            let lag = self.now_ms().saturating_sub(info.slot_ms()).max(0);
            telemetry::start_lag(
                &self.shared.cfg.instance_id,
                info.job.as_str(),
                info.reason,
                Duration::from_millis(lag as u64),
            );
        }
        self.emit(Event::Start(info.clone()));
        let ctx = JobContext {
            name: info.job.clone(),
            slot: info.slot,
            scheduled_at: to_datetime(scheduled_at),
            instance_id: self.shared.cfg.instance_id.clone(),
            manual: info.manual,
            attempt: info.attempt,
            reason: info.reason,
            fence: info.fence,
            signal: control.token(),
            data: Arc::new(Data::new()),
            control: control.clone(),
        };
        let scheduler_data = self.shared.cfg.data.clone();
        let tx = self.msgs.clone();
        let run_job = job.clone();
        use tracing::Instrument;
        let handle = tokio::spawn(
            async move {
                let job = run_job;
                let work = async move {
                    // Data functions run at each run's start; if one fails, the run fails. [B-31]
                    let mut data = Data::new();
                    for source in [scheduler_data.as_ref(), job.data.as_ref()]
                        .into_iter()
                        .flatten()
                    {
                        let d = source.resolve().await.map_err(|source| Error::Data {
                            job: job.name.to_string(),
                            source,
                        })?;
                        data = data.merged_with(&d);
                    }
                    if let Some(m) = manual_data {
                        data = data.merged_with(&m);
                    }
                    let ctx = JobContext {
                        data: Arc::new(data),
                        ..ctx
                    };
                    (job.handler)(ctx).await
                };
                let result = match AssertUnwindSafe(work).catch_unwind().await {
                    Ok(r) => r,
                    Err(panic) => {
                        let msg = panic
                            .downcast_ref::<&str>()
                            .map(|s| s.to_string())
                            .or_else(|| panic.downcast_ref::<String>().cloned())
                            .unwrap_or_else(|| "unknown panic".into());
                        Err(format!("handler panicked: {msg}").into())
                    }
                };
                let _ = tx.send(Msg::HandlerDone { id, result });
            }
            .instrument(span.clone()),
        );
        self.active.insert(
            id,
            Active {
                job: job.clone(),
                info,
                lease,
                machine: OwnerRun::new(leased),
                control,
                handler: Some(handle.abort_handle()),
                started: now,
                started_at,
                scheduled_at,
                span,
                last_renewed: now,
                start_written: None,
                manual_reply: None,
                sent_finish: None,
            },
        );
        if let Some(timeout) = job.opts.timeout {
            self.arm_after(timeout, Timer::Timeout { id });
        }
        if leased && !self.heartbeat_armed {
            self.heartbeat_armed = true;
            let every = self.heartbeat_every();
            self.arm_after(every, Timer::Heartbeat);
        }
        self.update_leases_held();
        id
    }

    fn start_leased(&mut self, job: Arc<JobDef>, lease: Lease) {
        let info = RunInfo {
            job: lease.run.job.clone(),
            slot: to_datetime(lease.run.slot),
            attempt: lease.attempt,
            fence: lease.fence,
            reason: lease.reason,
            manual: false,
            instance_id: lease.instance_id.clone(),
        };
        let started_at = lease.started_at;
        self.start_run(job, info, Some(lease), started_at, None);
    }

    /// Writes the `running` record of a run without a lease (manual, claim-only).
    fn record_start(&mut self, id: u64) {
        let Some(a) = self.active.get_mut(&id) else {
            return;
        };
        let rec = a.record(RunStatus::Running, None, None);
        let retention = a.job.opts.retention();
        let manual = a.info.manual;
        let (done, written) = oneshot::channel();
        a.start_written = Some(written);
        let store = self.shared.backend.clone();
        let shared = self.shared.clone();
        self.tasks.spawn(async move {
            let write = async {
                match &store {
                    Backend::Claim(s) if !manual => s.record(&rec, retention).await,
                    other => other.history().record_manual(&rec, retention).await,
                }
            };
            if let Err(e) = bounded(&shared, "record", write).await {
                let _ = shared.events.send(Event::Error {
                    operation: "record",
                    job: Some(rec.job.clone()),
                    message: e.to_string(),
                });
            }
            let _ = done.send(());
        });
    }

    /// Feeds an owner run's machine and carries out its effects.
    fn feed_owner(&mut self, id: u64, input: OwnerInput) {
        let Some(a) = self.active.get_mut(&id) else {
            return;
        };
        let effects = a.machine.handle(input);
        for effect in effects {
            self.owner_effect(id, effect);
        }
        if self
            .active
            .get(&id)
            .is_some_and(|a| a.machine.is_finished())
        {
            if let Some(a) = self.active.remove(&id)
                && let Some(l) = &a.lease
                && self.held.get(&l.run) == Some(&id)
            {
                self.held.remove(&l.run);
            }
            self.update_leases_held();
        }
    }

    fn owner_effect(&mut self, id: u64, effect: OwnerEffect) {
        let Some(a) = self.active.get_mut(&id) else {
            return;
        };
        match effect {
            OwnerEffect::Cancel(cause) => a.control.cancel(cause),
            OwnerEffect::Write(write) => self.write_result(id, write),
            OwnerEffect::ArmAbort => {
                let grace = self.shared.cfg.abort_grace;
                self.arm_after(grace, Timer::AbortGrace { id });
            }
            OwnerEffect::Abort => {
                if let Some(h) = a.handler.take() {
                    h.abort();
                }
            }
            OwnerEffect::Reply(outcome) => {
                let Some(reply) = a.manual_reply.take() else {
                    return;
                };
                let answer = match outcome {
                    Some((status, error)) => {
                        let error = match (status, error) {
                            (RunStatus::Interrupted, None) => Some("stopped".to_owned()),
                            (_, e) => e,
                        };
                        Ok(a.record(status, error, Some(self.shared.cfg.clock.now_ms())))
                    }
                    None => Err(Error::State {
                        state: "stopped",
                        hint: "the run outlived stop()'s timeout",
                    }),
                };
                let _ = reply.send(answer);
            }
            OwnerEffect::Emit(note) => self.owner_note(id, note),
        }
    }

    fn owner_note(&mut self, id: u64, note: Note) {
        let Some(a) = self.active.get(&id) else {
            return;
        };
        let info = a.info.clone();
        let job = a.job.clone();
        let key = a.lease.as_ref().map(|l| l.run.clone());
        let duration = a.started.elapsed();
        let terminal = !matches!(note, Note::Fenced);
        match note {
            Note::Fenced => self.emit(Event::Fenced(info.clone())),
            Note::Lost => {
                // [B-16] Another instance owns the run now; back it up.
                self.emit(Event::Lost(info.clone()));
                if let Some(key) = key {
                    self.watch(key, Watch::live());
                }
            }
            Note::Succeeded => self.emit(Event::Success {
                run: info.clone(),
                duration,
            }),
            Note::Failed(error) => self.emit(Event::Failure {
                run: info.clone(),
                error,
            }),
            Note::Interrupted(cause) => self.emit(Event::Interrupted {
                run: info.clone(),
                cause,
            }),
            Note::WriteFailed(message) => {
                self.emit(Event::Error {
                    operation: "finish",
                    job: Some(info.job.clone()),
                    message,
                });
                let retry = self
                    .active
                    .get_mut(&id)
                    .and_then(|a| Some((a.lease.clone()?, a.sent_finish.take()?)));
                match retry {
                    // A result whose write failed (a timeout, most often under load) is sent
                    // once more: it is fenced, so it records nothing over a newer attempt, and
                    // it spares a backup from running a finished handler again.
                    Some((lease, finish)) if !self.stopping => {
                        self.retry_finish(lease, finish, info.clone(), duration);
                    }
                    // The outcome is unknown: if the run is still ours in the store, the
                    // watch releases it to a backup once this run is gone here.
                    _ => {
                        if let Some(key) = key {
                            self.watch(key, Watch::live());
                        }
                    }
                }
            }
        }
        if terminal && info.reason == Reason::CatchUp {
            self.advance_catch_up(&job);
        }
    }

    fn write_result(&mut self, id: u64, write: Write) {
        let Some(a) = self.active.get_mut(&id) else {
            return;
        };
        let retention = a.job.opts.retention();
        let finished_at = self.shared.cfg.clock.now_ms();
        let span = a.span.clone();
        let Some(lease) = a.lease.clone() else {
            // Manual runs and claim-only runs: history only.
            let (status, error) = match &write {
                Write::Finish { status, error } => (*status, error.clone()),
                Write::Release => (RunStatus::Interrupted, Some("stopped".into())),
            };
            let rec = a.record(status, error, Some(finished_at));
            let store = self.shared.backend.clone();
            let manual = a.info.manual;
            let start_written = a.start_written.take();
            self.call_in(
                span,
                "record",
                async move {
                    if let Some(started) = start_written {
                        let _ = started.await;
                    }
                    match &store {
                        Backend::Claim(s) if !manual => s.record(&rec, retention).await,
                        other => other.history().record_manual(&rec, retention).await,
                    }
                    .map(|()| OwnerWrite::Done)
                },
                move |result| Msg::Written { id, result },
            );
            return;
        };
        let Backend::Lease(store) = self.shared.backend.clone() else {
            unreachable!("leases need a lease store")
        };
        match write {
            Write::Finish { status, error } => {
                let finish = Finish {
                    status,
                    error,
                    retention,
                };
                a.sent_finish = Some(finish.clone());
                if store.finish_batch_limit() > 1 {
                    // Results of runs that end in one turn of the loop go out together.
                    self.finish_queue.push((id, lease, finish));
                    return;
                }
                self.call_in(
                    span,
                    "finish",
                    async move { store.finish(&lease, &finish).await },
                    move |result| Msg::Written { id, result },
                );
            }
            Write::Release => {
                self.call_in(
                    span,
                    "release",
                    async move { store.release(&lease).await },
                    move |result| Msg::Written { id, result },
                );
            }
        }
    }

    /// Sends the takeovers queued in this turn, in batches the store takes in one round trip.
    fn flush_takeovers(&mut self) {
        if self.takeover_queue.is_empty() {
            return;
        }
        let Backend::Lease(store) = self.shared.backend.clone() else {
            return;
        };
        for batch in in_batches(
            std::mem::take(&mut self.takeover_queue),
            store.take_over_batch_limit(),
        ) {
            let keys: Vec<RunKey> = batch.iter().map(|t| t.run.clone()).collect();
            let store = store.clone();
            self.call(
                "take_over",
                async move { store.take_over_many(&batch).await },
                move |result| Msg::TookOverMany { keys, result },
            );
        }
    }

    /// Sends the results queued in this turn, in batches the store takes in one round trip.
    fn flush_finishes(&mut self) {
        if self.finish_queue.is_empty() {
            return;
        }
        let Backend::Lease(store) = self.shared.backend.clone() else {
            return;
        };
        for batch in in_batches(
            std::mem::take(&mut self.finish_queue),
            store.finish_batch_limit(),
        ) {
            let (ids, writes): (Vec<u64>, Vec<(Lease, Finish)>) = batch
                .into_iter()
                .map(|(id, lease, finish)| (id, (lease, finish)))
                .unzip();
            // A batch of one stays in its run's span; a larger one has no single parent.
            let parent = match ids.as_slice() {
                [id] => self
                    .active
                    .get(id)
                    .map_or_else(tracing::Span::none, |a| a.span.clone()),
                _ => tracing::Span::none(),
            };
            let store = store.clone();
            self.call_in(
                parent,
                "finish",
                async move { store.finish_many(&writes).await },
                move |result| Msg::WrittenMany { ids, result },
            );
        }
    }

    fn written_many(&mut self, ids: Vec<u64>, result: Result<Vec<OwnerWrite>>) {
        // One call, however many results it carried: health counts calls.
        self.count(result.is_ok());
        let answers = per_item(ids.len(), "results", result)
            .into_iter()
            .map(|a| match a {
                Ok(OwnerWrite::Done) => WriteAnswer::Done,
                Ok(OwnerWrite::Lost) => WriteAnswer::Lost,
                Err(message) => WriteAnswer::Failed(message),
            });
        for (id, answer) in ids.into_iter().zip(answers) {
            self.feed_owner(id, OwnerInput::WriteAnswered(answer));
        }
    }

    fn written(&mut self, id: u64, result: Result<OwnerWrite>) {
        self.count(result.is_ok());
        let answer = match result {
            Ok(OwnerWrite::Done) => WriteAnswer::Done,
            Ok(OwnerWrite::Lost) => WriteAnswer::Lost,
            Err(e) => WriteAnswer::Failed(e.to_string()),
        };
        self.feed_owner(id, OwnerInput::WriteAnswered(answer));
    }

    fn handler_done(&mut self, id: u64, result: std::result::Result<(), BoxError>) {
        let Some(a) = self.active.get_mut(&id) else {
            return;
        };
        a.handler = None;
        let cause = a.control.cause();
        let status = match (&result, cause) {
            (Ok(()), _) => "success",
            (Err(_), Some(_)) => "interrupted",
            (Err(_), None) => "failure",
        };
        a.span.record("status", status);
        telemetry::handler(
            &self.shared.cfg.instance_id,
            a.info.job.as_str(),
            status,
            a.started.elapsed(),
        );
        let result = result.map_err(|e| telemetry::error_chain(&*e));
        self.feed_owner(id, OwnerInput::HandlerReturned { result, cause });
    }

    /// Releases a lease this instance holds but will not run (won while stopping, or an
    /// orphan of its own), tracked so stop waits for it.
    /// Sends a result once more after its first write failed; the answer comes back as
    /// `Msg::SideFinished`. Counted with the side writes, so `stop()` waits for it.
    fn retry_finish(&mut self, lease: Lease, finish: Finish, info: RunInfo, duration: Duration) {
        let Backend::Lease(store) = self.shared.backend.clone() else {
            return;
        };
        self.side_writes += 1;
        let sent = finish.clone();
        self.call(
            "finish",
            async move { store.finish(&lease, &sent).await },
            move |result| Msg::SideFinished {
                info,
                finish,
                duration,
                result,
            },
        );
    }

    /// The answer to a result sent once more: reported as the first write's answer would
    /// have been; a second failure hands the run to the watch (a backup continues it).
    fn side_finished(
        &mut self,
        info: RunInfo,
        finish: Finish,
        duration: Duration,
        result: Result<OwnerWrite>,
    ) {
        self.side_writes = self.side_writes.saturating_sub(1);
        self.count(result.is_ok());
        let key = RunKey::new(info.job.clone(), info.slot_ms());
        match result {
            Ok(OwnerWrite::Done) if finish.status == RunStatus::Succeeded => {
                self.emit(Event::Success {
                    run: info,
                    duration,
                })
            }
            Ok(OwnerWrite::Done) => self.emit(Event::Failure {
                run: info,
                error: finish.error.unwrap_or_else(|| "failed".into()),
            }),
            Ok(OwnerWrite::Lost) => {
                // [B-16] Another attempt owns the run now; back it up.
                self.emit(Event::Lost(info));
                self.watch(key, Watch::live());
            }
            Err(e) => {
                self.error("finish", Some(&key.job), &e);
                self.watch(key, Watch::live());
            }
        }
    }

    fn side_release(&mut self, lease: Lease) {
        let Backend::Lease(store) = self.shared.backend.clone() else {
            return;
        };
        self.side_writes += 1;
        let key = lease.run.clone();
        self.call(
            "release",
            async move { store.release(&lease).await },
            move |result| Msg::SideReleased { key, result },
        );
    }

    // ----- heartbeat and self-fencing ----------------------------------------------------

    fn heartbeat(&mut self) {
        let lease_ms = self.lease_ms();
        let now = Instant::now();
        // Self-fencing: cancel before the lease can have expired, judged on the monotonic
        // clock from the last renewal that succeeded (counted from when it was sent).
        let fence_after = self.lease_margin();
        let overdue: Vec<u64> = self
            .active
            .iter()
            .filter(|(_, a)| a.machine.renews() && now - a.last_renewed >= fence_after)
            .map(|(id, _)| *id)
            .collect();
        for id in overdue {
            self.feed_owner(id, OwnerInput::RenewalOverdue);
        }
        let (ids, leases): (Vec<u64>, Vec<Lease>) = self
            .active
            .iter()
            .filter(|(_, a)| a.machine.renews())
            .filter_map(|(id, a)| a.lease.clone().map(|l| (*id, l)))
            .unzip();
        if ids.is_empty() {
            self.heartbeat_armed = false;
            return;
        }
        if !self.heartbeat_in_flight {
            self.heartbeat_in_flight = true;
            let Backend::Lease(store) = self.shared.backend.clone() else {
                return;
            };
            let sent = now;
            self.call(
                "heartbeat",
                async move { store.heartbeat(&leases, lease_ms).await },
                move |result| Msg::Heartbeat { ids, sent, result },
            );
        }
        let every = self.heartbeat_every();
        self.arm_after(every, Timer::Heartbeat);
    }

    fn heartbeat_done(&mut self, ids: Vec<u64>, sent: Instant, result: Result<Vec<Renewal>>) {
        self.heartbeat_in_flight = false;
        self.count(result.is_ok());
        match result {
            Ok(renewals) => {
                let mut store_now = None;
                let deadline = sent.checked_add(self.lease_margin());
                for (id, renewal) in ids.into_iter().zip(renewals) {
                    let Some(a) = self.active.get_mut(&id) else {
                        continue;
                    };
                    if !a.machine.renews() {
                        continue;
                    }
                    match renewal {
                        Renewal::Renewed { expires_at } => {
                            a.last_renewed = a.last_renewed.max(sent);
                            if let Some(l) = a.lease.as_mut() {
                                l.expires_at = expires_at;
                            }
                            if !a.control.check() {
                                a.control.set_deadline(deadline);
                            }
                            store_now = Some(
                                expires_at
                                    .saturating_sub(self.shared.cfg.timing.lease_ms() as EpochMs),
                            );
                        }
                        // [B-16] Another instance owns the run now.
                        Renewal::Lost => self.feed_owner(id, OwnerInput::RenewalLost),
                    }
                }
                if let Some(store_now) = store_now {
                    self.note_clock(store_now, sent);
                    let due = self
                        .last_skew_event
                        .is_none_or(|t| t.elapsed() > Duration::from_secs(60));
                    let rtt = sent.elapsed().as_millis() as i64;
                    let skew = self.now_ms().saturating_sub(store_now);
                    if due && skew.saturating_abs() - rtt > self.shared.cfg.skew_threshold_ms as i64
                    {
                        self.last_skew_event = Some(Instant::now());
                        check_skew(&self.shared, store_now, rtt);
                    }
                }
            }
            Err(e) => self.error("heartbeat", None, &e),
        }
    }

    // ----- backups: watch and takeover ---------------------------------------------------

    /// Starts watching a run of a registered job (or upgrades a pending watch once the run
    /// was seen). [B-14]
    fn watch(&mut self, key: RunKey, watch: Watch) {
        if self.stopping || !self.jobs.contains_key(&key.job) {
            return;
        }
        match self.watches.get_mut(&key) {
            Some(existing) => {
                if matches!(existing.state, WatchState::Pending { .. })
                    && watch.state == WatchState::Live
                {
                    existing.state = WatchState::Live;
                }
            }
            None => {
                self.watches.insert(key, watch);
            }
        }
        if !self.watch_armed {
            self.watch_armed = true;
            let every = self.heartbeat_every();
            self.arm_after(every, Timer::Watch);
        }
    }

    fn watch_tick(&mut self) {
        let asked: Vec<RunKey> = self
            .watches
            .iter()
            .filter(|(_, w)| w.polled())
            .map(|(k, _)| k.clone())
            .collect();
        if self.watches.is_empty() {
            self.watch_armed = false;
            return;
        }
        if !self.watch_in_flight && !asked.is_empty() {
            self.watch_in_flight = true;
            self.read_runs(asked, true);
        }
        let every = self.heartbeat_every();
        self.arm_after(every, Timer::Watch);
    }

    fn read_runs(&mut self, asked: Vec<RunKey>, poll: bool) {
        let Backend::Lease(store) = self.shared.backend.clone() else {
            return;
        };
        let keys = asked.clone();
        let sent = Instant::now();
        self.call(
            "runs",
            async move { store.runs(&keys).await },
            move |result| Msg::Watched {
                asked,
                poll,
                sent,
                result,
            },
        );
    }

    /// Reads the runs released in this turn in one call (a burst of release notifications,
    /// a stopping instance handing over many runs, is one read, not one per run).
    fn flush_reads(&mut self) {
        if self.read_queue.is_empty() {
            return;
        }
        let mut keys = std::mem::take(&mut self.read_queue);
        keys.sort();
        keys.dedup();
        self.read_runs(keys, false);
    }

    /// A release notification: look at that run now instead of at the next poll. [B-17]
    fn released(&mut self, key: RunKey) {
        self.feed_watch(&key, WatchInput::Released);
    }

    fn watched(&mut self, asked: Vec<RunKey>, sent: Instant, views: Vec<RunView>) {
        let mut by_key: HashMap<RunKey, RunView> =
            views.into_iter().map(|v| (v.run.clone(), v)).collect();
        if let Some(v) = by_key.values().next() {
            let store_now = v.store_now;
            self.note_clock(store_now, sent);
        }
        for key in asked {
            match by_key.remove(&key) {
                Some(view) => self.feed_watch(&key, WatchInput::Seen(view)),
                None => self.feed_watch(&key, WatchInput::Missing),
            }
        }
    }

    /// Feeds a watched run's machine and carries out its effects.
    fn feed_watch(&mut self, key: &RunKey, input: WatchInput) {
        let now = self.now_ms();
        let job = self.jobs.get(&key.job).cloned();
        let here = self.is_here(key);
        let Some(w) = self.watches.get_mut(key) else {
            // No longer watched (job removed, stop): a takeover won now is handed back.
            if let WatchInput::TakeoverAnswered(Ok(TakeoverOutcome::Won(lease))) = input {
                self.side_release(lease);
            }
            return;
        };
        let instance_id = self.shared.cfg.instance_id.clone();
        let facts = Facts {
            now,
            newest_due: job.as_ref().and_then(|j| j.schedule.newest_due(now)),
            instance_id: &instance_id,
            here,
            stopping: self.stopping,
        };
        if let WatchInput::Seen(view) = &input {
            w.seen = Some(view.clone());
        }
        let seen = w.seen.clone();
        let effects = w.handle(&facts, input);
        if w.is_gone() {
            self.watches.remove(key);
        }
        for effect in effects {
            self.watch_effect(key, job.clone(), seen.as_ref(), effect);
        }
    }

    fn watch_effect(
        &mut self,
        key: &RunKey,
        job: Option<Arc<JobDef>>,
        seen: Option<&RunView>,
        effect: WatchEffect,
    ) {
        let info = || RunInfo {
            job: key.job.clone(),
            slot: to_datetime(key.slot),
            attempt: seen.map_or(0, |v| v.attempt),
            fence: 0,
            reason: Reason::Takeover,
            manual: false,
            instance_id: seen.and_then(|v| v.owner.clone()).unwrap_or_default(),
        };
        match effect {
            // Read with the other runs released in this turn: one call. [B-17]
            WatchEffect::Read => self.read_queue.push(key.clone()),
            WatchEffect::TakeOver {
                seen_attempt,
                superseded,
            } => {
                let (Some(job), Backend::Lease(store)) = (job, self.shared.backend.clone()) else {
                    self.watches.remove(key);
                    return;
                };
                let takeover = Takeover {
                    run: key.clone(),
                    seen_attempt,
                    instance_id: self.shared.cfg.instance_id.to_string(),
                    lease_ms: self.lease_ms(),
                    max_attempts: job.opts.max_attempts,
                    superseded,
                    not_after: self.call_deadline(),
                };
                self.flight_start(key);
                if store.take_over_batch_limit() > 1 {
                    // Takeovers decided in one turn (an instance with many runs died) go
                    // out together.
                    self.takeover_queue.push(takeover);
                    return;
                }
                let key = key.clone();
                self.call(
                    "take_over",
                    async move { store.take_over(&takeover).await },
                    move |result| Msg::TookOver { key, result },
                );
            }
            WatchEffect::Start(lease) => match job {
                Some(job) => self.start_leased(job, lease),
                None => self.side_release(lease),
            },
            WatchEffect::Release(lease) => self.side_release(lease),
            WatchEffect::ReleaseOrphan { attempt } => {
                let lease = Lease {
                    run: key.clone(),
                    attempt,
                    fence: 0,
                    instance_id: self.shared.cfg.instance_id.to_string(),
                    reason: Reason::Takeover,
                    scheduled_at: key.slot,
                    started_at: 0,
                    expires_at: 0,
                };
                tracing::info!(
                    run = %key,
                    attempt,
                    "releasing a run this instance claimed after it had given up on the claim"
                );
                self.side_release(lease);
            }
            WatchEffect::Emit(note) => match note {
                WatchNote::Exhausted => {
                    let max = job.as_ref().map_or(0, |j| j.opts.max_attempts);
                    self.emit(Event::Failure {
                        run: info(),
                        error: format!("exhausted: started {max} times without finishing"),
                    });
                }
                WatchNote::Replaced => self.emit(Event::Interrupted {
                    run: info(),
                    cause: InterruptCause::ReplacedByNextSlot,
                }),
                WatchNote::TakeoverFailed(message) => self.emit(Event::Error {
                    operation: "take_over",
                    job: Some(key.job.clone()),
                    message,
                }),
            },
            WatchEffect::ClaimNewest => {
                // The new slot may start now: it may have been skipped for overlap while the
                // dead run still looked live. [B-15]
                if let Some(job) = job
                    && !self.stopping
                    && let Some(slot) = job.schedule.newest_due(self.now_ms())
                {
                    let not_after =
                        slot.saturating_add(job.opts.max_late_ms().min(i64::MAX as u64) as EpochMs);
                    self.claim(job, slot, Reason::Scheduled, not_after);
                }
            }
        }
    }

    // ----- messages ----------------------------------------------------------------------

    fn message(&mut self, msg: Msg) {
        match msg {
            Msg::Claimed {
                job,
                slot,
                reason,
                sent,
                result,
            } => self.claimed(job, slot, reason, sent, result),
            Msg::ClaimedMany {
                items,
                sent,
                result,
            } => self.claimed_many(items, sent, result),
            Msg::SlotClaimed { job, slot, result } => self.slot_claimed(job, slot, result),
            Msg::Heartbeat { ids, sent, result } => self.heartbeat_done(ids, sent, result),
            Msg::Watched {
                asked,
                poll,
                sent,
                result,
            } => {
                if poll {
                    self.watch_in_flight = false;
                }
                self.count(result.is_ok());
                match result {
                    Ok(views) => self.watched(asked, sent, views),
                    Err(e) => self.error("runs", None, &e),
                }
            }
            Msg::TookOver { key, result } => {
                self.flight_end(&key);
                self.count(result.is_ok());
                let answer = result.map_err(|e| e.to_string());
                self.feed_watch(&key, WatchInput::TakeoverAnswered(answer));
            }
            Msg::TookOverMany { keys, result } => {
                // One call, however many takeovers it carried: health counts calls.
                self.count(result.is_ok());
                let answers = per_item(keys.len(), "takeovers", result);
                for (key, answer) in keys.into_iter().zip(answers) {
                    self.flight_end(&key);
                    self.feed_watch(&key, WatchInput::TakeoverAnswered(answer));
                }
            }
            Msg::Unfinished { result } => {
                self.count(result.is_ok());
                match result {
                    Ok(views) => {
                        for v in views {
                            // Orphans are taken over, the rest watched. [B-19]
                            let key = v.run.clone();
                            self.watch(key.clone(), Watch::live());
                            self.feed_watch(&key, WatchInput::Seen(v));
                        }
                    }
                    Err(e) => self.error("unfinished_runs", None, &e),
                }
                self.start_catch_up();
            }
            Msg::HandlerDone { id, result } => self.handler_done(id, result),
            Msg::Written { id, result } => self.written(id, result),
            Msg::WrittenMany { ids, result } => self.written_many(ids, result),
            Msg::SideFinished {
                info,
                finish,
                duration,
                result,
            } => self.side_finished(info, finish, duration, result),
            Msg::SideReleased { key, result } => {
                self.side_writes = self.side_writes.saturating_sub(1);
                self.count(result.is_ok());
                if let Err(e) = result {
                    self.error("release", Some(&key.job), &e);
                    // Unknown: keep watching it (not while stopping).
                    self.watch(key, Watch::live());
                }
            }
        }
    }
}
