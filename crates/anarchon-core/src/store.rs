//! The store traits and their contract: what a store must do atomically, which clock it
//! uses and what each outcome means.
//!
//! A store implements [`Store`] and [`HistoryStore`], then either [`LeaseStore`] (Redis
//! `lease`, PostgreSQL, SQLite/libSQL: claims with a lease, takeover, handover) or
//! [`ClaimStore`] (RabbitMQ, NATS, the naive Redis strategies: one winner per slot, no lease).
//! [`crate::memory::MemoryStore`] is the reference implementation of both, and
//! `anarchon_core::testkit` (feature `testkit`) is the conformance suite a store runs against
//! itself. [B-44]
//!
//! All traits are object safe: the scheduler holds an `Arc<dyn LeaseStore>` or
//! `Arc<dyn ClaimStore>`. Every call the scheduler makes is bounded by its own timeout
//! (`store_timeout`), so a store need not, but should, also bound its driver calls.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

pub use crate::context::AttemptKey;
pub use crate::error::{BoxError, Error, Result, redact_url};
pub use crate::fenced::FenceLoss;
pub use crate::history::{Reason, Retention, RunRecord, RunStatus};
pub use crate::ids::{EpochMs, JobName, RunKey};

/// Whether a slot may start while an earlier run of the same job holds a live lease. [B-12]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Overlap {
    /// Skip the slot with reason `overlap` (default).
    #[default]
    Skip,
    /// Let runs overlap; each slot still starts once.
    Allow,
}

/// What the scheduler tells a store once, in `start()`.
#[derive(Debug, Clone)]
pub struct Prepare {
    /// The jobs this instance registered (may be empty: an API server that only reads
    /// history).
    pub jobs: Vec<JobName>,
    /// This instance's id.
    pub instance_id: String,
    /// The scheduler gives up on every store call after this long. A store's own timeouts
    /// (lock waits, retries, statement timeouts) must not outlast it, so that no call
    /// commits after its caller stopped waiting for it.
    pub call_timeout: std::time::Duration,
}

/// Everything every store does: set up, tell the time, close. [B-33, B-34]
///
/// # Contract
/// - [`Store::prepare`] checks the connection and the server version, then creates the
///   tables/keys it needs. Many instances may call it at the same moment: it must be safe
///   (advisory lock, `IF NOT EXISTS`). An older schema is migrated; a newer one is refused
///   with [`Error::SchemaTooNew`] and nothing is changed. Failures map to
///   [`Error::Unavailable`], [`Error::ServerTooOld`], [`Error::Corrupt`].
/// - [`Store::now`] is the store's clock in epoch ms (Redis `TIME`, the database clock; the
///   host clock for SQLite). Lease deadlines are judged on this clock. [B-20]
/// - [`Store::close`] closes the connections the store opened itself; connections, pools and
///   clients the user passed in stay open. Nothing is sent after it returns.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// A short name for messages and events (`"sqlite"`, `"redis"`).
    fn kind(&self) -> &'static str;

    /// Connects, checks versions, creates or migrates the schema.
    async fn prepare(&self, prepare: &Prepare) -> Result<()>;

    /// The store's clock, epoch ms.
    async fn now(&self) -> Result<EpochMs>;

    /// Closes what the store opened itself.
    async fn close(&self) -> Result<()>;
}

/// Reading and writing history. [B-36, B-37]
///
/// # Contract
/// - [`HistoryStore::history`] returns the latest attempts of a job from all instances,
///   newest first (by `started_at`, then slot, then attempt, all descending), at most `count`; it works from a process
///   that registered no jobs.
/// - [`HistoryStore::record_manual`] inserts or replaces the record of a manual run, keyed by
///   (job, slot, instance); the scheduler calls it at start (status `running`) and finish.
/// - [`HistoryStore::known_jobs`] lists every job name any instance registered or ran.
#[async_trait]
pub trait HistoryStore: Store {
    /// The latest `count` attempts of `job`, newest first.
    async fn history(&self, job: &JobName, count: usize) -> Result<Vec<RunRecord>>;

