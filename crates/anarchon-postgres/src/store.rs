//! The store traits on PostgreSQL: every call is one statement (record_manual two), bounded
//! by the store's timeout, except the claim and result batches: one pipelined transaction of
//! the single call's statements. See [`crate::sql`] for the statements.

use std::sync::atomic::Ordering;

use anarchon_core::store::{
    ClaimOutcome, EpochMs, Error, Finish, HistoryStore, JobName, Lease, LeaseClaim, LeaseStore,
    Overlap, OwnerWrite, Prepare, Reason, Renewal, Result, Retention, RunKey, RunRecord, RunStatus,
    RunView, Store, Takeover, TakeoverOutcome,
};
use async_trait::async_trait;
use tokio::sync::broadcast;
use tokio_postgres::Row;
use tokio_postgres::types::Type;

use crate::error::KIND;
use crate::error::{is_connection_lost, is_retryable};
use crate::sql::PRUNE_EVERY;
use crate::{Inner, MAX_RETRIES, PostgresStore};
use deadpool_postgres::Object;
use tokio_postgres::error::SqlState;

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

/// The most claims one pipelined transaction carries (`LeaseStore::claim_batch_limit`).
pub(crate) const BATCH_CLAIMS: usize = 256;

/// The parameter types of the claim statements.
const CLAIM_TYPES: [Type; 10] = [
    Type::TEXT,
    Type::INT8,
    Type::INT8,
    Type::TEXT,
    Type::INT8,
    Type::INT8,
    Type::BOOL,
    Type::TEXT,
    Type::INT8,
    Type::INT8,
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
    size: i64,
    ttl: Option<i64>,
}

impl ClaimParams<'_> {
    fn refs(&self) -> [&(dyn tokio_postgres::types::ToSql + Sync); 10] {
        [
            &self.job,
            &self.slot,
            &self.scheduled_at,
            &self.instance,
            &self.lease_ms,
            &self.not_after,
            &self.skip,
            &self.reason,
            &self.size,
            &self.ttl,
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
        size: i64::from(claim.retention.size),
        ttl: ttl(claim.retention),
    }
}

/// The most results one pipelined transaction carries (`LeaseStore::finish_batch_limit`).
pub(crate) const BATCH_FINISHES: usize = 256;

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
    error: Option<&'f str>,
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
        attempt: lease.attempt as i32,
        owner: &lease.instance_id,
        status: finish.status.as_str(),
        error: finish.error.as_deref(),
        size: i64::from(finish.retention.size),
        ttl: ttl(finish.retention),
    }
}

/// Reads the answer row of a finish statement.
fn owner_write(row: &Row) -> OwnerWrite {
    if row.get::<_, bool>(0) {
        OwnerWrite::Done
    } else {
        OwnerWrite::Lost
    }
}

/// Why a pipelined claim batch did not commit.
enum BatchFailure {
    /// A statement asked to be run again (serialization failure, deadlock): the whole
    /// transaction rolled back.
    Retry(tokio_postgres::Error),
    /// The guard found the database clock past the batch's latest deadline: rolled back.
    /// The answer rows of the claims, as they were before the rollback.
    Deadline(Vec<std::result::Result<Row, tokio_postgres::Error>>),
    /// Any other error: rolled back.
    Failed(tokio_postgres::Error),
}

impl Inner {
    /// Whether the next won claim of `job` is due to prune it: its count says so, or this
    /// store has not seen the count yet (a process that claims once and stops, again and
    /// again, still prunes).
    fn prune_due(&self, job: &JobName) -> bool {
        let counts = self.unpruned.lock().unwrap_or_else(|e| e.into_inner());
        counts
            .get(job.as_str())
            .is_none_or(|n| n + 1 >= PRUNE_EVERY)
    }

    /// The claim statement for `claim`: the pruning variant when the job is due.
    fn claim_sql(&self, claim: &LeaseClaim) -> &str {
        if self.prune_due(&claim.run.job) {
            &self.sql.claim_pruning[usize::from(claim.retention.ttl_ms.is_some())]
        } else {
            &self.sql.claim
        }
    }

