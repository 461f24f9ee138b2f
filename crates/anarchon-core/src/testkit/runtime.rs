//! Scheduler-level conformance tests: several scheduler instances on one store, short
//! leases, the lease behaviours B-11 to B-21 of `docs/behaviour.md`. Under a paused clock
//! (memory store) they take milliseconds; on real stores a few seconds each.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::broadcast;

use crate::context::{Data, DataSource};
use crate::error::{Error, Result};
use crate::event::{Event, SkipReason};
use crate::history::{Reason, Retention, RunRecord, RunStatus};
use crate::options::CatchUp;
use crate::scheduler::{Clock, Leased, Scheduler};
use crate::store::{
    BatchLimits, ClaimOutcome, EpochMs, Finish, HistoryStore, JobName, Lease, LeaseClaim,
    LeaseStore, OwnerWrite, Prepare, Renewal, RunKey, RunView, Store, Takeover, TakeoverOutcome,
};
use crate::testkit::{sleep_ms, unique_job};

/// Lease length of the runtime tests.
pub const LEASE_MS: u64 = 1000;
/// Heartbeat of the runtime tests.
pub const HEARTBEAT_MS: u64 = 200;

#[doc(hidden)]
#[macro_export]
macro_rules! __runtime_tests {
    ($factory:path, [$($mode:ident)?]) => {
        $crate::__kit_tests!($factory, [$($mode)?], runtime,
            b11_each_slot_runs_on_one_instance_the_others_skip_taken,
            b12_overlap_skip_never_runs_two_at_once,
            b14_backup_takes_over_after_the_owner_crashes,
            b11_batches_keep_to_the_store_limits,
            b14_crashed_run_is_exhausted_after_max_attempts,
            b14_a_slot_whose_claim_failed_is_backed_up_when_another_starts_it_late,
            b14_a_claim_committed_after_its_caller_gave_up_is_handed_over_at_once,
            b14_a_slot_skipped_for_overlap_then_started_late_elsewhere_is_backed_up,
            b17_stop_during_a_takeover_hands_the_run_over,
            b34_stop_waits_for_a_result_write_in_flight,
            b15_expired_run_is_replaced_and_the_due_slot_starts,
            b16_frozen_owner_is_fenced_then_learns_it_lost,
            b17_graceful_stop_hands_over_at_once_without_counting,
            b17_handler_ignoring_the_signal_is_recorded_as_succeeded,
            b17_handover_continues_the_same_slot_after_the_next_came_due,
            b17_stop_timeout_stops_heartbeats_and_a_backup_takes_over,
            b19_missed_slot_is_caught_up_on_start,
            b19_catch_up_zero_turns_it_off,
            b19_orphan_is_taken_over_on_start,
            b21_timeout_cancels_the_signal_and_fails_the_attempt,
            b30_context_carries_the_run_identity,
            b31_data_merges_levels_and_a_failing_data_function_fails_the_run,
            b35_run_now_is_manual_and_recorded,
            b35_final_record_is_never_overtaken_by_the_start_record,
            b36_history_is_readable_from_a_process_without_jobs,
            s11_all_catch_up_replays_missed_slots_in_order,
            s11_no_store_traffic_while_idle,
        );
    };
}

/// A store handle for one instance: `close` is a no-op (instances share the test's store),
/// it can be frozen (every call hangs, like a SIGSTOP'd process's connection), and it
/// counts calls.
#[derive(Clone)]
pub struct Instance {
    inner: Arc<dyn LeaseStore>,
    frozen: Arc<AtomicBool>,
    slow_starts: Arc<AtomicBool>,
    calls: Arc<AtomicUsize>,
    faults: Arc<Faults>,
}

/// Faults an [`Instance`] injects into its store calls.
#[derive(Default)]
struct Faults {
    /// Every call fails at once (an outage seen from this instance).
    fail: AtomicBool,
    /// Claims fail at once without reaching the store.
    fail_claims: AtomicBool,
    /// Claims reach the store (and may commit) but their answer is lost.
    lose_claim_answers: AtomicBool,
    /// Takeovers wait this long (ms) before reaching the store.
    takeover_delay_before: std::sync::atomic::AtomicU64,
    /// Takeovers wait this long (ms) after the store answered.
    takeover_delay_after: std::sync::atomic::AtomicU64,
    /// Finishes and releases wait this long (ms) before reaching the store.
    write_delay: std::sync::atomic::AtomicU64,
    /// Takeovers sent through this handle.
    takeovers: AtomicUsize,
    /// `take_over_many` calls sent through this handle.
    takeover_batches: AtomicUsize,
    /// Limits this handle reports instead of the store's (each at most the store's own).
    limits: std::sync::Mutex<Option<BatchLimits>>,
    /// The most claims, results and takeovers one call carried.
    largest_claims: AtomicUsize,
    largest_finishes: AtomicUsize,
    largest_takeovers: AtomicUsize,
}

