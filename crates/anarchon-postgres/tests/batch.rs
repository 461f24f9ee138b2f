//! Claim and result batches on PostgreSQL: one round trip per batch, answers that stand when
//! a claim batch reached its deadline, concurrent batches over the same jobs in different
//! orders, results fenced like single finishes, and heartbeats, result batches and takeover
//! batches that lock run rows in one order.

mod common;

use std::sync::Arc;
use std::time::Duration;

use anarchon_core::store::{
    ClaimOutcome, EpochMs, Finish, HistoryStore, JobName, Lease, LeaseClaim, LeaseStore, Overlap,
    OwnerWrite, Prepare, Reason, Retention, RunStatus, Store, Takeover, TakeoverOutcome,
};
use anarchon_core::testkit::{key, unique_job};
use anarchon_postgres::{PostgresOptions, PostgresStore};

fn claim(job: &JobName, slot: EpochMs, instance: &str, not_after: EpochMs) -> LeaseClaim {
    LeaseClaim {
        run: key(job, slot),
        scheduled_at: slot,
        instance_id: instance.into(),
        lease_ms: 30_000,
        not_after,
        overlap: Overlap::Skip,
        reason: Reason::Scheduled,
        retention: Retention::default(),
    }
}

/// A prepared store on a fresh schema with `pool` connections.
async fn store(url: &str, schema: &str, pool: usize, jobs: &[JobName]) -> PostgresStore {
    store_with(
        url,
        PostgresOptions::default().schema(schema).pool_size(pool),
        jobs,
    )
    .await
}

/// A prepared store with `options`.
async fn store_with(url: &str, options: PostgresOptions, jobs: &[JobName]) -> PostgresStore {
    let store = PostgresStore::connect_with(url, options)
        .await
        .expect("connect");
    store
        .prepare(&Prepare {
            jobs: jobs.to_vec(),
            instance_id: "batch".into(),
            call_timeout: Duration::from_secs(5),
        })
        .await
        .expect("prepare");
    store
}

#[tokio::test]
async fn a_batch_of_claims_is_one_round_trip_and_single_claims_are_one_each() {
    let Some(url) = common::url() else { return };
    common::drop_old_schemas(&url).await;
    let schema = common::fresh_schema();
    let jobs: Vec<JobName> = (0..203).map(|_| unique_job("rt")).collect();
    // One connection, so the statements prepared by the warm-up are cached for the rest.
    let s = store(&url, &schema, 1, &jobs).await;
    let t = s.now().await.unwrap();
    // Warm-up: prepares the batch's statements on the connection.
    let warm: Vec<LeaseClaim> = jobs[..3]
        .iter()
        .map(|j| claim(j, t, "a", t + 60_000))
        .collect();
    s.claim_many(&warm).await.unwrap();
    let batch: Vec<LeaseClaim> = jobs[3..103]
        .iter()
        .map(|j| claim(j, t, "a", t + 60_000))
        .collect();
    let before = s.round_trips();
    let out = s.claim_many(&batch).await.unwrap();
    let batch_trips = s.round_trips() - before;
    assert!(
        out.iter().all(|o| matches!(o, ClaimOutcome::Won(_))),
        "{out:?}"
    );
    assert_eq!(batch_trips, 1, "100 claims in one batch");
    s.claim(&claim(&jobs[103], t, "a", t + 60_000))
        .await
        .unwrap();
    let before = s.round_trips();
    for j in &jobs[104..] {
        s.claim(&claim(j, t, "a", t + 60_000)).await.unwrap();
    }
    assert_eq!(s.round_trips() - before, 99, "99 single claims");
    s.close().await.unwrap();
    common::drop_schema(&url, &schema).await;
}

#[tokio::test]
async fn a_batch_past_its_deadline_that_won_nothing_keeps_its_answers() {
    let Some(url) = common::url() else { return };
    let schema = common::fresh_schema();
    let (j1, j2) = (unique_job("dl"), unique_job("dl"));
    let s = store(&url, &schema, 2, &[j1.clone(), j2.clone()]).await;
    let t = s.now().await.unwrap();
    // Both late: the guard before COMMIT finds the clock past the batch's deadline, the
    // transaction rolls back, and the answers (nothing won) are still the right ones.
    let out = s
        .claim_many(&[claim(&j1, t, "a", t - 1_000), claim(&j2, t, "a", t - 2_000)])
        .await
        .unwrap();
    assert!(
        out.iter().all(|o| matches!(o, ClaimOutcome::Late { .. })),
        "{out:?}"
    );
    assert!(s.history(&j1, 10).await.unwrap().is_empty());
    s.close().await.unwrap();
    common::drop_schema(&url, &schema).await;
}

#[tokio::test]
async fn concurrent_batches_over_the_same_jobs_in_other_orders_win_each_slot_once() {
    race_three_batches(false).await;
}

/// Batches that are twins (the same jobs in the same order at the same moment, as when the
/// instances' orders of claims coincide) wait for each other's job locks; one wins each
/// slot, the others find its run.
#[tokio::test]
async fn b11_concurrent_twin_batches_in_one_order_win_each_slot_once() {
    race_three_batches(true).await;
}