    /// The newest attempt of `job`.
    async fn last_run(&self, job: &JobName) -> Result<Option<RunRecord>> {
        Ok(self.history(job, 1).await?.into_iter().next())
    }

    /// Records a manual run (start and finish), keyed by (job, slot, instance).
    async fn record_manual(&self, record: &RunRecord, retention: Retention) -> Result<()>;

    /// The names of all jobs known to the store, sorted.
    async fn known_jobs(&self) -> Result<Vec<JobName>>;
}

// ---------------------------------------------------------------------------------------
// Lease stores
// ---------------------------------------------------------------------------------------

/// A request to claim a slot under a lease. [B-10, B-11, B-12, B-15]
#[derive(Debug, Clone)]
pub struct LeaseClaim {
    /// The run to claim.
    pub run: RunKey,
    /// When the slot was due (epoch ms, instance clock); usually `run.slot`.
    pub scheduled_at: EpochMs,
    /// This instance.
    pub instance_id: String,
    /// Lease length from the store's now.
    pub lease_ms: u64,
    /// Store-clock deadline: a claim evaluated after it has no effect and returns
    /// [`ClaimOutcome::Late`]. It is `slot + max_late_ms` for scheduled claims and
    /// `slot + catch_up_ms` for catch-up [B-10], or earlier: the moment the scheduler stops
    /// waiting for this call (translated to the store's clock, less the measurement
    /// error), so a claim never commits after its caller gave up on it.
    pub not_after: EpochMs,
    /// Overlap policy of the job. [B-12]
    pub overlap: Overlap,
    /// `Scheduled` or `CatchUp`.
    pub reason: Reason,
    /// Retention to apply to the job's older runs.
    pub retention: Retention,
}

/// A lease held by this instance: the fence every write of the owner is conditional on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The run.
    pub run: RunKey,
    /// The attempt this lease belongs to (1, 2, ...).
    pub attempt: u32,
    /// The per-job, strictly increasing fencing token of this attempt.
    pub fence: u64,
    /// The owner.
    pub instance_id: String,
    /// Why the attempt started.
    pub reason: Reason,
    /// When the slot was due.
    pub scheduled_at: EpochMs,
    /// When the attempt started (store clock).
    pub started_at: EpochMs,
    /// When the lease ends (store clock).
    pub expires_at: EpochMs,
}

/// The answer to a [`LeaseClaim`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// This instance won: a run row in `running` with attempt 1 and a history row `running`.
    Won(Lease),
    /// Another claim for this slot came first (whatever the run's status now). [B-11]
    Taken,
    /// The store's clock was past `not_after`: nothing was written. [B-10]
    Late {
        /// The store's clock when the claim was judged.
        store_now: EpochMs,
    },
    /// `overlap: skip` and an earlier run of the job holds a live lease: nothing was
    /// written. [B-12]
    Overlap {
        /// The slot of the run that holds the lease.
        running_slot: EpochMs,
    },
}

/// The answer for one lease of a batched heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    /// Renewed to this store-clock deadline.
    Renewed {
        /// The new deadline.
        expires_at: EpochMs,
    },
    /// The lease is no longer this attempt's (taken over, finished, released, pruned). [B-16]
    Lost,
}

/// How an owner finishes its attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finish {
    /// `Succeeded` or `Failed`.
    pub status: RunStatus,
    /// The error (for `Failed`).
    pub error: Option<String>,
    /// Retention to apply to the job's runs after recording this one. [B-37]
    pub retention: Retention,
}

/// The answer to an owner's conditional write (finish, release).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerWrite {
    /// Written.
    Done,
    /// The fence no longer matches: another attempt owns the run, nothing was written. [B-16]
    Lost,
}

