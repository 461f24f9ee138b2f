//! The store operations as sequences of statements over an [`Exec`], and the row mapping.
//!
//! Every write runs in one `BEGIN IMMEDIATE ... COMMIT` transaction: SQLite takes the
//! database's write lock at `BEGIN`, so everything read inside cannot change before the
//! commit, and the store's clock is read after the lock was taken (a claim that waited for
//! the lock is judged on the time it is evaluated, not the time it was sent). An error
//! rolls the transaction back. Each function mirrors the clause of the contract in
//! [`anarchon_core::store`] that it is named after, and the in-memory reference store.

use std::collections::HashMap;

use anarchon_core::history::prunes_at;
use anarchon_core::store::{
    AttemptKey, ClaimOutcome, EpochMs, FenceLoss, Finish, JobName, Lease, LeaseClaim, Overlap,
    OwnerWrite, Reason, Renewal, Result, Retention, RunKey, RunRecord, RunStatus, RunView,
    Takeover, TakeoverOutcome,
};

use super::{Exec, Row, Sql, Value, job_key};

/// Rows per multi-row statement (heartbeat, runs): 4 parameters each stays far below
/// SQLite's limit on bound parameters.
const BATCH: usize = 200;

/// Commits after `r` succeeded, rolls back after it failed (or when the commit failed).
pub async fn finish_tx<E: Exec, T>(e: &mut E, r: Result<T>) -> Result<T> {
    match r {
        Ok(v) => match e.execute("COMMIT", &[]).await {
            Ok(_) => Ok(v),
            Err(err) => {
                let _ = e.execute("ROLLBACK", &[]).await;
                Err(err)
            }
        },
        Err(err) => {
            let _ = e.execute("ROLLBACK", &[]).await;
            Err(err)
        }
    }
}

/// Registers the jobs of an instance (`prepare`), so `known_jobs` lists them.
pub async fn register_jobs<E: Exec>(e: &mut E, sql: &Sql, jobs: &[JobName]) -> Result<()> {
    if jobs.is_empty() {
        return Ok(());
    }
    e.execute("BEGIN IMMEDIATE", &[]).await?;
    let r = async {
        for job in jobs {
            e.execute(&sql.st.register_job, &[job_key(job.as_str()).into()])
                .await?;
        }
        Ok(())
    }
    .await;
    finish_tx(e, r).await
}

/// [`anarchon_core::LeaseStore::claim_many`]: the claims in one `BEGIN IMMEDIATE`
/// transaction, one lock and one commit for all, each judged by the contract's claim rules
/// in the order given. [B-10, B-11, B-12, B-15, B-37]
///
/// First, in a read transaction (which in WAL mode neither takes nor waits for the write
/// lock), the claims whose run exists already are answered `Taken` (or `Late` past their
/// `not_after`): a run is only ever deleted by pruning, long after its slot, so such a claim
/// is lost whatever the write transaction would find. The instances that lose a slot thus
/// no longer queue for the file's lock behind the one that wins it; only the claims that may
/// insert go into the write transaction. A run inserted between the read and the lock is
/// found there, as before.
pub async fn claim_many<E: Exec>(
    e: &mut E,
    sql: &Sql,
    claims: &[LeaseClaim],
) -> Result<Vec<ClaimOutcome>> {
    if claims.is_empty() {
        return Ok(Vec::new());
    }
    let mut out = lost_claims(e, sql, claims).await?;
    if out.iter().all(Option::is_some) {
        return Ok(out.into_iter().flatten().collect());
    }
    e.execute("BEGIN IMMEDIATE", &[]).await?;
    let r = async {
        for (c, answer) in claims.iter().zip(out.iter_mut()) {
            if answer.is_none() {
                *answer = Some(claim_in_tx(e, sql, c).await?);
            }
        }
        Ok(out.into_iter().flatten().collect())
    }
    .await;
    finish_tx(e, r).await
}

/// The answers of the claims whose run exists already (`None` for the others), read without
/// the write lock (see [`claim_many`]).
async fn lost_claims<E: Exec>(
    e: &mut E,
    sql: &Sql,
    claims: &[LeaseClaim],
) -> Result<Vec<Option<ClaimOutcome>>> {
    e.execute("BEGIN", &[]).await?;
    let r = async {
        let mut out = Vec::with_capacity(claims.len());
        let mut now = None;
        for c in claims {
            let key = [Value::from(c.run.job.as_str()), Value::from(c.run.slot)];
            let rows = e.query(&sql.st.run_exists, &key).await?;
            let row = rows
                .first()
                .ok_or_else(|| sql.corrupt("", "the run check returned no row"))?;
            if int(sql, row, 0)? == 0 {
                out.push(None);
                continue;
            }
            let now = match now {
                Some(now) => now,
                None => *now.insert(e.now().await?),
            };
            out.push(Some(if now > c.not_after {
                ClaimOutcome::Late { store_now: now }
            } else {
                ClaimOutcome::Taken
            }));
        }
        Ok(out)
    }
    .await;
    finish_tx(e, r).await
}