/// Three stores on one schema each claim the same 150 slots in one concurrent batch, in
/// one order (`same_order`) or in three different ones: every slot is won exactly once.
async fn race_three_batches(same_order: bool) {
    let Some(url) = common::url() else { return };
    let schema = common::fresh_schema();
    let jobs: Vec<JobName> = (0..150).map(|_| unique_job("cc")).collect();
    let first = store(&url, &schema, 2, &jobs).await;
    let t = first.now().await.unwrap();
    let mut stores: Vec<Arc<PostgresStore>> = vec![Arc::new(first)];
    for _ in 0..2 {
        stores.push(Arc::new(store(&url, &schema, 2, &jobs).await));
    }
    let mut tasks = Vec::new();
    for (n, s) in stores.iter().enumerate() {
        let mut mine: Vec<LeaseClaim> = jobs
            .iter()
            .map(|j| claim(j, t, &format!("i{n}"), t + 60_000))
            .collect();
        if !same_order {
            // Each instance sends the jobs in another order.
            mine.rotate_left(n * 50);
            if n == 1 {
                mine.reverse();
            }
        }
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let out = s.claim_many(&mine).await.expect("batch");
            (mine, out)
        }));
    }
    let mut winners = std::collections::HashMap::new();
    for task in tasks {
        let (claims, out) = task.await.unwrap();
        assert_eq!(claims.len(), out.len());
        for (c, o) in claims.iter().zip(out) {
            match o {
                ClaimOutcome::Won(l) => {
                    assert_eq!(l.run, c.run);
                    assert!(
                        winners
                            .insert(c.run.clone(), c.instance_id.clone())
                            .is_none(),
                        "{} won twice",
                        c.run
                    );
                }
                ClaimOutcome::Taken => {}
                other => panic!("{}: {other:?}", c.run),
            }
        }
    }
    assert_eq!(winners.len(), jobs.len(), "every slot won once");
    for s in &stores {
        s.close().await.unwrap();
    }
    common::drop_schema(&url, &schema).await;
}

/// A batch whose claim waits on another transaction's uncommitted insert of its run past
/// the batch's deadline stops waiting there (the batch's `lock_timeout`) and answers every
/// claim `late`, nothing written, without waiting for that transaction: the run of the
/// batch's first job is inserted and held by another transaction for 1.2 s, the deadline
/// is 400 ms away. (Before the lock timeout the claim waited, won when the insert rolled
/// back, and the guard before `COMMIT` rolled the batch back as a timeout; the guard is
/// left for a batch whose own work outlasts its deadline.)
#[tokio::test]
async fn a_batch_waiting_on_another_insert_past_its_deadline_is_late_and_writes_nothing() {
    let Some(url) = common::url() else { return };
    let schema = common::fresh_schema();
    // Sorted by job, `ga-...` runs before `gz-...`.
    let (first, last) = (unique_job("ga"), unique_job("gz"));
    let s = store(&url, &schema, 2, &[first.clone(), last.clone()]).await;
    let t = s.now().await.unwrap();
    let (client, conn_task) = common::connect(&url).await;
    client.batch_execute("BEGIN").await.unwrap();
    client
        .execute(
            &format!(
                "INSERT INTO \"{schema}\".anarchon_runs (job, slot, status, attempt, \
                 counted_starts, owner, expires_at, scheduled_at, started_at) \
                 VALUES ($1, $2, 'running', 1, 1, 'other', $2, $2, $2)"
            ),
            &[&first.as_str(), &t],
        )
        .await
        .unwrap();
    let deadline = s.now().await.unwrap() + 400;
    let batch = vec![
        claim(&last, t, "a", deadline),
        claim(&first, t, "a", deadline),
    ];
    let started = std::time::Instant::now();
    let claims = tokio::spawn({
        let s = s.clone();
        async move {
            let result = s.claim_many(&batch).await;
            (result, started.elapsed())
        }
    });
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    client.batch_execute("ROLLBACK").await.unwrap();
    let (result, answered_after) = claims.await.unwrap();
    let outcomes = result.unwrap();
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, ClaimOutcome::Late { store_now } if *store_now > deadline)),
        "{outcomes:?}"
    );
    assert!(
        answered_after < Duration::from_millis(1_100),
        "answered after {answered_after:?}, not at the deadline"
    );
    for job in [&first, &last] {
        assert!(s.history(job, 10).await.unwrap().is_empty(), "{job}");
    }
    drop(client);
    let _ = conn_task.await;
    s.close().await.unwrap();
    common::drop_schema(&url, &schema).await;
}

fn result(n: usize) -> Finish {
    if n.is_multiple_of(2) {
        Finish {
            status: RunStatus::Succeeded,
            error: None,
            retention: Retention::default(),
        }
    } else {
        Finish {
            status: RunStatus::Failed,
            error: Some(format!("boom {n}")),
            retention: Retention::default(),
        }
    }
}

/// Claims one slot of every job in one batch and answers the leases, all won.
async fn leases(s: &PostgresStore, jobs: &[JobName], t: EpochMs) -> Vec<Lease> {
    let claims: Vec<LeaseClaim> = jobs.iter().map(|j| claim(j, t, "a", t + 60_000)).collect();
    anarchon_core::testkit::lease::won_all(s, &claims).await
}

