//! The store traits on PostgreSQL: every call is one statement (record_manual two), bounded
//! by the store's timeout. See [`crate::sql`] for the statements.

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
use crate::sql::PRUNE_EVERY;
use crate::{Inner, PostgresStore};

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
        let job = &claim.run.job;
        let sql = if inner.prune_due(job) {
            &inner.sql.claim_pruning[usize::from(claim.retention.ttl_ms.is_some())]
        } else {
            &inner.sql.claim
        };
        let rows = inner
            .query(
                "claim",
                sql,
                &[
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
                ],
                &[
                    &claim.run.job.as_str(),
                    &claim.run.slot,
                    &claim.scheduled_at,
                    &claim.instance_id,
                    &ms(claim.lease_ms),
                    &claim.not_after,
                    &(claim.overlap == Overlap::Skip),
                    &claim.reason.as_str(),
                    &i64::from(claim.retention.size),
                    &ttl(claim.retention),
                ],
            )
            .await?;
        let row = rows
            .first()
            .ok_or_else(|| Error::store(KIND, "claim", "no result row"))?;
        let now: i64 = row.get(0);
        let late: bool = row.get(1);
        let existed: bool = row.get(2);
        let live_slot: Option<i64> = row.get(3);
        let expires_at: Option<i64> = row.get(4);
        let fence: Option<i64> = row.get(5);
        inner.saw_unpruned(job, row.get(6));
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
        let rows = inner
            .query(
                "finish",
                &inner.sql.finish[usize::from(finish.retention.ttl_ms.is_some())],
                &[
                    Type::TEXT,
                    Type::INT8,
                    Type::INT4,
                    Type::TEXT,
                    Type::TEXT,
                    Type::TEXT,
                    Type::INT8,
                    Type::INT8,
                ],
                &[
                    &lease.run.job.as_str(),
                    &lease.run.slot,
                    &(lease.attempt as i32),
                    &lease.instance_id,
                    &finish.status.as_str(),
                    &finish.error,
                    &i64::from(finish.retention.size),
                    &ttl(finish.retention),
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
