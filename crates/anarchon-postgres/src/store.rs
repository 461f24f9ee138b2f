//! The store traits on PostgreSQL: every call is one statement (record_manual two), bounded
//! by the store's timeout, except claims, results and takeovers: one pipelined transaction
//! that first locks the rows of their jobs in job order, then runs set-based statements
//! (claims, results) or the takeover statements. See [`crate::sql`] for the statements.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use anarchon_core::store::{
    BatchLimits, ClaimOutcome, EpochMs, Error, Finish, HistoryStore, JobName, Lease, LeaseClaim,
    LeaseStore, Overlap, OwnerWrite, Prepare, Reason, Renewal, Result, Retention, RunKey,
    RunRecord, RunStatus, RunView, Store, Takeover, TakeoverOutcome,
};
use async_trait::async_trait;
use tokio::sync::broadcast;
use tokio_postgres::Row;
use tokio_postgres::types::{ToSql, Type};

use crate::error::KIND;
use crate::error::{is_connection_lost, is_retryable};
use crate::sql::PRUNE_EVERY;
use crate::{Counters, Inner, MAX_RETRIES, PostgresStore};
use deadpool_postgres::Object;
use tokio_postgres::error::SqlState;

/// A handler's error as PostgreSQL can store it: `text` holds no NUL byte (the server
/// refuses it: "invalid byte sequence for encoding UTF8: 0x00"), so each NUL becomes
/// U+FFFD (the replacement character), which shows where one was. Every other character is
/// stored as given. Without this a result with a NUL could never be written and its run
/// would be taken over again and again.
pub(crate) fn storable(text: &str) -> Cow<'_, str> {
    if text.contains('\0') {
        Cow::Owned(text.replace('\0', "\u{FFFD}"))
    } else {
        Cow::Borrowed(text)
    }
}

/// Refuses an instance id PostgreSQL cannot store (one with a NUL byte) with a typed error
/// naming it, instead of a driver error on every claim. (The scheduler refuses such an id
/// when it is built; this guards direct use of the store.)
pub(crate) fn check_instance(id: &str) -> Result<()> {
    if id.contains('\0') {
        return Err(crate::PostgresError::UnstorableText {
            input: "instance id",
            shown: id.to_owned(),
        }
        .into());
    }
    Ok(())
}

/// [`check_instance`] for each id.
fn check_instances<'a>(ids: impl IntoIterator<Item = &'a str>) -> Result<()> {
    ids.into_iter().try_for_each(check_instance)
}

/// A count for an `int4` column, saturated rather than wrapped.
fn int4(v: u32) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

fn corrupt(what: &str, value: &str) -> Error {
    Error::Corrupt {
        store: KIND,
        location: "postgres history".into(),
        reason: format!("unknown {what} {value:?}; the table holds rows anarchon did not write"),
    }
}

fn status(s: &str) -> Result<RunStatus> {
    RunStatus::parse(s).ok_or_else(|| corrupt("status", s))
}

fn job_name(s: String) -> Result<JobName> {
    JobName::new(&s).map_err(|_| corrupt("job name", &s))
}

fn ttl(retention: Retention) -> Option<i64> {
    retention
        .ttl_ms
        .map(|t| i64::try_from(t).unwrap_or(i64::MAX / 2))
}

fn ms(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX / 4)
}

/// The most claims one batch carries (`BatchLimits::claims`).
pub(crate) const BATCH_CLAIMS: usize = 256;

/// The most results one batch carries (`BatchLimits::finishes`).
pub(crate) const BATCH_FINISHES: usize = 256;

/// The most takeovers one batch carries (`BatchLimits::takeovers`).
pub(crate) const BATCH_TAKEOVERS: usize = 256;

/// The most jobs one `unfinished_runs` statement asks about: one index descent into the
/// partial `running` index per job, so a statement stays within about a millisecond of
/// server time; a longer list is sent as several statements, one after the other.
pub(crate) const UNFINISHED_JOBS: usize = 1024;

/// The parameter types of the claim statements.
const CLAIM_TYPES: [Type; 8] = [
    Type::TEXT,
    Type::INT8,
    Type::INT8,
    Type::TEXT,
    Type::INT8,
    Type::INT8,
    Type::BOOL,
    Type::TEXT,
];

/// The bound values of one claim statement, owned so a batch can hold them all.
struct ClaimParams<'c> {
    job: &'c str,
    slot: i64,
    scheduled_at: i64,
    instance: &'c str,
    lease_ms: i64,
    not_after: i64,
    skip: bool,
    reason: &'static str,
}

impl ClaimParams<'_> {
    fn refs(&self) -> [&(dyn tokio_postgres::types::ToSql + Sync); 8] {
        [
            &self.job,
            &self.slot,
            &self.scheduled_at,
            &self.instance,
            &self.lease_ms,
            &self.not_after,
            &self.skip,
            &self.reason,
        ]
    }
}

fn claim_params(claim: &LeaseClaim) -> ClaimParams<'_> {
    ClaimParams {
        job: claim.run.job.as_str(),
        slot: claim.run.slot,
        scheduled_at: claim.scheduled_at,
        instance: &claim.instance_id,
        lease_ms: ms(claim.lease_ms),
        not_after: claim.not_after,
        skip: claim.overlap == Overlap::Skip,
        reason: claim.reason.as_str(),
    }
}

/// The parameter types of the finish statements.
const FINISH_TYPES: [Type; 8] = [
    Type::TEXT,
    Type::INT8,
    Type::INT4,
    Type::TEXT,
    Type::TEXT,
    Type::TEXT,
    Type::INT8,
    Type::INT8,
];

/// The bound values of one finish statement, owned so a batch can hold them all.
struct FinishParams<'f> {
    job: &'f str,
    slot: i64,
    attempt: i32,
    owner: &'f str,
    status: &'static str,
    error: Option<Cow<'f, str>>,
    size: i64,
    ttl: Option<i64>,
}

impl FinishParams<'_> {
    fn refs(&self) -> [&(dyn tokio_postgres::types::ToSql + Sync); 8] {
        [
            &self.job,
            &self.slot,
            &self.attempt,
            &self.owner,
            &self.status,
            &self.error,
            &self.size,
            &self.ttl,
        ]
    }
}