#[tokio::test]
async fn b16_a_batch_of_results_is_one_round_trip_and_fenced_like_single_finishes() {
    let Some(url) = common::url() else { return };
    let schema = common::fresh_schema();
    let jobs: Vec<JobName> = (0..204).map(|_| unique_job("fin")).collect();
    let s = store(&url, &schema, 1, &jobs).await;
    let t = s.now().await.unwrap();
    let held = leases(&s, &jobs, t).await;
    // Warm-up: prepares the batch's statements on the (only) connection.
    let warm: Vec<(Lease, Finish)> = held[..3].iter().map(|l| (l.clone(), result(0))).collect();
    assert_eq!(
        s.finish_many(&warm).await.unwrap(),
        vec![OwnerWrite::Done; 3]
    );
    // 100 results, every tenth from a stale owner (another instance, or an old attempt).
    let batch: Vec<(Lease, Finish)> = held[3..103]
        .iter()
        .enumerate()
        .map(|(n, l)| {
            let mut l = l.clone();
            if n % 10 == 3 {
                l.instance_id = "not-the-owner".into();
            } else if n % 10 == 7 {
                l.attempt += 1;
            }
            (l, result(n))
        })
        .collect();
    let before = s.round_trips();
    let out = s.finish_many(&batch).await.unwrap();
    assert_eq!(s.round_trips() - before, 1, "100 results in one batch");
    for (n, ((lease, finish), answer)) in batch.iter().zip(&out).enumerate() {
        let history = s.history(&lease.run.job, 10).await.unwrap();
        assert_eq!(history.len(), 1, "{}", lease.run);
        if n % 10 == 3 || n % 10 == 7 {
            assert_eq!(*answer, OwnerWrite::Lost, "{}", lease.run);
            assert_eq!(history[0].status, RunStatus::Running, "nothing written");
            assert_eq!(history[0].finished_at, None);
        } else {
            assert_eq!(*answer, OwnerWrite::Done, "{}", lease.run);
            assert_eq!(history[0].status, finish.status);
            assert_eq!(history[0].error, finish.error);
            assert!(history[0].finished_at.is_some());
        }
    }
    // The same results again: every run is final now, so all are lost.
    assert_eq!(
        s.finish_many(&batch).await.unwrap(),
        vec![OwnerWrite::Lost; batch.len()]
    );
    // The first single finish prepares the single finish's statement.
    s.finish(&held[103], &result(0)).await.unwrap();
    let before = s.round_trips();
    for l in &held[104..] {
        s.finish(l, &result(0)).await.unwrap();
    }
    assert_eq!(s.round_trips() - before, 100, "100 single finishes");
    s.close().await.unwrap();
    common::drop_schema(&url, &schema).await;
}

#[tokio::test]
async fn b37_a_batch_of_results_of_one_job_prunes_to_its_retention() {
    let Some(url) = common::url() else { return };
    let schema = common::fresh_schema();
    let job = unique_job("prune");
    let s = store(&url, &schema, 1, std::slice::from_ref(&job)).await;
    let t = s.now().await.unwrap();
    // Five overlapping runs of one job.
    let mut held = Vec::new();
    for slot in 0..5 {
        let mut c = claim(&job, t + slot * 1_000, "a", t + 60_000);
        c.overlap = Overlap::Allow;
        let ClaimOutcome::Won(l) = s.claim(&c).await.unwrap() else {
            panic!("claim {slot}")
        };
        held.push(l);
    }
    let keep_two = Finish {
        status: RunStatus::Succeeded,
        error: None,
        retention: Retention {
            size: 2,
            ttl_ms: None,
        },
    };
    let batch: Vec<(Lease, Finish)> = held.iter().map(|l| (l.clone(), keep_two.clone())).collect();
    let out = s.finish_many(&batch).await.unwrap();
    assert_eq!(out, vec![OwnerWrite::Done; 5]);
    s.pruning_settled().await;
    // Each result pruned as a single finish does: the two newest runs are left.
    let history = s.history(&job, 10).await.unwrap();
    let slots: Vec<EpochMs> = history.iter().map(|r| r.slot).collect();
    assert_eq!(slots, vec![t + 4_000, t + 3_000], "{history:?}");
    assert!(history.iter().all(|r| r.status == RunStatus::Succeeded));
    s.close().await.unwrap();
    common::drop_schema(&url, &schema).await;
}

#[tokio::test]
async fn concurrent_result_batches_over_the_same_jobs_in_other_orders_finish_each_run_once() {
    let Some(url) = common::url() else { return };
    let schema = common::fresh_schema();
    let jobs: Vec<JobName> = (0..150).map(|_| unique_job("fc")).collect();
    let first = store(&url, &schema, 2, &jobs).await;
    let t = first.now().await.unwrap();
    let held = leases(&first, &jobs, t).await;
    let mut stores: Vec<Arc<PostgresStore>> = vec![Arc::new(first)];
    for _ in 0..2 {
        stores.push(Arc::new(store(&url, &schema, 2, &jobs).await));
    }
    let mut tasks = Vec::new();
    for (n, s) in stores.iter().enumerate() {
        // Every store sends every result (as the owner), each in another order: the first
        // result of a run to commit is done, the others find the run final.
        let mut mine: Vec<(Lease, Finish)> = held.iter().map(|l| (l.clone(), result(n))).collect();
        mine.rotate_left(n * 50);
        if n == 1 {
            mine.reverse();
        }
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let out = s.finish_many(&mine).await.expect("batch");
            (mine, out)
        }));
    }
    let mut done = std::collections::HashSet::new();
    for task in tasks {
        let (writes, out) = task.await.unwrap();
        assert_eq!(writes.len(), out.len());
        for ((l, _), o) in writes.iter().zip(out) {
            if o == OwnerWrite::Done {
                assert!(done.insert(l.run.clone()), "{} finished twice", l.run);
            }
        }
    }
    assert_eq!(done.len(), jobs.len(), "every run finished once");
    for s in &stores {
        s.close().await.unwrap();
    }
    common::drop_schema(&url, &schema).await;
}

/// Sleeps until `after` past the next multiple of `window` on the wall clock.
async fn sleep_past_window_end(window: Duration, after: Duration) {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let into = since.as_nanos() % window.as_nanos();
    let left = Duration::from_nanos(u64::try_from(window.as_nanos() - into).unwrap());
    tokio::time::sleep(left + after).await;
}