/// A request to take over an unfinished run whose lease ended. [B-14, B-15, B-17]
#[derive(Debug, Clone)]
pub struct Takeover {
    /// The run.
    pub run: RunKey,
    /// The attempt the backup saw; the takeover only succeeds if it is still current.
    pub seen_attempt: u32,
    /// This instance.
    pub instance_id: String,
    /// Lease length.
    pub lease_ms: u64,
    /// Crash starts allowed (`max_attempts`).
    pub max_attempts: u32,
    /// The job's next slot is already due, so an expired run is marked `interrupted`
    /// instead of being started again. [B-15]
    pub superseded: bool,
    /// Store-clock deadline: the moment the scheduler stops waiting for this call. A
    /// takeover judged after it writes nothing and returns [`TakeoverOutcome::Late`].
    pub not_after: EpochMs,
}

/// The answer to a [`Takeover`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TakeoverOutcome {
    /// This instance owns the next attempt (reason `takeover`).
    Won(Lease),
    /// The lease is still live (or another backup already took over).
    Live,
    /// The run is finished (or gone): stop watching it.
    Finished(RunStatus),
    /// The crash budget was used up: the run is now `failed` ("exhausted"). [B-14]
    Exhausted,
    /// `superseded` was set and the lease had ended: the run is now `interrupted`. [B-15]
    Interrupted,
    /// The store's clock was past `not_after`: nothing was written.
    Late,
}

/// What a backup sees of an unfinished or finished run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunView {
    /// The run.
    pub run: RunKey,
    /// Its status.
    pub status: RunStatus,
    /// The current attempt.
    pub attempt: u32,
    /// The current owner; `None` after a handover released it.
    pub owner: Option<String>,
    /// The lease deadline (store clock).
    pub expires_at: EpochMs,
    /// The store's clock when read, to judge `expires_at` against.
    pub store_now: EpochMs,
}

impl RunView {
    /// Unfinished and its lease ended (expired or released): a backup may take it over.
    pub fn is_takeable(&self) -> bool {
        self.status == RunStatus::Running
            && (self.owner.is_none() || self.expires_at <= self.store_now)
    }
}

/// How many items of each batch call a store takes in one round trip or transaction. The
/// scheduler sends at most this many per call; a store still answers a longer batch whole
/// (splitting it as it needs). The default, 1 each, means "no batching": the scheduler sends
/// batches of one.
///
/// ```
/// use anarchon_core::store::BatchLimits;
///
/// assert_eq!(
///     BatchLimits::default(),
///     BatchLimits {
///         claims: 1,
///         finishes: 1,
///         takeovers: 1,
///         gather_batches: false,
///         gather_results: false,
///     }
/// );
/// assert_eq!(BatchLimits::all(256).takeovers, 256);
/// assert!(BatchLimits::all(256).gathering_batches().gather_batches);
/// assert!(BatchLimits::all(256).gathering_results().gather_results);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchLimits {
    /// Claims per [`LeaseStore::claim_many`] round trip.
    pub claims: usize,
    /// Results per [`LeaseStore::finish_many`] round trip.
    pub finishes: usize,
    /// Takeovers per [`LeaseStore::take_over_many`] round trip.
    pub takeovers: usize,
    /// Whether a claim or result batch that is not full waits while two calls of its kind
    /// are out, so that the claims falling due (the results ending) meanwhile join it: for
    /// a store whose cost is per call rather than per item (PostgreSQL: a transaction of
    /// four or five statements and a commit a call). Full batches always leave at once.
    /// Such a store also has its claims in flight bounded by its recent pace: about a
    /// quarter second of the claims it answers a second while claims are out, so that under
    /// overload claims wait at the instance (and are shed as late there) rather than for
    /// seconds at the store. Off by default: on SQLite's single connection thread waiting
    /// claim batches cost more than they saved, and the paced bound cost it a tenth of the
    /// slots it started. Implies [`gather_results`](Self::gather_results).
    pub gather_batches: bool,
    /// Whether a result batch that is not full waits while two result calls are out, so
    /// that the results ending meanwhile join it; claims leave as they fall due. For a store
    /// whose claims are cheap to send at once but whose every call costs a transaction and
    /// a commit (SQLite: one connection thread serving calls one after the other; a result
    /// call per turn's results was a transaction per one or two results, and three
    /// processes' commits held the file's write lock most of the time).
    pub gather_results: bool,
}