fn finish_params<'f>(lease: &'f Lease, finish: &'f Finish) -> FinishParams<'f> {
    FinishParams {
        job: lease.run.job.as_str(),
        slot: lease.run.slot,
        attempt: int4(lease.attempt),
        owner: &lease.instance_id,
        status: finish.status.as_str(),
        error: finish.error.as_deref().map(storable),
        size: i64::from(finish.retention.size),
        ttl: ttl(finish.retention),
    }
}

/// The parameter types of the set-based claim statement.
const CLAIM_SET_TYPES: [Type; 9] = [
    Type::TEXT_ARRAY,
    Type::INT8_ARRAY,
    Type::INT8_ARRAY,
    Type::TEXT_ARRAY,
    Type::INT8_ARRAY,
    Type::INT8_ARRAY,
    Type::BOOL_ARRAY,
    Type::TEXT_ARRAY,
    Type::BOOL_ARRAY,
];

/// The parameter types of the set-based finish statement.
const FINISH_SET_TYPES: [Type; 8] = [
    Type::TEXT_ARRAY,
    Type::INT8_ARRAY,
    Type::INT4_ARRAY,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::INT8_ARRAY,
    Type::INT8_ARRAY,
];

/// The parameter types of the takeover statement.
const TAKEOVER_TYPES: [Type; 9] = [
    Type::TEXT,
    Type::INT8,
    Type::INT4,
    Type::TEXT,
    Type::INT4,
    Type::BOOL,
    Type::INT8,
    Type::INT8,
    Type::INT8,
];

pub(crate) type Param<'a> = &'a (dyn ToSql + Sync);

/// Splits a batch into rounds in which each job appears at most once: a job's n-th item
/// goes to round n, and the items of a round keep the order given. Running the rounds one
/// after the other is running the items of each job in the order given.
fn rounds<'j>(jobs: impl Iterator<Item = &'j str>) -> Vec<Vec<usize>> {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut rounds: Vec<Vec<usize>> = Vec::new();
    for (i, job) in jobs.enumerate() {
        let n = seen.entry(job).or_insert(0);
        if rounds.len() <= *n {
            rounds.push(Vec::new());
        }
        rounds[*n].push(i);
        *n += 1;
    }
    rounds
}

/// The indexes `picked` sorted by their runs `run(i)` (job name bytewise, then slot).
///
/// Heartbeats, result batches and takeover batches send their runs in this order. All
/// update run rows, and a heartbeat takes no job lock; PostgreSQL locks each row as the
/// `UPDATE` reaches it, which in the plans it makes for a large runs table is the order of
/// the arrays sent (a loop over them that looks each run up by key; a takeover batch sends
/// one statement per run) or the key order of an index it reads them from; the key order
/// is this order under the `C` collation and close to it under others. Sent in any other order, a heartbeat and a result or takeover batch could each
/// hold a row the other waits for: a deadlock, which PostgreSQL ends only after
/// `deadlock_timeout` (1 s by default) by aborting one of them, while the batch holds the
/// job locks of up to 256 jobs ([`BATCH_FINISHES`], [`BATCH_TAKEOVERS`]) and the claims of
/// those jobs wait behind it. (A result batch and a takeover batch take their jobs' locks
/// first, so they never wait for each other's run rows.)
fn in_run_order<'r>(run: impl Fn(usize) -> &'r RunKey, mut picked: Vec<usize>) -> Vec<usize> {
    picked.sort_by_key(|&i| {
        let r = run(i);
        (r.job.as_str(), r.slot)
    });
    picked
}

/// The bound arrays of one round of the set-based claim statement.
struct ClaimArrays<'c> {
    job: Vec<&'c str>,
    slot: Vec<i64>,
    scheduled_at: Vec<i64>,
    instance: Vec<&'c str>,
    lease_ms: Vec<i64>,
    not_after: Vec<i64>,
    skip: Vec<bool>,
    reason: Vec<&'static str>,
    prune: Vec<bool>,
}

impl<'c> ClaimArrays<'c> {
    /// `due`: whether each claim of the batch is due to prune, indexed like `claims`.
    fn new(claims: &'c [LeaseClaim], round: &[usize], due: &[bool]) -> Self {
        let pick =
            |f: &dyn Fn(&'c LeaseClaim) -> i64| round.iter().map(|&i| f(&claims[i])).collect();
        ClaimArrays {
            job: round.iter().map(|&i| claims[i].run.job.as_str()).collect(),
            slot: pick(&|c| c.run.slot),
            scheduled_at: pick(&|c| c.scheduled_at),
            instance: round
                .iter()
                .map(|&i| claims[i].instance_id.as_str())
                .collect(),
            lease_ms: pick(&|c| ms(c.lease_ms)),
            not_after: pick(&|c| c.not_after),
            skip: round
                .iter()
                .map(|&i| claims[i].overlap == Overlap::Skip)
                .collect(),
            reason: round.iter().map(|&i| claims[i].reason.as_str()).collect(),
            prune: round.iter().map(|&i| due[i]).collect(),
        }
    }

    fn refs(&self) -> Vec<Param<'_>> {
        vec![
            &self.job,
            &self.slot,
            &self.scheduled_at,
            &self.instance,
            &self.lease_ms,
            &self.not_after,
            &self.skip,
            &self.reason,
            &self.prune,
        ]
    }
}

/// The bound arrays of one round of the set-based finish statement.
struct FinishArrays<'f> {
    job: Vec<&'f str>,
    slot: Vec<i64>,
    attempt: Vec<i32>,
    owner: Vec<&'f str>,
    status: Vec<&'static str>,
    error: Vec<Option<Cow<'f, str>>>,
    size: Vec<i64>,
    ttl: Vec<Option<i64>>,
}

impl<'f> FinishArrays<'f> {
    fn new(writes: &'f [(Lease, Finish)], round: &[usize]) -> Self {
        let w = |i: usize| &writes[i];
        FinishArrays {
            job: round.iter().map(|&i| w(i).0.run.job.as_str()).collect(),
            slot: round.iter().map(|&i| w(i).0.run.slot).collect(),
            attempt: round.iter().map(|&i| int4(w(i).0.attempt)).collect(),
            owner: round.iter().map(|&i| w(i).0.instance_id.as_str()).collect(),
            status: round.iter().map(|&i| w(i).1.status.as_str()).collect(),
            error: round
                .iter()
                .map(|&i| w(i).1.error.as_deref().map(storable))
                .collect(),
            size: round
                .iter()
                .map(|&i| i64::from(w(i).1.retention.size))
                .collect(),
            ttl: round.iter().map(|&i| ttl(w(i).1.retention)).collect(),
        }
    }