    /// Reads the answer row of a claim statement.
    fn claim_outcome(&self, claim: &LeaseClaim, row: &Row) -> Result<ClaimOutcome> {
        let now: i64 = row.get(0);
        let late: bool = row.get(1);
        let existed: bool = row.get(2);
        let live_slot: Option<i64> = row.get(3);
        let expires_at: Option<i64> = row.get(4);
        let fence: Option<i64> = row.get(5);
        self.saw_unpruned(&claim.run.job, row.get(6));
        Ok(if late {
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
            // The insert met a run another instance inserted after this statement's snapshot.
            ClaimOutcome::Taken
        })
    }

    /// The answers of a batch's claim statements, `rows` in the order they ran (`order`),
    /// put back into the order of `claims`.
    fn claim_outcomes(
        &self,
        claims: &[LeaseClaim],
        order: &[usize],
        rows: Vec<std::result::Result<Row, tokio_postgres::Error>>,
    ) -> Result<Vec<ClaimOutcome>> {
        let mut out: Vec<Option<ClaimOutcome>> = vec![None; claims.len()];
        for (&i, row) in order.iter().zip(rows) {
            let row = row.map_err(|e| self.pg(e, "claim"))?;
            out[i] = Some(self.claim_outcome(&claims[i], &row)?);
        }
        Ok(out.into_iter().flatten().collect())
    }

    /// How long a claim or result batch may take: the store's timeout, or the scheduler's if
    /// shorter.
    fn batch_timeout(&self) -> std::time::Duration {
        match self.caller_limit_ms.load(Ordering::Relaxed) {
            0 => self.timeout,
            limit => self.timeout.min(std::time::Duration::from_millis(limit)),
        }
    }