/// [B-37] The jobs that batches find due to prune wait for the end of the store's prune
/// window (the next multiple of it on the wall clock, the same moment on every instance)
/// and are then pruned together, in one statement, with no call waiting for it; a caller
/// that waits for pruning to settle (tests) ends the wait.
#[tokio::test]
async fn b37_due_jobs_wait_for_the_prune_window_and_are_pruned_together() {
    let Some(url) = common::url() else { return };
    let schema = common::fresh_schema();
    let jobs: Vec<JobName> = (0..2).map(|_| unique_job("window")).collect();
    let window = Duration::from_secs(4);
    let options = |window| {
        PostgresOptions::default()
            .schema(&schema)
            .pool_size(2)
            .prune_window(window)
    };
    let s = store_with(&url, options(window), &jobs).await;
    let keep_two = Retention {
        size: 2,
        ttl_ms: None,
    };
    let result = Finish {
        status: RunStatus::Succeeded,
        error: None,
        retention: keep_two,
    };
    // Five runs of each job, claimed and finished in batches, from just after a window's
    // end: every result after the second finds its job due.
    let five_each = |s: &PostgresStore, t: EpochMs| {
        let claims: Vec<LeaseClaim> = jobs
            .iter()
            .flat_map(|job| {
                (0..5).map(move |slot| LeaseClaim {
                    retention: keep_two,
                    overlap: Overlap::Allow,
                    ..claim(job, t + slot * 1_000, "a", t + 60_000)
                })
            })
            .collect();
        let s = s.clone();
        let result = result.clone();
        async move {
            let held: Vec<Lease> = s
                .claim_many(&claims)
                .await
                .unwrap()
                .into_iter()
                .map(|o| match o {
                    ClaimOutcome::Won(l) => l,
                    other => panic!("{other:?}"),
                })
                .collect();
            let batch: Vec<(Lease, Finish)> =
                held.iter().map(|l| (l.clone(), result.clone())).collect();
            assert_eq!(
                s.finish_many(&batch).await.unwrap(),
                vec![OwnerWrite::Done; 10]
            );
        }
    };
    sleep_past_window_end(window, Duration::from_millis(50)).await;
    let t = s.now().await.unwrap();
    five_each(&s, t).await;
    let prunes = s.prunes();
    tokio::time::sleep(window / 4).await;
    for job in &jobs {
        assert_eq!(
            s.history(job, 10).await.unwrap().len(),
            5,
            "pruned before the window ended"
        );
    }
    assert_eq!(s.prunes(), prunes, "a prune before the window ended");
    // The window ends: both jobs are pruned to their two newest runs, in one statement.
    sleep_past_window_end(window, Duration::from_millis(1_500)).await;
    for job in &jobs {
        let slots: Vec<EpochMs> = s
            .history(job, 10)
            .await
            .unwrap()
            .iter()
            .map(|r| r.slot)
            .collect();
        assert_eq!(slots, vec![t + 4_000, t + 3_000], "{job}");
    }
    assert_eq!(s.prunes() - prunes, 1, "both jobs in one statement");
    s.close().await.unwrap();
    // The longest window: waiting for pruning to settle ends it.
    let long = store_with(&url, options(anarchon_postgres::MAX_PRUNE_WINDOW), &jobs).await;
    let t = long.now().await.unwrap() + 10_000;
    five_each(&long, t).await;
    tokio::time::timeout(Duration::from_secs(5), long.pruning_settled())
        .await
        .expect("pruning_settled waited for the window");
    for job in &jobs {
        assert_eq!(long.history(job, 10).await.unwrap().len(), 2, "{job}");
    }
    long.close().await.unwrap();
    common::drop_schema(&url, &schema).await;
}