    fn refs(&self) -> Vec<Param<'_>> {
        vec![
            &self.job,
            &self.slot,
            &self.attempt,
            &self.owner,
            &self.status,
            &self.error,
            &self.size,
            &self.ttl,
        ]
    }
}

/// The bound values of one takeover statement.
struct TakeoverParams<'t> {
    job: &'t str,
    slot: i64,
    seen_attempt: i32,
    instance: &'t str,
    max_attempts: i32,
    superseded: bool,
    lease_ms: i64,
    not_after: i64,
    /// The run's advisory lock key, which a fenced transaction holds while open.
    lock_key: i64,
}

impl<'t> TakeoverParams<'t> {
    fn new(t: &'t Takeover, lock_key: i64) -> Self {
        TakeoverParams {
            job: t.run.job.as_str(),
            slot: t.run.slot,
            seen_attempt: i32::try_from(t.seen_attempt).unwrap_or(i32::MAX),
            instance: &t.instance_id,
            max_attempts: i32::try_from(t.max_attempts).unwrap_or(i32::MAX),
            superseded: t.superseded,
            lease_ms: ms(t.lease_ms),
            not_after: t.not_after,
            lock_key,
        }
    }

    fn refs(&self) -> Vec<Param<'_>> {
        vec![
            &self.job,
            &self.slot,
            &self.seen_attempt,
            &self.instance,
            &self.max_attempts,
            &self.superseded,
            &self.lease_ms,
            &self.not_after,
            &self.lock_key,
        ]
    }
}

/// One statement of a locked batch: its text, parameter types and bound values.
pub(crate) struct Step<'p> {
    pub(crate) sql: &'p str,
    pub(crate) types: &'p [Type],
    pub(crate) params: Vec<Param<'p>>,
    /// Whether it counts as a data statement (settings do not).
    pub(crate) counted: bool,
}

/// The job lock that opens a batch (see [`Inner::locked_batch`]).
pub(crate) enum JobLock<'a> {
    /// The `_jobs` rows of these jobs ([`crate::sql`]'s `lock_jobs`).
    Jobs(&'a [&'a str]),
    /// The `_jobs` rows of the jobs of claims whose run does not exist yet
    /// ([`crate::sql`]'s `lock_claims`).
    Claims {
        jobs: &'a [&'a str],
        slots: &'a [i64],
    },
    /// None: a transaction that writes no row a batch writes (a prune).
    None,
}

/// How a locked batch ended without an error.
pub(crate) enum Batch {
    /// Committed: the answer rows of each step.
    Committed(Vec<Vec<Row>>),
    /// The guard found the database clock past the batch's deadline, so the transaction
    /// rolled back: the answer rows of each step as they were before the rollback.
    RolledBack(Vec<Vec<Row>>),
    /// A lock the batch waited for was not granted before its deadline (the transaction's
    /// `lock_timeout` ends there): rolled back, nothing written, and every item of the
    /// batch is past its `not_after` on the database clock.
    PastDeadline {
        /// The batch's deadline: the database clock was past it.
        deadline: i64,
    },
    /// A batch without a deadline waited for a lock as long as its caller waits for it
    /// (its `lock_timeout` is the batch timeout): rolled back, nothing written.
    LockWaitEnded,
}

/// Why one try of a locked batch did not commit.
enum Failure {
    /// A statement asked to be run again (serialization failure, deadlock): rolled back.
    Retry(tokio_postgres::Error),
    /// Any other error: rolled back.
    Failed(tokio_postgres::Error),
}

fn failure(e: tokio_postgres::Error) -> Failure {
    if is_retryable(&e) {
        Failure::Retry(e)
    } else {
        Failure::Failed(e)
    }
}

/// The bound values of one round: a single statement's or a set-based statement's.
enum Either<O, S> {
    One(O),
    Set(S),
}

/// Reads the answer row of a finish statement, whose `done` column is `col` (0 in the
/// single finish's row, 1 after `ord` in the set-based one's).
fn owner_write(row: &Row, col: usize) -> OwnerWrite {
    if row.get::<_, bool>(col) {
        OwnerWrite::Done
    } else {
        OwnerWrite::Lost
    }
}

/// The 0-based position an answer row's `ord` column (1-based) names within its round.
fn ord(row: &Row) -> usize {
    usize::try_from(row.get::<_, i64>(0) - 1).unwrap_or(usize::MAX)
}

impl Inner {
    /// Whether the next won claim of `job` is due to prune it: its count says so, or this
    /// store has not seen the count yet (a process that claims once and stops, again and
    /// again, still prunes).
    fn prune_due(&self, job: &JobName) -> bool {
        let counts = self.unpruned.lock().unwrap_or_else(|e| e.into_inner());
        counts
            .get(job.as_str())
            .is_none_or(|n| n.saturating_add(1) >= PRUNE_EVERY)
    }

    /// Reads the answer row of a claim statement, whose columns start at `base` (0 in the
    /// single claim's row, 1 after `ord` in the set-based one's).
    fn claim_outcome(&self, claim: &LeaseClaim, row: &Row, base: usize) -> ClaimOutcome {
        let now: i64 = row.get(base);
        let late: bool = row.get(base + 1);
        let existed: bool = row.get(base + 2);
        let live_slot: Option<i64> = row.get(base + 3);
        let expires_at: Option<i64> = row.get(base + 4);
        let fence: Option<i64> = row.get(base + 5);
        self.saw_unpruned(&claim.run.job, row.get(base + 6));
        if late {
            ClaimOutcome::Late { store_now: now }
        } else if existed {
            ClaimOutcome::Taken
        } else if let Some(running_slot) = live_slot {
            ClaimOutcome::Overlap { running_slot }
        } else if let (Some(expires_at), Some(fence)) = (expires_at, fence) {
            ClaimOutcome::Won(Lease {
                run: claim.run.clone(),
                attempt: 1,
                fence: fence as u64,
                instance_id: claim.instance_id.clone(),
                reason: claim.reason,
                scheduled_at: claim.scheduled_at,
                started_at: now,
                expires_at,
            })
        } else {
            // The insert met a run inserted after this statement's snapshot (by a writer
            // that did not lock the job first).
            ClaimOutcome::Taken
        }
    }