async fn claim_in_tx<E: Exec>(e: &mut E, sql: &Sql, c: &LeaseClaim) -> Result<ClaimOutcome> {
    let now = e.now().await?;
    if now > c.not_after {
        return Ok(ClaimOutcome::Late { store_now: now });
    }
    let st = &sql.st;
    let job = c.run.job.as_str();
    let key = [Value::from(job), Value::from(c.run.slot), Value::from(now)];
    // One read answers the claim's questions; the interrupting write runs only when the
    // read found earlier runs to interrupt (rarely). Interrupting changes neither answer:
    // it touches earlier slots only, and only runs without a live lease.
    let check = e.query(&st.claim_check, &key).await?;
    let row = check
        .first()
        .ok_or_else(|| sql.corrupt("", "the claim check returned no row"))?;
    let taken = int(sql, row, 0)? != 0;
    let running_slot = opt_int(sql, row, 1)?;
    if int(sql, row, 2)? != 0 {
        for row in e.query(&st.interrupt_runs, &key).await? {
            let run = RunKey::new(c.run.job.clone(), int(sql, &row, 0)?);
            let attempt = u32_at(sql, &row, 1)?;
            close_attempt(
                e,
                sql,
                &run,
                attempt,
                RunStatus::Interrupted,
                now,
                "replaced by the next slot",
            )
            .await?;
        }
    }
    if taken {
        e.execute(&st.register_job, &[job_key(job).into()]).await?;
        return Ok(ClaimOutcome::Taken);
    }
    if let (Overlap::Skip, Some(running_slot)) = (c.overlap, running_slot) {
        e.execute(&st.register_job, &[job_key(job).into()]).await?;
        return Ok(ClaimOutcome::Overlap { running_slot });
    }
    let fence = next_fence(e, sql, job).await?;
    let expires_at = now.saturating_add(ms(c.lease_ms));
    e.execute(
        &st.insert_run,
        &[
            job.into(),
            c.run.slot.into(),
            c.scheduled_at.into(),
            c.instance_id.as_str().into(),
            c.reason.as_str().into(),
            fence.into(),
            now.into(),
            expires_at.into(),
        ],
    )
    .await?;
    // No history row: the run's row is the history of its first attempt (see
    // [`write_attempt`]).
    if prune_due(job, fence) {
        prune(e, sql, job, c.retention, now).await?;
    }
    Ok(ClaimOutcome::Won(Lease {
        run: c.run.clone(),
        attempt: 1,
        fence,
        instance_id: c.instance_id.clone(),
        reason: c.reason,
        scheduled_at: c.scheduled_at,
        started_at: now,
        expires_at,
    }))
}

/// [`anarchon_core::LeaseStore::heartbeat`]: one statement per 200 leases (4 bound parameters
/// each, far below SQLite's limit). [B-13]
pub async fn heartbeat<E: Exec>(
    e: &mut E,
    sql: &Sql,
    leases: &[Lease],
    lease_ms: u64,
) -> Result<Vec<Renewal>> {
    if leases.is_empty() {
        return Ok(Vec::new());
    }
    e.execute("BEGIN IMMEDIATE", &[]).await?;
    let r = async {
        let now = e.now().await?;
        let expires_at = now.saturating_add(ms(lease_ms));
        let mut renewed: HashMap<(String, EpochMs, i64, String), ()> = HashMap::new();
        for chunk in leases.chunks(BATCH) {
            let mut text = sql.st.heartbeat_head.clone();
            let mut params = Vec::with_capacity(1 + 4 * chunk.len());
            params.push(Value::from(expires_at));
            for (i, l) in chunk.iter().enumerate() {
                let p = 2 + 4 * i;
                if i > 0 {
                    text.push_str(", ");
                }
                text.push_str(&format!("(?{}, ?{}, ?{}, ?{})", p, p + 1, p + 2, p + 3));
                params.push(l.run.job.as_str().into());
                params.push(l.run.slot.into());
                params.push(l.attempt.into());
                params.push(l.instance_id.as_str().into());
            }
            text.push_str(") RETURNING job, slot, attempt, owner");
            for row in e.query(&text, &params).await? {
                let key = (
                    text_at(sql, &row, 0)?,
                    int(sql, &row, 1)?,
                    int(sql, &row, 2)?,
                    text_at(sql, &row, 3)?,
                );
                renewed.insert(key, ());
            }
        }
        Ok(leases
            .iter()
            .map(|l| {
                let key = (
                    l.run.job.as_str().to_owned(),
                    l.run.slot,
                    i64::from(l.attempt),
                    l.instance_id.clone(),
                );
                if renewed.contains_key(&key) {
                    Renewal::Renewed { expires_at }
                } else {
                    Renewal::Lost
                }
            })
            .collect())
    }
    .await;
    finish_tx(e, r).await
}