/// [B-37] Claims and results due to prune do not prune in their batch, which holds their
/// jobs' locks: the store prunes their jobs after the batch committed, in the background,
/// in a statement of its own that takes no job lock. Here another transaction holds every
/// history row of the job (as a slow prune of another instance would): a claim due to
/// prune still wins at once, a result due to prune is done at once, and while their prunes
/// wait for those rows the job's next claim wins. (Pruning in the batch, the claims were
/// late, each waiting for a lock until its deadline, and the result waited with them.)
/// Once the rows are free the prunes are done and the job is back within its retention.
#[tokio::test(flavor = "multi_thread")]
async fn b37_claims_and_results_prune_after_their_batch_without_its_job_locks() {
    let Some(url) = common::url() else { return };
    let schema = common::fresh_schema();
    let job = unique_job("after");
    // Pruned as soon as found due: the test waits for the prunes to begin.
    let at_once = |pool| {
        PostgresOptions::default()
            .schema(&schema)
            .pool_size(pool)
            .prune_window(Duration::ZERO)
    };
    let s = store_with(&url, at_once(4), std::slice::from_ref(&job)).await;
    let keep = Retention {
        size: 2,
        ttl_ms: None,
    };
    let t = s.now().await.unwrap();
    let at = |slot: i64, not_after: EpochMs| LeaseClaim {
        retention: keep,
        overlap: Overlap::Allow,
        ..claim(&job, t + slot * 1_000, "a", not_after)
    };
    let done = |retention| Finish {
        status: RunStatus::Succeeded,
        error: None,
        retention,
    };
    for slot in 0..4 {
        let ClaimOutcome::Won(l) = s.claim(&at(slot, t + 60_000)).await.unwrap() else {
            panic!("claim {slot}")
        };
        assert_eq!(s.finish(&l, &done(keep)).await.unwrap(), OwnerWrite::Done);
    }
    s.pruning_settled().await;
    let slots = |h: Vec<anarchon_core::store::RunRecord>| -> Vec<i64> {
        h.iter().map(|r| (r.slot - t) / 1_000).collect()
    };
    assert_eq!(slots(s.history(&job, 10).await.unwrap()), vec![3, 2]);
    let rows = common::RowLocks::history(&url, &schema, &[job.as_str()]).await;
    // A claim due to prune: a store that has not seen the job's count yet sends it so.
    let fresh = store_with(&url, at_once(2), std::slice::from_ref(&job)).await;
    let now = fresh.now().await.unwrap();
    let statements = fresh.statements();
    let ClaimOutcome::Won(fourth) = fresh.claim(&at(4, now + 2_000)).await.unwrap() else {
        panic!("a claim due to prune waited for the rows its prune deletes")
    };
    assert_eq!(fresh.statements() - statements, 1, "no prune in the batch");
    // A result due to prune (a TTL is set): done at once; its prune waits for the rows,
    // not the job.
    let with_ttl = Retention {
        ttl_ms: Some(3_600_000),
        ..keep
    };
    let finished = tokio::time::timeout(Duration::from_secs(2), s.finish(&fourth, &done(with_ttl)))
        .await
        .expect("a result due to prune waited for the rows its prune deletes");
    assert_eq!(finished.unwrap(), OwnerWrite::Done);
    // Both prunes (the claim's, the result's) run in the background: the next claim goes
    // out once both have begun and wait for the rows, as the history checked below says.
    rows.wait_for_waiters(2).await;
    let now = s.now().await.unwrap();
    let next = s.claim(&at(5, now + 2_000)).await.unwrap();
    assert!(
        matches!(next, ClaimOutcome::Won(_)),
        "the job's next claim waited for the result's prune: {next:?}"
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(300), s.pruning_settled())
            .await
            .is_err(),
        "the result's prune waits for the rows"
    );
    rows.release().await;
    s.pruning_settled().await;
    fresh.pruning_settled().await;
    assert!(fresh.prunes() >= 1, "the claim's job was pruned after it");
    // The prunes of one job take turns (each locks the job's remembered cut first): the
    // first read the job before the run of slot 5 existed and removed slot 2; the second
    // read it after the first committed, slot 5 there, and removed slot 3.
    assert_eq!(slots(s.history(&job, 10).await.unwrap()), vec![5, 4]);
    fresh.close().await.unwrap();
    s.close().await.unwrap();
    common::drop_schema(&url, &schema).await;
}

/// A batch of claims is one set-based statement (and one round trip), whatever its size;
/// a batch that holds two slots of each job (catch-up) is one statement per round, still
/// one round trip, and judges each job's second slot after its first.
#[tokio::test]
async fn b11_a_batch_of_claims_is_one_statement_and_catch_up_one_per_round() {
    let Some(url) = common::url() else { return };
    let schema = common::fresh_schema();
    let jobs: Vec<JobName> = (0..152).map(|_| unique_job("st")).collect();
    let s = store(&url, &schema, 1, &jobs).await;
    let t = s.now().await.unwrap();
    // Warm-up: prepares the batch's statements on the (only) connection.
    s.claim_many(&[
        claim(&jobs[150], t, "a", t + 60_000),
        claim(&jobs[151], t, "a", t + 60_000),
    ])
    .await
    .unwrap();
    let batch: Vec<LeaseClaim> = jobs[1..101]
        .iter()
        .map(|j| claim(j, t, "a", t + 60_000))
        .collect();
    let (statements, trips) = (s.statements(), s.round_trips());
    let out = s.claim_many(&batch).await.unwrap();
    assert_eq!(
        s.statements() - statements,
        1,
        "100 claims in one statement"
    );
    assert_eq!(s.round_trips() - trips, 1, "100 claims in one round trip");
    assert!(
        out.iter().all(|o| matches!(o, ClaimOutcome::Won(_))),
        "{out:?}"
    );
    // Catch-up: two slots of each of 49 jobs, the later slot first for half of them. With
    // overlap skip the earlier slot of a job wins and the later one finds it live, exactly
    // as two single claims in the order given would; with overlap allow both win, the
    // second with the next fence.
    let mut batch = Vec::new();
    for (n, j) in jobs[101..150].iter().enumerate() {
        let (first, second) = (
            claim(j, t, "a", t + 60_000),
            claim(j, t + 1_000, "a", t + 60_000),
        );
        let (mut first, mut second) = if n % 2 == 0 {
            (first, second)
        } else {
            (second, first)
        };
        if n % 3 == 0 {
            first.overlap = Overlap::Allow;
            second.overlap = Overlap::Allow;
        }
        batch.push(first);
        batch.push(second);
    }
    let (statements, trips) = (s.statements(), s.round_trips());
    let out = s.claim_many(&batch).await.unwrap();
    assert_eq!(s.statements() - statements, 2, "two rounds");
    assert_eq!(s.round_trips() - trips, 1, "one round trip");
    for (n, pair) in out.chunks(2).enumerate() {
        let (first, second) = (&batch[2 * n], &batch[2 * n + 1]);
        let ClaimOutcome::Won(won) = &pair[0] else {
            panic!("{}: {:?}", first.run, pair[0])
        };
        match (&pair[1], second.overlap, n % 2 == 0) {
            (ClaimOutcome::Won(next), Overlap::Allow, _) => {
                assert_eq!(next.fence, won.fence + 1, "{}", second.run);
            }
            // The later slot waits for the earlier one's live lease.
            (ClaimOutcome::Overlap { running_slot }, Overlap::Skip, true) => {
                assert_eq!(*running_slot, first.run.slot);
            }
            // The earlier slot, claimed after the later one: no earlier run holds a lease.
            (ClaimOutcome::Won(_), Overlap::Skip, false) => {}
            other => panic!("{}: {other:?}", second.run),
        }
    }
    s.close().await.unwrap();
    common::drop_schema(&url, &schema).await;
}