impl Instance {
    /// Wraps the shared store.
    pub fn new(inner: Arc<dyn LeaseStore>) -> Self {
        Instance {
            inner,
            frozen: Arc::default(),
            slow_starts: Arc::default(),
            calls: Arc::default(),
            faults: Arc::default(),
        }
    }
    /// Makes every call fail at once with [`Error::Unavailable`] (or heals it).
    pub fn fail_all(&self, fail: bool) {
        self.faults.fail.store(fail, Ordering::SeqCst);
    }
    /// Makes claims fail at once without reaching the store (or heals them).
    pub fn fail_claims(&self, fail: bool) {
        self.faults.fail_claims.store(fail, Ordering::SeqCst);
    }
    /// Lets claims reach the store but loses their answers, as a timeout after the commit.
    pub fn lose_claim_answers(&self, lose: bool) {
        self.faults.lose_claim_answers.store(lose, Ordering::SeqCst);
    }
    /// Delays takeovers by `before` ms before they reach the store and `after` ms after.
    pub fn delay_takeovers(&self, before: u64, after: u64) {
        self.faults
            .takeover_delay_before
            .store(before, Ordering::SeqCst);
        self.faults
            .takeover_delay_after
            .store(after, Ordering::SeqCst);
    }
    /// Delays finishes and releases by `ms` before they reach the store.
    pub fn delay_owner_writes(&self, ms: u64) {
        self.faults.write_delay.store(ms, Ordering::SeqCst);
    }
    /// Reports at most `limits` as this store's batch limits (each no more than the store's
    /// own), so the scheduler sends smaller batches through this handle.
    pub fn limit_batches(&self, limits: BatchLimits) {
        *self.faults.limits.lock().unwrap_or_else(|e| e.into_inner()) = Some(limits);
    }
    /// The most claims, results and takeovers one call through this handle carried so far.
    pub fn largest_batches(&self) -> BatchLimits {
        BatchLimits {
            claims: self.faults.largest_claims.load(Ordering::SeqCst),
            finishes: self.faults.largest_finishes.load(Ordering::SeqCst),
            takeovers: self.faults.largest_takeovers.load(Ordering::SeqCst),
            gather_batches: false,
            gather_results: false,
        }
    }
    /// Takeovers sent through this handle so far.
    pub fn takeovers(&self) -> usize {
        self.faults.takeovers.load(Ordering::SeqCst)
    }
    /// `take_over_many` calls sent through this handle (each counts its takeovers too).
    pub fn takeover_batches(&self) -> usize {
        self.faults.takeover_batches.load(Ordering::SeqCst)
    }
    fn failing(&self) -> Result<()> {
        if self.faults.fail.load(Ordering::SeqCst) {
            Err(Error::Unavailable {
                store: "kit",
                target: "instance".into(),
                source: "injected outage".into(),
            })
        } else {
            Ok(())
        }
    }
    async fn write_delay(&self) {
        let ms = self.faults.write_delay.load(Ordering::SeqCst);
        if ms > 0 {
            sleep_ms(ms).await;
        }
    }
    /// Freezes or thaws this instance's store access.
    pub fn freeze(&self, frozen: bool) {
        self.frozen.store(frozen, Ordering::SeqCst);
    }
    /// Delays the write of every `running` manual record by 300 ms (a slow connection of a
    /// pool), to check that the final record is never overtaken by the start record.
    pub fn slow_start_records(&self, slow: bool) {
        self.slow_starts.store(slow, Ordering::SeqCst);
    }
    /// Store calls made through this handle.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
    async fn gate(&self) {
        self.calls.fetch_add(1, Ordering::SeqCst);
        while self.frozen.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[async_trait]
impl Store for Instance {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    async fn prepare(&self, p: &Prepare) -> Result<()> {
        self.gate().await;
        self.inner.prepare(p).await
    }
    async fn now(&self) -> Result<EpochMs> {
        self.gate().await;
        self.inner.now().await
    }
    async fn close(&self) -> Result<()> {
        Ok(())
    }
}

#[async_trait]
impl HistoryStore for Instance {
    async fn history(&self, job: &JobName, count: usize) -> Result<Vec<RunRecord>> {
        self.gate().await;
        self.inner.history(job, count).await
    }
    async fn record_manual(&self, r: &RunRecord, k: Retention) -> Result<()> {
        self.gate().await;
        if r.status == RunStatus::Running && self.slow_starts.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        self.inner.record_manual(r, k).await
    }
    async fn known_jobs(&self) -> Result<Vec<JobName>> {
        self.gate().await;
        self.inner.known_jobs().await
    }
}

#[async_trait]
impl LeaseStore for Instance {
    /// The faults apply once per call, as to one round trip.
    async fn claim_many(&self, claims: &[LeaseClaim]) -> Result<Vec<ClaimOutcome>> {
        self.gate().await;
        self.faults
            .largest_claims
            .fetch_max(claims.len(), Ordering::SeqCst);
        self.failing()?;
        if self.faults.fail_claims.load(Ordering::SeqCst) {
            return Err(Error::Unavailable {
                store: "kit",
                target: "instance".into(),
                source: "injected claim failure".into(),
            });
        }
        let outcome = self.inner.claim_many(claims).await;
        if self.faults.lose_claim_answers.load(Ordering::SeqCst) {
            return Err(Error::Timeout {
                store: "kit",
                operation: "claim",
                after: Duration::ZERO,
            });
        }
        outcome
    }
    fn limits(&self) -> BatchLimits {
        let store = self.inner.limits();
        match *self.faults.limits.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(cap) => BatchLimits {
                claims: store.claims.min(cap.claims).max(1),
                finishes: store.finishes.min(cap.finishes).max(1),
                takeovers: store.takeovers.min(cap.takeovers).max(1),
                gather_batches: store.gather_batches,
                gather_results: store.gather_results,
            },
            None => store,
        }
    }
    async fn heartbeat(&self, l: &[Lease], ms: u64) -> Result<Vec<Renewal>> {
        self.gate().await;
        self.failing()?;
        self.inner.heartbeat(l, ms).await
    }
    async fn finish_many(&self, writes: &[(Lease, Finish)]) -> Result<Vec<OwnerWrite>> {
        // One call: the faults apply once, as to one round trip.
        self.gate().await;
        self.faults
            .largest_finishes
            .fetch_max(writes.len(), Ordering::SeqCst);
        self.failing()?;
        self.write_delay().await;
        self.inner.finish_many(writes).await
    }
    async fn release(&self, l: &Lease) -> Result<OwnerWrite> {
        self.gate().await;
        self.failing()?;
        self.write_delay().await;
        self.inner.release(l).await
    }
    /// The faults apply once per call; every takeover of it is counted.
    async fn take_over_many(&self, ts: &[Takeover]) -> Result<Vec<TakeoverOutcome>> {
        self.gate().await;
        self.failing()?;
        self.faults.takeover_batches.fetch_add(1, Ordering::SeqCst);
        self.faults.takeovers.fetch_add(ts.len(), Ordering::SeqCst);
        self.faults
            .largest_takeovers
            .fetch_max(ts.len(), Ordering::SeqCst);
        let before = self.faults.takeover_delay_before.load(Ordering::SeqCst);
        if before > 0 {
            sleep_ms(before).await;
        }
        let outcome = self.inner.take_over_many(ts).await;
        let after = self.faults.takeover_delay_after.load(Ordering::SeqCst);
        if after > 0 {
            sleep_ms(after).await;
        }
        outcome
    }
    async fn runs(&self, r: &[RunKey]) -> Result<Vec<RunView>> {
        self.gate().await;
        self.failing()?;
        self.inner.runs(r).await
    }
    async fn unfinished_runs(&self, j: &[JobName]) -> Result<Vec<RunView>> {
        self.gate().await;
        self.failing()?;
        self.inner.unfinished_runs(j).await
    }
    async fn newest_unfinished_runs(&self, j: &[JobName], newest: usize) -> Result<Vec<RunView>> {
        self.gate().await;
        self.failing()?;
        self.inner.newest_unfinished_runs(j, newest).await
    }
    fn subscribe_releases(&self) -> Option<broadcast::Receiver<RunKey>> {
        self.inner.subscribe_releases()
    }
    fn set_watching(&self, watching: bool) {
        self.inner.set_watching(watching);
    }
}

/// A scheduler for one instance of the tests, with the kit's timing.
pub fn node(store: &Instance, id: &str) -> crate::SchedulerBuilder<Leased> {
    Scheduler::leased(store.clone())
        .instance_id(id)
        .lease(Duration::from_millis(LEASE_MS))
        .heartbeat(Duration::from_millis(HEARTBEAT_MS))
        .jitter(Duration::from_millis(0))
        .store_timeout(Duration::from_secs(2))
        .clock(Clock::tokio())
}

/// Collects events until the scheduler is dropped.
pub fn record_events(s: &Scheduler<Leased>) -> Arc<std::sync::Mutex<Vec<Event>>> {
    let out = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut rx = s.events();
    let sink = out.clone();
    tokio::spawn(async move {
        loop {
            match rx.recv().await {
                Ok(e) => sink.lock().unwrap().push(e),
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(_) => break,
            }
        }
    });
    out
}

/// Waits (polling every 20 ms of tokio time) until `f` is true, up to `ms`.
pub async fn wait_for(ms: u64, mut f: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(ms);
    while tokio::time::Instant::now() < deadline {
        if f() {
            return true;
        }
        sleep_ms(20).await;
    }
    f()
}

fn now_ms() -> EpochMs {
    Clock::tokio().now_ms()
}

/// Sleeps until just after the next multiple of `period_ms` on the epoch grid.
async fn align(period_ms: u64, after: u64) {
    let now = now_ms();
    let p = period_ms as EpochMs;
    let next = (now / p + 1) * p;
    sleep_ms((next - now) as u64 + after).await;
}

type Starts = Arc<std::sync::Mutex<Vec<(String, EpochMs, u32, Reason)>>>;

/// A handler that records its start and waits `ms` (or until cancelled, then returns an
/// error when `fail_on_cancel`).
fn worker(
    starts: &Starts,
    who: &str,
    ms: u64,
    fail_on_cancel: bool,
) -> impl Fn(
    crate::JobContext,
) -> futures::future::BoxFuture<'static, std::result::Result<(), crate::HandlerError>>
+ Send
+ Sync
+ 'static {
    let starts = starts.clone();
    let who = who.to_owned();
    move |ctx| {
        starts
            .lock()
            .unwrap()
            .push((who.clone(), ctx.slot_ms(), ctx.attempt, ctx.reason));
        Box::pin(async move {
            tokio::select! {
                _ = sleep_ms(ms) => Ok(()),
                _ = ctx.signal.cancelled(), if fail_on_cancel => Err(ctx.check_cancelled().unwrap_err().into()),
            }
        })
    }
}

fn count<F: Fn(&Event) -> bool>(events: &std::sync::Mutex<Vec<Event>>, f: F) -> usize {
    events.lock().unwrap().iter().filter(|e| f(e)).count()
}

/// [B-11] Three instances, one `every 1s` job: each slot starts once; the others skip it as
/// `taken`.
pub async fn b11_each_slot_runs_on_one_instance_the_others_skip_taken(store: Arc<dyn LeaseStore>) {
    let job = unique_job("every");
    let starts: Starts = Arc::default();
    let mut nodes = Vec::new();
    let mut logs = Vec::new();
    for i in 0..3 {
        let s = node(&Instance::new(store.clone()), &format!("n{i}"))
            .jitter(Duration::from_millis(100))
            .catch_up_window(Duration::from_millis(0))
            .build()
            .unwrap();
        s.every(job.as_str(), "1s")
            .handler(worker(&starts, &format!("n{i}"), 50, false))
            .unwrap();
        logs.push(record_events(&s));
        nodes.push(s);
    }
    for s in &nodes {
        s.start().await.unwrap();
    }
    sleep_ms(3_600).await;
    for s in &nodes {
        s.stop(Duration::from_secs(5)).await.unwrap();
    }
    let starts = starts.lock().unwrap().clone();
    let mut slots: Vec<EpochMs> = starts.iter().map(|s| s.1).collect();
    slots.sort_unstable();
    let n = slots.len();
    slots.dedup();
    assert!(n >= 3, "expected at least 3 slots to run, got {starts:?}");
    assert_eq!(slots.len(), n, "a slot started twice: {starts:?}");
    assert!(
        slots.iter().all(|s| s % 1000 == 0),
        "slots on the grid: {slots:?}"
    );
    let taken: usize = logs
        .iter()
        .map(|l| {
            count(l, |e| {
                matches!(
                    e,
                    Event::Skip {
                        reason: SkipReason::Taken,
                        ..
                    }
                )
            })
        })
        .sum();
    assert!(
        taken >= 2 * (n - 1),
        "others skip as taken ({taken} for {n} slots)"
    );
}