/// [`anarchon_core::LeaseStore::finish_many`]: the results in one `BEGIN IMMEDIATE`
/// transaction, one lock and one commit for all, each written by the contract's finish
/// rules in the order given. [B-16, B-37]
pub async fn finish_many<E: Exec>(
    e: &mut E,
    sql: &Sql,
    writes: &[(Lease, Finish)],
) -> Result<Vec<OwnerWrite>> {
    if writes.is_empty() {
        return Ok(Vec::new());
    }
    e.execute("BEGIN IMMEDIATE", &[]).await?;
    let r = async {
        let mut out = Vec::with_capacity(writes.len());
        for (l, f) in writes {
            out.push(finish_in_tx(e, sql, l, f).await?);
        }
        Ok(out)
    }
    .await;
    finish_tx(e, r).await
}

async fn finish_in_tx<E: Exec>(e: &mut E, sql: &Sql, l: &Lease, f: &Finish) -> Result<OwnerWrite> {
    {
        let now = e.now().await?;
        let st = &sql.st;
        let job = l.run.job.as_str();
        let n = e
            .execute(
                &st.finish_run,
                &[
                    job.into(),
                    l.run.slot.into(),
                    l.attempt.into(),
                    l.instance_id.as_str().into(),
                    f.status.as_str().into(),
                    f.error.as_deref().into(),
                    now.into(),
                ],
            )
            .await?;
        if n == 0 {
            return Ok(OwnerWrite::Lost);
        }
        // The attempt's history row, where one was written (a takeover before version 4,
        // a store that writes one at every claim); else the run's row is its history.
        e.execute(
            &st.finish_attempt,
            &[
                job.into(),
                l.run.slot.into(),
                l.attempt.into(),
                f.status.as_str().into(),
                now.into(),
                f.error.as_deref().into(),
            ],
        )
        .await?;
        let by_count = finish_prunes(job, l.fence, f.retention.size);
        if by_count || f.retention.ttl_ms.is_some() {
            prune_some(e, sql, job, f.retention, now, by_count).await?;
        }
        Ok(OwnerWrite::Done)
    }
}

/// [`anarchon_core::LeaseStore::release`]: the graceful handover. [B-17]
pub async fn release<E: Exec>(e: &mut E, sql: &Sql, l: &Lease) -> Result<OwnerWrite> {
    e.execute("BEGIN IMMEDIATE", &[]).await?;
    let r = async {
        let now = e.now().await?;
        let st = &sql.st;
        let job = l.run.job.as_str();
        // The attempt's history row first, from the run's row (whose owner the release
        // clears); written under the release's own conditions, so only when it succeeds.
        write_attempt(
            e,
            sql,
            &l.run,
            l.attempt,
            &l.instance_id,
            now,
            "handed over",
        )
        .await?;
        let n = e
            .execute(
                &st.release_run,
                &[
                    job.into(),
                    l.run.slot.into(),
                    l.attempt.into(),
                    l.instance_id.as_str().into(),
                    now.into(),
                ],
            )
            .await?;
        if n == 0 {
            return Ok(OwnerWrite::Lost);
        }
        Ok(OwnerWrite::Done)
    }
    .await;
    finish_tx(e, r).await
}

/// [`anarchon_core::LeaseStore::take_over_many`]: the takeovers in one `BEGIN IMMEDIATE`
/// transaction, one lock and one commit for all, each judged by the contract's takeover
/// rules in the order given. [B-14, B-15, B-17]
pub async fn take_over_many<E: Exec>(
    e: &mut E,
    sql: &Sql,
    takeovers: &[Takeover],
) -> Result<Vec<TakeoverOutcome>> {
    if takeovers.is_empty() {
        return Ok(Vec::new());
    }
    e.execute("BEGIN IMMEDIATE", &[]).await?;
    let r = async {
        let mut out = Vec::with_capacity(takeovers.len());
        for t in takeovers {
            out.push(take_over_in_tx(e, sql, t).await?);
        }
        Ok(out)
    }
    .await;
    finish_tx(e, r).await
}

