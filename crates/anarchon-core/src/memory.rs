//! The in-memory reference store: a [`LeaseStore`] and a [`ClaimStore`] in one process.
//!
//! It is the executable model of the contract in [`crate::store`]: every store must behave
//! like it under the conformance kit. Its clock is tokio's, anchored to the system clock at
//! creation, so under `tokio::time::pause()` leases expire exactly when the test advances
//! time. It can also be made unavailable or unresponsive, to test the scheduler's timeouts
//! and self-fencing.
//!
//! ```
//! # tokio_test_block_on(async {
//! use anarchon_core::memory::MemoryStore;
//! use anarchon_core::store::Store;
//! let store = MemoryStore::new();
//! assert!(store.now().await.unwrap() > 1_600_000_000_000);
//! # });
//! # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
//! # }
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicI64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use tokio::sync::broadcast;

use crate::error::{Error, Result};
use crate::history::{Reason, Retention, RunRecord, RunStatus};
use crate::store::{
    BatchLimits, ClaimOutcome, ClaimStore, EpochMs, Finish, HistoryStore, JobName, Lease,
    LeaseClaim, LeaseStore, Overlap, OwnerWrite, Prepare, Renewal, RunKey, RunView, SlotClaim,
    SlotOutcome, Store, Takeover, TakeoverOutcome,
};

const HEALTHY: u8 = 0;
const UNAVAILABLE: u8 = 1;
const HANGING: u8 = 2;

/// How the in-memory store answers, to simulate an outage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Answers normally.
    Healthy,
    /// Every call fails at once with [`Error::Unavailable`].
    Unavailable,
    /// Every call hangs until the scheduler's timeout (a dead connection).
    Hanging,
}

#[derive(Debug, Clone)]
struct Run {
    status: RunStatus,
    attempt: u32,
    counted_starts: u32,
    owner: Option<String>,
    expires_at: EpochMs,
}

#[derive(Default)]
struct State {
    runs: BTreeMap<RunKey, Run>,
    /// Per job, every attempt record (lease and claim-only runs, manual runs).
    history: HashMap<JobName, Vec<RunRecord>>,
    fences: HashMap<JobName, u64>,
    jobs: BTreeSet<JobName>,
    /// Claim-only: the run keys claimed.
    claimed: BTreeSet<RunKey>,
    /// Per job, how many rows of `history` each distinct run `(slot, manual)` has: `prune`
    /// finds the oldest run retention keeps here instead of sorting every row at every write.
    keys: HashMap<JobName, BTreeMap<(EpochMs, bool), u32>>,
    /// The keys of `runs` whose status is `running` (what a claim, `prune` and
    /// `unfinished_runs` look for, without walking every run kept). [`State::track`] keeps it
    /// in step after each change of a run.
    running: BTreeSet<RunKey>,
}

/// One more (`up`) or one fewer row of the run `key` in `keys`.
fn count_row(keys: &mut BTreeMap<(EpochMs, bool), u32>, key: (EpochMs, bool), up: bool) {
    if up {
        *keys.entry(key).or_default() += 1;
    } else if let Some(n) = keys.get_mut(&key) {
        *n -= 1;
        if *n == 0 {
            keys.remove(&key);
        }
    }
}

/// A clock set by hand, for tests on virtual time: a [`MemoryStore::with_clock`] store reads
/// it instead of tokio's clock, so its calls complete without a runtime.
///
/// ```
/// use anarchon_core::memory::{ManualClock, MemoryStore};
/// use anarchon_core::store::Store;
/// use futures::FutureExt;
///
/// let clock = ManualClock::new(1_000);
/// let store = MemoryStore::with_clock(clock.clone());
/// clock.set(5_000);
/// assert_eq!(store.now().now_or_never().unwrap().unwrap(), 5_000);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    /// A clock reading `epoch_ms`.
    pub fn new(epoch_ms: EpochMs) -> Self {
        ManualClock(Arc::new(AtomicI64::new(epoch_ms)))
    }

    /// Sets the time.
    pub fn set(&self, epoch_ms: EpochMs) {
        self.0.store(epoch_ms, Ordering::SeqCst);
    }

    /// The time.
    pub fn now_ms(&self) -> EpochMs {
        self.0.load(Ordering::SeqCst)
    }
}