/// [B-12] With `overlap: skip` a job longer than its interval never runs twice at once; the
/// slots in between skip with reason `overlap`.
pub async fn b12_overlap_skip_never_runs_two_at_once(store: Arc<dyn LeaseStore>) {
    let job = unique_job("long");
    let running = Arc::new(AtomicUsize::new(0));
    let max_seen = Arc::new(AtomicUsize::new(0));
    let mut nodes = Vec::new();
    let mut logs = Vec::new();
    for i in 0..2 {
        let s = node(&Instance::new(store.clone()), &format!("o{i}"))
            .catch_up_window(Duration::from_millis(0))
            .build()
            .unwrap();
        let (running, max_seen) = (running.clone(), max_seen.clone());
        s.every(job.as_str(), "500ms")
            .handler(move |_ctx| {
                let (running, max_seen) = (running.clone(), max_seen.clone());
                async move {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    max_seen.fetch_max(now, Ordering::SeqCst);
                    sleep_ms(1_300).await;
                    running.fetch_sub(1, Ordering::SeqCst);
                    Ok(())
                }
            })
            .unwrap();
        logs.push(record_events(&s));
        nodes.push(s);
    }
    for s in &nodes {
        s.start().await.unwrap();
    }
    sleep_ms(3_200).await;
    for s in &nodes {
        s.stop(Duration::from_secs(5)).await.unwrap();
    }
    assert_eq!(max_seen.load(Ordering::SeqCst), 1, "two runs overlapped");
    let overlap: usize = logs
        .iter()
        .map(|l| {
            count(l, |e| {
                matches!(
                    e,
                    Event::Skip {
                        reason: SkipReason::Overlap,
                        ..
                    }
                )
            })
        })
        .sum();
    assert!(overlap >= 1, "slots in between skip with overlap");
}

/// Runs `job` on `a`: an hourly job whose last full hour's slot `a` catches up at its start
/// (a catch-up window of an hour), and waits until `a` runs it.
///
/// A test that began in the
/// last minute of an hour would see the next hour's slot come due in its middle (a backup
/// starting it as scheduled before it takes the caught-up run over, which is right but not
/// what the test reads: seen at 13:59:59 UTC). Such a test first waits for the hour to turn.
async fn claim_on(
    a: &Scheduler<Leased>,
    job: &JobName,
    starts: &Starts,
    handler_ms: u64,
    fail_on_cancel: bool,
) {
    let hour_ms = 3_600_000;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let to_next_hour = hour_ms - now_ms.rem_euclid(hour_ms);
    if to_next_hour < 60_000 {
        tokio::time::sleep(Duration::from_millis(to_next_hour as u64 + 1_000)).await;
    }
    a.every(job.as_str(), "1h")
        .catch_up_window(Duration::from_secs(3600))
        .handler(worker(starts, "a", handler_ms, fail_on_cancel))
        .unwrap();
    a.start().await.unwrap();
    assert!(
        wait_for(5_000, || !starts.lock().unwrap().is_empty()).await,
        "a never started the catch-up run"
    );
}

/// [B-14] When the owner crashes, a backup starts attempt 2 (reason `takeover`) after the
/// lease expired, within `lease + 2 × heartbeat`.
pub async fn b14_backup_takes_over_after_the_owner_crashes(store: Arc<dyn LeaseStore>) {
    let job = unique_job("crash");
    let starts: Starts = Arc::default();
    let a = node(&Instance::new(store.clone()), "a").build().unwrap();
    claim_on(&a, &job, &starts, 60_000, false).await;
    let b = node(&Instance::new(store.clone()), "b")
        .catch_up_window(Duration::from_secs(3600))
        .build()
        .unwrap();
    b.every(job.as_str(), "1h")
        .handler(worker(&starts, "b", 100, false))
        .unwrap();
    b.start().await.unwrap();
    sleep_ms(300).await;
    let crashed_at = tokio::time::Instant::now();
    a.crash();
    assert!(
        wait_for(LEASE_MS + 3 * HEARTBEAT_MS + 2_000, || starts
            .lock()
            .unwrap()
            .len()
            >= 2)
        .await,
        "no takeover after the crash: {:?}",
        starts.lock().unwrap()
    );
    let waited = crashed_at.elapsed().as_millis() as u64;
    let s = starts.lock().unwrap().clone();
    assert_eq!(
        (s[1].0.as_str(), s[1].2, s[1].3),
        ("b", 2, Reason::Takeover),
        "{s:?}"
    );
    assert_eq!(s[0].1, s[1].1, "the same slot is taken over");
    assert!(
        waited + HEARTBEAT_MS >= LEASE_MS / 2,
        "took over before the lease could expire ({waited} ms)"
    );
    assert!(
        waited <= LEASE_MS + 2 * HEARTBEAT_MS + 1_000,
        "took {waited} ms"
    );
    sleep_ms(600).await;
    let h = b.history(job.as_str(), 10).await.unwrap();
    assert_eq!(h[0].status, RunStatus::Succeeded);
    assert_eq!((h[1].attempt, h[1].status), (1, RunStatus::Interrupted));
    b.stop(Duration::from_secs(5)).await.unwrap();
}

/// [B-11, B-14, B-16] The scheduler sends claims, takeovers and results in batches no longer
/// than the store's limits, as the store reports them (here lowered to 1 — every call a
/// batch of one, the single calls' shape — then to 2): five jobs whose slots are caught up
/// together are claimed in batches of the limit, a backup takes their runs over after the
/// owner crashed and writes their results, and every run still ends once, succeeded.
pub async fn b11_batches_keep_to_the_store_limits(store: Arc<dyn LeaseStore>) {
    for cap in [1, 2] {
        let jobs: Vec<JobName> = (0..5).map(|_| unique_job("limits")).collect();
        let starts: Starts = Arc::default();
        let (ia, ib) = (Instance::new(store.clone()), Instance::new(store.clone()));
        ia.limit_batches(BatchLimits::all(cap));
        ib.limit_batches(BatchLimits::all(cap));
        let (la, lb) = (LeaseStore::limits(&ia), LeaseStore::limits(&ib));
        assert_eq!(la.claims, cap.min(store.limits().claims));
        let a = node(&ia, "a")
            .catch_up_window(Duration::from_secs(3600))
            .build()
            .unwrap();
        let b = node(&ib, "b")
            .catch_up_window(Duration::from_secs(3600))
            .build()
            .unwrap();
        for job in &jobs {
            a.every(job.as_str(), "1h")
                .handler(worker(&starts, "a", 60_000, false))
                .unwrap();
            b.every(job.as_str(), "1h")
                .handler(worker(&starts, "b", 200, false))
                .unwrap();
        }
        a.start().await.unwrap();
        let started = |who: &str| starts.lock().unwrap().iter().filter(|s| s.0 == who).count();
        assert!(
            wait_for(5_000, || started("a") == jobs.len()).await,
            "a did not catch every job up: {:?}",
            starts.lock().unwrap()
        );
        b.start().await.unwrap();
        sleep_ms(300).await;
        a.crash();
        assert!(
            wait_for(LEASE_MS + 3 * HEARTBEAT_MS + 5_000, || started("b")
                == jobs.len())
            .await,
            "b did not take every run over: {:?}",
            starts.lock().unwrap()
        );
        let mut ended = false;
        for _ in 0..150 {
            let mut all = true;
            for job in &jobs {
                let h = b.history(job.as_str(), 1).await.unwrap();
                all &= h.first().is_some_and(|r| r.status == RunStatus::Succeeded);
            }
            if all {
                ended = true;
                break;
            }
            sleep_ms(20).await;
        }
        assert!(ended, "every taken-over run succeeds (limit {cap})");
        b.stop(Duration::from_secs(5)).await.unwrap();
        let (sa, sb) = (ia.largest_batches(), ib.largest_batches());
        // a's five catch-up claims fell due in one turn: they went out `la.claims` at a time.
        assert_eq!(sa.claims, la.claims, "limit {cap}: {sa:?}");
        assert!(
            (1..=lb.claims).contains(&sb.claims),
            "limit {cap}: {sb:?} > {lb:?}"
        );
        assert!(
            (1..=lb.takeovers).contains(&sb.takeovers),
            "limit {cap}: {sb:?} > {lb:?}"
        );
        assert!(
            (1..=lb.finishes).contains(&sb.finishes),
            "limit {cap}: {sb:?} > {lb:?}"
        );
    }
}