async fn take_over_in_tx<E: Exec>(e: &mut E, sql: &Sql, t: &Takeover) -> Result<TakeoverOutcome> {
    let now = e.now().await?;
    if now > t.not_after {
        // The scheduler has stopped waiting for this call: commit nothing.
        return Ok(TakeoverOutcome::Late);
    }
    let st = &sql.st;
    let job = t.run.job.as_str();
    let rows = e
        .query(&st.read_run, &[job.into(), t.run.slot.into()])
        .await?;
    let Some(row) = rows.first() else {
        return Ok(TakeoverOutcome::Finished(RunStatus::Interrupted));
    };
    let status = status_at(sql, row, 0)?;
    let attempt = int(sql, row, 1)?;
    let starts = int(sql, row, 2)?;
    let owner = opt_text(sql, row, 3)?;
    let expires_at = int(sql, row, 4)?;
    let scheduled_at = int(sql, row, 5)?;
    if status.is_final() {
        return Ok(TakeoverOutcome::Finished(status));
    }
    let released = owner.is_none();
    if attempt != i64::from(t.seen_attempt) || (!released && expires_at > now) {
        return Ok(TakeoverOutcome::Live);
    }
    let seen = u32::try_from(attempt).map_err(|_| sql.corrupt("", format!("attempt {attempt}")))?;
    // The attempt whose lease ended gets its history row before the row moves on; a
    // released one has it already (written by the release).
    if let Some(owner) = &owner {
        write_attempt(e, sql, &t.run, seen, owner, now, "lease expired").await?;
    }
    if t.superseded {
        e.execute(
            &st.set_run_status,
            &[
                job.into(),
                t.run.slot.into(),
                "interrupted".into(),
                Value::Null,
            ],
        )
        .await?;
        return Ok(TakeoverOutcome::Interrupted);
    }
    let counted = if released {
        starts
    } else {
        starts.saturating_add(1)
    };
    if counted > i64::from(t.max_attempts) {
        e.execute(
            &st.set_run_status,
            &[
                job.into(),
                t.run.slot.into(),
                "failed".into(),
                "exhausted".into(),
            ],
        )
        .await?;
        return Ok(TakeoverOutcome::Exhausted);
    }
    // A takeover's fence leaves the count of won claims alone (see [`PRUNE_EVERY`]).
    let fence = draw_fence(e, sql, &sql.st.takeover_fence, job).await?;
    let next = seen.saturating_add(1);
    let expires_at = now.saturating_add(ms(t.lease_ms));
    e.execute(
        &st.takeover_run,
        &[
            job.into(),
            t.run.slot.into(),
            next.into(),
            counted.into(),
            t.instance_id.as_str().into(),
            fence.into(),
            now.into(),
            expires_at.into(),
        ],
    )
    .await?;
    // No history row: the run's row is the history of the new attempt.
    Ok(TakeoverOutcome::Won(Lease {
        run: t.run.clone(),
        attempt: next,
        fence,
        instance_id: t.instance_id.clone(),
        reason: Reason::Takeover,
        scheduled_at,
        started_at: now,
        expires_at,
    }))
}

/// [`anarchon_core::LeaseStore::runs`]: in the order asked, missing runs left out.
pub async fn runs<E: Exec>(e: &mut E, sql: &Sql, keys: &[RunKey]) -> Result<Vec<RunView>> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let now = e.now().await?;
    let mut found: HashMap<RunKey, RunView> = HashMap::new();
    for chunk in keys.chunks(BATCH) {
        let mut text = sql.st.runs_head.clone();
        let mut params = Vec::with_capacity(2 * chunk.len());
        for (i, k) in chunk.iter().enumerate() {
            if i > 0 {
                text.push_str(", ");
            }
            text.push_str(&format!("(?{}, ?{})", 2 * i + 1, 2 * i + 2));
            params.push(k.job.as_str().into());
            params.push(k.slot.into());
        }
        text.push(')');
        for row in e.query(&text, &params).await? {
            let v = run_view(sql, &row, now)?;
            found.insert(v.run.clone(), v);
        }
    }
    Ok(keys.iter().filter_map(|k| found.get(k).cloned()).collect())
}

/// [`anarchon_core::LeaseStore::unfinished_runs`], ordered by job and slot.
pub async fn unfinished_runs<E: Exec>(
    e: &mut E,
    sql: &Sql,
    jobs: &[JobName],
) -> Result<Vec<RunView>> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let now = e.now().await?;
    let mut out = Vec::new();
    for chunk in jobs.chunks(BATCH) {
        let mut text = sql.st.unfinished_head.clone();
        let params: Vec<Value> = chunk.iter().map(|j| j.as_str().into()).collect();
        for i in 0..chunk.len() {
            if i > 0 {
                text.push_str(", ");
            }
            text.push_str(&format!("?{}", i + 1));
        }
        text.push(')');
        for row in e.query(&text, &params).await? {
            out.push(run_view(sql, &row, now)?);
        }
    }
    out.sort_by(|a, b| a.run.cmp(&b.run));
    out.dedup_by(|a, b| a.run == b.run);
    Ok(out)
}

