//! The driver task: one loop per scheduler owning every timer, lease and watch.
//!
//! The loop never awaits the store: each store call runs in a task of its own, bounded by
//! `store_timeout`, and reports back as a [`Msg`]. So a hung connection delays one answer,
//! never the heartbeats of other runs or the watchdog's view of the loop.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Backend, Command, JobDef, Shared};
use crate::context::{Data, JobContext};
use crate::error::{BoxError, Error, Result};
use crate::event::{Event, RunInfo, SkipReason};
use crate::history::{HistoryRecord, Reason, RunStatus};
use crate::options::CatchUp;
use crate::slot::Schedule;
use crate::store::{
    ClaimOutcome, EpochMs, Finish, JobName, Lease, LeaseClaim, OwnerWrite, Prepare, Renewal,
    RunKey, RunView, SlotClaim, SlotOutcome, Takeover, TakeoverOutcome,
};

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

/// `start()`'s synchronous part: prepare the store and check the clocks. [B-20, B-33]
pub(crate) async fn prepare(shared: &Arc<Shared>, jobs: &[Arc<JobDef>]) -> Result<()> {
    let store = shared.backend.history();
    let prep = Prepare {
        jobs: jobs.iter().map(|j| j.name.clone()).collect(),
        instance_id: shared.cfg.instance_id.to_string(),
    };
    bounded(shared, "prepare", store.prepare(&prep)).await?;
    let store_now = bounded(shared, "now", store.now()).await?;
    check_skew(shared, store_now, 0);
    Ok(())
}

fn check_skew(shared: &Shared, store_now: EpochMs, allowance: i64) {
    let skew = shared.cfg.clock.now_ms() - store_now;
    if skew.abs() - allowance > shared.cfg.skew_threshold_ms as i64 {
        tracing::warn!(
            skew_ms = skew,
            "this instance's clock differs from the store's by {skew} ms: slots follow the \
             instance clock and leases the store's, keep clocks NTP-synced"
        );
        let _ = shared.events.send(Event::ClockSkew { skew_ms: skew });
    }
}

enum Timer {
    Due { job: Arc<JobDef>, slot: EpochMs },
    Heartbeat,
    Watch,
    Timeout { id: u64 },
    StopDeadline,
    Tick,
}

enum Msg {
    Claimed {
        job: Arc<JobDef>,
        slot: EpochMs,
        reason: Reason,
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
        result: Result<Vec<RunView>>,
    },
    TookOver {
        job: Arc<JobDef>,
        view: RunView,
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
        write: Write,
        result: Result<OwnerWrite>,
    },
}

#[derive(Debug, Clone)]
enum Write {
    Finish {
        status: RunStatus,
        error: Option<String>,
    },
    Release,
}

#[derive(Debug, PartialEq, Eq)]
enum Phase {
    /// The handler runs; the lease is renewed.
    Running,
    /// The result is written or being written (handler returned, timed out), or must not be
    /// (lease lost): no more renewals, and a later return of the handler is ignored.
    Done,
}

struct Active {
    job: Arc<JobDef>,
    info: RunInfo,
    lease: Option<Lease>,
    token: CancellationToken,
    cause: Arc<OnceLock<&'static str>>,
    started: Instant,
    started_at: EpochMs,
    scheduled_at: EpochMs,
    last_renewed: Instant,
    fenced: bool,
    phase: Phase,
    /// The handler task has returned.
    returned: bool,
    /// A finish/release/record write is in flight.
    writing: bool,
    /// Resolves when the `running` history record of a manual or claim-only run is written,
    /// so its final record is never written before it (a pooled store could reorder them).
    start_written: Option<oneshot::Receiver<()>>,
    manual_reply: Option<oneshot::Sender<Result<HistoryRecord>>>,
}

impl Active {
    fn cancel(&self, cause: &'static str) {
        let _ = self.cause.set(cause);
        self.token.cancel();
    }