/// [B-14] A run whose runners keep crashing starts `max_attempts` times, then it is failed.
pub async fn b14_crashed_run_is_exhausted_after_max_attempts(store: Arc<dyn LeaseStore>) {
    let job = unique_job("exhaust");
    let starts: Starts = Arc::default();
    let a = node(&Instance::new(store.clone()), "a")
        .max_attempts(2)
        .build()
        .unwrap();
    claim_on(&a, &job, &starts, 60_000, false).await;
    let b = node(&Instance::new(store.clone()), "b")
        .max_attempts(2)
        .catch_up_window(Duration::from_millis(0))
        .build()
        .unwrap();
    b.every(job.as_str(), "1h")
        .handler(worker(&starts, "b", 60_000, false))
        .unwrap();
    b.start().await.unwrap();
    sleep_ms(300).await;
    a.crash();
    assert!(
        wait_for(LEASE_MS + 2_000, || starts.lock().unwrap().len() >= 2).await,
        "no takeover"
    );
    b.crash();
    let c = node(&Instance::new(store.clone()), "c")
        .max_attempts(2)
        .catch_up_window(Duration::from_millis(0))
        .build()
        .unwrap();
    let events = record_events(&c);
    c.every(job.as_str(), "1h")
        .handler(worker(&starts, "c", 100, false))
        .unwrap();
    c.start().await.unwrap();
    let exhausted = wait_for(LEASE_MS + 6_000, || {
        count(
            &events,
            |e| matches!(e, Event::Failure { error, .. } if error.to_string().contains("exhausted")),
        ) == 1
    })
    .await;
    assert!(
        exhausted,
        "no exhausted failure: {:?}",
        events.lock().unwrap()
    );
    assert_eq!(
        starts.lock().unwrap().len(),
        2,
        "a third crash start happened"
    );
    let h = c.history(job.as_str(), 10).await.unwrap();
    assert!(
        h.iter().all(|r| r.status == RunStatus::Interrupted),
        "{h:?}"
    );
    c.stop(Duration::from_secs(5)).await.unwrap();
}

/// [B-16, G-02] An owner that cannot renew (frozen) cancels its own signal before its lease
/// can have expired; a backup takes over; when the owner thaws, it learns it lost: `lost`,
/// and its result is not recorded over the new owner's.
pub async fn b16_frozen_owner_is_fenced_then_learns_it_lost(store: Arc<dyn LeaseStore>) {
    let job = unique_job("frozen");
    let starts: Starts = Arc::default();
    let a_store = Instance::new(store.clone());
    let a = node(&a_store, "a")
        .store_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let a_events = record_events(&a);
    let fenced_at = Arc::new(std::sync::Mutex::new(None));
    {
        let fenced_at = fenced_at.clone();
        let starts = starts.clone();
        a.every(job.as_str(), "1h")
            .catch_up_window(Duration::from_secs(3600))
            .handler(move |ctx| {
                starts
                    .lock()
                    .unwrap()
                    .push(("a".into(), ctx.slot_ms(), ctx.attempt, ctx.reason));
                let fenced_at = fenced_at.clone();
                async move {
                    ctx.signal.cancelled().await;
                    *fenced_at.lock().unwrap() = Some(tokio::time::Instant::now());
                    Ok(ctx.check_cancelled()?)
                }
            })
            .unwrap();
    }
    a.start().await.unwrap();
    assert!(wait_for(5_000, || !starts.lock().unwrap().is_empty()).await);
    let b = node(&Instance::new(store.clone()), "b")
        .catch_up_window(Duration::from_millis(0))
        .build()
        .unwrap();
    b.every(job.as_str(), "1h")
        .handler(worker(&starts, "b", 200, false))
        .unwrap();
    b.start().await.unwrap();
    sleep_ms(2 * HEARTBEAT_MS).await;
    let frozen_at = tokio::time::Instant::now();
    a_store.freeze(true);
    assert!(
        wait_for(LEASE_MS + 2_000, || starts.lock().unwrap().len() >= 2).await,
        "no takeover"
    );
    let fenced = fenced_at.lock().unwrap().expect("a's signal was cancelled");
    let b_started = tokio::time::Instant::now();
    assert!(fenced <= b_started, "a was still live when b took over");
    assert!(
        fenced - frozen_at < Duration::from_millis(LEASE_MS),
        "fenced too late"
    );
    assert!(
        wait_for(1_000, || count(&a_events, |e| matches!(
            e,
            Event::Fenced(_)
        )) == 1)
        .await
    );
    a_store.freeze(false);
    assert!(
        wait_for(3_000, || count(&a_events, |e| matches!(e, Event::Lost(_)))
            == 1)
        .await,
        "a never emitted lost: {:?}",
        a_events.lock().unwrap()
    );
    sleep_ms(600).await;
    let h = b.history(job.as_str(), 10).await.unwrap();
    assert_eq!((h[0].instance_id.as_str(), h[0].attempt), ("b", 2), "{h:?}");
    a.stop(Duration::from_secs(2)).await.unwrap();
    b.stop(Duration::from_secs(2)).await.unwrap();
}

/// [B-17] `stop()` cancels the signal; a handler that returns an error hands the run over:
/// a backup starts it at once (within two heartbeats) and it does not count against
/// `max_attempts`.
pub async fn b17_graceful_stop_hands_over_at_once_without_counting(store: Arc<dyn LeaseStore>) {
    let job = unique_job("handover");
    let starts: Starts = Arc::default();
    let a = node(&Instance::new(store.clone()), "a")
        .max_attempts(1)
        .build()
        .unwrap();
    let a_events = record_events(&a);
    claim_on(&a, &job, &starts, 60_000, true).await;
    let b = node(&Instance::new(store.clone()), "b")
        .max_attempts(1)
        .catch_up_window(Duration::from_millis(0))
        .build()
        .unwrap();
    b.every(job.as_str(), "1h")
        .handler(worker(&starts, "b", 100, false))
        .unwrap();
    b.start().await.unwrap();
    sleep_ms(300).await;
    let stopped_at = tokio::time::Instant::now();
    a.stop(Duration::from_secs(5)).await.unwrap();
    assert!(
        wait_for(2 * HEARTBEAT_MS + 1_000, || starts.lock().unwrap().len()
            >= 2)
        .await,
        "no handover: {:?}",
        starts.lock().unwrap()
    );
    let waited = stopped_at.elapsed().as_millis() as u64;
    assert!(
        waited <= 2 * HEARTBEAT_MS + 300,
        "handover took {waited} ms"
    );
    let s = starts.lock().unwrap().clone();
    assert_eq!(
        (s[1].0.as_str(), s[1].2, s[1].3),
        ("b", 2, Reason::Takeover)
    );
    assert!(
        wait_for(1_000, || count(
            &a_events,
            |e| matches!(e, Event::Interrupted { cause, .. } if *cause == crate::InterruptCause::HandedOver)
        ) == 1)
        .await
    );
    sleep_ms(600).await;
    let h = b.history(job.as_str(), 10).await.unwrap();
    assert_eq!(h[0].status, RunStatus::Succeeded, "{h:?}");
    assert_eq!(
        (h[1].status, h[1].error.as_deref()),
        (RunStatus::Interrupted, Some("handed over"))
    );
    b.stop(Duration::from_secs(5)).await.unwrap();
}

/// [B-17] A handler that ignores the signal and returns `Ok` is recorded as succeeded.
pub async fn b17_handler_ignoring_the_signal_is_recorded_as_succeeded(store: Arc<dyn LeaseStore>) {
    let job = unique_job("ignore");
    let starts: Starts = Arc::default();
    let a = node(&Instance::new(store.clone()), "a").build().unwrap();
    claim_on(&a, &job, &starts, 400, false).await;
    a.stop(Duration::from_secs(5)).await.unwrap();
    let h = history_of(&store, &job).await;
    assert_eq!(h[0].status, RunStatus::Succeeded, "{h:?}");
}