/// [`anarchon_core::store::HistoryStore::history`]: newest first.
pub async fn history<E: Exec>(
    e: &mut E,
    sql: &Sql,
    job: &JobName,
    count: usize,
) -> Result<Vec<RunRecord>> {
    if count == 0 {
        return Ok(Vec::new());
    }
    let limit = i64::try_from(count).unwrap_or(i64::MAX);
    let rows = e
        .query(&sql.st.history, &[job.as_str().into(), limit.into()])
        .await?;
    rows.iter().map(|r| history_record(sql, r)).collect()
}

/// [`anarchon_core::store::HistoryStore::record_manual`]: keyed by (job, slot, instance).
pub async fn record_manual<E: Exec>(
    e: &mut E,
    sql: &Sql,
    rec: &RunRecord,
    retention: Retention,
) -> Result<()> {
    e.execute("BEGIN IMMEDIATE", &[]).await?;
    let r = async {
        let now = e.now().await?;
        let st = &sql.st;
        let job = rec.job.as_str();
        e.execute(&st.register_job, &[job_key(job).into()]).await?;
        let n = e
            .execute(
                &st.update_manual,
                &[
                    job.into(),
                    rec.slot.into(),
                    rec.instance_id.as_str().into(),
                    rec.scheduled_at.into(),
                    rec.attempt.into(),
                    rec.reason.as_str().into(),
                    rec.status.as_str().into(),
                    rec.fence.into(),
                    rec.started_at.into(),
                    rec.finished_at.into(),
                    rec.error.as_deref().into(),
                ],
            )
            .await?;
        if n == 0 {
            insert_attempt(
                e,
                sql,
                &RunRecord {
                    manual: true,
                    ..rec.clone()
                },
            )
            .await?;
        }
        prune(e, sql, job, retention, now).await?;
        Ok(())
    }
    .await;
    finish_tx(e, r).await
}

/// [`anarchon_core::store::HistoryStore::known_jobs`], sorted.
pub async fn known_jobs<E: Exec>(e: &mut E, sql: &Sql) -> Result<Vec<JobName>> {
    let rows = e.query(&sql.st.known_jobs, &[]).await?;
    let mut jobs = Vec::with_capacity(rows.len());
    for row in &rows {
        let name = text_at(sql, row, 0)?;
        match JobName::new(&name) {
            Ok(j) => jobs.push(j),
            Err(_) => tracing::warn!(
                store = sql.store,
                location = %sql.location,
                name,
                "skipping a job key in the meta table that is not a valid job name"
            ),
        }
    }
    jobs.sort();
    Ok(jobs)
}

/// The check a fenced transaction runs first, inside its own `BEGIN IMMEDIATE` (the caller
/// opened it): `None` when `key`'s attempt owns the run on the store's clock now (status
/// `running`; attempt, owner and fence as in `key`; lease not ended), else why not. Reads
/// only; the write lock the caller holds keeps the answer true until its commit.
pub async fn check_attempt<E: Exec>(
    e: &mut E,
    sql: &Sql,
    key: &AttemptKey,
) -> Result<Option<FenceLoss>> {
    let now = e.now().await?;
    let rows = e
        .query(
            &sql.st.fence_check,
            &[key.run.job.as_str().into(), key.run.slot.into()],
        )
        .await?;
    let Some(row) = rows.first() else {
        return Ok(Some(FenceLoss::Missing));
    };
    let status = status_at(sql, row, 0)?;
    let attempt = int(sql, row, 1)?;
    let owner = opt_text(sql, row, 2)?;
    let fence = int(sql, row, 3)?;
    let expires_at = int(sql, row, 4)?;
    Ok(judge_attempt(
        key,
        status,
        attempt,
        owner.as_deref(),
        fence,
        expires_at,
        now,
    ))
}

/// Why the run row (`status`, `attempt`, `owner`, `fence`, `expires_at`) is not `key`'s
/// attempt holding a live lease at `now`, or `None` when it is. The same rules as
/// [`take_over_many`]: a lease has ended once `expires_at <= now`, a released run has no owner.
pub fn judge_attempt(
    key: &AttemptKey,
    status: RunStatus,
    attempt: i64,
    owner: Option<&str>,
    fence: i64,
    expires_at: EpochMs,
    now: EpochMs,
) -> Option<FenceLoss> {
    if status.is_final() {
        return Some(FenceLoss::Finished(status));
    }
    if attempt != i64::from(key.attempt) || u64::try_from(fence).ok() != Some(key.fence) {
        return Some(FenceLoss::Superseded);
    }
    match owner {
        None => return Some(FenceLoss::Released),
        Some(owner) if owner != key.instance_id => return Some(FenceLoss::Superseded),
        Some(_) => {}
    }
    if expires_at <= now {
        return Some(FenceLoss::LeaseEnded);
    }
    None
}