impl BatchLimits {
    /// The same limit for every batch call (0 counts as 1).
    pub const fn all(n: usize) -> Self {
        let n = if n == 0 { 1 } else { n };
        BatchLimits {
            claims: n,
            finishes: n,
            takeovers: n,
            gather_batches: false,
            gather_results: false,
        }
    }

    /// The same limits with [`gather_batches`](Self::gather_batches) on.
    pub const fn gathering_batches(self) -> Self {
        BatchLimits {
            gather_batches: true,
            ..self
        }
    }

    /// The same limits with [`gather_results`](Self::gather_results) on.
    pub const fn gathering_results(self) -> Self {
        BatchLimits {
            gather_results: true,
            ..self
        }
    }
}

impl Default for BatchLimits {
    fn default() -> Self {
        BatchLimits::all(1)
    }
}

/// Answers a batch one item after the other, stopping at the first error: the batch call of
/// a store that has no batch path of its own (its [`BatchLimits`] stay at 1 for that call).
/// Every such store uses this one loop rather than writing its own.
///
/// ```
/// # async fn demo() -> anarchon_core::Result<()> {
/// use anarchon_core::store::one_by_one;
///
/// let doubled = one_by_one(&[1, 2, 3], |n| async move { Ok(n * 2) }).await?;
/// assert_eq!(doubled, vec![2, 4, 6]);
/// # Ok(()) }
/// ```
pub async fn one_by_one<'a, I, T, F, Fut>(items: &'a [I], mut call: F) -> Result<Vec<T>>
where
    F: FnMut(&'a I) -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        out.push(call(item).await?);
    }
    Ok(out)
}

/// Keeps of each job its `newest` unfinished runs and every one without an owner (the
/// answer of [`LeaseStore::newest_unfinished_runs`] from that of
/// [`LeaseStore::unfinished_runs`]), ordered by job and slot.
///
/// ```
/// use anarchon_core::history::RunStatus;
/// use anarchon_core::store::{JobName, RunKey, RunView, newest_of_each_job};
///
/// let job = JobName::new("report").unwrap();
/// let run = |slot, owner: Option<&str>| RunView {
///     run: RunKey::new(job.clone(), slot),
///     status: RunStatus::Running,
///     attempt: 1,
///     owner: owner.map(str::to_owned),
///     expires_at: 0,
///     store_now: 0,
/// };
/// let all = vec![run(1, None), run(2, Some("a")), run(3, Some("b")), run(4, Some("c"))];
/// let kept: Vec<i64> = newest_of_each_job(all, 2).iter().map(|v| v.run.slot).collect();
/// assert_eq!(kept, [1, 3, 4]);
/// ```
pub fn newest_of_each_job(mut views: Vec<RunView>, newest: usize) -> Vec<RunView> {
    views.sort_by(|a, b| a.run.cmp(&b.run));
    let mut keep = Vec::with_capacity(views.len());
    for group in views.chunk_by(|a, b| a.run.job == b.run.job) {
        let older = group.len().saturating_sub(newest);
        keep.extend(
            group
                .iter()
                .enumerate()
                .map(|(i, view)| i >= older || view.owner.is_none()),
        );
    }
    let mut keep = keep.into_iter();
    views.retain(|_| keep.next().unwrap_or(false));
    views
}

/// The one answer of a batch of one; a store that answered with another count broke the
/// contract, which is reported as its error.
fn only<T>(store: &'static str, operation: &'static str, mut out: Vec<T>) -> Result<T> {
    match (out.pop(), out.is_empty()) {
        (Some(one), true) => Ok(one),
        (first, _) => Err(Error::store(
            store,
            operation,
            format!(
                "a batch of one was answered with {} outcomes (a bug in the store)",
                out.len() + usize::from(first.is_some())
            ),
        )),
    }
}