async fn history_of(store: &Arc<dyn LeaseStore>, job: &JobName) -> Vec<RunRecord> {
    store.history(job, 10).await.unwrap()
}

/// [B-17] A handler still running when stop's timeout passes is no longer heartbeated, so a
/// backup takes over after the lease expires.
pub async fn b17_stop_timeout_stops_heartbeats_and_a_backup_takes_over(store: Arc<dyn LeaseStore>) {
    let job = unique_job("stoptimeout");
    let starts: Starts = Arc::default();
    let a = node(&Instance::new(store.clone()), "a").build().unwrap();
    let a_events = record_events(&a);
    claim_on(&a, &job, &starts, 60_000, false).await;
    let b = node(&Instance::new(store.clone()), "b")
        .catch_up_window(Duration::from_millis(0))
        .build()
        .unwrap();
    b.every(job.as_str(), "1h")
        .handler(worker(&starts, "b", 100, false))
        .unwrap();
    b.start().await.unwrap();
    sleep_ms(300).await;
    let t0 = tokio::time::Instant::now();
    a.stop(Duration::from_millis(300)).await.unwrap();
    assert!(
        t0.elapsed() < Duration::from_millis(2_000),
        "stop waited past its timeout"
    );
    // The recorder task may not have seen the event yet when `stop` returns.
    assert!(
        wait_for(1_000, || count(
            &a_events,
            |e| matches!(e, Event::Interrupted { cause, .. } if *cause == crate::InterruptCause::StopTimeout)
        ) == 1)
        .await,
        "no stop-timeout interruption: {:?}",
        a_events.lock().unwrap()
    );
    assert!(
        wait_for(LEASE_MS + 2_000, || starts.lock().unwrap().len() >= 2).await,
        "no takeover"
    );
    assert!(
        t0.elapsed() >= Duration::from_millis(LEASE_MS / 2),
        "taken over before the lease ended"
    );
    assert_eq!(starts.lock().unwrap()[1].2, 2);
    b.stop(Duration::from_secs(5)).await.unwrap();
}

/// [B-19] On start, the most recent slot that nobody claimed is run with reason `catch-up`.
pub async fn b19_missed_slot_is_caught_up_on_start(store: Arc<dyn LeaseStore>) {
    let job = unique_job("catchup");
    let starts: Starts = Arc::default();
    align(2_000, 300).await;
    let a = node(&Instance::new(store.clone()), "a").build().unwrap();
    a.every(job.as_str(), "1h")
        .catch_up_window(Duration::from_secs(3600))
        .handler(worker(&starts, "a", 10, false))
        .unwrap();
    a.start().await.unwrap();
    assert!(wait_for(2_000, || !starts.lock().unwrap().is_empty()).await);
    let s = starts.lock().unwrap()[0].clone();
    assert_eq!(s.3, Reason::CatchUp);
    assert_eq!(s.1 % 3_600_000, 0);
    a.stop(Duration::from_secs(5)).await.unwrap();
    // A second instance starting later finds it claimed: no second run.
    let b = node(&Instance::new(store.clone()), "b").build().unwrap();
    b.every(job.as_str(), "1h")
        .catch_up_window(Duration::from_secs(3600))
        .handler(worker(&starts, "b", 10, false))
        .unwrap();
    b.start().await.unwrap();
    sleep_ms(500).await;
    b.stop(Duration::from_secs(5)).await.unwrap();
    assert_eq!(starts.lock().unwrap().len(), 1);
}

/// [B-19] `catch_up_ms: 0` turns catch-up off.
pub async fn b19_catch_up_zero_turns_it_off(store: Arc<dyn LeaseStore>) {
    let job = unique_job("nocatchup");
    let starts: Starts = Arc::default();
    let a = node(&Instance::new(store.clone()), "a").build().unwrap();
    a.every(job.as_str(), "1h")
        .catch_up_window(Duration::from_millis(0))
        .handler(worker(&starts, "a", 10, false))
        .unwrap();
    a.start().await.unwrap();
    sleep_ms(800).await;
    a.stop(Duration::from_secs(5)).await.unwrap();
    assert!(starts.lock().unwrap().is_empty());
}

/// [B-19] On start, a run whose owner vanished (lease expired, unfinished) is taken over.
pub async fn b19_orphan_is_taken_over_on_start(store: Arc<dyn LeaseStore>) {
    let job = unique_job("orphan");
    let starts: Starts = Arc::default();
    let a = node(&Instance::new(store.clone()), "a").build().unwrap();
    claim_on(&a, &job, &starts, 60_000, false).await;
    a.crash();
    sleep_ms(LEASE_MS + 300).await;
    let b = node(&Instance::new(store.clone()), "b")
        .catch_up_window(Duration::from_millis(0))
        .build()
        .unwrap();
    b.every(job.as_str(), "1h")
        .handler(worker(&starts, "b", 10, false))
        .unwrap();
    b.start().await.unwrap();
    assert!(
        wait_for(2_000, || starts.lock().unwrap().len() >= 2).await,
        "orphan not taken over"
    );
    let s = starts.lock().unwrap()[1].clone();
    assert_eq!((s.0.as_str(), s.2, s.3), ("b", 2, Reason::Takeover));
    b.stop(Duration::from_secs(5)).await.unwrap();
}

/// [B-21] When `timeout_ms` passes, the signal is cancelled and the attempt is `failed`
/// ("timed out").
pub async fn b21_timeout_cancels_the_signal_and_fails_the_attempt(store: Arc<dyn LeaseStore>) {
    let job = unique_job("timeout");
    let cancelled = Arc::new(AtomicBool::new(false));
    let a = node(&Instance::new(store.clone()), "a").build().unwrap();
    let events = record_events(&a);
    {
        let cancelled = cancelled.clone();
        a.every(job.as_str(), "1h")
            .catch_up_window(Duration::from_secs(3600))
            .timeout(Duration::from_millis(300))
            .handler(move |ctx| {
                let cancelled = cancelled.clone();
                async move {
                    ctx.signal.cancelled().await;
                    cancelled.store(true, Ordering::SeqCst);
                    assert_eq!(
                        ctx.cancel_cause(),
                        Some(crate::context::CancelCause::TimedOut)
                    );
                    Ok(())
                }
            })
            .unwrap();
    }
    a.start().await.unwrap();
    assert!(
        wait_for(3_000, || count(&events, |e| matches!(
            e,
            Event::Failure { .. }
        )) == 1)
        .await
    );
    assert!(cancelled.load(Ordering::SeqCst));
    let h = history_of(&store, &job).await;
    assert_eq!(
        (h[0].status, h[0].error.as_deref()),
        (RunStatus::Failed, Some("timed out"))
    );
    a.stop(Duration::from_secs(5)).await.unwrap();
}

/// [B-30] The context names the job, slot, instance, attempt, reason and fence.
pub async fn b30_context_carries_the_run_identity(store: Arc<dyn LeaseStore>) {
    let job = unique_job("ctx");
    let seen = Arc::new(std::sync::Mutex::new(None));
    let a = node(&Instance::new(store.clone()), "ctx-node")
        .build()
        .unwrap();
    {
        let seen = seen.clone();
        a.every(job.as_str(), "1h")
            .catch_up_window(Duration::from_secs(3600))
            .handler(move |ctx| {
                *seen.lock().unwrap() = Some(ctx.clone());
                async { Ok(()) }
            })
            .unwrap();
    }
    a.start().await.unwrap();
    assert!(wait_for(2_000, || seen.lock().unwrap().is_some()).await);
    let ctx = seen.lock().unwrap().clone().unwrap();
    assert_eq!(ctx.name, job);
    assert_eq!(&*ctx.instance_id, "ctx-node");
    assert_eq!(
        (ctx.attempt, ctx.reason, ctx.manual),
        (1, Reason::CatchUp, false)
    );
    assert_eq!(ctx.slot_ms() % 3_600_000, 0);
    assert!(ctx.fence >= 1);
    assert!(!ctx.signal.is_cancelled() && ctx.check_cancelled().is_ok());
    a.stop(Duration::from_secs(5)).await.unwrap();
}