    /// The error of a batch whose lock wait ended at the batch timeout: its caller gives
    /// up at that moment too.
    pub(crate) fn lock_wait_ended(&self, operation: &'static str) -> Error {
        Error::Timeout {
            store: KIND,
            operation,
            after: self.batch_timeout(),
        }
    }

    /// How long a batch may take: the store's timeout, or the scheduler's if shorter.
    fn batch_timeout(&self) -> std::time::Duration {
        match self.caller_limit_ms.load(Ordering::Relaxed) {
            0 => self.timeout,
            limit => self.timeout.min(std::time::Duration::from_millis(limit)),
        }
    }

    /// Runs `steps` in one transaction, pipelined in one round trip on one connection:
    /// `BEGIN`, the job lock `lock` asks for ([`crate::sql`]'s `lock_jobs` or
    /// `lock_claims`: the jobs' rows in job order), the steps in order, the deadline guard
    /// when `deadline` is given, `COMMIT`. The whole transaction runs again after a
    /// serialization failure or a deadlock (neither happens between batches, which lock in
    /// one order; a writer that does not lock the job, such as a heartbeat renewing an
    /// ended lease at the same moment, can cause one), all within the batch timeout. Its
    /// round trips and statements count in `counters`.
    pub(crate) async fn locked_batch(
        &self,
        operation: &'static str,
        lock: JobLock<'_>,
        steps: &[Step<'_>],
        deadline: Option<i64>,
        counters: &Counters,
    ) -> Result<Batch> {
        let timeout = self.batch_timeout();
        let client = self.client(operation).await?;
        let work = async {
            // Statements this connection has not prepared yet cost a round trip each.
            let cached = client.statement_cache.size();
            let begin = client.prepare_typed_cached("BEGIN", &[]).await?;
            let (lock_statement, lock_params): (_, Vec<Param<'_>>) = match &lock {
                JobLock::Claims { jobs, slots } => (
                    Some(
                        client
                            .prepare_typed_cached(
                                &self.sql.lock_claims,
                                &[Type::TEXT_ARRAY, Type::INT8_ARRAY],
                            )
                            .await?,
                    ),
                    vec![jobs, slots],
                ),
                JobLock::Jobs(jobs) => (
                    Some(
                        client
                            .prepare_typed_cached(&self.sql.lock_jobs, &[Type::TEXT_ARRAY])
                            .await?,
                    ),
                    vec![jobs],
                ),
                JobLock::None => (None, Vec::new()),
            };
            // A batch waits for a lock until its deadline (every item late by then) or, one
            // without a deadline, as long as its caller waits for it: never on for nobody.
            let (guard, limit) = match deadline {
                Some(_) => (
                    Some(
                        client
                            .prepare_typed_cached(&self.sql.claim_guard, &[Type::INT8])
                            .await?,
                    ),
                    client
                        .prepare_typed_cached(&self.sql.lock_wait_until, &[Type::INT8])
                        .await?,
                ),
                None => (
                    None,
                    client
                        .prepare_typed_cached(&self.sql.lock_wait_for, &[Type::TEXT])
                        .await?,
                ),
            };
            let commit = client.prepare_typed_cached("COMMIT", &[]).await?;
            let mut statements = Vec::with_capacity(steps.len());
            for step in steps {
                statements.push(client.prepare_typed_cached(step.sql, step.types).await?);
            }
            let prepared = client.statement_cache.size().saturating_sub(cached);
            counters.add(prepared as u64, 0);
            let has_deadline = deadline.is_some();
            let deadline = deadline.unwrap_or(i64::MAX);
            let guard_params: [Param<'_>; 1] = [&deadline];
            let wait_for = format!("{}ms", timeout.as_millis().max(1));
            let limit_params: [Param<'_>; 1] = if has_deadline {
                [&deadline]
            } else {
                [&wait_for]
            };
            let mut tries = 0;
            loop {
                counters.add(1, steps.iter().filter(|s| s.counted).count() as u64);
                let client = &*client;
                // Every request goes out before the first answer is read: tokio-postgres
                // pipelines the queries of futures polled together on one connection, in
                // the order they are first polled.
                let (began, limited, locked, rows, guarded, committed) = futures::join!(
                    client.execute(&begin, &[]),
                    client.query(&limit, &limit_params),
                    async {
                        match &lock_statement {
                            Some(l) => client.execute(l, &lock_params).await,
                            None => Ok(0),
                        }
                    },
                    futures::future::join_all(
                        statements
                            .iter()
                            .zip(steps)
                            .map(|(st, step)| client.query(st, &step.params))
                    ),
                    async {
                        match &guard {
                            Some(g) => client.execute(g, &guard_params).await.map(Some),
                            None => Ok(None),
                        }
                    },
                    client.execute(&commit, &[]),
                );
                // The first error is the cause: the requests after it only found the
                // transaction aborted (and its COMMIT answered with a rollback).
                let limited = limited.map(|_| 0);
                let first_error = [&began, &limited, &locked]
                    .into_iter()
                    .find_map(|r| r.as_ref().err())
                    .or_else(|| rows.iter().find_map(|r| r.as_ref().err()));
                if let Some(e) = first_error
                    && e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE)
                {
                    return Ok(if has_deadline {
                        Batch::PastDeadline { deadline }
                    } else {
                        Batch::LockWaitEnded
                    });
                }
                let failed = match (began, limited, locked) {
                    (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => failure(e),
                    _ if rows.iter().any(Result::is_err) => {
                        failure(rows.into_iter().find_map(Result::err).expect("an error"))
                    }
                    _ => match (guarded, committed) {
                        (Err(e), _) if e.code() == Some(&SqlState::INVALID_TEXT_REPRESENTATION) => {
                            let rows = rows.into_iter().map(|r| r.expect("answered")).collect();
                            return Ok(Batch::RolledBack(rows));
                        }
                        (Err(e), _) | (_, Err(e)) => failure(e),
                        _ => {
                            let rows = rows.into_iter().map(|r| r.expect("answered")).collect();
                            return Ok(Batch::Committed(rows));
                        }
                    },
                };
                match failed {
                    Failure::Retry(e) if tries < MAX_RETRIES => {
                        tries += 1;
                        self.retries.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(operation, tries, "postgres batch retried: {e}");
                        tokio::task::yield_now().await;
                    }
                    Failure::Retry(e) | Failure::Failed(e) => return Err(e),
                }
            }
        };
        match tokio::time::timeout(timeout, work).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => {
                if is_connection_lost(&e) {
                    drop(Object::take(client));
                }
                Err(self.pg(e, operation))
            }
            Err(_) => {
                drop(Object::take(client));
                Err(Error::Timeout {
                    store: KIND,
                    operation,
                    after: timeout,
                })
            }
        }
    }

    /// At most [`BATCH_CLAIMS`] claims as one transaction of set-based statements, one per
    /// round (see [`rounds`]): usually one statement. Answers in the order given.
    async fn claim_batch(self: &Arc<Self>, claims: &[LeaseClaim]) -> Result<Vec<ClaimOutcome>> {
        check_instances(claims.iter().map(|c| c.instance_id.as_str()))?;
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        // Whether each claim is due to prune, once: the statements reset the due jobs'
        // counts and the store prunes them once the batch committed.
        let due: Vec<bool> = claims.iter().map(|c| self.prune_due(&c.run.job)).collect();
        let rounds = rounds(claims.iter().map(|c| c.run.job.as_str()));
        // A round of one claim sends the single claim's statement: the set-based one costs
        // a lone claim more than its work (its plan has about a hundred nodes).
        let params: Vec<Either<ClaimParams<'_>, ClaimArrays<'_>>> = rounds
            .iter()
            .map(|round| match round.as_slice() {
                [i] => Either::One(claim_params(&claims[*i])),
                _ => Either::Set(ClaimArrays::new(claims, round, &due)),
            })
            .collect();
        let steps: Vec<Step<'_>> = params
            .iter()
            .zip(&rounds)
            .map(|(p, round)| match p {
                Either::One(p) => Step {
                    sql: &self.sql.claim[usize::from(due[round[0]])],
                    types: &CLAIM_TYPES,
                    params: p.refs().to_vec(),
                    counted: true,
                },
                Either::Set(a) => Step {
                    sql: &self.sql.claim_set,
                    types: &CLAIM_SET_TYPES,
                    params: a.refs(),
                    counted: true,
                },
            })
            .collect();
        let jobs: Vec<&str> = claims.iter().map(|c| c.run.job.as_str()).collect();
        let slots: Vec<i64> = claims.iter().map(|c| c.run.slot).collect();
        let deadline = claims.iter().map(|c| c.not_after).max().unwrap_or(0);
        let (rows, committed) = match self
            .locked_batch(
                "claim",
                JobLock::Claims {
                    jobs: &jobs,
                    slots: &slots,
                },
                &steps,
                Some(deadline),
                &self.counted,
            )
            .await?
        {
            Batch::Committed(rows) => (rows, true),
            Batch::RolledBack(rows) => (rows, false),
            // Every claim of the batch is past its `not_after`: late, as the claim statement
            // would have judged it, and nothing was written.
            Batch::PastDeadline { deadline } => {
                let late = ClaimOutcome::Late {
                    store_now: deadline.saturating_add(1),
                };
                return Ok(vec![late; claims.len()]);
            }
            Batch::LockWaitEnded => return Err(self.lock_wait_ended("claim")),
        };
        let mut out: Vec<Option<ClaimOutcome>> = vec![None; claims.len()];
        for (round, rows) in rounds.iter().zip(&rows) {
            if let ([i], [row]) = (round.as_slice(), rows.as_slice()) {
                out[*i] = Some(self.claim_outcome(&claims[*i], row, 0));
                continue;
            }
            for row in rows {
                if let Some(&i) = round.get(ord(row)) {
                    out[i] = Some(self.claim_outcome(&claims[i], row, 1));
                }
            }
        }
        let out: Vec<ClaimOutcome> = out.into_iter().flatten().collect();
        if out.len() != claims.len() {
            return Err(Error::store(
                KIND,
                "claim",
                "a claim of the batch got no answer row",
            ));
        }
        // Rolled back at the deadline: a batch that won nothing lost nothing by that (at
        // most the marking of ended runs, which the next claim redoes), so its answers
        // stand; one that won must not report leases it no longer holds.
        if !committed && out.iter().any(|o| matches!(o, ClaimOutcome::Won(_))) {
            return Err(Error::Timeout {
                store: KIND,
                operation: "claim",
                after: self.batch_timeout(),
            });
        }
        // The won claims that were due reset their jobs' counts: their jobs are pruned
        // now, in the background, so that these answers do not wait for it. Jobs left out
        // because too many wait already are left to their next prunes (see `crate::prune`).
        if committed {
            let _left_out = self.prune_later(
                claims
                    .iter()
                    .zip(&out)
                    .zip(&due)
                    .filter(|((_, o), due)| **due && matches!(o, ClaimOutcome::Won(_)))
                    .map(|((c, _), _)| (c.run.job.as_str(), c.retention)),
            );
        }
        Ok(out)
    }

    /// At most [`BATCH_FINISHES`] results as one transaction of set-based statements, one
    /// per round (see [`rounds`]): usually one statement. Answers in the order given.
    async fn finish_batch(self: &Arc<Self>, writes: &[(Lease, Finish)]) -> Result<Vec<OwnerWrite>> {
        check_instances(writes.iter().map(|(l, _)| l.instance_id.as_str()))?;
        if writes.is_empty() {
            return Ok(Vec::new());
        }
        // Each round in run order, so its statement locks the run rows in the order a
        // heartbeat locks them (see `in_run_order`).
        let rounds: Vec<Vec<usize>> = rounds(writes.iter().map(|(l, _)| l.run.job.as_str()))
            .into_iter()
            .map(|round| in_run_order(|i| &writes[i].0.run, round))
            .collect();
        // A round of one result sends the single finish's statement (see `claim_batch`).
        let params: Vec<Either<FinishParams<'_>, FinishArrays<'_>>> = rounds
            .iter()
            .map(|round| match round.as_slice() {
                [i] => Either::One(finish_params(&writes[*i].0, &writes[*i].1)),
                _ => Either::Set(FinishArrays::new(writes, round)),
            })
            .collect();
        let steps: Vec<Step<'_>> = params
            .iter()
            .map(|p| match p {
                Either::One(p) => Step {
                    sql: &self.sql.finish,
                    types: &FINISH_TYPES,
                    params: p.refs().to_vec(),
                    counted: true,
                },
                Either::Set(a) => Step {
                    sql: &self.sql.finish_set,
                    types: &FINISH_SET_TYPES,
                    params: a.refs(),
                    counted: true,
                },
            })
            .collect();
        let jobs: Vec<&str> = writes.iter().map(|(l, _)| l.run.job.as_str()).collect();
        let rows = match self
            .locked_batch("finish", JobLock::Jobs(&jobs), &steps, None, &self.counted)
            .await?
        {
            Batch::Committed(rows) | Batch::RolledBack(rows) => rows,
            // Results have no deadline: their batch waits for its locks as long as its
            // caller waits for it.
            Batch::LockWaitEnded => return Err(self.lock_wait_ended("finish")),
            Batch::PastDeadline { .. } => {
                return Err(Error::store(
                    KIND,
                    "finish",
                    "a result batch stopped at a deadline it does not have (a bug in anarchon)",
                ));
            }
        };
        let mut out = vec![OwnerWrite::Lost; writes.len()];
        let mut due = Vec::new();
        for (round, rows) in rounds.iter().zip(&rows) {
            if let ([i], [row]) = (round.as_slice(), rows.as_slice()) {
                out[*i] = owner_write(row, 0);
                if row.get::<_, bool>(1) {
                    due.push(*i);
                }
                continue;
            }
            for row in rows {
                if let Some(&i) = round.get(ord(row)) {
                    out[i] = owner_write(row, 1);
                    if row.get::<_, bool>(2) {
                        due.push(i);
                    }
                }
            }
        }
        // The results are committed: their due jobs are pruned in the background, or now
        // when too many jobs wait for it already (the results then wait for their prune);
        // a prune that fails only leaves the jobs to their next one (see `crate::prune`).
        let due = due
            .into_iter()
            .map(|i| (writes[i].0.run.job.as_str(), writes[i].1.retention));
        let left_out = self.prune_later(due);
        if !left_out.is_empty()
            && let Err(e) = self
                .prune_now(left_out.iter().map(|(j, r)| (j.as_str(), *r)))
                .await
        {
            tracing::warn!(target_url = %self.target, "postgres pruning after results failed: {e}");
        }
        Ok(out)
    }

    /// At most [`BATCH_TAKEOVERS`] takeovers in one transaction: the lock of their jobs,
    /// then the single takeover's statement for each, in run order (see [`in_run_order`];
    /// the answers in the order given), pipelined in one round trip, and the deadline guard.
    async fn take_over_batch(&self, takeovers: &[Takeover]) -> Result<Vec<TakeoverOutcome>> {
        check_instances(takeovers.iter().map(|t| t.instance_id.as_str()))?;
        if takeovers.is_empty() {
            return Ok(Vec::new());
        }
        let order = in_run_order(|i| &takeovers[i].run, (0..takeovers.len()).collect());
        let params: Vec<TakeoverParams<'_>> = order
            .iter()
            .map(|&i| {
                let t = &takeovers[i];
                let key = self.names.run_lock_key(t.run.job.as_str(), t.run.slot);
                TakeoverParams::new(t, key)
            })
            .collect();
        let steps: Vec<Step<'_>> = params
            .iter()
            .map(|p| Step {
                sql: &self.sql.take_over,
                types: &TAKEOVER_TYPES,
                params: p.refs(),
                counted: true,
            })
            .collect();
        let jobs: Vec<&str> = takeovers.iter().map(|t| t.run.job.as_str()).collect();
        let deadline = takeovers.iter().map(|t| t.not_after).max().unwrap_or(0);
        let (rows, committed) = match self
            .locked_batch(
                "take_over",
                JobLock::Jobs(&jobs),
                &steps,
                Some(deadline),
                &self.counted,
            )
            .await?
        {
            Batch::Committed(rows) => (rows, true),
            Batch::RolledBack(rows) => (rows, false),
            // Every takeover of the batch is past its `not_after`: late, nothing written.
            Batch::PastDeadline { .. } => {
                return Ok(vec![TakeoverOutcome::Late; takeovers.len()]);
            }
            Batch::LockWaitEnded => return Err(self.lock_wait_ended("take_over")),
        };
        let mut out = vec![TakeoverOutcome::Late; takeovers.len()];
        for (&i, rows) in order.iter().zip(&rows) {
            let row = rows
                .first()
                .ok_or_else(|| Error::store(KIND, "take_over", "no result row"))?;
            out[i] = takeover_outcome(&takeovers[i], row)?;
        }
        if !committed && out.iter().any(|o| matches!(o, TakeoverOutcome::Won(_))) {
            return Err(Error::Timeout {
                store: KIND,
                operation: "take_over",
                after: self.batch_timeout(),
            });
        }
        Ok(out)
    }

    fn saw_unpruned(&self, job: &JobName, count: Option<i32>) {
        if let Some(count) = count {
            let mut counts = self.unpruned.lock().unwrap_or_else(|e| e.into_inner());
            match counts.get_mut(job.as_str()) {
                Some(n) => *n = count,
                None => {
                    counts.insert(job.as_str().to_owned(), count);
                }
            }
        }
    }
}

/// Reads the answer row of a takeover statement.
fn takeover_outcome(t: &Takeover, row: &Row) -> Result<TakeoverOutcome> {
    let outcome: Option<&str> = row.get(0);
    Ok(match outcome {
        None => TakeoverOutcome::Finished(RunStatus::Interrupted),
        Some("finished") => TakeoverOutcome::Finished(status(row.get(1))?),
        Some("live") => TakeoverOutcome::Live,
        Some("late") => TakeoverOutcome::Late,
        Some("interrupted") => TakeoverOutcome::Interrupted,
        Some("exhausted") => TakeoverOutcome::Exhausted,
        Some("won") => {
            let attempt: i32 = row.get(2);
            let expires_at: i64 = row.get(3);
            let fence: i64 = row.get(4);
            let scheduled_at: i64 = row.get(5);
            let now: i64 = row.get(6);
            TakeoverOutcome::Won(Lease {
                run: t.run.clone(),
                attempt: attempt as u32,
                fence: fence as u64,
                instance_id: t.instance_id.clone(),
                reason: Reason::Takeover,
                scheduled_at,
                started_at: now,
                expires_at,
            })
        }
        Some(other) => {
            return Err(Error::store(
                KIND,
                "take_over",
                format!("outcome {other:?}"),
            ));
        }
    })
}

fn view(row: &Row) -> Result<RunView> {
    Ok(RunView {
        run: RunKey::new(job_name(row.get(0))?, row.get(1)),
        status: status(row.get(2))?,
        attempt: row.get::<_, i32>(3) as u32,
        owner: row.get(4),
        expires_at: row.get(5),
        store_now: row.get(6),
    })
}

impl PostgresStore {
    /// The unfinished runs of `jobs`, [`UNFINISHED_JOBS`] jobs a statement, one statement
    /// after the other: every one, or with `newest` each job's newest that many and those
    /// handed over. Ordered by job and slot.
    async fn unfinished_of(&self, jobs: &[JobName], newest: Option<usize>) -> Result<Vec<RunView>> {
        let (operation, sql) = match newest {
            None => ("unfinished_runs", &self.inner.sql.unfinished),
            Some(_) => ("newest_unfinished_runs", &self.inner.sql.newest_unfinished),
        };
        let newest = newest.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        let mut views = Vec::new();
        for chunk in jobs.chunks(UNFINISHED_JOBS) {
            let list: Vec<&str> = chunk.iter().map(JobName::as_str).collect();
            let mut types = vec![Type::TEXT_ARRAY];
            let mut params: Vec<&(dyn ToSql + Sync)> = vec![&list];
            if let Some(n) = &newest {
                types.push(Type::INT8);
                params.push(n);
            }
            let rows = self.inner.query(operation, sql, &types, &params).await?;
            for row in &rows {
                views.push(view(row)?);
            }
        }
        views.sort_by(|a, b| a.run.cmp(&b.run));
        Ok(views)
    }
}

#[async_trait]
impl Store for PostgresStore {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn prepare(&self, prepare: &Prepare) -> Result<()> {
        check_instance(&prepare.instance_id)?;
        // A claim batch ends 10 ms before the scheduler stops waiting for it.
        let limit = prepare
            .call_timeout
            .saturating_sub(std::time::Duration::from_millis(10))
            .max(std::time::Duration::from_millis(1));
        self.inner.caller_limit_ms.store(
            u64::try_from(limit.as_millis()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        self.inner.prepare_schema(&prepare.jobs).await?;
        // An instance with jobs is a backup: listen for releases from the start. A process
        // that only reads history opens no LISTEN connection unless it subscribes.
        if !prepare.jobs.is_empty() || self.inner.releases.receiver_count() > 0 {
            self.inner.start_listener().await;
        }
        Ok(())
    }

    async fn now(&self) -> Result<EpochMs> {
        let rows = self
            .inner
            .query("now", &self.inner.sql.now, &[], &[])
            .await?;
        Ok(rows.first().map(|r| r.get(0)).unwrap_or_default())
    }

    async fn close(&self) -> Result<()> {
        let inner = &self.inner;
        inner.closed.store(true, Ordering::SeqCst);
        inner.shutdown.cancel();
        let handle = inner
            .listener
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(handle) = handle {
            // The task returns at its next poll; waiting makes sure its connection is closed.
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), handle).await;
        }
        if inner.owns_pool {
            inner.pool.close();
        }
        Ok(())
    }
}

#[async_trait]
impl HistoryStore for PostgresStore {
    async fn history(&self, job: &JobName, count: usize) -> Result<Vec<RunRecord>> {
        let count = i64::try_from(count).unwrap_or(i64::MAX);
        let rows = self
            .inner
            .query(
                "history",
                &self.inner.sql.history,
                &[Type::TEXT, Type::INT8],
                &[&job.as_str(), &count],
            )
            .await?;
        rows.iter()
            .map(|r| {
                let reason: &str = r.get(6);
                Ok(RunRecord {
                    job: job_name(r.get(0))?,
                    slot: r.get(1),
                    scheduled_at: r.get(2),
                    instance_id: r.get(3),
                    manual: r.get(4),
                    attempt: r.get::<_, i32>(5) as u32,
                    reason: Reason::parse(reason).ok_or_else(|| corrupt("reason", reason))?,
                    status: status(r.get(7))?,
                    fence: r.get::<_, i64>(8) as u64,
                    started_at: r.get(9),
                    finished_at: r.get(10),
                    error: r.get(11),
                })
            })
            .collect()
    }