/// A store that claims slots under a lease and lets backups take over. [B-11..B-21]
///
/// # Contract
/// Every operation is atomic with respect to every other instance. All times are on the
/// store's clock ([`Store::now`]).
///
/// The calls that come in numbers are batches, and only batches: a store implements
/// [`LeaseStore::claim_many`], [`LeaseStore::finish_many`], [`LeaseStore::take_over_many`]
/// and [`LeaseStore::heartbeat`], each answering in the order given, each item judged
/// exactly as the rules below say, after the items before it in the batch. A batch stops
/// at the first error (items before it may have been written; the caller treats every item
/// as unknown). [`LeaseStore::limits`] says how many items of each the store takes in one
/// round trip or transaction; it answers longer batches too, splitting them. The single
/// calls [`LeaseStore::claim`], [`LeaseStore::finish`] and [`LeaseStore::take_over`] are
/// batches of one, provided by the trait: a store does not implement them. A store with no
/// batch path for a call implements it with [`one_by_one`] over its single operation and
/// keeps that limit at 1.
///
/// - claim (each [`LeaseClaim`] of [`LeaseStore::claim_many`]): if the store's now is past
///   `not_after` → `Late`, nothing written.
///   Else, every earlier run of the job that is `running` with an ended lease is marked
///   `interrupted` (its running history row too) [B-15]. Then if a run row for the slot
///   exists → `Taken` (a store may skip the marking for a claim whose run exists: the claim
///   that created the run marked the job's runs, and a lease that ended since is marked by
///   the next slot's claim or taken over by a backup). Else if `overlap` is `Skip` and an
///   earlier run of the job is `running` with a live lease → `Overlap`. Else insert the run
///   (`running`, attempt 1, counted starts 1, owner, lease `now + lease_ms`, the next fence
///   of the job) and its history row (`running`) → `Won`. Then prune the job to `retention`; a store may defer that pruning
///   (to `finish`, to every n-th claim, or to after the call returned) as long as a job's
///   runs stay bounded. One round trip per batch where the store allows.
/// - [`LeaseStore::heartbeat`]: for each lease, if the run is `running` and its (attempt,
///   owner) match, set the deadline to `now + lease_ms` → `Renewed`; else `Lost`. One round
///   trip for the whole batch; answers in the order given.
/// - finish (each item of [`LeaseStore::finish_many`]): conditional on (job, slot, attempt,
///   owner) and status `running`: set the run and its attempt's history row to the status,
///   `finished_at = now`, error; prune to retention (a store may do that after the call
///   returned, see claim) → `Done`; else `Lost` and nothing written.
/// - [`LeaseStore::release`] (graceful handover) [B-17]: conditional like finish: the run
///   stays `running` with no owner and an ended lease, marked as handed over; the attempt's
///   history row becomes `interrupted` ("handed over"). Notifies subscribers of
///   [`LeaseStore::subscribe_releases`] where the store can.
/// - takeover (each [`Takeover`] of [`LeaseStore::take_over_many`]): if the store's now is
///   past `not_after` → `Late`, nothing written. Else if the run is missing or final →
///   `Finished`. If its attempt
///   is not `seen_attempt` or its lease is live (owner set and deadline in the future) →
///   `Live`. Else its current history row becomes `interrupted` (unless already final, as
///   after a release). Then: if `superseded` → run `interrupted`, `Interrupted`. Else if the
///   run was released (handover) the counted starts stay the same; otherwise they go up by 1
///   and, if that passes `max_attempts`, the run becomes `failed` with error "exhausted" →
///   `Exhausted`. Otherwise attempt + 1, this owner, a new lease and fence, a new history row
///   `running` with reason `takeover` → `Won`.
/// - [`LeaseStore::runs`] reads the given runs (missing ones are left out);
///   [`LeaseStore::unfinished_runs`] lists every `running` run of the given jobs.
///
/// ```
/// # async fn demo() -> anarchon_core::Result<()> {
/// use anarchon_core::memory::MemoryStore;
/// use anarchon_core::store::LeaseStore;
///
/// let store = MemoryStore::new();
/// assert!(store.claim_many(&[]).await?.is_empty());
/// assert!(store.take_over_many(&[]).await?.is_empty());
/// assert!(store.limits().claims >= 1);
/// # Ok(()) }
/// ```
#[async_trait]
pub trait LeaseStore: HistoryStore {
    /// Claims several slots, answers in the order given. See the trait's contract.
    async fn claim_many(&self, claims: &[LeaseClaim]) -> Result<Vec<ClaimOutcome>>;
    /// Renews every given lease in one call; answers in the order given.
    async fn heartbeat(&self, leases: &[Lease], lease_ms: u64) -> Result<Vec<Renewal>>;
    /// Records the ends of several attempts, answers in the order given. The driver sends
    /// the results of runs that end in the same turn of its loop together.
    async fn finish_many(&self, writes: &[(Lease, Finish)]) -> Result<Vec<OwnerWrite>>;
    /// Hands a run over at once (graceful stop).
    async fn release(&self, lease: &Lease) -> Result<OwnerWrite>;
    /// Takes over several unfinished runs whose lease ended, answers in the order given.
    async fn take_over_many(&self, takeovers: &[Takeover]) -> Result<Vec<TakeoverOutcome>>;
    /// How many items of each batch call the store takes in one round trip (default: 1
    /// each, no batching).
    fn limits(&self) -> BatchLimits {
        BatchLimits::default()
    }
    /// Claims one slot: [`LeaseStore::claim_many`] with one claim. Not for stores to
    /// implement.
    async fn claim(&self, claim: &LeaseClaim) -> Result<ClaimOutcome> {
        only(
            self.kind(),
            "claim",
            self.claim_many(std::slice::from_ref(claim)).await?,
        )
    }
    /// Records the end of one attempt: [`LeaseStore::finish_many`] with one result. Not for
    /// stores to implement.
    async fn finish(&self, lease: &Lease, finish: &Finish) -> Result<OwnerWrite> {
        only(
            self.kind(),
            "finish",
            self.finish_many(&[(lease.clone(), finish.clone())]).await?,
        )
    }
    /// Takes over one run: [`LeaseStore::take_over_many`] with one takeover. Not for stores
    /// to implement.
    async fn take_over(&self, takeover: &Takeover) -> Result<TakeoverOutcome> {
        only(
            self.kind(),
            "take_over",
            self.take_over_many(std::slice::from_ref(takeover)).await?,
        )
    }
    /// Reads runs (a backup reads the runs a release notification named); missing runs are
    /// left out.
    async fn runs(&self, runs: &[RunKey]) -> Result<Vec<RunView>>;
    /// Every unfinished (`running`, released included) run of these jobs: on start (orphans
    /// and runs to watch), and every heartbeat as the backups' poll, with the jobs of every
    /// run the instance backs up (thousands of names at scale). It is on the hot path: it
    /// must cost about the unfinished runs it returns plus a small term per job, never a
    /// scan of history, and a store splits a long list of jobs into round trips that keep
    /// the server responsive.
    async fn unfinished_runs(&self, jobs: &[JobName]) -> Result<Vec<RunView>>;
    /// The backups' sweep: of each of these jobs, its `newest` unfinished runs (by slot)
    /// and every unfinished run without an owner (handed over), ordered by job and slot.
    /// A backup watches only that many runs of a job with an owner (older ones, should
    /// their lease end, are interrupted by the job's next claim), so a store whose jobs
    /// pile up unfinished runs under overload (results answered too late) need not read
    /// and send them all every heartbeat. [B-14]
    ///
    /// The default filters [`LeaseStore::unfinished_runs`]; a store overrides it where it
    /// can leave the older runs unread.
    ///
    /// ```
    /// # async fn demo() -> anarchon_core::Result<()> {
    /// use anarchon_core::memory::MemoryStore;
    /// use anarchon_core::store::{JobName, LeaseStore};
    ///
    /// let store = MemoryStore::new();
    /// let job = JobName::new("report")?;
    /// assert!(store.newest_unfinished_runs(&[job], 4).await?.is_empty());
    /// # Ok(()) }
    /// ```
    async fn newest_unfinished_runs(
        &self,
        jobs: &[JobName],
        newest: usize,
    ) -> Result<Vec<RunView>> {
        Ok(newest_of_each_job(
            self.unfinished_runs(jobs).await?,
            newest,
        ))
    }
    /// A stream of released runs for fast handover (Redis pub/sub, PostgreSQL NOTIFY), or
    /// `None` where the store has none; backups then poll every heartbeat. Trait objects
    /// cannot be asked for a second trait, so this optional ability is a method.
    fn subscribe_releases(&self) -> Option<tokio::sync::broadcast::Receiver<RunKey>> {
        None
    }