/// A fenced transaction's own finish, inside the caller's transaction: the run (the history
/// of this attempt, and its history row where one was written) becomes `succeeded` with
/// `finished_at` = the store's now, as
/// [`finish_many`] writes them (without pruning: the job's next claims prune it). Conditional on
/// (job, slot, attempt, owner, fence) and status `running`: when that no longer holds (the
/// handler's own statements changed the run row) nothing is written and the loss found is
/// returned; the caller rolls back.
pub async fn finish_fenced<E: Exec>(
    e: &mut E,
    sql: &Sql,
    key: &AttemptKey,
) -> Result<Option<FenceLoss>> {
    let now = e.now().await?;
    let job = key.run.job.as_str();
    let status = RunStatus::Succeeded.as_str();
    let n = e
        .execute(
            &sql.st.finish_run_fenced,
            &[
                job.into(),
                key.run.slot.into(),
                key.attempt.into(),
                key.instance_id.as_str().into(),
                key.fence.into(),
                status.into(),
                now.into(),
            ],
        )
        .await?;
    if n == 0 {
        // Say why; the lease itself is not judged again (it was at the start).
        let loss = check_attempt(e, sql, key).await?;
        return Ok(Some(match loss {
            None | Some(FenceLoss::LeaseEnded) => FenceLoss::Superseded,
            Some(loss) => loss,
        }));
    }
    e.execute(
        &sql.st.finish_attempt,
        &[
            job.into(),
            key.run.slot.into(),
            key.attempt.into(),
            status.into(),
            now.into(),
            Value::Null,
        ],
    )
    .await?;
    Ok(None)
}

async fn next_fence<E: Exec>(e: &mut E, sql: &Sql, job: &str) -> Result<u64> {
    draw_fence(e, sql, &sql.st.next_fence, job).await
}

/// Draws the job's next fence with `statement` (`next_fence` or `takeover_fence`).
async fn draw_fence<E: Exec>(e: &mut E, sql: &Sql, statement: &str, job: &str) -> Result<u64> {
    let rows = e.query(statement, &[job_key(job).into()]).await?;
    let row = rows
        .first()
        .ok_or_else(|| sql.corrupt("", "the fence counter returned no row"))?;
    let v = int(sql, row, 0)?;
    u64::try_from(v).map_err(|_| {
        sql.corrupt(
            &format!("table {}", sql.tables.meta),
            format!("fence {v} of job {job}"),
        )
    })
}

async fn insert_attempt<E: Exec>(e: &mut E, sql: &Sql, r: &RunRecord) -> Result<()> {
    e.execute(
        &sql.st.insert_attempt,
        &[
            r.job.as_str().into(),
            r.slot.into(),
            r.manual.into(),
            r.attempt.into(),
            r.instance_id.as_str().into(),
            r.scheduled_at.into(),
            r.reason.as_str().into(),
            r.status.as_str().into(),
            r.fence.into(),
            r.started_at.into(),
            r.finished_at.into(),
            r.error.as_deref().into(),
        ],
    )
    .await?;
    Ok(())
}

/// Writes the history row of `run`'s `attempt` held by `owner`, ended as `interrupted` at
/// `now` with `error`, from the run's row, when the run is still that attempt's (running,
/// same attempt and owner); a row written already is ended unless it ended already.
///
/// A run's row is the history of its current attempt ([B-36, B-37]): a won claim and a won
/// takeover write no history row, and a result writes only the run's row. An attempt gets a
/// row of its own only when the run's row moves on while the attempt's record must stay: a
/// release (the row loses its owner) and a takeover (the row becomes the next attempt's).
/// The history reads the rows and the runs whose current attempt has none.
async fn write_attempt<E: Exec>(
    e: &mut E,
    sql: &Sql,
    run: &RunKey,
    attempt: u32,
    owner: &str,
    now: EpochMs,
    error: &str,
) -> Result<()> {
    e.execute(
        &sql.st.write_attempt,
        &[
            run.job.as_str().into(),
            run.slot.into(),
            attempt.into(),
            owner.into(),
            RunStatus::Interrupted.as_str().into(),
            now.into(),
            error.into(),
        ],
    )
    .await?;
    Ok(())
}

/// Ends a running history row of a lease attempt; an ended one stays as it is.
async fn close_attempt<E: Exec>(
    e: &mut E,
    sql: &Sql,
    run: &RunKey,
    attempt: u32,
    status: RunStatus,
    now: EpochMs,
    error: &str,
) -> Result<()> {
    e.execute(
        &sql.st.close_attempt,
        &[
            run.job.as_str().into(),
            run.slot.into(),
            attempt.into(),
            status.as_str().into(),
            now.into(),
            error.into(),
        ],
    )
    .await?;
    Ok(())
}