    async fn record_manual(&self, record: &RunRecord, retention: Retention) -> Result<()> {
        check_instance(&record.instance_id)?;
        let inner = &self.inner;
        let error = record.error.as_deref().map(storable);
        inner
            .query(
                "record_manual",
                &inner.sql.record_manual,
                &[
                    Type::TEXT,
                    Type::INT8,
                    Type::INT4,
                    Type::TEXT,
                    Type::INT8,
                    Type::TEXT,
                    Type::TEXT,
                    Type::INT8,
                    Type::INT8,
                    Type::INT8,
                    Type::TEXT,
                ],
                &[
                    &record.job.as_str(),
                    &record.slot,
                    &int4(record.attempt),
                    &record.instance_id,
                    &record.scheduled_at,
                    &record.reason.as_str(),
                    &record.status.as_str(),
                    &i64::try_from(record.fence).unwrap_or(i64::MAX),
                    &record.started_at,
                    &record.finished_at,
                    &error,
                ],
            )
            .await?;
        // Manual runs are rare: pruning after them is a second, separate statement.
        inner
            .prune_now(std::iter::once((record.job.as_str(), retention)))
            .await
    }

    async fn known_jobs(&self) -> Result<Vec<JobName>> {
        let rows = self
            .inner
            .query("known_jobs", &self.inner.sql.known_jobs, &[], &[])
            .await?;
        let mut jobs = rows
            .into_iter()
            .map(|r| job_name(r.get(0)))
            .collect::<Result<Vec<_>>>()?;
        // Byte order, like every other store (a database collation may order `_` and `-`
        // differently).
        jobs.sort();
        Ok(jobs)
    }
}

#[async_trait]
impl LeaseStore for PostgresStore {
    /// One round trip and one transaction per 256 claims: `BEGIN`, a statement that locks
    /// the `_jobs` rows of the batch's jobs in job order, one set-based claim statement
    /// (arrays bound as parameters, `unnest ... WITH ORDINALITY`, data-modifying CTEs) for
    /// the whole batch, a deadline guard and `COMMIT`, pipelined on one connection. A batch
    /// that holds several slots of one job (catch-up) gets one claim statement per round,
    /// each job once per round, so each slot is judged after the earlier ones of its job,
    /// in the order given. Instances that claim the same slots at once queue on the job
    /// locks: the first commits, the next ones find the runs (`Taken`), none deadlocks and
    /// none runs again. Answers in the order given.
    async fn claim_many(&self, claims: &[LeaseClaim]) -> Result<Vec<ClaimOutcome>> {
        let mut out = Vec::with_capacity(claims.len());
        for chunk in claims.chunks(BATCH_CLAIMS) {
            out.extend(self.inner.claim_batch(chunk).await?);
        }
        Ok(out)
    }