/// [B-31] Scheduler, job and manual data merge (maps shallowly, typed extensions by type);
/// a data function runs at each start and, if it fails, the run fails.
pub async fn b31_data_merges_levels_and_a_failing_data_function_fails_the_run(
    store: Arc<dyn LeaseStore>,
) {
    #[derive(Debug, PartialEq)]
    struct Client(&'static str);
    let (ok_job, bad_job) = (unique_job("data"), unique_job("baddata"));
    let seen = Arc::new(std::sync::Mutex::new(None));
    let a = node(&Instance::new(store.clone()), "a")
        .data(Data::from_value(serde_json::json!({"region": "eu", "batch": 1})).with(Client("c1")))
        .build()
        .unwrap();
    let events = record_events(&a);
    {
        let seen = seen.clone();
        a.every(ok_job.as_str(), "1h")
            .catch_up_window(Duration::from_millis(0))
            .data(DataSource::function(|| async {
                Ok::<_, Error>(Data::from_value(
                    serde_json::json!({"batch": 2, "job": true}),
                ))
            }))
            .handler(move |ctx| {
                *seen.lock().unwrap() = Some((ctx.data.value().clone(), ctx.get::<Client>()));
                async { Ok(()) }
            })
            .unwrap();
    }
    // Jobs without data of their own share the scheduler's fixed data.
    let plain_seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let plain_jobs = [unique_job("plain"), unique_job("plain")];
    for job in &plain_jobs {
        let seen = plain_seen.clone();
        a.every(job.as_str(), "1h")
            .catch_up_window(Duration::from_millis(0))
            .handler(move |ctx| {
                seen.lock().unwrap().push(ctx.data.clone());
                async { Ok(()) }
            })
            .unwrap();
    }
    // Fixed data at both levels is merged once and shared by the job's runs.
    let fixed_job = unique_job("fixeddata");
    let shared_seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    {
        let seen = shared_seen.clone();
        a.every(fixed_job.as_str(), "1h")
            .catch_up_window(Duration::from_millis(0))
            .data(Data::from_value(serde_json::json!({"batch": 4})))
            .handler(move |ctx| {
                seen.lock().unwrap().push(ctx.data.clone());
                async { Ok(()) }
            })
            .unwrap();
    }
    a.every(bad_job.as_str(), "1h")
        .catch_up_window(Duration::from_secs(3600))
        .data(DataSource::function(|| async {
            Err::<Data, _>(std::io::Error::other("vault down"))
        }))
        .handler(|_ctx| async { Ok(()) })
        .unwrap();
    a.start().await.unwrap();
    let rec = a
        .run_now(
            ok_job.as_str(),
            Some(Data::from_value(serde_json::json!({"batch": 3}))),
        )
        .await
        .unwrap();
    assert_eq!(rec.status, RunStatus::Succeeded);
    let (value, client) = seen.lock().unwrap().clone().unwrap();
    assert_eq!(
        value,
        serde_json::json!({"region": "eu", "batch": 3, "job": true})
    );
    assert_eq!(client.as_deref(), Some(&Client("c1")));
    for job in [&fixed_job, &fixed_job, &plain_jobs[0], &plain_jobs[1]] {
        let rec = a.run_now(job.as_str(), None).await.unwrap();
        assert_eq!(rec.status, RunStatus::Succeeded);
    }
    {
        let seen = plain_seen.lock().unwrap();
        assert_eq!(
            seen[0].value(),
            &serde_json::json!({"region": "eu", "batch": 1})
        );
        assert!(
            Arc::ptr_eq(&seen[0], &seen[1]),
            "jobs without data share the scheduler's, not a copy each"
        );
    }
    {
        let seen = shared_seen.lock().unwrap();
        assert_eq!(
            seen[0].value(),
            &serde_json::json!({"region": "eu", "batch": 4})
        );
        assert_eq!(seen[0].get::<Client>().as_deref(), Some(&Client("c1")));
        assert!(
            Arc::ptr_eq(&seen[0], &seen[1]),
            "runs of a job with fixed data share one merged copy"
        );
    }
    assert!(
        wait_for(3_000, || count(
            &events,
            |e| matches!(e, Event::Failure { error, .. } if error.to_string().contains("vault down"))
        ) == 1)
        .await
    );
    a.stop(Duration::from_secs(5)).await.unwrap();
}

/// [B-35] `run_now` runs the job here at once, without deduplication, recorded as manual.
pub async fn b35_run_now_is_manual_and_recorded(store: Arc<dyn LeaseStore>) {
    let job = unique_job("manual");
    let runs = Arc::new(AtomicUsize::new(0));
    let a = node(&Instance::new(store.clone()), "a").build().unwrap();
    {
        let runs = runs.clone();
        a.every(job.as_str(), "1h")
            .catch_up_window(Duration::from_millis(0))
            .handler(move |ctx| {
                assert!(ctx.manual && ctx.reason == Reason::Manual);
                runs.fetch_add(1, Ordering::SeqCst);
                async { Ok(()) }
            })
            .unwrap();
    }
    assert!(matches!(
        a.run_now(job.as_str(), None).await,
        Err(Error::State { .. })
    ));
    a.start().await.unwrap();
    let r1 = a.run_now(job.as_str(), None).await.unwrap();
    sleep_ms(5).await;
    let r2 = a.run_now(job.as_str(), None).await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert!(r1.manual && r1.status == RunStatus::Succeeded && r2.status == RunStatus::Succeeded);
    let h = a.history(job.as_str(), 10).await.unwrap();
    assert_eq!(h.len(), 2, "{h:?}");
    assert!(
        h.iter()
            .all(|r| r.manual && r.reason == Reason::Manual && r.status == RunStatus::Succeeded)
    );
    assert!(matches!(
        a.run_now("nope", None).await,
        Err(Error::UnknownJob { .. })
    ));
    a.stop(Duration::from_secs(5)).await.unwrap();
}

/// [B-36] `history` and `last_run` work from a scheduler that registered no jobs.
pub async fn b36_history_is_readable_from_a_process_without_jobs(store: Arc<dyn LeaseStore>) {
    let job = unique_job("api");
    let starts: Starts = Arc::default();
    let a = node(&Instance::new(store.clone()), "a").build().unwrap();
    claim_on(&a, &job, &starts, 10, false).await;
    sleep_ms(300).await;
    let api = node(&Instance::new(store.clone()), "api").build().unwrap();
    api.start().await.unwrap();
    let h = api.history(job.as_str(), 5).await.unwrap();
    assert_eq!(h.len(), 1);
    assert_eq!(h[0].instance_id, "a");
    assert_eq!(
        api.last_run(job.as_str()).await.unwrap().unwrap().slot,
        h[0].slot
    );
    assert!(api.jobs().is_empty());
    api.stop(Duration::from_secs(5)).await.unwrap();
    a.stop(Duration::from_secs(5)).await.unwrap();
}

/// [G-05] Catch-up policy `all` replays every missed slot inside the window, oldest first,
/// one after another, capped by `max`.
pub async fn s11_all_catch_up_replays_missed_slots_in_order(store: Arc<dyn LeaseStore>) {
    let job = unique_job("catchall");
    let starts: Starts = Arc::default();
    let a = node(&Instance::new(store.clone()), "a").build().unwrap();
    a.every(job.as_str(), "200ms")
        .catch_up_window(Duration::from_secs(1))
        .catch_up(CatchUp::All { max: 3 })
        .handler(worker(&starts, "a", 10, false))
        .unwrap();
    a.start().await.unwrap();
    assert!(
        wait_for(2_000, || starts
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.3 == Reason::CatchUp)
            .count()
            >= 3)
        .await
    );
    a.stop(Duration::from_secs(5)).await.unwrap();
    let s: Vec<_> = starts
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.3 == Reason::CatchUp)
        .cloned()
        .collect();
    assert_eq!(s.len(), 3, "{s:?}");
    assert!(s[0].1 < s[1].1 && s[1].1 < s[2].1, "oldest first: {s:?}");
    assert_eq!(s[2].1 - s[0].1, 400);
}

/// [G-06] With no job due and none running, an instance sends nothing to the store.
pub async fn s11_no_store_traffic_while_idle(store: Arc<dyn LeaseStore>) {
    let job = unique_job("idle");
    let inst = Instance::new(store.clone());
    let a = node(&inst, "a")
        .catch_up_window(Duration::from_millis(0))
        .build()
        .unwrap();
    // The job's grid is laid so that its next slot is half an hour away whenever the test
    // runs: on the plain hourly grid, a run at the top of an hour met the slot inside the
    // idle window (seen: 15 calls, the slot's claim, run and result).
    let into_hour = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis()
        % 3_600_000;
    let offset = Duration::from_millis(((into_hour + 1_800_000) % 3_600_000) as u64);
    a.every(job.as_str(), "1h")
        .offset(offset)
        .handler(|_ctx| async { Ok(()) })
        .unwrap();
    a.start().await.unwrap();
    sleep_ms(300).await;
    let before = inst.calls();
    sleep_ms(3_000).await;
    assert_eq!(inst.calls(), before, "idle instance talked to the store");
    a.stop(Duration::from_secs(5)).await.unwrap();
}