/// Three instances send `claim_many` over the same 500 slots (250 jobs, two slots each,
/// overlap allowed) at once, each in another order: every slot is won exactly once, each
/// job's two runs get distinct fences, and no batch deadlocks or runs again (the job locks
/// queue them).
#[tokio::test]
async fn b11_three_concurrent_batches_over_500_slots_win_each_slot_exactly_once() {
    let Some(url) = common::url() else { return };
    let schema = common::fresh_schema();
    let jobs: Vec<JobName> = (0..250).map(|_| unique_job("c3")).collect();
    let first = store(&url, &schema, 2, &jobs).await;
    let t = first.now().await.unwrap();
    let mut stores: Vec<Arc<PostgresStore>> = vec![Arc::new(first)];
    for _ in 0..2 {
        stores.push(Arc::new(store(&url, &schema, 2, &jobs).await));
    }
    let slots: Vec<(JobName, EpochMs)> = jobs
        .iter()
        .flat_map(|j| [(j.clone(), t), (j.clone(), t + 1_000)])
        .collect();
    let start = Arc::new(tokio::sync::Barrier::new(stores.len()));
    let mut tasks = Vec::new();
    for (n, s) in stores.iter().enumerate() {
        let mut mine: Vec<LeaseClaim> = slots
            .iter()
            .map(|(j, slot)| {
                let mut c = claim(j, *slot, &format!("i{n}"), t + 60_000);
                c.overlap = Overlap::Allow;
                c
            })
            .collect();
        mine.rotate_left(n * 170);
        if n == 1 {
            mine.reverse();
        }
        let (s, start) = (s.clone(), start.clone());
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let out = s.claim_many(&mine).await.expect("batch");
            (mine, out)
        }));
    }
    let mut winners = std::collections::HashMap::new();
    let mut fences = std::collections::HashSet::new();
    for task in tasks {
        let (claims, out) = task.await.unwrap();
        assert_eq!(claims.len(), out.len());
        for (c, o) in claims.iter().zip(out) {
            match o {
                ClaimOutcome::Won(l) => {
                    assert_eq!(l.run, c.run);
                    assert!(
                        winners
                            .insert(c.run.clone(), c.instance_id.clone())
                            .is_none(),
                        "{} won twice",
                        c.run
                    );
                    assert!(
                        fences.insert((l.run.job.clone(), l.fence)),
                        "{}: fence {} given twice",
                        l.run,
                        l.fence
                    );
                }
                ClaimOutcome::Taken => {}
                other => panic!("{}: {other:?}", c.run),
            }
        }
    }
    assert_eq!(winners.len(), 500, "every slot won once");
    for s in &stores {
        assert_eq!(s.retries(), 0, "no batch deadlocked or ran again");
        s.close().await.unwrap();
    }
    common::drop_schema(&url, &schema).await;
}