/// A won claim prunes its job on one fence in `PRUNE_EVERY`, at the job's own phase
/// ([`prunes_at`]: jobs whose fences go in step prune in different seconds). [B-37]
///
/// Won claims and takeovers draw fences from one per-job counter in the meta table (in
/// every process): a claim adds 1, a takeover adds `PRUNE_EVERY` (fences stay strictly
/// increasing; gaps are allowed). The fence modulo `PRUNE_EVERY` thus counts won claims
/// only, and exactly one of any `PRUNE_EVERY` consecutive won claims of a job prunes it,
/// whichever instances won them. A finish prunes by count on one fence in
/// [`finish_prune_period`] (every time for a `size` below 16; one finish in 8 at the
/// default 100, one in 16 from 128), at the same phase, and by age every time a TTL is set.
/// Between prunes, and for runs that never finish (taken over until exhausted, interrupted
/// by the next slot), a job holds at most `size + PRUNE_EVERY - 1` runs (plus older runs
/// still running, which pruning always keeps). No schema change: the counter is the fence counter of version 1.
///
/// Why not every finish: finding the `size`-th newest run walks `size` index entries, so a
/// prune costs O(`size`) whatever it removes; done on one finish in `size / 8` it removes
/// that many runs at once, so its cost per run removed is a constant (about 9 index
/// entries walked), and the runs it removes share their index pages.
pub const PRUNE_EVERY: u64 = anarchon_core::history::MAX_PRUNE_PERIOD;

fn prune_due(job: &str, fence: u64) -> bool {
    prunes_at(job, fence, PRUNE_EVERY)
}

/// How often a finish prunes a job kept to `size` runs by count (the rule of every store; it
/// divides `PRUNE_EVERY`, so a takeover's fence leaves the fence modulo the period alone).
pub use anarchon_core::history::finish_prune_period;

/// Whether the finish of `job`'s run with `fence` prunes the job (kept to `size` runs) by
/// count: one fence in [`finish_prune_period`], at the job's phase ([`prunes_at`]).
///
/// ```
/// use anarchon_sqlite::sql::ops::finish_prunes;
/// // At the default 100 runs, one finish in 8 prunes ...
/// assert_eq!((1..=8).filter(|&fence| finish_prunes("report", fence, 100)).count(), 1);
/// // ... and below 16 runs every finish does.
/// assert!((1..=8).all(|fence| finish_prunes("report", fence, 10)));
/// ```
pub fn finish_prunes(job: &str, fence: u64, size: u32) -> bool {
    prunes_at(job, fence, finish_prune_period(size))
}

/// The most history rows one pass of the age cut looks at (the oldest of the job): a pass
/// that removed them all looks again, up to `TTL_PASSES` passes per prune.
pub const TTL_PAGE: i64 = 16;

/// The most passes of the age cut in one prune; rows left go at the job's next prune.
const TTL_PASSES: usize = 64;

/// [B-37] Prunes the job to its retention: by count of runs, and by age of finish.
async fn prune<E: Exec>(
    e: &mut E,
    sql: &Sql,
    job: &str,
    retention: Retention,
    now: EpochMs,
) -> Result<()> {
    prune_some(e, sql, job, retention, now, true).await
}

/// [B-37] Prunes the job by age (when `retention` has a TTL) and, when `by_count`, by count.
///
/// By count: the cut is the `size`-th newest run (one walk of `size` keys); the history rows
/// and the runs that ended below it go in two range deletes. By age: the history rows among
/// the job's oldest that finished before the cut go, [`TTL_PAGE`] rows a pass, and so do the
/// runs among the job's oldest whose row holds their history and that finished before it,
/// so a prune looks at what it removes plus one page, never at the whole history; a row that
/// finished before the cut behind a newer slot's row that did not is removed once the older
/// rows ahead of it went (runs end roughly in slot order, so that is at once in practice;
/// the count bounds the rest).
async fn prune_some<E: Exec>(
    e: &mut E,
    sql: &Sql,
    job: &str,
    retention: Retention,
    now: EpochMs,
    by_count: bool,
) -> Result<()> {
    let size = i64::from(retention.size.max(1));
    if by_count {
        let cut = e
            .query(&sql.st.prune_cut, &[job.into(), size.into()])
            .await?;
        if let Some(row) = cut.first() {
            let params = [
                job.into(),
                int(sql, row, 0)?.into(),
                int(sql, row, 1)?.into(),
            ];
            e.query(&sql.st.prune_by_count, &params).await?;
            e.execute(&sql.st.prune_runs_by_count, &params).await?;
        }
    }
    let Some(ttl) = retention.ttl_ms else {
        return Ok(());
    };
    let cut = now.saturating_sub(ms(ttl));
    let mut gone = Vec::new();
    for _ in 0..TTL_PASSES {
        let rows = e
            .query(
                &sql.st.prune_by_age,
                &[job.into(), cut.into(), TTL_PAGE.into()],
            )
            .await?;
        let n = rows.len();
        gone.extend(rows);
        if i64::try_from(n).unwrap_or(i64::MAX) < TTL_PAGE {
            break;
        }
    }
    // The scheduled slots whose history rows went: their runs go in one range delete.
    let mut range: Option<(i64, i64)> = None;
    for row in &gone {
        if int(sql, row, 1)? == 0 {
            let slot = int(sql, row, 0)?;
            range = Some(range.map_or((slot, slot), |(lo, hi)| (lo.min(slot), hi.max(slot))));
        }
    }
    if let Some((first, last)) = range {
        e.execute(
            &sql.st.prune_runs,
            &[job.into(), first.into(), last.into(), cut.into()],
        )
        .await?;
    }
    // The runs whose row is their history.
    for _ in 0..TTL_PASSES {
        let n = e
            .query(
                &sql.st.prune_runs_by_age,
                &[job.into(), cut.into(), TTL_PAGE.into()],
            )
            .await?
            .len();
        if i64::try_from(n).unwrap_or(i64::MAX) < TTL_PAGE {
            break;
        }
    }
    Ok(())
}