    /// The scheduler starts (`true`) or stops (`false`) watching runs as a backup; calls
    /// come in pairs per scheduler. A store whose release notifications cost something while
    /// idle (SQLite polls the file's change counter for other processes' releases) does that
    /// only while at least one scheduler watches, so an idle instance stays silent.
    fn set_watching(&self, _watching: bool) {}
}

// ---------------------------------------------------------------------------------------
// Claim-only stores
// ---------------------------------------------------------------------------------------

/// A request to claim a slot on a claim-only store. [B-22..B-29]
#[derive(Debug, Clone)]
pub struct SlotClaim {
    /// The run.
    pub run: RunKey,
    /// This instance.
    pub instance_id: String,
    /// Deadline on the store's clock where it has one, else the instance's. [B-10]
    pub not_after: EpochMs,
}

/// The answer to a [`SlotClaim`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotOutcome {
    /// This instance won the slot.
    Won,
    /// Another instance won it.
    Taken,
    /// Too late: nothing was written.
    Late,
    /// The answer was lost (connection dropped during the publish): the slot is skipped
    /// rather than risk a duplicate. [B-29]
    Unknown,
}

/// A store that picks one instance per slot and keeps no lease: no backup, takeover,
/// overlap check, catch-up or retry. [B-22]
///
/// # Contract
/// - [`ClaimStore::claim_slot`]: exactly one concurrent claim of a run key gets `Won` while
///   the store remembers the key (slot TTL, duplicate window, stream id order); the others
///   get `Taken`. When the answer is lost → `Unknown`.
/// - [`ClaimStore::record`]: inserts or replaces the history record keyed by (job, slot,
///   attempt, instance), keeping at most `retention.size` per job (count only). [B-28]
/// - [`ClaimStore::claim_window`]: how long the store remembers a claimed key, where that is
///   bounded (RabbitMQ slot TTL, NATS duplicate window); a claim of the same key after it
///   could win again. The scheduler refuses a job whose `jitter_ms + max_late_ms` is not
///   shorter. `None` (default): remembered for as long as the store keeps the key. [B-28]
#[async_trait]
pub trait ClaimStore: HistoryStore {
    /// Claims a slot.
    async fn claim_slot(&self, claim: &SlotClaim) -> Result<SlotOutcome>;
    /// Records an attempt (at start and at finish).
    async fn record(&self, record: &RunRecord, retention: Retention) -> Result<()>;
    /// How long a claimed key stays claimed, where the store bounds it. See the contract.
    fn claim_window(&self) -> Option<std::time::Duration> {
        None
    }
}

/// Refuses `jitter_ms + max_late_ms` that is not shorter than the store's
/// [`ClaimStore::claim_window`]: a claim that late could find the slot forgotten and win it a
/// second time. The scheduler calls it when a job is registered on a claim-only store. [B-28]
pub fn check_claim_window(store: &dyn ClaimStore, jitter_ms: u64, max_late_ms: u64) -> Result<()> {
    let Some(window) = store.claim_window() else {
        return Ok(());
    };
    let window_ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
    if jitter_ms.saturating_add(max_late_ms) >= window_ms {
        return Err(crate::error::Error::invalid_option(
            "max_late_ms",
            format!(
                "jitter_ms ({jitter_ms}) + max_late_ms ({max_late_ms}) must be shorter than the {} \
                 store's claim window ({window_ms} ms: slot TTL / duplicate window), or a late \
                 claim could start the slot twice; lower them or lengthen the window",
                store.kind()
            ),
        ));
    }
    Ok(())
}