    /// At most [`BATCH_CLAIMS`] claims in one pipelined transaction (see
    /// `LeaseStore::claim_many`), run again as a whole after a serialization failure.
    async fn claim_batch(&self, claims: &[LeaseClaim]) -> Result<Vec<ClaimOutcome>> {
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        // Grouped by job, in the given order within a job (a stable sort).
        let mut order: Vec<usize> = (0..claims.len()).collect();
        order.sort_by(|&a, &b| claims[a].run.job.cmp(&claims[b].run.job));
        let deadline = claims.iter().map(|c| c.not_after).max().unwrap_or(0);
        let timeout = self.batch_timeout();
        let client = self.client("claim").await?;
        let work = async {
            // Statements this connection has not prepared yet cost a round trip each.
            let mut cached = client.statement_cache.size();
            let begin = client.prepare_typed_cached("BEGIN", &[]).await?;
            let guard = client
                .prepare_typed_cached(&self.sql.claim_guard, &[Type::INT8])
                .await?;
            let commit = client.prepare_typed_cached("COMMIT", &[]).await?;
            let mut tries = 0;
            loop {
                let mut statements = Vec::with_capacity(order.len());
                for &i in &order {
                    statements.push(
                        client
                            .prepare_typed_cached(self.claim_sql(&claims[i]), &CLAIM_TYPES)
                            .await?,
                    );
                }
                let params: Vec<ClaimParams<'_>> =
                    order.iter().map(|&i| claim_params(&claims[i])).collect();
                let refs: Vec<_> = params.iter().map(ClaimParams::refs).collect();
                // Every request goes out before the first answer is read: tokio-postgres
                // pipelines the queries of futures polled together on one connection.
                let prepared = client.statement_cache.size().saturating_sub(cached);
                self.round_trips
                    .fetch_add(1 + prepared as u64, Ordering::Relaxed);
                cached = client.statement_cache.size();
                let client = &*client;
                let guard_params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&deadline];
                let (began, rows, guarded, committed) = futures::join!(
                    client.execute(&begin, &[]),
                    futures::future::join_all(
                        statements
                            .iter()
                            .zip(&refs)
                            .map(|(st, p)| client.query_one(st, p))
                    ),
                    client.execute(&guard, &guard_params),
                    client.execute(&commit, &[]),
                );
                let failure = match (began, guarded, committed) {
                    (Err(e), _, _) => BatchFailure::Failed(e),
                    _ if rows.iter().any(Result::is_err) => {
                        // The first error is the cause; the statements after it only
                        // found the transaction aborted.
                        let e = rows
                            .into_iter()
                            .find_map(Result::err)
                            .expect("an error is present");
                        if is_retryable(&e) {
                            BatchFailure::Retry(e)
                        } else {
                            BatchFailure::Failed(e)
                        }
                    }
                    (_, Err(e), _) if e.code() == Some(&SqlState::INVALID_TEXT_REPRESENTATION) => {
                        BatchFailure::Deadline(rows)
                    }
                    (_, Err(e), _) | (_, _, Err(e)) => {
                        if is_retryable(&e) {
                            BatchFailure::Retry(e)
                        } else {
                            BatchFailure::Failed(e)
                        }
                    }
                    _ => return Ok(self.claim_outcomes(claims, &order, rows)),
                };
                match failure {
                    BatchFailure::Retry(e) if tries < MAX_RETRIES => {
                        tries += 1;
                        tracing::debug!(tries, "postgres claim batch retried: {e}");
                        tokio::task::yield_now().await;
                    }
                    BatchFailure::Retry(e) | BatchFailure::Failed(e) => return Err(e),
                    BatchFailure::Deadline(rows) => {
                        // Rolled back. A batch that won nothing lost nothing by that (at
                        // most the marking of ended runs, which the next claim redoes):
                        // its answers stand. One that won must not report leases it no
                        // longer holds.
                        let answers = self.claim_outcomes(claims, &order, rows);
                        return Ok(match answers {
                            Ok(out) if !out.iter().any(|o| matches!(o, ClaimOutcome::Won(_))) => {
                                Ok(out)
                            }
                            _ => Err(Error::Timeout {
                                store: KIND,
                                operation: "claim",
                                after: timeout,
                            }),
                        });
                    }
                }
            }
        };
        match tokio::time::timeout(timeout, work).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                if is_connection_lost(&e) {
                    drop(Object::take(client));
                }
                Err(self.pg(e, "claim"))
            }
            Err(_) => {
                drop(Object::take(client));
                Err(Error::Timeout {
                    store: KIND,
                    operation: "claim",
                    after: timeout,
                })
            }
        }
    }

    /// At most [`BATCH_FINISHES`] results in one pipelined transaction (see
    /// `LeaseStore::finish_many`), run again as a whole after a serialization failure or a
    /// deadlock, all within the batch timeout.
    async fn finish_batch(&self, writes: &[(Lease, Finish)]) -> Result<Vec<OwnerWrite>> {
        if writes.is_empty() {
            return Ok(Vec::new());
        }
        // Grouped by job, in the given order within a job (a stable sort), like claims.
        let mut order: Vec<usize> = (0..writes.len()).collect();
        order.sort_by(|&a, &b| writes[a].0.run.job.cmp(&writes[b].0.run.job));
        let timeout = self.batch_timeout();
        let client = self.client("finish").await?;
        let work = async {
            let mut cached = client.statement_cache.size();
            let begin = client.prepare_typed_cached("BEGIN", &[]).await?;
            let commit = client.prepare_typed_cached("COMMIT", &[]).await?;
            let mut tries = 0;
            loop {
                let mut statements = Vec::with_capacity(order.len());
                for &i in &order {
                    let ttl = writes[i].1.retention.ttl_ms.is_some();
                    statements.push(
                        client
                            .prepare_typed_cached(&self.sql.finish[usize::from(ttl)], &FINISH_TYPES)
                            .await?,
                    );
                }
                let params: Vec<FinishParams<'_>> = order
                    .iter()
                    .map(|&i| finish_params(&writes[i].0, &writes[i].1))
                    .collect();
                let refs: Vec<_> = params.iter().map(FinishParams::refs).collect();
                // One round trip: every request goes out before the first answer is read.
                let prepared = client.statement_cache.size().saturating_sub(cached);
                self.round_trips
                    .fetch_add(1 + prepared as u64, Ordering::Relaxed);
                cached = client.statement_cache.size();
                let client = &*client;
                let (began, rows, committed) = futures::join!(
                    client.execute(&begin, &[]),
                    futures::future::join_all(
                        statements
                            .iter()
                            .zip(&refs)
                            .map(|(st, p)| client.query_one(st, p))
                    ),
                    client.execute(&commit, &[]),
                );
                // The first error is the cause: the statements after it only found the
                // transaction aborted (and its COMMIT answered with a rollback).
                let failed = match (began, committed) {
                    (Err(e), _) => e,
                    _ if rows.iter().any(Result::is_err) => rows
                        .into_iter()
                        .find_map(Result::err)
                        .expect("an error is present"),
                    (_, Err(e)) => e,
                    _ => {
                        let mut out = vec![OwnerWrite::Lost; writes.len()];
                        for (&i, row) in order.iter().zip(rows) {
                            out[i] = owner_write(&row.expect("every statement answered"));
                        }
                        return Ok(out);
                    }
                };
                if !is_retryable(&failed) || tries >= MAX_RETRIES {
                    return Err(failed);
                }
                tries += 1;
                tracing::debug!(tries, "postgres finish batch retried: {failed}");
                tokio::task::yield_now().await;
            }
        };
        match tokio::time::timeout(timeout, work).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => {
                if is_connection_lost(&e) {
                    drop(Object::take(client));
                }
                Err(self.pg(e, "finish"))
            }
            Err(_) => {
                drop(Object::take(client));
                Err(Error::Timeout {
                    store: KIND,
                    operation: "finish",
                    after: timeout,
                })
            }
        }
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