    async fn heartbeat(&self, leases: &[Lease], lease_ms: u64) -> Result<Vec<Renewal>> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        check_instances(leases.iter().map(|l| l.instance_id.as_str()))?;
        let inner = &self.inner;
        // Sent in run order, so the statement locks the run rows in the order a result
        // batch locks them (see `in_run_order`); `ord` is a position in `order`.
        let order = in_run_order(|i| &leases[i].run, (0..leases.len()).collect());
        let sorted: Vec<&Lease> = order.iter().map(|&i| &leases[i]).collect();
        let jobs: Vec<&str> = sorted.iter().map(|l| l.run.job.as_str()).collect();
        let slots: Vec<i64> = sorted.iter().map(|l| l.run.slot).collect();
        let attempts: Vec<i32> = sorted.iter().map(|l| int4(l.attempt)).collect();
        let owners: Vec<&str> = sorted.iter().map(|l| l.instance_id.as_str()).collect();
        let rows = inner
            .query(
                "heartbeat",
                &inner.sql.heartbeat,
                &[
                    Type::TEXT_ARRAY,
                    Type::INT8_ARRAY,
                    Type::INT4_ARRAY,
                    Type::TEXT_ARRAY,
                    Type::INT8,
                ],
                &[&jobs, &slots, &attempts, &owners, &ms(lease_ms)],
            )
            .await?;
        let mut out = vec![Renewal::Lost; leases.len()];
        for row in rows {
            let ord: i64 = row.get(0);
            let expires_at: Option<i64> = row.get(1);
            if let (Some(slot), Some(expires_at)) = (
                usize::try_from(ord - 1)
                    .ok()
                    .and_then(|i| order.get(i))
                    .and_then(|&i| out.get_mut(i)),
                expires_at,
            ) {
                *slot = Renewal::Renewed { expires_at };
            }
        }
        Ok(out)
    }