/// Starts `a` on an `every 2s` job at the start of a slot and a backup `b` that skips the next
/// slot for overlap; returns the slot `a` runs.
async fn long_run_then_overlap(
    store: &Arc<dyn LeaseStore>,
    job: &JobName,
    starts: &Starts,
    fail_on_cancel: bool,
) -> (
    Scheduler<Leased>,
    Scheduler<Leased>,
    EpochMs,
    Arc<std::sync::Mutex<Vec<Event>>>,
) {
    align(2_000, 100).await;
    let a = node(&Instance::new(store.clone()), "a").build().unwrap();
    a.every(job.as_str(), "2s")
        .catch_up_window(Duration::from_secs(10))
        .handler(worker(starts, "a", 60_000, fail_on_cancel))
        .unwrap();
    let a_events = record_events(&a);
    a.start().await.unwrap();
    assert!(
        wait_for(1_000, || !starts.lock().unwrap().is_empty()).await,
        "a did not start"
    );
    let slot = starts.lock().unwrap()[0].1;
    let b = node(&Instance::new(store.clone()), "b")
        .catch_up_window(Duration::from_millis(0))
        .build()
        .unwrap();
    let b_events = record_events(&b);
    b.every(job.as_str(), "2s")
        .handler(worker(starts, "b", 100, false))
        .unwrap();
    b.start().await.unwrap();
    assert!(
        wait_for(3_000, || count(&b_events, |e| matches!(
            e,
            Event::Skip {
                reason: SkipReason::Overlap,
                ..
            }
        )) >= 1)
        .await,
        "b never skipped for overlap"
    );
    // `a`'s own claim of that next slot is answered too (overlap, or won if `slot`'s lease
    // lapsed under load) before the caller stops or crashes `a`: otherwise it could still be
    // in flight then and win the next slot right after `slot` was handed over (a claim is
    // free to replace a released run), which is another story than the one told here.
    wait_for(3_000, || {
        count(&a_events, |e| {
            matches!(
                e,
                Event::Skip {
                    reason: SkipReason::Overlap,
                    ..
                }
            )
        }) >= 1
            || starts
                .lock()
                .unwrap()
                .iter()
                .any(|s| s.0 == "a" && s.1 > slot)
    })
    .await;
    (a, b, slot, b_events)
}

/// Waits up to `ms` for the first run started by `who`; its (slot, attempt, reason).
async fn first_start_of(starts: &Starts, who: &str, ms: u64) -> (EpochMs, u32, Reason) {
    let started = wait_for(ms, || starts.lock().unwrap().iter().any(|s| s.0 == who)).await;
    let all = starts.lock().unwrap().clone();
    assert!(started, "{who} never started: {all:?}");
    let s = all.iter().find(|s| s.0 == who).unwrap();
    (s.1, s.2, s.3)
}

/// [B-15] When a crashed run's lease expires after the job's next slot came due (and was
/// skipped for overlap), the backup marks it `interrupted` and starts the due slot.
pub async fn b15_expired_run_is_replaced_and_the_due_slot_starts(store: Arc<dyn LeaseStore>) {
    let job = unique_job("replace");
    let starts: Starts = Arc::default();
    let (a, b, slot, b_events) = long_run_then_overlap(&store, &job, &starts, false).await;
    a.crash();
    let b_run = first_start_of(&starts, "b", LEASE_MS + 4 * HEARTBEAT_MS + 3_000).await;
    assert_eq!(b_run, (slot + 2_000, 1, Reason::Scheduled));
    assert_eq!(
        count(
            &b_events,
            |e| matches!(e, Event::Interrupted { cause, .. } if *cause == crate::InterruptCause::ReplacedByNextSlot)
        ),
        1
    );
    b.stop(Duration::from_secs(5)).await.unwrap();
    let h = history_of(&store, &job).await;
    let old = h.iter().find(|r| r.slot == slot).unwrap();
    assert_eq!(old.status, RunStatus::Interrupted);
}

/// [B-17] A handover continues the same slot as attempt 2, even when the job's next slot is
/// already due.
pub async fn b17_handover_continues_the_same_slot_after_the_next_came_due(
    store: Arc<dyn LeaseStore>,
) {
    let job = unique_job("handnext");
    let starts: Starts = Arc::default();
    let (a, b, slot, _) = long_run_then_overlap(&store, &job, &starts, true).await;
    // The run `a` hands over is its newest: normally `slot`, but on a loaded machine a late
    // renewal can let `slot`'s lease lapse, and `a`'s own claim of the next slot then
    // replaces it (B-15) and runs that one instead.
    let handed = starts
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.0 == "a")
        .map(|s| s.1)
        .max()
        .unwrap_or(slot);
    a.stop(Duration::from_secs(5)).await.unwrap();
    let b_run = first_start_of(&starts, "b", 2 * HEARTBEAT_MS + 2_000).await;
    if b_run != (handed, 2, Reason::Takeover) {
        let h = history_of(&store, &job).await;
        panic!(
            "b started {b_run:?}, not ({handed}, 2, takeover); starts {:?}; history {h:#?}",
            starts.lock().unwrap()
        );
    }
    b.stop(Duration::from_secs(5)).await.unwrap();
}

/// [B-35, B-37] The final record of a manual run is written after its `running` record,
/// even when the start write is slow: history never shows a finished run as running.
pub async fn b35_final_record_is_never_overtaken_by_the_start_record(store: Arc<dyn LeaseStore>) {
    let job = unique_job("order");
    let inst = Instance::new(store.clone());
    inst.slow_start_records(true);
    let a = node(&inst, "a").build().unwrap();
    a.every(job.as_str(), "1h")
        .catch_up_window(Duration::from_millis(0))
        .handler(|_ctx| async { Ok(()) })
        .unwrap();
    a.start().await.unwrap();
    let rec = a.run_now(job.as_str(), None).await.unwrap();
    assert_eq!(rec.status, RunStatus::Succeeded);
    sleep_ms(500).await;
    let h = history_of(&store, &job).await;
    assert_eq!(h.len(), 1, "{h:?}");
    assert_eq!(
        h[0].status,
        RunStatus::Succeeded,
        "the start record overwrote the final one: {h:?}"
    );
    a.stop(Duration::from_secs(5)).await.unwrap();
}

/// Sleeps until `after` ms past the next multiple of `period_ms` on `clock`. Nodes built
/// before the first sleep share the clock's anchor, also under a paused tokio clock.
async fn align_on(clock: &Clock, period_ms: u64, after: u64) -> EpochMs {
    let now = clock.now_ms();
    let p = period_ms as EpochMs;
    let next = (now / p + 1) * p;
    sleep_ms((next - now) as u64 + after).await;
    next
}

/// An instance of the kit's timing with an `every 4s` job, on `clock`.
fn every_4s<F>(
    inst: &Instance,
    id: &str,
    clock: Clock,
    catch_up: Duration,
    job: &JobName,
    handler: F,
) -> Scheduler<Leased>
where
    F: Fn(
            crate::JobContext,
        )
            -> futures::future::BoxFuture<'static, std::result::Result<(), crate::HandlerError>>
        + Send
        + Sync
        + 'static,
{
    let s = node(inst, id)
        .clock(clock)
        .catch_up_window(catch_up)
        .build()
        .unwrap();
    s.every(job.as_str(), "4s").handler(handler).unwrap();
    s
}

/// [B-14] A run only one instance knows of is still backed up: `a`'s claim of the slot
/// failed, then `b` started the slot late (catch-up) and crashed; `a` takes it over.
pub async fn b14_a_slot_whose_claim_failed_is_backed_up_when_another_starts_it_late(
    store: Arc<dyn LeaseStore>,
) {
    let job = unique_job("unknown");
    let starts = Starts::default();
    let clock = Clock::tokio();
    let ia = Instance::new(store.clone());
    ia.fail_claims(true);
    // No catch-up on `a`: it must learn of the run by watching, not by claiming it again.
    let a = every_4s(
        &ia,
        "a",
        clock,
        Duration::from_millis(0),
        &job,
        worker(&starts, "a", 100, false),
    );
    let b = node(&Instance::new(store.clone()), "b")
        .clock(clock)
        .catch_up_window(Duration::from_secs(10))
        .build()
        .unwrap();
    b.every(job.as_str(), "4s")
        .handler(worker(&starts, "b", 60_000, false))
        .unwrap();
    a.start().await.unwrap();
    let slot = align_on(&clock, 4_000, 150).await;
    ia.fail_claims(false);
    b.start().await.unwrap();
    let (b_slot, _, b_reason) = first_start_of(&starts, "b", 2_000).await;
    assert_eq!((b_slot, b_reason), (slot, Reason::CatchUp));
    b.crash();
    let (a_slot, attempt, reason) = first_start_of(&starts, "a", 3_000).await;
    assert_eq!(
        (a_slot, attempt, reason),
        (slot, 2, Reason::Takeover),
        "a must take over the run it never claimed"
    );
    a.stop(Duration::from_secs(5)).await.unwrap();
}