    fn record(
        &self,
        status: RunStatus,
        error: Option<String>,
        finished_at: Option<EpochMs>,
    ) -> HistoryRecord {
        HistoryRecord {
            job: self.info.job.clone(),
            slot: self.info.slot,
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
    watch: BTreeSet<RunKey>,
    taking_over: BTreeSet<RunKey>,
    heartbeat_armed: bool,
    heartbeat_in_flight: bool,
    watch_armed: bool,
    watch_in_flight: bool,
    catch_up: HashMap<JobName, VecDeque<EpochMs>>,
    msgs: mpsc::UnboundedSender<Msg>,
    tasks: JoinSet<()>,
    stopping: Option<oneshot::Sender<()>>,
    last_skew_event: Option<Instant>,
}

/// The driver task's body.
pub(crate) async fn run(
    shared: Arc<Shared>,
    jobs: Vec<Arc<JobDef>>,
    mut commands: mpsc::UnboundedReceiver<Command>,
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
        watch: BTreeSet::new(),
        taking_over: BTreeSet::new(),
        heartbeat_armed: false,
        heartbeat_in_flight: false,
        watch_armed: false,
        watch_in_flight: false,
        catch_up: HashMap::new(),
        msgs,
        tasks: JoinSet::new(),
        stopping: None,
        last_skew_event: None,
    };
    d.begin(jobs);
    let tick = (d.shared.cfg.stall_after / 4).max(Duration::from_millis(50));
    d.arm(Instant::now() + tick, Timer::Tick);
    loop {
        d.shared
            .health
            .last_turn_ms
            .store(mono_ms(), Ordering::Relaxed);
        d.shared.health.leases_held.store(
            d.active
                .values()
                .filter(|a| a.lease.is_some() && a.phase != Phase::Done)
                .count() as u64,
            Ordering::Relaxed,
        );
        let next = d.timers.keys().next().map(|(t, _)| *t);
        tokio::select! {
            biased;
            Some(cmd) = commands.recv() => d.command(cmd),
            Some(msg) = inbox.recv() => d.message(msg),
            Some(key) = recv_release(&mut releases) => d.released(key),
            _ = sleep_until(next) => {
                let now = Instant::now();
                while let Some(entry) = d.timers.first_entry() {
                    if entry.key().0 > now { break; }
                    let timer = entry.remove();
                    if let Timer::Tick = timer {
                        d.arm(now + tick, Timer::Tick);
                    } else {
                        d.timer(timer);
                    }
                }
            }
            // Let joined store tasks go (their results came through `inbox`).
            Some(_) = d.tasks.join_next(), if !d.tasks.is_empty() => {}
        }
        if d.stopping.is_some() && d.active.is_empty() {
            break;
        }
    }
    // Stop: nothing may reach the store after `stop()` returns. [B-34]
    d.tasks.shutdown().await;
    let _ = bounded(&d.shared, "close", d.shared.backend.history().close()).await;
    watchdog_stop.store(true, Ordering::Relaxed);
    if let Some(reply) = d.stopping.take() {
        let _ = reply.send(());
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
                    let _ = shared.events.send(Event::Stalled { for_ms: idle });
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

    fn instant_at(&self, epoch_ms: EpochMs) -> Instant {
        let delta = (epoch_ms - self.now_ms()).max(0) as u64;
        Instant::now() + Duration::from_millis(delta)
    }

    fn arm(&mut self, at: Instant, timer: Timer) {
        self.seq += 1;
        self.timers.insert((at, self.seq), timer);
    }

    fn lease_ms(&self) -> u64 {
        self.shared.cfg.timing.lease_ms
    }

    fn heartbeat_every(&self) -> Duration {
        Duration::from_millis(self.shared.cfg.timing.heartbeat_ms)
    }

    fn emit(&self, event: Event) {
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
                tracing::debug!(%job, slot, reason = reason.as_str(), "skip")
            }
            other => tracing::info!(event = other.name(), "{other:?}"),
        }
        let _ = self.shared.events.send(event);
    }