    /// One round trip and one transaction per 256 results: `BEGIN`, the lock of the batch's
    /// jobs (as for claims), one set-based finish statement per round (each job once per
    /// round, so several results of one job are written in the order given) and `COMMIT`,
    /// pipelined on one connection. Every result is fenced, recorded and pruned exactly as
    /// a single finish after the earlier ones (a stale owner's result is `Lost` and changes
    /// nothing). Answers in the order given.
    async fn finish_many(&self, writes: &[(Lease, Finish)]) -> Result<Vec<OwnerWrite>> {
        let mut out = Vec::with_capacity(writes.len());
        for chunk in writes.chunks(BATCH_FINISHES) {
            out.extend(self.inner.finish_batch(chunk).await?);
        }
        Ok(out)
    }

    async fn release(&self, lease: &Lease) -> Result<OwnerWrite> {
        check_instance(&lease.instance_id)?;
        let inner = &self.inner;
        let payload = lease.run.to_string();
        let rows = inner
            .query(
                "release",
                &inner.sql.release,
                &[
                    Type::TEXT,
                    Type::INT8,
                    Type::INT4,
                    Type::TEXT,
                    Type::TEXT,
                    Type::TEXT,
                ],
                &[
                    &lease.run.job.as_str(),
                    &lease.run.slot,
                    &int4(lease.attempt),
                    &lease.instance_id,
                    &inner.names.channel,
                    &payload,
                ],
            )
            .await?;
        let done = rows.first().is_some_and(|r| r.get::<_, bool>(0));
        Ok(if done {
            OwnerWrite::Done
        } else {
            OwnerWrite::Lost
        })
    }