/// The in-memory reference store. Clone it to share one store between several schedulers
/// (instances) in one process.
#[derive(Clone)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
    anchor_ms: EpochMs,
    anchor: tokio::time::Instant,
    releases: broadcast::Sender<RunKey>,
    health: Arc<AtomicU8>,
    fast_handover: bool,
    /// Read instead of tokio's clock when set.
    manual: Option<ManualClock>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore").finish_non_exhaustive()
    }
}

impl MemoryStore {
    /// A new, empty store whose clock starts at the system time.
    pub fn new() -> Self {
        let anchor_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as EpochMs)
            .unwrap_or(0);
        Self::starting_at(anchor_ms)
    }

    /// A new, empty store whose clock reads `epoch_ms` now and then follows tokio's clock.
    pub fn starting_at(epoch_ms: EpochMs) -> Self {
        MemoryStore {
            state: Arc::default(),
            anchor_ms: epoch_ms,
            anchor: tokio::time::Instant::now(),
            releases: broadcast::channel(1024).0,
            health: Arc::new(AtomicU8::new(HEALTHY)),
            fast_handover: true,
            manual: None,
        }
    }

    /// A new, empty store whose clock is `clock` (virtual time: nothing of it needs a
    /// runtime, and a call completes at its first poll unless the store hangs).
    pub fn with_clock(clock: ManualClock) -> Self {
        MemoryStore {
            manual: Some(clock),
            ..Self::starting_at(0)
        }
    }

    /// Turns off release notifications, so backups must poll (as on a store without them).
    pub fn without_fast_handover(mut self) -> Self {
        self.fast_handover = false;
        self
    }

    /// Makes every call succeed, fail or hang from now on.
    pub fn set_health(&self, health: Health) {
        let v = match health {
            Health::Healthy => HEALTHY,
            Health::Unavailable => UNAVAILABLE,
            Health::Hanging => HANGING,
        };
        self.health.store(v, Ordering::SeqCst);
    }

    /// The store's clock, without the health check (for tests).
    pub fn clock_ms(&self) -> EpochMs {
        if let Some(clock) = &self.manual {
            return clock.now_ms();
        }
        self.anchor_ms + self.anchor.elapsed().as_millis() as EpochMs
    }

    async fn gate(&self) -> Result<()> {
        match self.health.load(Ordering::SeqCst) {
            UNAVAILABLE => Err(Error::Unavailable {
                store: "memory",
                target: "memory".into(),
                source: "simulated outage".into(),
            }),
            HANGING => {
                std::future::pending::<()>().await;
                unreachable!()
            }
            _ => Ok(()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves the model in a consistent state (every
        // mutation is a few field writes), so poisoning is ignored.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl State {
    /// Keeps `running` in step with the status of the run `key` (after it changed).
    fn track(&mut self, key: &RunKey) {
        if self
            .runs
            .get(key)
            .is_some_and(|r| r.status == RunStatus::Running)
        {
            if !self.running.contains(key) {
                self.running.insert(key.clone());
            }
        } else {
            self.running.remove(key);
        }
    }

    fn next_fence(&mut self, job: &JobName) -> u64 {
        let f = self.fences.entry(job.clone()).or_insert(0);
        *f += 1;
        *f
    }

    fn history_row(&mut self, run: &RunKey, attempt: u32) -> Option<&mut RunRecord> {
        self.history
            .get_mut(&run.job)?
            .iter_mut()
            .find(|r| !r.manual && r.slot == run.slot && r.attempt == attempt)
    }

    fn set_row(
        &mut self,
        run: &RunKey,
        attempt: u32,
        status: RunStatus,
        now: EpochMs,
        error: Option<&str>,
    ) {
        if let Some(row) = self.history_row(run, attempt)
            && row.status == RunStatus::Running
        {
            row.status = status;
            row.finished_at = Some(now);
            row.error = error.map(str::to_owned);
        }
    }

    /// Appends a row to `job`'s history.
    fn push_row(&mut self, record: RunRecord) {
        let keys = self.keys.entry(record.job.clone()).or_default();
        count_row(keys, (record.slot, record.manual), true);
        self.history
            .entry(record.job.clone())
            .or_default()
            .push(record);
    }

    /// Replaces the row of `job` that `matches` with `record`, or appends it.
    fn upsert_row(&mut self, record: &RunRecord, matches: impl Fn(&RunRecord) -> bool) {
        let rows = self.history.entry(record.job.clone()).or_default();
        match rows.iter_mut().find(|r| matches(r)) {
            Some(row) => {
                let keys = self.keys.entry(record.job.clone()).or_default();
                count_row(keys, (row.slot, row.manual), false);
                count_row(keys, (record.slot, record.manual), true);
                *row = record.clone();
            }
            None => self.push_row(record.clone()),
        }
    }

    fn prune(&mut self, job: &JobName, retention: Retention, now: EpochMs) {
        // Distinct runs, newest slot first; a manual run counts as a run of its own. The
        // `size` newest are kept: every run from the `size`-th newest on.
        let size = retention.size.max(1) as usize;
        let oldest_kept = match self.keys.get(job) {
            Some(keys) if keys.len() > size => keys.keys().nth(keys.len() - size).copied(),
            _ => None,
        };
        let ttl_cut = retention.ttl_ms.map(|t| now - t as EpochMs);
        if oldest_kept.is_none() && ttl_cut.is_none() {
            // Every run fits and none expires.
            return;
        }
        let expired =
            |r: &RunRecord| ttl_cut.is_some_and(|cut| r.finished_at.is_some_and(|f| f < cut));
        let kept = |r: &RunRecord| {
            oldest_kept.is_none_or(|oldest| (r.slot, r.manual) >= oldest) && !expired(r)
        };
        let Some(rows) = self.history.get(job) else {
            return;
        };
        if rows.iter().all(kept) {
            return;
        }
        let running: BTreeSet<EpochMs> = self
            .running
            .range(RunKey::new(job.clone(), EpochMs::MIN)..=RunKey::new(job.clone(), EpochMs::MAX))
            .map(|k| k.slot)
            .collect();
        let (Some(rows), Some(keys)) = (self.history.get_mut(job), self.keys.get_mut(job)) else {
            return;
        };
        let mut dropped = BTreeSet::new();
        rows.retain(|r| {
            let keep_it = running.contains(&r.slot) && !r.manual || kept(r);
            if !keep_it {
                count_row(keys, (r.slot, r.manual), false);
                if !r.manual {
                    dropped.insert(r.slot);
                }
            }
            keep_it
        });
        for slot in dropped {
            let key = RunKey::new(job.clone(), slot);
            if rows.iter().all(|r| r.manual || r.slot != slot) {
                self.runs.remove(&key);
                self.running.remove(&key);
                self.claimed.remove(&key);
            }
        }
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn kind(&self) -> &'static str {
        "memory"
    }

    async fn prepare(&self, prepare: &Prepare) -> Result<()> {
        self.gate().await?;
        self.lock().jobs.extend(prepare.jobs.iter().cloned());
        Ok(())
    }

    async fn now(&self) -> Result<EpochMs> {
        self.gate().await?;
        Ok(self.clock_ms())
    }

    async fn close(&self) -> Result<()> {
        Ok(())
    }
}

#[async_trait]
impl HistoryStore for MemoryStore {
    async fn history(&self, job: &JobName, count: usize) -> Result<Vec<RunRecord>> {
        self.gate().await?;
        let st = self.lock();
        let mut rows = st.history.get(job).cloned().unwrap_or_default();
        rows.sort_by(|a, b| {
            (b.started_at, b.slot, b.attempt).cmp(&(a.started_at, a.slot, a.attempt))
        });
        rows.truncate(count);
        Ok(rows)
    }

    async fn record_manual(&self, record: &RunRecord, retention: Retention) -> Result<()> {
        self.gate().await?;
        let now = self.clock_ms();
        let mut st = self.lock();
        st.jobs.insert(record.job.clone());
        st.upsert_row(record, |r| {
            r.manual && r.slot == record.slot && r.instance_id == record.instance_id
        });
        st.prune(&record.job, retention, now);
        Ok(())
    }

    async fn known_jobs(&self) -> Result<Vec<JobName>> {
        self.gate().await?;
        Ok(self.lock().jobs.iter().cloned().collect())
    }
}

#[async_trait]
impl LeaseStore for MemoryStore {
    /// One call and one lock for the whole batch (a store's one round trip), each claim
    /// judged as the contract says after the ones before it.
    async fn claim_many(&self, claims: &[LeaseClaim]) -> Result<Vec<ClaimOutcome>> {
        self.gate().await?;
        let now = self.clock_ms();
        let mut st = self.lock();
        Ok(claims.iter().map(|c| claim_one(&mut st, c, now)).collect())
    }

    /// The reference store takes batches (one lock each), so the kit drives the
    /// scheduler's batched paths on it.
    fn limits(&self) -> BatchLimits {
        BatchLimits::all(64)
    }

    async fn heartbeat(&self, leases: &[Lease], lease_ms: u64) -> Result<Vec<Renewal>> {
        self.gate().await?;
        let now = self.clock_ms();
        let mut st = self.lock();
        Ok(leases
            .iter()
            .map(|lease| match st.runs.get_mut(&lease.run) {
                Some(run)
                    if run.status == RunStatus::Running
                        && run.attempt == lease.attempt
                        && run.owner.as_deref() == Some(&lease.instance_id) =>
                {
                    run.expires_at = now + lease_ms as EpochMs;
                    Renewal::Renewed {
                        expires_at: run.expires_at,
                    }
                }
                _ => Renewal::Lost,
            })
            .collect())
    }

    /// One call and one lock for the whole batch, like `claim_many`.
    async fn finish_many(&self, writes: &[(Lease, Finish)]) -> Result<Vec<OwnerWrite>> {
        self.gate().await?;
        let now = self.clock_ms();
        let mut st = self.lock();
        Ok(writes
            .iter()
            .map(|(lease, finish)| finish_one(&mut st, lease, finish, now))
            .collect())
    }

    async fn release(&self, lease: &Lease) -> Result<OwnerWrite> {
        self.gate().await?;
        let now = self.clock_ms();
        {
            let mut st = self.lock();
            match st.runs.get_mut(&lease.run) {
                Some(run)
                    if run.status == RunStatus::Running
                        && run.attempt == lease.attempt
                        && run.owner.as_deref() == Some(&lease.instance_id) =>
                {
                    run.owner = None;
                    run.expires_at = now;
                }
                _ => return Ok(OwnerWrite::Lost),
            }
            st.set_row(
                &lease.run,
                lease.attempt,
                RunStatus::Interrupted,
                now,
                Some("handed over"),
            );
        }
        if self.fast_handover {
            let _ = self.releases.send(lease.run.clone());
        }
        Ok(OwnerWrite::Done)
    }

    /// One call and one lock for the whole batch, like `claim_many`.
    async fn take_over_many(&self, takeovers: &[Takeover]) -> Result<Vec<TakeoverOutcome>> {
        self.gate().await?;
        let now = self.clock_ms();
        let mut st = self.lock();
        Ok(takeovers
            .iter()
            .map(|t| take_over_one(&mut st, t, now))
            .collect())
    }

    async fn runs(&self, runs: &[RunKey]) -> Result<Vec<RunView>> {
        self.gate().await?;
        let now = self.clock_ms();
        let st = self.lock();
        Ok(runs
            .iter()
            .filter_map(|k| st.runs.get(k).map(|r| view(k, r, now)))
            .collect())
    }

    async fn unfinished_runs(&self, jobs: &[JobName]) -> Result<Vec<RunView>> {
        self.gate().await?;
        let now = self.clock_ms();
        // The backup poll names every job it backs up (thousands): a set, not a list scan
        // per running run.
        let jobs: std::collections::HashSet<&JobName> = jobs.iter().collect();
        let st = self.lock();
        Ok(st
            .running
            .iter()
            .filter(|k| jobs.contains(&k.job))
            .filter_map(|k| Some((k, st.runs.get(k)?)))
            .filter(|(_, r)| r.status == RunStatus::Running)
            .map(|(k, r)| view(k, r, now))
            .collect())
    }

    fn subscribe_releases(&self) -> Option<broadcast::Receiver<RunKey>> {
        self.fast_handover.then(|| self.releases.subscribe())
    }
}

/// One claim, judged at `now` under the lock (see the trait's contract).
fn claim_one(st: &mut State, claim: &LeaseClaim, now: EpochMs) -> ClaimOutcome {
    if now > claim.not_after {
        return ClaimOutcome::Late { store_now: now };
    }
    let job = &claim.run.job;
    st.jobs.insert(job.clone());
    // [B-15] Earlier runs whose lease ended unfinished are replaced by this slot.
    // Runs are ordered by job, then slot: the job's earlier runs are one range.
    let earlier = RunKey::new(job.clone(), EpochMs::MIN)..claim.run.clone();
    let ended: Vec<(RunKey, u32)> = st
        .running
        .range(earlier.clone())
        .filter_map(|k| Some((k, st.runs.get(k)?)))
        .filter(|(_, r)| {
            r.status == RunStatus::Running && (r.owner.is_none() || r.expires_at <= now)
        })
        .map(|(k, r)| (k.clone(), r.attempt))
        .collect();
    for (key, attempt) in ended {
        if let Some(run) = st.runs.get_mut(&key) {
            run.status = RunStatus::Interrupted;
            run.owner = None;
        }
        st.track(&key);
        st.set_row(
            &key,
            attempt,
            RunStatus::Interrupted,
            now,
            Some("replaced by the next slot"),
        );
    }
    if st.runs.contains_key(&claim.run) {
        return ClaimOutcome::Taken;
    }
    if claim.overlap == Overlap::Skip
        && let Some((k, _)) = st
            .running
            .range(earlier)
            .filter_map(|k| Some((k, st.runs.get(k)?)))
            .find(|(_, r)| {
                r.status == RunStatus::Running && r.owner.is_some() && r.expires_at > now
            })
    {
        return ClaimOutcome::Overlap {
            running_slot: k.slot,
        };
    }
    let fence = st.next_fence(job);
    let expires_at = now + claim.lease_ms as EpochMs;
    st.runs.insert(
        claim.run.clone(),
        Run {
            status: RunStatus::Running,
            attempt: 1,
            counted_starts: 1,
            owner: Some(claim.instance_id.clone()),
            expires_at,
        },
    );
    st.track(&claim.run);
    st.push_row(RunRecord {
        job: job.clone(),
        slot: claim.run.slot,
        scheduled_at: claim.scheduled_at,
        instance_id: claim.instance_id.clone(),
        manual: false,
        attempt: 1,
        reason: claim.reason,
        status: RunStatus::Running,
        fence,
        started_at: now,
        finished_at: None,
        error: None,
    });
    st.prune(job, claim.retention, now);
    ClaimOutcome::Won(Lease {
        run: claim.run.clone(),
        attempt: 1,
        fence,
        instance_id: claim.instance_id.clone(),
        reason: claim.reason,
        scheduled_at: claim.scheduled_at,
        started_at: now,
        expires_at,
    })
}

/// One result, written at `now` under the lock.
fn finish_one(st: &mut State, lease: &Lease, finish: &Finish, now: EpochMs) -> OwnerWrite {
    match st.runs.get_mut(&lease.run) {
        Some(run)
            if run.status == RunStatus::Running
                && run.attempt == lease.attempt
                && run.owner.as_deref() == Some(&lease.instance_id) =>
        {
            run.status = finish.status;
            run.owner = None;
        }
        _ => return OwnerWrite::Lost,
    }
    st.track(&lease.run);
    if let Some(row) = st.history_row(&lease.run, lease.attempt) {
        row.status = finish.status;
        row.finished_at = Some(now);
        row.error = finish.error.clone();
    }
    st.prune(&lease.run.job, finish.retention, now);
    OwnerWrite::Done
}

/// One takeover, judged at `now` under the lock.
fn take_over_one(st: &mut State, t: &Takeover, now: EpochMs) -> TakeoverOutcome {
    if now > t.not_after {
        return TakeoverOutcome::Late;
    }
    let Some(run) = st.runs.get(&t.run).cloned() else {
        return TakeoverOutcome::Finished(RunStatus::Interrupted);
    };
    if run.status.is_final() {
        return TakeoverOutcome::Finished(run.status);
    }
    let released = run.owner.is_none();
    if run.attempt != t.seen_attempt || (!released && run.expires_at > now) {
        return TakeoverOutcome::Live;
    }
    st.set_row(
        &t.run,
        run.attempt,
        RunStatus::Interrupted,
        now,
        Some("lease expired"),
    );
    if t.superseded {
        if let Some(r) = st.runs.get_mut(&t.run) {
            r.status = RunStatus::Interrupted;
        }
        st.track(&t.run);
        return TakeoverOutcome::Interrupted;
    }
    let counted = if released {
        run.counted_starts
    } else {
        run.counted_starts + 1
    };
    if counted > t.max_attempts {
        if let Some(r) = st.runs.get_mut(&t.run) {
            r.status = RunStatus::Failed;
        }
        st.track(&t.run);
        return TakeoverOutcome::Exhausted;
    }
    let fence = st.next_fence(&t.run.job);
    let expires_at = now + t.lease_ms as EpochMs;
    let attempt = run.attempt + 1;
    let first = st
        .history_row(&t.run, 1)
        .map(|r| r.scheduled_at)
        .unwrap_or(t.run.slot);
    if let Some(r) = st.runs.get_mut(&t.run) {
        *r = Run {
            status: RunStatus::Running,
            attempt,
            counted_starts: counted,
            owner: Some(t.instance_id.clone()),
            expires_at,
        };
    }
    st.track(&t.run);
    st.push_row(RunRecord {
        job: t.run.job.clone(),
        slot: t.run.slot,
        scheduled_at: first,
        instance_id: t.instance_id.clone(),
        manual: false,
        attempt,
        reason: Reason::Takeover,
        status: RunStatus::Running,
        fence,
        started_at: now,
        finished_at: None,
        error: None,
    });
    TakeoverOutcome::Won(Lease {
        run: t.run.clone(),
        attempt,
        fence,
        instance_id: t.instance_id.clone(),
        reason: Reason::Takeover,
        scheduled_at: first,
        started_at: now,
        expires_at,
    })
}

fn view(key: &RunKey, run: &Run, now: EpochMs) -> RunView {
    RunView {
        run: key.clone(),
        status: run.status,
        attempt: run.attempt,
        owner: run.owner.clone(),
        expires_at: run.expires_at,
        store_now: now,
    }
}

#[async_trait]
impl ClaimStore for MemoryStore {
    async fn claim_slot(&self, claim: &SlotClaim) -> Result<SlotOutcome> {
        self.gate().await?;
        if self.clock_ms() > claim.not_after {
            return Ok(SlotOutcome::Late);
        }
        let mut st = self.lock();
        st.jobs.insert(claim.run.job.clone());
        Ok(if st.claimed.insert(claim.run.clone()) {
            SlotOutcome::Won
        } else {
            SlotOutcome::Taken
        })
    }

    async fn record(&self, record: &RunRecord, retention: Retention) -> Result<()> {
        self.gate().await?;
        let now = self.clock_ms();
        let mut st = self.lock();
        st.upsert_row(record, |r| {
            r.slot == record.slot
                && r.attempt == record.attempt
                && r.instance_id == record.instance_id
                && r.manual == record.manual
        });
        st.prune(
            &record.job,
            Retention {
                ttl_ms: None,
                ..retention
            },
            now,
        );
        Ok(())
    }
}