    fn error(&self, operation: &'static str, job: Option<&JobName>, e: &Error) {
        self.emit(Event::Error {
            operation,
            job: job.cloned(),
            message: e.to_string(),
        });
    }

    /// Spawns a bounded store call whose answer comes back as a message.
    fn call<T, F, M>(&mut self, operation: &'static str, fut: F, to_msg: M)
    where
        T: Send + 'static,
        F: std::future::Future<Output = Result<T>> + Send + 'static,
        M: FnOnce(Result<T>) -> Msg + Send + 'static,
    {
        let shared = self.shared.clone();
        let tx = self.msgs.clone();
        self.tasks.spawn(async move {
            let result = bounded(&shared, operation, fut).await;
            let _ = tx.send(to_msg(result));
        });
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
        if self.stopping.is_some() {
            return;
        }
        let now = self.now_ms();
        let jobs: Vec<Arc<JobDef>> = self.jobs.values().cloned().collect();
        for job in jobs {
            let window = job.opts.catch_up_ms as EpochMs;
            if window == 0 {
                continue;
            }
            let slots: VecDeque<EpochMs> = match job.opts.catch_up {
                CatchUp::None => continue,
                CatchUp::Latest => job
                    .schedule
                    .newest_due(now)
                    .filter(|s| now - s <= window)
                    .into_iter()
                    .collect(),
                CatchUp::All { max } => job.schedule.due_between(now - window - 1, now, max).into(),
            };
            if !slots.is_empty() {
                self.catch_up.insert(job.name.clone(), slots);
                self.advance_catch_up(&job);
            }
        }
    }

    /// Claims the next queued catch-up slot of a job, one at a time.
    fn advance_catch_up(&mut self, job: &Arc<JobDef>) {
        if self.stopping.is_some() {
            return;
        }
        let Some(queue) = self.catch_up.get_mut(&job.name) else {
            return;
        };
        let Some(slot) = queue.pop_front() else {
            self.catch_up.remove(&job.name);
            return;
        };
        let not_after = slot + job.opts.catch_up_ms as EpochMs;
        self.claim(job.clone(), slot, Reason::CatchUp, not_after);
    }

    // ----- scheduling --------------------------------------------------------------------

    fn schedule_next(&mut self, job: &Arc<JobDef>, after: EpochMs) {
        let Some(slot) = job.schedule.next_after(after) else {
            return;
        };
        let mut jitter = job.opts.jitter_ms;
        if let Schedule::Every { interval_ms, .. } = job.schedule {
            // Never jitter past the next slot: a fast job would skip slots.
            jitter = jitter.min(interval_ms / 2);
        }
        let at = self.instant_at(slot + crate::slot::jitter(jitter) as EpochMs);
        self.arm(
            at,
            Timer::Due {
                job: job.clone(),
                slot,
            },
        );
    }

    fn claim(&mut self, job: Arc<JobDef>, slot: EpochMs, reason: Reason, not_after: EpochMs) {
        let run = RunKey::new(job.name.clone(), slot);
        match self.shared.backend.clone() {
            Backend::Lease(store) => {
                let claim = LeaseClaim {
                    run,
                    scheduled_at: slot,
                    instance_id: self.shared.cfg.instance_id.to_string(),
                    lease_ms: self.lease_ms(),
                    not_after,
                    overlap: job.opts.overlap,
                    reason,
                    retention: job.opts.retention(),
                };
                self.call(
                    "claim",
                    async move { store.claim(&claim).await },
                    move |result| Msg::Claimed {
                        job,
                        slot,
                        reason,
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

    fn timer(&mut self, timer: Timer) {
        match timer {
            Timer::Due { job, slot } => {
                let current = self
                    .jobs
                    .get(&job.name)
                    .is_some_and(|j| Arc::ptr_eq(j, &job));
                if !current || self.stopping.is_some() {
                    return;
                }
                // Only the newest due slot is ever claimed. [B-10]
                let now = self.now_ms();
                let slot = job.schedule.newest_due(now).map_or(slot, |n| n.max(slot));
                self.claim(
                    job.clone(),
                    slot,
                    Reason::Scheduled,
                    slot + job.opts.max_late_ms as EpochMs,
                );
                self.schedule_next(&job, slot.max(now));
            }
            Timer::Heartbeat => self.heartbeat(),
            Timer::Watch => self.watch_tick(),
            Timer::Timeout { id } => self.timed_out(id),
            Timer::StopDeadline => self.abandon_all(),
            Timer::Tick => {}
        }
    }

    // ----- commands ----------------------------------------------------------------------

    fn command(&mut self, cmd: Command) {
        match cmd {
            Command::Add(job) => {
                if self.stopping.is_none() {
                    self.jobs.insert(job.name.clone(), job.clone());
                    self.schedule_next(&job, self.now_ms());
                }
            }
            Command::Remove(name) => {
                self.jobs.remove(&name);
                self.catch_up.remove(&name);
                self.watch.retain(|k| k.job != name);
            }
            Command::RunNow { job, data, reply } => {
                if self.stopping.is_some() {
                    let _ = reply.send(Err(Error::State {
                        state: "stopping",
                        hint: "run_now after stop()",
                    }));
                    return;
                }
                let now = self.now_ms();
                let info = RunInfo {
                    job: job.name.clone(),
                    slot: now,
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
                self.stopping = Some(reply);
                self.timers
                    .retain(|_, t| !matches!(t, Timer::Due { .. } | Timer::Watch));
                self.watch.clear();
                self.catch_up.clear();
                for a in self.active.values() {
                    a.cancel("stopping");
                }
                let at = Instant::now() + timeout;
                self.arm(at, Timer::StopDeadline);
            }
        }
    }

    /// Stop's timeout passed: runs still going are no longer heartbeated, so a backup takes
    /// over after the lease. [B-17]
    fn abandon_all(&mut self) {
        let ids: Vec<u64> = self.active.keys().copied().collect();
        for id in ids {
            if let Some(a) = self.active.remove(&id) {
                if a.phase == Phase::Running {
                    self.emit(Event::Interrupted {
                        run: a.info.clone(),
                        cause: "stop timeout".into(),
                    });
                }
                if let Some(reply) = a.manual_reply {
                    let _ = reply.send(Err(Error::State {
                        state: "stopped",
                        hint: "the run outlived stop()'s timeout",
                    }));
                }
            }
        }
    }

    // ----- runs --------------------------------------------------------------------------

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
        let token = CancellationToken::new();
        let cause = Arc::new(OnceLock::new());
        let scheduled_at = lease.as_ref().map_or(info.slot, |l| l.scheduled_at);
        let has_lease = lease.is_some();
        self.active.insert(
            id,
            Active {
                job: job.clone(),
                info: info.clone(),
                lease,
                token: token.clone(),
                cause: cause.clone(),
                started: Instant::now(),
                started_at,
                scheduled_at,
                last_renewed: Instant::now(),
                fenced: false,
                phase: Phase::Running,
                returned: false,
                writing: false,
                start_written: None,
                manual_reply: None,
            },
        );
        self.emit(Event::Start(info.clone()));
        let ctx = JobContext {
            name: info.job.clone(),
            slot: info.slot,
            scheduled_at,
            instance_id: self.shared.cfg.instance_id.clone(),
            manual: info.manual,
            attempt: info.attempt,
            reason: info.reason,
            fence: info.fence,
            signal: token,
            data: Arc::new(Data::new()),
            cause,
        };
        let scheduler_data = self.shared.cfg.data.clone();
        let tx = self.msgs.clone();
        tokio::spawn(async move {
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
        });
        if let Some(ms) = self.active[&id].job.opts.timeout_ms {
            self.arm(
                Instant::now() + Duration::from_millis(ms),
                Timer::Timeout { id },
            );
        }
        if has_lease && !self.heartbeat_armed {
            self.heartbeat_armed = true;
            let at = Instant::now() + self.heartbeat_every();
            self.arm(at, Timer::Heartbeat);
        }
        id
    }

    fn start_leased(&mut self, job: Arc<JobDef>, lease: Lease) {
        let info = RunInfo {
            job: lease.run.job.clone(),
            slot: lease.run.slot,
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

    /// [B-21] The timeout passed: cancel the signal and record the attempt as failed.
    fn timed_out(&mut self, id: u64) {
        let Some(a) = self.active.get_mut(&id) else {
            return;
        };
        if a.phase != Phase::Running {
            return;
        }
        a.cancel("timed out");
        self.write_result(
            id,
            Write::Finish {
                status: RunStatus::Failed,
                error: Some("timed out".into()),
            },
        );
    }

    fn handler_done(&mut self, id: u64, result: std::result::Result<(), BoxError>) {
        let Some(a) = self.active.get_mut(&id) else {
            return;
        };
        a.returned = true;
        if a.phase != Phase::Running {
            // Timed out (recorded already) or lost (must not be recorded).
            self.reap(id);
            return;
        }
        let cause = a.cause.get().copied();
        let write = match result {
            Ok(()) => Write::Finish {
                status: RunStatus::Succeeded,
                error: None,
            },
            // A handler that returns an error because it was stopped hands the run over
            // [B-17]; without a lease (manual, claim-only) the run is recorded `interrupted`.
            Err(_) if matches!(cause, Some("stopping" | "lease not renewed")) => Write::Release,
            Err(e) => Write::Finish {
                status: RunStatus::Failed,
                error: Some(e.to_string()),
            },
        };
        self.write_result(id, write);
    }

    /// Forgets a run once its handler returned and no write is in flight.
    fn reap(&mut self, id: u64) {
        if self
            .active
            .get(&id)
            .is_some_and(|a| a.returned && !a.writing)
        {
            self.active.remove(&id);
        }
    }

    fn write_result(&mut self, id: u64, write: Write) {
        let Some(a) = self.active.get_mut(&id) else {
            return;
        };
        a.phase = Phase::Done;
        a.writing = true;
        let retention = a.job.opts.retention();
        let finished_at = self.shared.cfg.clock.now_ms();
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
            self.call(
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
                move |result| Msg::Written { id, write, result },
            );
            return;
        };
        let Backend::Lease(store) = self.shared.backend.clone() else {
            unreachable!("leases need a lease store")
        };
        match write.clone() {
            Write::Finish { status, error } => {
                let finish = Finish {
                    status,
                    error,
                    retention,
                };
                self.call(
                    "finish",
                    async move { store.finish(&lease, &finish).await },
                    move |result| Msg::Written { id, write, result },
                );
            }
            Write::Release => {
                self.call(
                    "release",
                    async move { store.release(&lease).await },
                    move |result| Msg::Written { id, write, result },
                );
            }
        }
    }

    fn written(&mut self, id: u64, write: Write, result: Result<OwnerWrite>) {
        let Some(a) = self.active.get_mut(&id) else {
            return;
        };
        a.writing = false;
        let had_lease = a.lease.take().is_some();
        let stopped = if had_lease { "handed over" } else { "stopped" };
        let info = a.info.clone();
        let catching_up = info.reason == Reason::CatchUp;
        let job = a.job.clone();
        let duration_ms = a.started.elapsed().as_millis() as u64;
        let reply = a.manual_reply.take();
        let (status, error) = match &write {
            Write::Finish { status, error } => (*status, error.clone()),
            Write::Release => (RunStatus::Interrupted, Some(stopped.to_owned())),
        };
        let record = a.record(status, error.clone(), Some(self.shared.cfg.clock.now_ms()));
        self.reap(id);
        match result {
            Ok(OwnerWrite::Done) => match status {
                RunStatus::Succeeded => self.emit(Event::Success {
                    run: info,
                    duration_ms,
                }),
                RunStatus::Interrupted => self.emit(Event::Interrupted {
                    run: info,
                    cause: stopped.into(),
                }),
                _ => self.emit(Event::Failure {
                    run: info,
                    error: error.unwrap_or_else(|| "failed".into()),
                }),
            },
            // [B-16] Another instance took the run over: nothing of ours was recorded.
            Ok(OwnerWrite::Lost) => self.emit(Event::Lost(info)),
            Err(e) => self.error("finish", Some(&info.job), &e),
        }
        if let Some(reply) = reply {
            let _ = reply.send(Ok(record));
        }
        if catching_up {
            self.advance_catch_up(&job);
        }
    }

    // ----- heartbeat and self-fencing ----------------------------------------------------

    fn heartbeat(&mut self) {
        let lease_ms = self.lease_ms();
        let hb = self.shared.cfg.timing.heartbeat_ms;
        let now = Instant::now();
        // Self-fencing: cancel before the lease can have expired, judged on the monotonic
        // clock from the last renewal that succeeded (counted from when it was sent). SPEC §11
        let fence_after = Duration::from_millis(lease_ms.saturating_sub(hb));
        let mut fenced = Vec::new();
        for a in self.active.values_mut() {
            if a.lease.is_some()
                && a.phase == Phase::Running
                && !a.fenced
                && now - a.last_renewed >= fence_after
            {
                a.fenced = true;
                a.cancel("lease not renewed");
                fenced.push(a.info.clone());
            }
        }
        for info in fenced {
            self.emit(Event::Fenced(info));
        }
        let (ids, leases): (Vec<u64>, Vec<Lease>) = self
            .active
            .iter()
            .filter(|(_, a)| a.phase == Phase::Running)
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
        let at = now + self.heartbeat_every();
        self.arm(at, Timer::Heartbeat);
    }

    fn heartbeat_done(&mut self, ids: Vec<u64>, sent: Instant, result: Result<Vec<Renewal>>) {
        self.heartbeat_in_flight = false;
        match result {
            Ok(renewals) => {
                let mut lost = Vec::new();
                let mut store_now = None;
                for (id, renewal) in ids.into_iter().zip(renewals) {
                    let Some(a) = self.active.get_mut(&id) else {
                        continue;
                    };
                    if a.phase != Phase::Running {
                        continue;
                    }
                    match renewal {
                        Renewal::Renewed { expires_at } => {
                            a.last_renewed = a.last_renewed.max(sent);
                            if let Some(l) = a.lease.as_mut() {
                                l.expires_at = expires_at;
                            }
                            store_now =
                                Some(expires_at - self.shared.cfg.timing.lease_ms as EpochMs);
                        }
                        Renewal::Lost => {
                            // [B-16] Another instance owns the run now.
                            a.cancel("lease lost");
                            a.phase = Phase::Done;
                            lost.push(a.info.clone());
                        }
                    }
                }
                for info in lost {
                    self.emit(Event::Lost(info));
                }
                if let Some(store_now) = store_now {
                    let due = self
                        .last_skew_event
                        .is_none_or(|t| t.elapsed() > Duration::from_secs(60));
                    let rtt = sent.elapsed().as_millis() as i64;
                    let skew = self.now_ms() - store_now;
                    if due && skew.abs() - rtt > self.shared.cfg.skew_threshold_ms as i64 {
                        self.last_skew_event = Some(Instant::now());
                        check_skew(&self.shared, store_now, rtt);
                    }
                }
            }
            Err(e) => self.error("heartbeat", None, &e),
        }
    }

    // ----- backups: watch and takeover ---------------------------------------------------

    fn add_watch(&mut self, run: RunKey) {
        if self.stopping.is_some() || !self.jobs.contains_key(&run.job) {
            return;
        }
        self.watch.insert(run);
        if !self.watch_armed {
            self.watch_armed = true;
            let at = Instant::now() + self.heartbeat_every();
            self.arm(at, Timer::Watch);
        }
    }

    fn watch_tick(&mut self) {
        if self.watch.is_empty() {
            self.watch_armed = false;
            return;
        }
        if !self.watch_in_flight {
            self.watch_in_flight = true;
            let asked: Vec<RunKey> = self.watch.iter().cloned().collect();
            self.read_runs(asked, true);
        }
        let at = Instant::now() + self.heartbeat_every();
        self.arm(at, Timer::Watch);
    }

    fn read_runs(&mut self, asked: Vec<RunKey>, poll: bool) {
        let Backend::Lease(store) = self.shared.backend.clone() else {
            return;
        };
        let keys = asked.clone();
        self.call(
            "runs",
            async move { store.runs(&keys).await },
            move |result| Msg::Watched {
                asked,
                poll,
                result,
            },
        );
    }

    /// A release notification: look at that run now instead of at the next poll. [B-17]
    fn released(&mut self, key: RunKey) {
        if self.watch.contains(&key) && !self.taking_over.contains(&key) {
            self.read_runs(vec![key], false);
        }
    }

    fn watched(&mut self, asked: Vec<RunKey>, views: Vec<RunView>) {
        let by_key: HashMap<RunKey, RunView> =
            views.into_iter().map(|v| (v.run.clone(), v)).collect();
        for key in asked {
            match by_key.get(&key) {
                None => {
                    self.watch.remove(&key);
                }
                Some(v) if v.status.is_final() => {
                    self.watch.remove(&key);
                }
                Some(v) if v.is_takeable() => self.try_take_over(v.clone()),
                Some(_) => {}
            }
        }
    }

    fn try_take_over(&mut self, view: RunView) {
        if self.stopping.is_some() || self.taking_over.contains(&view.run) {
            return;
        }
        let Some(job) = self.jobs.get(&view.run.job).cloned() else {
            self.watch.remove(&view.run);
            return;
        };
        let held = self
            .active
            .values()
            .any(|a| a.lease.as_ref().is_some_and(|l| l.run == view.run));
        if held {
            return;
        }
        // [B-15] If the job's next slot is already due, the expired run is replaced, not
        // restarted.
        // A released run (graceful handover) is always continued as the same slot. [B-17]
        let superseded = view.owner.is_some()
            && job
                .schedule
                .newest_due(self.now_ms())
                .is_some_and(|s| s > view.run.slot);
        let Backend::Lease(store) = self.shared.backend.clone() else {
            return;
        };
        let takeover = Takeover {
            run: view.run.clone(),
            seen_attempt: view.attempt,
            instance_id: self.shared.cfg.instance_id.to_string(),
            lease_ms: self.lease_ms(),
            max_attempts: job.opts.max_attempts,
            superseded,
        };
        self.taking_over.insert(view.run.clone());
        self.call(
            "take_over",
            async move { store.take_over(&takeover).await },
            move |result| Msg::TookOver { job, view, result },
        );
    }

    fn took_over(&mut self, job: Arc<JobDef>, view: RunView, result: Result<TakeoverOutcome>) {
        self.taking_over.remove(&view.run);
        let info = || RunInfo {
            job: view.run.job.clone(),
            slot: view.run.slot,
            attempt: view.attempt,
            fence: 0,
            reason: Reason::Takeover,
            manual: false,
            instance_id: view.owner.clone().unwrap_or_default(),
        };
        match result {
            Ok(TakeoverOutcome::Won(lease)) => {
                self.watch.remove(&view.run);
                if self.stopping.is_some() {
                    // Won while stopping: hand it straight back.
                    if let Backend::Lease(store) = self.shared.backend.clone() {
                        self.tasks.spawn(async move {
                            let _ = store.release(&lease).await;
                        });
                    }
                    return;
                }
                self.start_leased(job, lease);
            }
            Ok(TakeoverOutcome::Live) => {
                self.add_watch(view.run.clone());
            }
            Ok(TakeoverOutcome::Finished(_)) => {
                self.watch.remove(&view.run);
            }
            Ok(TakeoverOutcome::Exhausted) => {
                self.watch.remove(&view.run);
                self.emit(Event::Failure {
                    run: info(),
                    error: format!(
                        "exhausted: started {} times without finishing",
                        job.opts.max_attempts
                    ),
                });
            }
            Ok(TakeoverOutcome::Interrupted) => {
                self.watch.remove(&view.run);
                self.emit(Event::Interrupted {
                    run: info(),
                    cause: "replaced by the next slot".into(),
                });
                // The new slot may start now: it may have been skipped for overlap while the
                // dead run still looked live. [B-15]
                if self.stopping.is_none()
                    && let Some(slot) = job.schedule.newest_due(self.now_ms())
                {
                    let not_after = slot + job.opts.max_late_ms as EpochMs;
                    self.claim(job, slot, Reason::Scheduled, not_after);
                }
            }
            Err(e) => {
                self.error("take_over", Some(&view.run.job), &e);
                self.add_watch(view.run.clone());
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
                result,
            } => {
                let catching_up = reason == Reason::CatchUp;
                match result {
                    Ok(ClaimOutcome::Won(lease)) => {
                        if self.stopping.is_some() {
                            if let Backend::Lease(store) = self.shared.backend.clone() {
                                self.tasks.spawn(async move {
                                    let _ = store.release(&lease).await;
                                });
                            }
                            return;
                        }
                        self.start_leased(job, lease);
                        return;
                    }
                    Ok(ClaimOutcome::Taken) => {
                        self.emit(Event::Skip {
                            job: job.name.clone(),
                            slot,
                            reason: SkipReason::Taken,
                        });
                        // A backup watches the run it lost. [B-14]
                        self.add_watch(RunKey::new(job.name.clone(), slot));
                    }
                    Ok(ClaimOutcome::Late { .. }) => self.emit(Event::Skip {
                        job: job.name.clone(),
                        slot,
                        reason: SkipReason::Late,
                    }),
                    Ok(ClaimOutcome::Overlap { running_slot }) => {
                        self.emit(Event::Skip {
                            job: job.name.clone(),
                            slot,
                            reason: SkipReason::Overlap,
                        });
                        self.add_watch(RunKey::new(job.name.clone(), running_slot));
                    }
                    Err(e) => self.error("claim", Some(&job.name), &e),
                }
                if catching_up {
                    self.advance_catch_up(&job);
                }
            }
            Msg::SlotClaimed { job, slot, result } => match result {
                Ok(SlotOutcome::Won) => {
                    if self.stopping.is_some() {
                        return;
                    }
                    let info = RunInfo {
                        job: job.name.clone(),
                        slot,
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
                        slot,
                        reason,
                    });
                }
                Err(e) => {
                    // [B-29] The answer is lost: skip rather than risk a duplicate.
                    self.error("claim", Some(&job.name), &e);
                    self.emit(Event::Skip {
                        job: job.name.clone(),
                        slot,
                        reason: SkipReason::Unknown,
                    });
                }
            },
            Msg::Heartbeat { ids, sent, result } => self.heartbeat_done(ids, sent, result),
            Msg::Watched {
                asked,
                poll,
                result,
            } => {
                if poll {
                    self.watch_in_flight = false;
                }
                match result {
                    Ok(views) => self.watched(asked, views),
                    Err(e) => self.error("runs", None, &e),
                }
            }
            Msg::TookOver { job, view, result } => self.took_over(job, view, result),
            Msg::Unfinished { result } => {
                match result {
                    Ok(views) => {
                        for v in views {
                            if v.is_takeable() {
                                // Orphans: their owner vanished. [B-19]
                                self.try_take_over(v);
                            } else {
                                self.add_watch(v.run);
                            }
                        }
                    }
                    Err(e) => self.error("unfinished_runs", None, &e),
                }
                self.start_catch_up();
            }
            Msg::HandlerDone { id, result } => self.handler_done(id, result),
            Msg::Written { id, write, result } => self.written(id, write, result),
        }
    }
}