fn ms(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

// ---------------------------------------------------------------------------------------
// Row mapping
// ---------------------------------------------------------------------------------------

fn cell<'r>(sql: &Sql, row: &'r Row, i: usize) -> Result<&'r Value> {
    row.get(i)
        .ok_or_else(|| sql.corrupt("", format!("a result row has no column {i}")))
}

fn int(sql: &Sql, row: &Row, i: usize) -> Result<i64> {
    match cell(sql, row, i)? {
        Value::Integer(v) => Ok(*v),
        other => Err(sql.corrupt(
            "",
            format!("column {i} holds {other:?} where an integer belongs"),
        )),
    }
}

fn opt_int(sql: &Sql, row: &Row, i: usize) -> Result<Option<i64>> {
    match cell(sql, row, i)? {
        Value::Null => Ok(None),
        _ => int(sql, row, i).map(Some),
    }
}

fn text_at(sql: &Sql, row: &Row, i: usize) -> Result<String> {
    match cell(sql, row, i)? {
        Value::Text(s) => Ok(s.clone()),
        other => Err(sql.corrupt("", format!("column {i} holds {other:?} where text belongs"))),
    }
}

fn opt_text(sql: &Sql, row: &Row, i: usize) -> Result<Option<String>> {
    match cell(sql, row, i)? {
        Value::Null => Ok(None),
        _ => text_at(sql, row, i).map(Some),
    }
}

fn status_at(sql: &Sql, row: &Row, i: usize) -> Result<RunStatus> {
    let s = text_at(sql, row, i)?;
    RunStatus::parse(&s).ok_or_else(|| sql.corrupt("", format!("unknown status {s:?}")))
}

fn u32_at(sql: &Sql, row: &Row, i: usize) -> Result<u32> {
    let v = int(sql, row, i)?;
    u32::try_from(v).map_err(|_| sql.corrupt("", format!("column {i} holds {v}, out of range")))
}

fn job_at(sql: &Sql, row: &Row, i: usize) -> Result<JobName> {
    let s = text_at(sql, row, i)?;
    JobName::new(&s).map_err(|_| sql.corrupt("", format!("invalid job name {s:?}")))
}

/// Maps `job, slot, status, attempt, owner, expires_at`.
fn run_view(sql: &Sql, row: &Row, now: EpochMs) -> Result<RunView> {
    Ok(RunView {
        run: RunKey::new(job_at(sql, row, 0)?, int(sql, row, 1)?),
        status: status_at(sql, row, 2)?,
        attempt: u32_at(sql, row, 3)?,
        owner: opt_text(sql, row, 4)?,
        expires_at: int(sql, row, 5)?,
        store_now: now,
    })
}

/// Maps the history columns (see `ATTEMPT_COLUMNS`).
fn history_record(sql: &Sql, row: &Row) -> Result<RunRecord> {
    let reason = text_at(sql, row, 6)?;
    let fence = int(sql, row, 8)?;
    Ok(RunRecord {
        job: job_at(sql, row, 0)?,
        slot: int(sql, row, 1)?,
        scheduled_at: int(sql, row, 2)?,
        instance_id: text_at(sql, row, 3)?,
        manual: int(sql, row, 4)? != 0,
        attempt: u32_at(sql, row, 5)?,
        reason: Reason::parse(&reason)
            .ok_or_else(|| sql.corrupt("", format!("unknown reason {reason:?}")))?,
        status: status_at(sql, row, 7)?,
        fence: u64::try_from(fence).map_err(|_| sql.corrupt("", format!("fence {fence}")))?,
        started_at: int(sql, row, 9)?,
        finished_at: opt_int(sql, row, 10)?,
        error: opt_text(sql, row, 11)?,
    })
}