/// [B-14] A claim that committed after its caller stopped waiting never strands the slot:
/// the instance finds the run in its own name with nothing running it, hands it over, and
/// the slot starts again at once as a handover (not after the lease, not counted).
pub async fn b14_a_claim_committed_after_its_caller_gave_up_is_handed_over_at_once(
    store: Arc<dyn LeaseStore>,
) {
    let job = unique_job("lostans");
    let starts = Starts::default();
    let clock = Clock::tokio();
    let ia = Instance::new(store.clone());
    ia.lose_claim_answers(true);
    let a = every_4s(
        &ia,
        "a",
        clock,
        Duration::from_millis(0),
        &job,
        worker(&starts, "a", 100, false),
    );
    a.start().await.unwrap();
    let slot = align_on(&clock, 4_000, 100).await;
    ia.lose_claim_answers(false);
    let (s, attempt, reason) = first_start_of(&starts, "a", 3_000).await;
    assert_eq!((s, attempt, reason), (slot, 2, Reason::Takeover));
    let h = store.history(&job, 10).await.unwrap();
    let first = h.iter().find(|r| r.slot == slot && r.attempt == 1);
    assert!(
        first.is_some_and(
            |r| r.status == RunStatus::Interrupted && r.error.as_deref() == Some("handed over")
        ),
        "attempt 1 must be handed over, not left to expire: {h:?}"
    );
    a.stop(Duration::from_secs(5)).await.unwrap();
}

/// [B-17, B-34] Stop racing a takeover, at two points (before the takeover reaches the store
/// and after it committed but before its answer came back): the won attempt is handed over
/// before `stop()` returns, never left `running`, and another instance continues the run
/// without using up an attempt.
pub async fn b17_stop_during_a_takeover_hands_the_run_over(store: Arc<dyn LeaseStore>) {
    // One clock for both rounds: under a paused tokio clock a clock made later would lag
    // the store's by the time the first round advanced.
    let clock = Clock::tokio();
    for (before, after) in [(300, 0), (0, 300)] {
        let job = unique_job("stoptko");
        let starts = Starts::default();
        let a = node(&Instance::new(store.clone()), "a")
            .clock(clock)
            .catch_up_window(Duration::from_millis(0))
            .build()
            .unwrap();
        a.every(job.as_str(), "4s")
            .handler(worker(&starts, "a", 60_000, false))
            .unwrap();
        let ib = Instance::new(store.clone());
        ib.delay_takeovers(before, after);
        let b = every_4s(
            &ib,
            "b",
            clock,
            Duration::from_secs(10),
            &job,
            worker(&starts, "b", 60_000, true),
        );
        let c = node(&Instance::new(store.clone()), "c")
            .clock(clock)
            .catch_up_window(Duration::from_millis(0))
            .build()
            .unwrap();
        c.every(job.as_str(), "4s")
            .handler(worker(&starts, "c", 100, false))
            .unwrap();
        a.start().await.unwrap();
        align_on(&clock, 4_000, 100).await;
        let (slot, _, _) = first_start_of(&starts, "a", 1_000).await;
        b.start().await.unwrap();
        a.crash();
        assert!(
            wait_for(3_000, || ib.takeovers() >= 1).await,
            "b never tried to take over"
        );
        sleep_ms(50).await;
        b.stop(Duration::from_secs(5)).await.unwrap();
        let h = store.history(&job, 10).await.unwrap();
        assert!(
            !h.iter()
                .any(|r| r.instance_id == "b" && r.status == RunStatus::Running),
            "stop left b's attempt running (delays {before}/{after}): {h:?}"
        );
        c.start().await.unwrap();
        let (c_slot, attempt, reason) = first_start_of(&starts, "c", 3_000).await;
        assert_eq!((c_slot, reason), (slot, Reason::Takeover));
        assert!(attempt >= 2, "attempt {attempt}");
        c.stop(Duration::from_secs(5)).await.unwrap();
    }
}

/// [B-34] `stop()` waits (within its timeout) for a result write already in flight instead
/// of aborting it, and sends nothing after it returns.
pub async fn b34_stop_waits_for_a_result_write_in_flight(store: Arc<dyn LeaseStore>) {
    let job = unique_job("stopwrite");
    let starts = Starts::default();
    let clock = Clock::tokio();
    let ia = Instance::new(store.clone());
    ia.delay_owner_writes(400);
    let a = every_4s(
        &ia,
        "a",
        clock,
        Duration::from_millis(0),
        &job,
        worker(&starts, "a", 100, false),
    );
    a.start().await.unwrap();
    let slot = align_on(&clock, 4_000, 50).await;
    first_start_of(&starts, "a", 1_000).await;
    // The handler has returned; its finish waits 400 ms before reaching the store.
    sleep_ms(250).await;
    a.stop(Duration::from_secs(5)).await.unwrap();
    let calls = ia.calls();
    let h = store.history(&job, 10).await.unwrap();
    assert!(
        h.iter()
            .any(|r| r.slot == slot && r.status == RunStatus::Succeeded),
        "the finish in flight was dropped by stop: {h:?}"
    );
    sleep_ms(500).await;
    assert_eq!(
        ia.calls(),
        calls,
        "a call reached the store after stop returned"
    );
}

/// [B-12, B-14] The slot every instance skipped as `overlap` and another instance started
/// late (catch-up after a restart) is still backed up: `b` skipped it, `c` started it and
/// crashed, `b` takes it over.
pub async fn b14_a_slot_skipped_for_overlap_then_started_late_elsewhere_is_backed_up(
    store: Arc<dyn LeaseStore>,
) {
    let job = unique_job("ovlate");
    let starts = Starts::default();
    let clock = Clock::tokio();
    // `a` runs one slot for 5 s, over the next slot (every 4 s).
    let a = node(&Instance::new(store.clone()), "a")
        .clock(clock)
        .catch_up_window(Duration::from_millis(0))
        .build()
        .unwrap();
    a.every(job.as_str(), "4s")
        .handler(worker(&starts, "a", 5_000, false))
        .unwrap();
    let b = node(&Instance::new(store.clone()), "b")
        .clock(clock)
        .catch_up_window(Duration::from_millis(0))
        .build()
        .unwrap();
    b.every(job.as_str(), "4s")
        .handler(worker(&starts, "b", 100, false))
        .unwrap();
    let c = node(&Instance::new(store.clone()), "c")
        .clock(clock)
        .catch_up_window(Duration::from_secs(10))
        .build()
        .unwrap();
    c.every(job.as_str(), "4s")
        .handler(worker(&starts, "c", 60_000, false))
        .unwrap();
    a.start().await.unwrap();
    let first = align_on(&clock, 4_000, 100).await;
    first_start_of(&starts, "a", 1_000).await;
    // `a` stops taking new slots (its run goes on); `b` joins and skips the next slot.
    b.start().await.unwrap();
    let skipped = first + 4_000;
    sleep_ms((skipped - clock.now_ms()).max(0) as u64 + 300).await;
    a.remove(job.as_str()).unwrap();
    // `a`'s run ends at first + 5 s; then `c` starts and catches the skipped slot up.
    sleep_ms((first + 5_200 - clock.now_ms()).max(0) as u64).await;
    c.start().await.unwrap();
    let (c_slot, _, c_reason) = first_start_of(&starts, "c", 2_000).await;
    assert_eq!(
        (c_slot, c_reason),
        (skipped, Reason::CatchUp),
        "{:?}",
        starts.lock().unwrap()
    );
    c.crash();
    let (b_slot, attempt, reason) = first_start_of(&starts, "b", 3_000).await;
    assert_eq!(
        (b_slot, attempt, reason),
        (skipped, 2, Reason::Takeover),
        "b must back up the slot it skipped: {:?}",
        starts.lock().unwrap()
    );
    a.stop(Duration::from_secs(5)).await.unwrap();
    b.stop(Duration::from_secs(5)).await.unwrap();
}