    /// One round trip and one transaction per 256 takeovers: `BEGIN`, the lock of their
    /// jobs (as for claims, so a takeover never waits for a job's row while holding a run
    /// that a claim of the job waits for), the single takeover's statement for each in the
    /// order given, a deadline guard and `COMMIT`, pipelined on one connection. A run whose
    /// fenced transaction is open ([`PostgresStore::fenced_transaction`]) is `Live`: the
    /// statement tries the run's advisory lock, which that transaction holds, and does not
    /// wait for it.
    async fn take_over_many(&self, takeovers: &[Takeover]) -> Result<Vec<TakeoverOutcome>> {
        let mut out = Vec::with_capacity(takeovers.len());
        for chunk in takeovers.chunks(BATCH_TAKEOVERS) {
            out.extend(self.inner.take_over_batch(chunk).await?);
        }
        Ok(out)
    }

    /// 256 of each per round trip and transaction; claim batches gather while two are out
    /// (a claim transaction costs five statements and a commit whatever its size: 100,000
    /// tenants' jobs on 5 instances, a slot due every 0.6 ms, drowned the server in
    /// transactions of one or two claims).
    fn limits(&self) -> BatchLimits {
        BatchLimits {
            claims: BATCH_CLAIMS,
            finishes: BATCH_FINISHES,
            takeovers: BATCH_TAKEOVERS,
            gather_batches: true,
            gather_results: true,
        }
    }

    async fn runs(&self, runs: &[RunKey]) -> Result<Vec<RunView>> {
        if runs.is_empty() {
            return Ok(Vec::new());
        }
        let jobs: Vec<&str> = runs.iter().map(|k| k.job.as_str()).collect();
        let slots: Vec<i64> = runs.iter().map(|k| k.slot).collect();
        let rows = self
            .inner
            .query(
                "runs",
                &self.inner.sql.runs,
                &[Type::TEXT_ARRAY, Type::INT8_ARRAY],
                &[&jobs, &slots],
            )
            .await?;
        rows.iter().map(view).collect()
    }

    async fn unfinished_runs(&self, jobs: &[JobName]) -> Result<Vec<RunView>> {
        self.unfinished_of(jobs, None).await
    }

    async fn newest_unfinished_runs(
        &self,
        jobs: &[JobName],
        newest: usize,
    ) -> Result<Vec<RunView>> {
        self.unfinished_of(jobs, Some(newest)).await
    }

    fn subscribe_releases(&self) -> Option<broadcast::Receiver<RunKey>> {
        self.inner.listen.as_ref()?;
        let receiver = self.inner.releases.subscribe();
        self.inner.ensure_listener();
        Some(receiver)
    }
}