/// [B-11, B-15] A claim whose run exists is `Taken` and writes nothing, in a batch and
/// alone: an earlier run whose lease ended after the slot's winner claimed is left to the
/// next slot's claim (or a backup's takeover), which marks it `interrupted` as usual.
#[tokio::test]
async fn b15_a_taken_claim_leaves_an_ended_lease_to_the_next_slots_claim() {
    let Some(url) = common::url() else { return };
    let schema = common::fresh_schema();
    let (j1, j2) = (unique_job("tk"), unique_job("tk"));
    let s = store(&url, &schema, 2, &[j1.clone(), j2.clone()]).await;
    let t = s.now().await.unwrap();
    // Each job: slot t - 1000 held by x with a lease of 300 ms, slot t won by a meanwhile.
    let mut olds = Vec::new();
    for j in [&j1, &j2] {
        let mut short = claim(j, t - 1_000, "x", t + 60_000);
        short.lease_ms = 300;
        short.overlap = Overlap::Allow;
        match s.claim(&short).await.unwrap() {
            ClaimOutcome::Won(l) => olds.push(l),
            other => panic!("expected to win: {other:?}"),
        }
        let mut next = claim(j, t, "a", t + 60_000);
        next.overlap = Overlap::Allow;
        assert!(
            matches!(s.claim(&next).await.unwrap(), ClaimOutcome::Won(_)),
            "slot t won while x's lease is live"
        );
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    // x's leases have ended: b's claims of slot t are taken and interrupt nothing, j1's in a
    // batch (the set-based statement), j2's alone (the single claim's statement).
    let mixed = [
        claim(&j1, t, "b", t + 60_000),
        claim(&unique_job("tk"), t, "b", t + 60_000),
    ];
    let out = s.claim_many(&mixed).await.unwrap();
    assert_eq!(out[0], ClaimOutcome::Taken, "{out:?}");
    let out = s.claim(&claim(&j2, t, "b", t + 60_000)).await.unwrap();
    assert_eq!(out, ClaimOutcome::Taken);
    let runs = s
        .runs(&[olds[0].run.clone(), olds[1].run.clone()])
        .await
        .unwrap();
    assert!(
        runs.iter().all(|r| r.status == RunStatus::Running),
        "a taken claim wrote nothing: {runs:?}"
    );
    // The next slot's claim marks the ended lease, as without the lost claims.
    let mut next = claim(&j2, t + 2_000, "b", t + 60_000);
    next.overlap = Overlap::Allow;
    let out = s.claim(&next).await.unwrap();
    assert!(matches!(out, ClaimOutcome::Won(_)), "{out:?}");
    let runs = s.runs(std::slice::from_ref(&olds[1].run)).await.unwrap();
    assert_eq!(runs[0].status, RunStatus::Interrupted);
    s.close().await.unwrap();
    common::drop_schema(&url, &schema).await;
}

/// How many backends wait for a lock that the backend `holder` holds, directly or behind
/// one other waiter, seen from `observer`, a connection outside `holder`'s transaction (a
/// transaction sees `pg_stat_activity` as it was at its first look). A pipelined batch's
/// waiting statement may show as its last one, `COMMIT`, so the waiters are found by whom
/// they wait for.
async fn lock_waiters(observer: &tokio_postgres::Client, holder: i32) -> i64 {
    observer
        .query_one(
            "SELECT count(*) FROM pg_stat_activity a WHERE a.wait_event_type = 'Lock' AND ( \
                 $1 = ANY (pg_blocking_pids(a.pid)) \
                 OR EXISTS (SELECT 1 FROM pg_stat_activity b \
                            WHERE b.pid = ANY (pg_blocking_pids(a.pid)) \
                              AND $1 = ANY (pg_blocking_pids(b.pid))))",
            &[&holder],
        )
        .await
        .unwrap()
        .get(0)
}

/// Waits until `n` backends wait for a lock `holder` holds (at most 10 s).
async fn until_lock_waiters(observer: &tokio_postgres::Client, holder: i32, n: i64) {
    for _ in 0..1_000 {
        if lock_waiters(observer, holder).await >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{n} statements never waited for the test's lock");
}

/// A transaction of the test's own that holds one run's row locked, on a runs table that
/// also holds the runs in flight of a large service (20,000 running runs of other jobs), so
/// that the server plans the statements that queue behind it as in service: a loop that
/// looks up each run by key, locking the rows in the order sent. (With a few runs it may
/// hash the arrays and read the runs in key order, or scan the table and lock in the rows'
/// physical order; then these tests would not tell a wrong order sent.)
struct RunHeld {
    client: tokio_postgres::Client,
    observer: tokio_postgres::Client,
    holder: i32,
    tasks: Vec<tokio::task::JoinHandle<Result<(), tokio_postgres::Error>>>,
}

impl RunHeld {
    async fn new(url: &str, schema: &str, run: &anarchon_core::store::RunKey) -> Self {
        let (client, conn_task) = common::connect(url).await;
        client
            .batch_execute(&format!(
                "INSERT INTO \"{schema}\".anarchon_runs (job, slot, status, attempt, \
                 counted_starts, owner, expires_at, scheduled_at, started_at) \
                 SELECT 'filler-' || (n % 200), n, 'running', 1, 1, 'other', n, n, n \
                 FROM generate_series(1, 20000) AS n; \
                 ANALYZE \"{schema}\".anarchon_runs"
            ))
            .await
            .unwrap();
        let (observer, observer_task) = common::connect(url).await;
        let holder: i32 = client
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .unwrap()
            .get(0);
        client.batch_execute("BEGIN").await.unwrap();
        let locked = client
            .execute(
                &format!(
                    "SELECT 1 FROM \"{schema}\".anarchon_runs WHERE job = $1 AND slot = $2 \
                     FOR UPDATE"
                ),
                &[&run.job.as_str(), &run.slot],
            )
            .await
            .unwrap();
        assert_eq!(locked, 1, "the run is held");
        Self {
            client,
            observer,
            holder,
            tasks: vec![conn_task, observer_task],
        }
    }

    /// Waits until `n` statements wait for the held row (directly or behind one that does).
    async fn until_waiters(&self, n: i64) {
        until_lock_waiters(&self.observer, self.holder, n).await;
    }

    /// Commits the transaction, freeing the row, and closes both connections.
    async fn release(self) {
        self.client.batch_execute("COMMIT").await.unwrap();
        drop((self.client, self.observer));
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

/// A heartbeat and a result batch over the same runs, given in opposite orders, lock the
/// run rows in one order (job, slot): neither can hold a row the other holds while waiting
/// for one the other holds, so neither is aborted as a deadlock and run again (a deadlock
/// holds a result batch's job locks, and the claims behind them, for `deadlock_timeout`).
#[tokio::test(flavor = "multi_thread")]
async fn a_heartbeat_and_a_result_batch_in_opposite_orders_do_not_deadlock() {
    let Some(url) = common::url() else { return };
    heartbeat_then_results(&url, Reversed::Results).await;
}

/// As above, with the heartbeat's leases in reverse order.
#[tokio::test(flavor = "multi_thread")]
async fn a_reversed_heartbeat_and_a_result_batch_do_not_deadlock() {
    let Some(url) = common::url() else { return };
    heartbeat_then_results(&url, Reversed::Heartbeat).await;
}

/// Which of the two statements gets its runs in reverse job order.
#[derive(Clone, Copy, PartialEq)]
enum Reversed {
    Heartbeat,
    Results,
}

/// A heartbeat, then a result batch, over the same 40 runs, one of them in reverse job
/// order, the other in job order. A transaction of the test's own holds the middle run, so
/// that both statements are under way and waiting when it lets go; the heartbeat waits
/// first, so it renews every lease and the results are written after it. Neither may be
/// run again after a deadlock.
async fn heartbeat_then_results(url: &str, reversed: Reversed) {
    let schema = common::fresh_schema();
    let jobs: Vec<JobName> = (0..40).map(|_| unique_job("dl")).collect();
    let options = PostgresOptions::default()
        .schema(&schema)
        .pool_size(4)
        .timeout(Duration::from_secs(30));
    let s = Arc::new(store_with(url, options, &jobs).await);
    let t = s.now().await.unwrap();
    let mut held = leases(&s, &jobs, t).await;
    held.sort_by(|a, b| a.run.job.as_str().cmp(b.run.job.as_str()));
    let middle = held[held.len() / 2].run.clone();
    let hold = RunHeld::new(url, &schema, &middle).await;
    let in_order = |reverse: bool| -> Vec<Lease> {
        let mut leases = held.clone();
        if reverse {
            leases.reverse();
        }
        leases
    };
    let heartbeat = tokio::spawn({
        let (s, leases) = (s.clone(), in_order(reversed == Reversed::Heartbeat));
        async move { s.heartbeat(&leases, 30_000).await }
    });
    hold.until_waiters(1).await;
    let results = tokio::spawn({
        let s = s.clone();
        let writes: Vec<(Lease, Finish)> = in_order(reversed == Reversed::Results)
            .into_iter()
            .map(|l| (l, result(0)))
            .collect();
        async move { s.finish_many(&writes).await }
    });
    hold.until_waiters(2).await;
    hold.release().await;
    let renewals = heartbeat.await.unwrap().expect("heartbeat");
    let written = results.await.unwrap().expect("results");
    assert_eq!(s.retries(), 0, "a statement was run again after a deadlock");
    assert!(
        renewals
            .iter()
            .all(|r| matches!(r, anarchon_core::store::Renewal::Renewed { .. })),
        "the heartbeat went first: {renewals:?}"
    );
    assert_eq!(written, vec![OwnerWrite::Done; held.len()]);
    s.close().await.unwrap();
    common::drop_schema(url, &schema).await;
}

/// A takeover batch sends its runs in run order, as heartbeats do, so a heartbeat of the late
/// owner (which takes no job lock) and a takeover batch given the runs in reverse order
/// cannot deadlock. A transaction of the test's own holds the middle one of 40 runs whose
/// leases ended; the takeovers wait for it first, the heartbeat behind them. The takeovers'
/// store ends a deadlock after 200 ms, the owner's after 20 s, so that a deadlock would
/// always abort the takeovers: the heartbeat would renew every lease and the takeovers, run
/// again, find them live. In run order the takeovers win every run and the heartbeat
/// renews none.
#[tokio::test(flavor = "multi_thread")]
async fn a_reversed_takeover_batch_and_the_owners_heartbeat_do_not_deadlock() {
    let Some(url) = common::url() else { return };
    let schema = common::fresh_schema();
    let jobs: Vec<JobName> = (0..40).map(|_| unique_job("tkhb")).collect();
    let sep = if url.contains('?') { '&' } else { '?' };
    let with_deadlock_timeout = |t: &str| format!("{url}{sep}options=-c%20deadlock_timeout%3D{t}");
    let options = || {
        PostgresOptions::default()
            .schema(&schema)
            .pool_size(2)
            .timeout(Duration::from_secs(30))
    };
    let owner = Arc::new(store_with(&with_deadlock_timeout("20s"), options(), &jobs).await);
    let backup = Arc::new(store_with(&with_deadlock_timeout("200ms"), options(), &jobs).await);
    let t = owner.now().await.unwrap();
    let claims: Vec<LeaseClaim> = jobs
        .iter()
        .map(|j| LeaseClaim {
            lease_ms: 300,
            ..claim(j, t, "a", t + 60_000)
        })
        .collect();
    let mut held = anarchon_core::testkit::lease::won_all(owner.as_ref(), &claims).await;
    held.sort_by(|a, b| a.run.job.as_str().cmp(b.run.job.as_str()));
    let middle = held[held.len() / 2].run.clone();
    tokio::time::sleep(Duration::from_millis(
        anarchon_core::testkit::lease::PAST_LEASE_MS,
    ))
    .await;
    let hold = RunHeld::new(&url, &schema, &middle).await;
    let not_after = backup.now().await.unwrap() + 60_000;
    let takeovers = tokio::spawn({
        let backup = backup.clone();
        let batch: Vec<Takeover> = held
            .iter()
            .rev()
            .map(|l| Takeover {
                run: l.run.clone(),
                seen_attempt: l.attempt,
                instance_id: "b".into(),
                lease_ms: 30_000,
                max_attempts: 3,
                superseded: false,
                not_after,
            })
            .collect();
        async move { backup.take_over_many(&batch).await }
    });
    hold.until_waiters(1).await;
    let heartbeat = tokio::spawn({
        let (owner, leases) = (owner.clone(), held.clone());
        async move { owner.heartbeat(&leases, 30_000).await }
    });
    hold.until_waiters(2).await;
    hold.release().await;
    let taken = takeovers.await.unwrap().expect("takeovers");
    let renewals = heartbeat.await.unwrap().expect("heartbeat");
    assert!(
        taken.iter().all(|o| matches!(o, TakeoverOutcome::Won(_))),
        "the takeovers were aborted as a deadlock: {taken:?}"
    );
    assert_eq!(
        renewals,
        vec![anarchon_core::store::Renewal::Lost; held.len()]
    );
    owner.close().await.unwrap();
    backup.close().await.unwrap();
    common::drop_schema(&url, &schema).await;
}