#[async_trait]
impl Store for PostgresStore {
    fn kind(&self) -> &'static str {
        KIND
    }

    async fn prepare(&self, prepare: &Prepare) -> Result<()> {
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
        let inner = &self.inner;
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
                    &(record.attempt as i32),
                    &record.instance_id,
                    &record.scheduled_at,
                    &record.reason.as_str(),
                    &record.status.as_str(),
                    &(record.fence as i64),
                    &record.started_at,
                    &record.finished_at,
                    &record.error,
                ],
            )
            .await?;
        // Manual runs are rare: pruning after them is a second, separate statement.
        inner
            .query(
                "record_manual",
                &inner.sql.prune[usize::from(retention.ttl_ms.is_some())],
                &[Type::TEXT, Type::INT8, Type::INT8],
                &[
                    &record.job.as_str(),
                    &i64::from(retention.size),
                    &ttl(retention),
                ],
            )
            .await?;
        Ok(())
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
    async fn claim(&self, claim: &LeaseClaim) -> Result<ClaimOutcome> {
        let inner = &self.inner;
        let params = claim_params(claim);
        let rows = inner
            .query(
                "claim",
                inner.claim_sql(claim),
                &CLAIM_TYPES,
                &params.refs(),
            )
            .await?;
        let row = rows
            .first()
            .ok_or_else(|| Error::store(KIND, "claim", "no result row"))?;
        inner.claim_outcome(claim, row)
    }

    /// One round trip and one transaction per 256 claims: `BEGIN`, the single
    /// claim's statement for each claim, a deadline guard and `COMMIT`, pipelined on one
    /// connection. Each statement sees what the ones before it wrote, so every claim is
    /// judged exactly as a single claim after the earlier ones. The claims run grouped by
    /// job (in the given order within a job), so instances claiming the same jobs lock their
    /// rows in one order and never deadlock; the answers come back in the order given.
    async fn claim_many(&self, claims: &[LeaseClaim]) -> Result<Vec<ClaimOutcome>> {
        let mut out = Vec::with_capacity(claims.len());
        for chunk in claims.chunks(BATCH_CLAIMS) {
            if let [one] = chunk {
                out.push(self.claim(one).await?);
            } else {
                out.extend(self.inner.claim_batch(chunk).await?);
            }
        }
        Ok(out)
    }

    fn claim_batch_limit(&self) -> usize {
        BATCH_CLAIMS
    }

    async fn heartbeat(&self, leases: &[Lease], lease_ms: u64) -> Result<Vec<Renewal>> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let inner = &self.inner;
        let jobs: Vec<&str> = leases.iter().map(|l| l.run.job.as_str()).collect();
        let slots: Vec<i64> = leases.iter().map(|l| l.run.slot).collect();
        let attempts: Vec<i32> = leases.iter().map(|l| l.attempt as i32).collect();
        let owners: Vec<&str> = leases.iter().map(|l| l.instance_id.as_str()).collect();
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
                usize::try_from(ord - 1).ok().and_then(|i| out.get_mut(i)),
                expires_at,
            ) {
                *slot = Renewal::Renewed { expires_at };
            }
        }
        Ok(out)
    }

    async fn finish(&self, lease: &Lease, finish: &Finish) -> Result<OwnerWrite> {
        let inner = &self.inner;
        let params = finish_params(lease, finish);
        let rows = inner
            .query(
                "finish",
                &inner.sql.finish[usize::from(finish.retention.ttl_ms.is_some())],
                &FINISH_TYPES,
                &params.refs(),
            )
            .await?;
        Ok(rows.first().map_or(OwnerWrite::Lost, owner_write))
    }

    /// One round trip and one transaction per 256 results: `BEGIN`, the single finish's
    /// statement for each result and `COMMIT`, pipelined on one connection. Each statement
    /// sees what the ones before it wrote, so every result is fenced, recorded and pruned
    /// exactly as a single finish after the earlier ones (a stale owner's result is `Lost`
    /// and changes nothing). The results run grouped by job (in the given order within a
    /// job), the order claim batches lock in; the answers come back in the order given.
    async fn finish_many(&self, writes: &[(Lease, Finish)]) -> Result<Vec<OwnerWrite>> {
        let mut out = Vec::with_capacity(writes.len());
        for chunk in writes.chunks(BATCH_FINISHES) {
            if let [(lease, finish)] = chunk {
                out.push(self.finish(lease, finish).await?);
            } else {
                out.extend(self.inner.finish_batch(chunk).await?);
            }
        }
        Ok(out)
    }

    fn finish_batch_limit(&self) -> usize {
        BATCH_FINISHES
    }

    async fn release(&self, lease: &Lease) -> Result<OwnerWrite> {
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
                    &(lease.attempt as i32),
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

    async fn take_over(&self, t: &Takeover) -> Result<TakeoverOutcome> {
        let inner = &self.inner;
        let rows = inner
            .query(
                "take_over",
                &inner.sql.take_over,
                &[
                    Type::TEXT,
                    Type::INT8,
                    Type::INT4,
                    Type::TEXT,
                    Type::INT4,
                    Type::BOOL,
                    Type::INT8,
                    Type::INT8,
                ],
                &[
                    &t.run.job.as_str(),
                    &t.run.slot,
                    &(t.seen_attempt as i32),
                    &t.instance_id,
                    &(t.max_attempts.min(i32::MAX as u32) as i32),
                    &t.superseded,
                    &ms(t.lease_ms),
                    &t.not_after,
                ],
            )
            .await?;
        let row = rows
            .first()
            .ok_or_else(|| Error::store(KIND, "take_over", "no result row"))?;
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
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let list: Vec<&str> = jobs.iter().map(JobName::as_str).collect();
        let rows = self
            .inner
            .query(
                "unfinished_runs",
                &self.inner.sql.unfinished,
                &[Type::TEXT_ARRAY],
                &[&list],
            )
            .await?;
        let mut views = rows.iter().map(view).collect::<Result<Vec<_>>>()?;
        views.sort_by(|a, b| a.run.cmp(&b.run));
        Ok(views)
    }

    fn subscribe_releases(&self) -> Option<broadcast::Receiver<RunKey>> {
        self.inner.listen.as_ref()?;
        let receiver = self.inner.releases.subscribe();
        self.inner.ensure_listener();
        Some(receiver)
    }
}
