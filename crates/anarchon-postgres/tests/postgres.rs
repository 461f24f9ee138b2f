//! Direct tests of the PostgreSQL store against a real server: races, schema checks, bad
//! input and NOTIFY. The shared contract is checked by `conformance.rs`.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anarchon_core::store::{
    ClaimOutcome, Error, Finish, HistoryStore, JobName, Lease, LeaseClaim, LeaseStore, Overlap,
    OwnerWrite, Prepare, Reason, Renewal, Retention, RunKey, RunStatus, Store, Takeover,
    TakeoverOutcome,
};
use anarchon_postgres::{PostgresError, PostgresOptions, PostgresStore};

fn prep(jobs: &[&JobName]) -> Prepare {
    Prepare {
        jobs: jobs.iter().map(|j| (*j).clone()).collect(),
        instance_id: "test".into(),
        call_timeout: std::time::Duration::from_secs(5),
    }
}

fn job(prefix: &str) -> JobName {
    anarchon_core::testkit::unique_job(prefix)
}

fn claim(job: &JobName, slot: i64, instance: &str, now: i64) -> LeaseClaim {
    LeaseClaim {
        run: RunKey::new(job.clone(), slot),
        scheduled_at: slot,
        instance_id: instance.into(),
        lease_ms: 30_000,
        not_after: now + 60_000,
        overlap: Overlap::Skip,
        reason: Reason::Scheduled,
        retention: Retention::default(),
    }
}

/// Sends `c` from a task of its own and checks, 300 ms later, that it still waits (for a
/// job lock the test holds); the task answers once the lock is free.
async fn claim_that_waits(
    store: &PostgresStore,
    c: LeaseClaim,
    what: &str,
) -> tokio::task::JoinHandle<anarchon_core::store::Result<ClaimOutcome>> {
    let task = {
        let store = store.clone();
        tokio::spawn(async move { store.claim(&c).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!task.is_finished(), "{what}");
    task
}

fn won(outcome: ClaimOutcome) -> Lease {
    match outcome {
        ClaimOutcome::Won(lease) => lease,
        other => panic!("expected Won, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn b11_sixteen_concurrent_claimers_one_winner() {
    let Some(url) = common::url() else { return };
    let store = common::fresh_store(&url).await;
    let j = job("race");
    let now = store.now().await.unwrap();
    for round in 0..5 {
        let slot = now + round * 1000;
        let tasks: Vec<_> = (0..16)
            .map(|i| {
                let store = store.clone();
                let c = claim(&j, slot, &format!("instance-{i}"), now);
                tokio::spawn(async move { store.claim(&c).await })
            })
            .collect();
        let mut winners = 0;
        for t in tasks {
            match t.await.unwrap().unwrap() {
                ClaimOutcome::Won(_) => winners += 1,
                ClaimOutcome::Taken | ClaimOutcome::Overlap { .. } => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        // Round 0 has exactly one winner; later rounds overlap the live earlier run.
        assert_eq!(winners, usize::from(round == 0), "round {round}");
    }
    let history = store.history(&j, 100).await.unwrap();
    assert_eq!(history.len(), 1);
    common::drop_schema(&url, store.schema()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn b11_concurrent_claims_of_many_slots_with_overlap_allow_get_distinct_fences() {
    let Some(url) = common::url() else { return };
    let store = common::fresh_store(&url).await;
    let j = job("fences");
    let now = store.now().await.unwrap();
    let tasks: Vec<_> = (0..32)
        .map(|i| {
            let store = store.clone();
            let mut c = claim(&j, now - 1000 + i / 2, &format!("i{i}"), now);
            c.overlap = Overlap::Allow;
            tokio::spawn(async move { store.claim(&c).await })
        })
        .collect();
    let mut fences = Vec::new();
    for t in tasks {
        if let ClaimOutcome::Won(lease) = t.await.unwrap().unwrap() {
            fences.push(lease.fence);
        }
    }
    fences.sort_unstable();
    assert_eq!(fences, (1..=16).collect::<Vec<u64>>());
    common::drop_schema(&url, store.schema()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn b12_concurrent_claims_of_different_slots_with_overlap_skip_start_one() {
    let Some(url) = common::url() else { return };
    let store = common::fresh_store(&url).await;
    for round in 0..10 {
        let j = job("skip");
        let now = store.now().await.unwrap();
        let tasks: Vec<_> = (0..8)
            .map(|i| {
                let store = store.clone();
                let c = claim(&j, now - 10_000 + i * 1000, &format!("i{i}"), now);
                tokio::spawn(async move { store.claim(&c).await })
            })
            .collect();
        let mut winners = Vec::new();
        for t in tasks {
            if let ClaimOutcome::Won(lease) = t.await.unwrap().unwrap() {
                winners.push((lease.run.slot, lease.fence));
            }
        }
        assert!(!winners.is_empty(), "round {round}");
        // Only earlier runs block a slot, so several may win, but only in an order in which
        // each winner saw no live earlier run: a later slot must have won before (with a
        // smaller fence than) every earlier slot that also won. Without the snapshot
        // re-check, two racing claims could both miss each other and break this.
        winners.sort_unstable();
        assert!(
            winners.windows(2).all(|w| w[0].1 > w[1].1),
            "round {round}: {winners:?}"
        );
    }
    common::drop_schema(&url, store.schema()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn lease_lifecycle_claim_heartbeat_finish_history() {
    let Some(url) = common::url() else { return };
    let store = common::fresh_store(&url).await;
    let j = job("life");
    store.prepare(&prep(&[&j])).await.unwrap();
    let now = store.now().await.unwrap();
    let slot = now - now % 1000;
    let a = won(store.claim(&claim(&j, slot, "a", now)).await.unwrap());
    assert_eq!((a.attempt, a.fence), (1, 1));
    assert!(a.expires_at >= now + 30_000);
    assert_eq!(
        store.claim(&claim(&j, slot, "b", now)).await.unwrap(),
        ClaimOutcome::Taken
    );
    // The next slot overlaps the live run.
    assert_eq!(
        store
            .claim(&claim(&j, slot + 1000, "b", now))
            .await
            .unwrap(),
        ClaimOutcome::Overlap { running_slot: slot }
    );
    // Late: the store's clock is past not_after.
    let mut late = claim(&j, slot + 2000, "b", now);
    late.not_after = now - 1;
    assert!(matches!(
        store.claim(&late).await.unwrap(),
        ClaimOutcome::Late { .. }
    ));

    let mut stranger = a.clone();
    stranger.instance_id = "b".into();
    let r = store
        .heartbeat(&[a.clone(), stranger.clone()], 10_000)
        .await
        .unwrap();
    assert!(matches!(r[0], Renewal::Renewed { .. }));
    assert_eq!(r[1], Renewal::Lost);

    let finish = Finish {
        status: RunStatus::Succeeded,
        error: None,
        retention: Retention::default(),
    };
    assert_eq!(
        store.finish(&stranger, &finish).await.unwrap(),
        OwnerWrite::Lost
    );
    assert_eq!(store.finish(&a, &finish).await.unwrap(), OwnerWrite::Done);
    assert_eq!(store.finish(&a, &finish).await.unwrap(), OwnerWrite::Lost);
    let h = store.history(&j, 10).await.unwrap();
    assert_eq!(h.len(), 1);
    assert_eq!(h[0].status, RunStatus::Succeeded);
    assert_eq!(h[0].instance_id, "a");
    assert!(h[0].finished_at.is_some());
    assert_eq!(store.known_jobs().await.unwrap(), vec![j.clone()]);
    assert_eq!(store.last_run(&j).await.unwrap().unwrap().slot, slot);
    common::drop_schema(&url, store.schema()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn b14_takeover_after_expiry_then_exhausted() {
    let Some(url) = common::url() else { return };
    let store = common::fresh_store(&url).await;
    let j = job("take");
    let now = store.now().await.unwrap();
    let mut c = claim(&j, now, "a", now);
    // Leases of 1 s: the takeover right after the claim must find it live even on a
    // loaded CI machine (50 ms leases expired before it there).
    c.lease_ms = 1_000;
    let a = won(store.claim(&c).await.unwrap());
    let key = RunKey::new(j.clone(), now);
    let t = |attempt, instance: &str| Takeover {
        run: key.clone(),
        seen_attempt: attempt,
        instance_id: instance.into(),
        lease_ms: 1_000,
        max_attempts: 2,
        superseded: false,
        not_after: i64::MAX,
    };
    assert_eq!(
        store.take_over(&t(1, "b")).await.unwrap(),
        TakeoverOutcome::Live
    );
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let b = match store.take_over(&t(1, "b")).await.unwrap() {
        TakeoverOutcome::Won(l) => l,
        other => panic!("{other:?}"),
    };
    assert_eq!((b.attempt, b.fence, b.reason), (2, 2, Reason::Takeover));
    // The stale owner is fenced off.
    assert_eq!(
        store
            .heartbeat(std::slice::from_ref(&a), 1000)
            .await
            .unwrap(),
        vec![Renewal::Lost]
    );
    assert_eq!(
        store.take_over(&t(1, "c")).await.unwrap(),
        TakeoverOutcome::Live
    );
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert_eq!(
        store.take_over(&t(2, "c")).await.unwrap(),
        TakeoverOutcome::Exhausted
    );
    assert_eq!(
        store.take_over(&t(2, "c")).await.unwrap(),
        TakeoverOutcome::Finished(RunStatus::Failed)
    );
    let h = store.history(&j, 10).await.unwrap();
    let statuses: Vec<_> = h.iter().map(|r| (r.attempt, r.status)).collect();
    assert_eq!(
        statuses,
        vec![(2, RunStatus::Interrupted), (1, RunStatus::Interrupted)]
    );
    common::drop_schema(&url, store.schema()).await;
}

/// The history table's rows of job `j`.
async fn history_rows(url: &str, store: &PostgresStore, j: &JobName) -> i64 {
    let sql = format!(
        "SELECT count(*) FROM \"{}\".anarchon_runs_attempts WHERE job = $1",
        store.schema()
    );
    rows_for(url, &sql, j.as_str()).await[0].get(0)
}

/// [B-37] A run's row is the history of its current attempt (schema version 4): a won claim
/// and its result write no history row; a release writes the row of the attempt handed over
/// and a takeover the row of the attempt whose lease ended, before the run's row moves on
/// to the next attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn b37_a_won_claim_and_its_result_write_no_history_row() {
    let Some(url) = common::url() else { return };
    let store = common::fresh_store(&url).await;
    let j = job("onerow");
    let now = store.now().await.unwrap();
    let done = |status, error: Option<&str>| Finish {
        status,
        error: error.map(str::to_owned),
        retention: Retention::default(),
    };
    // Claim and result: the run's row alone.
    let first = won(store
        .claim(&claim(&j, now - 10_000, "a", now))
        .await
        .unwrap());
    assert_eq!(history_rows(&url, &store, &j).await, 0);
    let failed = done(RunStatus::Failed, Some("boom"));
    assert_eq!(
        store.finish(&first, &failed).await.unwrap(),
        OwnerWrite::Done
    );
    assert_eq!(history_rows(&url, &store, &j).await, 0);
    // Released, then taken over: one row, the attempt handed over.
    let second = won(store
        .claim(&claim(&j, now - 5_000, "a", now))
        .await
        .unwrap());
    assert_eq!(store.release(&second).await.unwrap(), OwnerWrite::Done);
    assert_eq!(history_rows(&url, &store, &j).await, 1);
    let take = |attempt, instance: &str| Takeover {
        run: RunKey::new(j.clone(), now - 5_000),
        seen_attempt: attempt,
        instance_id: instance.into(),
        lease_ms: 50,
        max_attempts: 5,
        superseded: false,
        not_after: i64::MAX,
    };
    let TakeoverOutcome::Won(b) = store.take_over(&take(1, "b")).await.unwrap() else {
        panic!("the run handed over is taken")
    };
    assert_eq!(
        history_rows(&url, &store, &j).await,
        1,
        "written at the release"
    );
    // Its lease ends: the next takeover writes the row of attempt 2.
    tokio::time::sleep(Duration::from_millis(80)).await;
    let TakeoverOutcome::Won(c) = store.take_over(&take(2, "c")).await.unwrap() else {
        panic!("the ended lease is taken over")
    };
    assert_eq!(history_rows(&url, &store, &j).await, 2);
    assert_eq!(
        store
            .finish(&c, &done(RunStatus::Succeeded, None))
            .await
            .unwrap(),
        OwnerWrite::Done
    );
    assert_eq!(history_rows(&url, &store, &j).await, 2);
    assert_eq!(store.finish(&b, &failed).await.unwrap(), OwnerWrite::Lost);
    // Each attempt once, as it ended: the kit's
    // `b36_history_shows_each_attempt_once_as_it_ended` checks every field.
    assert_eq!(store.history(&j, 10).await.unwrap().len(), 4);
    common::drop_schema(&url, store.schema()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn b17_release_hands_over_without_counting_and_notifies() {
    let Some(url) = common::url() else { return };
    let store = common::fresh_store(&url).await;
    let backup = common::store_on(&url, store.schema());
    let mut releases = backup
        .subscribe_releases()
        .expect("postgres has LISTEN/NOTIFY");
    // The listener connects in the background; give it a moment.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let j = job("handover");
    let now = store.now().await.unwrap();
    let a = won(store.claim(&claim(&j, now, "a", now)).await.unwrap());
    let sent = Instant::now();
    assert_eq!(store.release(&a).await.unwrap(), OwnerWrite::Done);
    let key = tokio::time::timeout(Duration::from_secs(2), releases.recv())
        .await
        .expect("notification within 2 s")
        .unwrap();
    assert_eq!(key, RunKey::new(j.clone(), now));
    eprintln!("release -> notification: {:?}", sent.elapsed());
    let view = &store.runs(std::slice::from_ref(&key)).await.unwrap()[0];
    assert!(view.is_takeable());
    assert_eq!(view.owner, None);
    let t = Takeover {
        run: key.clone(),
        seen_attempt: 1,
        instance_id: "b".into(),
        lease_ms: 30_000,
        max_attempts: 1,
        superseded: false,
        not_after: i64::MAX,
    };
    // max_attempts 1 and yet the takeover wins: a handover is not a crash.
    let b = match backup.take_over(&t).await.unwrap() {
        TakeoverOutcome::Won(l) => l,
        other => panic!("{other:?}"),
    };
    assert_eq!(b.attempt, 2);
    let h = store.history(&j, 10).await.unwrap();
    assert_eq!(h[1].status, RunStatus::Interrupted);
    assert_eq!(h[1].error.as_deref(), Some("handed over"));
    assert_eq!(store.release(&a).await.unwrap(), OwnerWrite::Lost);
    backup.close().await.unwrap();
    store.close().await.unwrap();
    common::drop_schema(&url, store.schema()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn b15_expired_earlier_run_is_interrupted_by_the_next_slot() {
    let Some(url) = common::url() else { return };
    let store = common::fresh_store(&url).await;
    let j = job("next");
    let now = store.now().await.unwrap();
    let mut c = claim(&j, now - 1000, "a", now);
    c.lease_ms = 30;
    won(store.claim(&c).await.unwrap());
    tokio::time::sleep(Duration::from_millis(60)).await;
    won(store.claim(&claim(&j, now, "b", now)).await.unwrap());
    let v = store
        .runs(&[RunKey::new(j.clone(), now - 1000)])
        .await
        .unwrap();
    assert_eq!(v[0].status, RunStatus::Interrupted);
    let h = store.history(&j, 10).await.unwrap();
    let old = h.iter().find(|r| r.slot == now - 1000).unwrap();
    assert_eq!(old.status, RunStatus::Interrupted);
    assert_eq!(old.error.as_deref(), Some("replaced by the next slot"));
    common::drop_schema(&url, store.schema()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn b37_retention_prunes_runs_and_history() {
    let Some(url) = common::url() else { return };
    let store = common::fresh_store(&url).await;
    let j = job("keep");
    let now = store.now().await.unwrap();
    let retention = Retention {
        size: 3,
        ttl_ms: None,
    };
    for i in 0..6 {
        let mut c = claim(&j, now - 10_000 + i * 1000, "a", now);
        c.retention = retention;
        let l = won(store.claim(&c).await.unwrap());
        let f = Finish {
            status: RunStatus::Succeeded,
            error: None,
            retention,
        };
        assert_eq!(store.finish(&l, &f).await.unwrap(), OwnerWrite::Done);
    }
    store.pruning_settled().await;
    let h = store.history(&j, 100).await.unwrap();
    assert_eq!(
        h.iter().map(|r| r.slot).collect::<Vec<_>>(),
        vec![now - 5000, now - 6000, now - 7000]
    );
    let old = store
        .runs(&[RunKey::new(j.clone(), now - 10_000)])
        .await
        .unwrap();
    assert!(old.is_empty(), "pruned run still there: {old:?}");
    // Size 1 with an expired earlier run, on a claim due to prune (sent by a store that has
    // not seen the job's count yet): the claim marks the earlier run, and the prune after
    // its batch removes it.
    let pruning = common::store_on(&url, store.schema());
    let mut c = claim(&j, now - 4000, "a", now);
    c.lease_ms = 20;
    c.retention = Retention {
        size: 1,
        ttl_ms: None,
    };
    won(store.claim(&c).await.unwrap());
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut c = claim(&j, now - 3000, "a", now);
    c.retention = Retention {
        size: 1,
        ttl_ms: None,
    };
    let l3 = won(pruning.claim(&c).await.unwrap());
    pruning.pruning_settled().await;
    assert_eq!(unpruned(&url, &store, &j).await, 0);
    let h = store.history(&j, 100).await.unwrap();
    assert_eq!(
        h.iter().map(|r| r.slot).collect::<Vec<_>>(),
        vec![now - 3000]
    );
    let f = Finish {
        status: RunStatus::Succeeded,
        error: None,
        retention,
    };
    assert_eq!(store.finish(&l3, &f).await.unwrap(), OwnerWrite::Done);
    // TTL: finished rows older than the TTL go.
    let l = won(store.claim(&claim(&j, now - 2000, "a", now)).await.unwrap());
    let f = Finish {
        status: RunStatus::Failed,
        error: Some("boom".into()),
        retention,
    };
    store.finish(&l, &f).await.unwrap();
    tokio::time::sleep(Duration::from_millis(30)).await;
    let pruning = common::store_on(&url, store.schema());
    let mut c = claim(&j, now - 1000, "a", now);
    c.retention = Retention {
        size: 10,
        ttl_ms: Some(10),
    };
    won(pruning.claim(&c).await.unwrap());
    pruning.pruning_settled().await;
    let slots: Vec<_> = store
        .history(&j, 100)
        .await
        .unwrap()
        .iter()
        .map(|r| r.slot)
        .collect();
    assert!(!slots.contains(&(now - 2000)), "{slots:?}");
    common::drop_schema(&url, store.schema()).await;
}

/// Mirrors `sql::PRUNE_EVERY`: a won claim prunes when it is the job's 16th since the last
/// claim that pruned.
const PRUNE_EVERY: i32 = 16;

async fn unpruned(url: &str, store: &PostgresStore, j: &JobName) -> i32 {
    let (client, task) = common::connect(url).await;
    let row = client
        .query_one(
            &format!(
                "SELECT unpruned FROM \"{}\".anarchon_runs_jobs WHERE job = $1",
                store.schema()
            ),
            &[&j.as_str()],
        )
        .await
        .unwrap();
    drop(client);
    let _ = task.await;
    row.get(0)
}

async fn set_unpruned(url: &str, store: &PostgresStore, j: &JobName, n: i32) {
    common::exec(
        url,
        &format!(
            "UPDATE \"{}\".anarchon_runs_jobs SET unpruned = {n} WHERE job = '{j}'",
            store.schema()
        ),
    )
    .await
    .unwrap();
}

/// [B-37] Runs that never finish (here: each interrupted by the next slot) are pruned after
/// the claims alone, one claim in `PRUNE_EVERY`: once the prune after a claim is done, the
/// job is within `size + PRUNE_EVERY - 1` runs (the running one included), and a finish
/// brings it back to `size`.
#[tokio::test(flavor = "multi_thread")]
async fn b37_claims_alone_keep_a_job_bounded() {
    let Some(url) = common::url() else { return };
    let store = common::fresh_store(&url).await;
    let j = job("bound");
    store.prepare(&prep(&[&j])).await.unwrap();
    let keep = Retention {
        size: 2,
        ttl_ms: None,
    };
    let now = store.now().await.unwrap();
    let claims = 3 * PRUNE_EVERY as i64 + 5;
    let mut longest = 0;
    let mut last = None;
    for i in 0..claims {
        let mut c = claim(&j, now - 100_000 + i * 10, "a", now);
        c.lease_ms = 1;
        c.retention = keep;
        last = Some(won(store.claim(&c).await.unwrap()));
        store.pruning_settled().await;
        let kept = store.history(&j, 1000).await.unwrap().len();
        assert!(
            kept < keep.size as usize + PRUNE_EVERY as usize,
            "claim {i}: {kept} runs kept"
        );
        longest = longest.max(kept);
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    assert_eq!(longest, keep.size as usize + PRUNE_EVERY as usize - 1);
    // The first claim pruned (the store had not seen the count), then every 16th.
    assert_eq!(
        unpruned(&url, &store, &j).await,
        ((claims - 1) % PRUNE_EVERY as i64) as i32
    );
    // The last run's lease ended, but its owner may still finish it: that prunes exactly.
    let f = Finish {
        status: RunStatus::Succeeded,
        error: None,
        retention: keep,
    };
    let done = store.finish(&last.unwrap(), &f).await.unwrap();
    assert_eq!(done, OwnerWrite::Done);
    store.pruning_settled().await;
    assert_eq!(store.history(&j, 1000).await.unwrap().len(), 2);
    common::drop_schema(&url, store.schema()).await;
}

/// [B-37] A store learns the job's count from every claim it sends, won or taken, so the
/// claims of other instances bring its pruning claim due.
#[tokio::test(flavor = "multi_thread")]
async fn b37_a_taken_claim_tells_the_count_too() {
    let Some(url) = common::url() else { return };
    let store = common::fresh_store(&url).await;
    let j = job("learn");
    store.prepare(&prep(&[&j])).await.unwrap();
    let now = store.now().await.unwrap();
    let l = won(store.claim(&claim(&j, now - 2000, "a", now)).await.unwrap());
    assert_eq!(unpruned(&url, &store, &j).await, 0, "a first claim prunes");
    let f = Finish {
        status: RunStatus::Succeeded,
        error: None,
        retention: Retention::default(),
    };
    store.finish(&l, &f).await.unwrap();
    // Other instances won 15 claims meanwhile.
    set_unpruned(&url, &store, &j, PRUNE_EVERY - 1).await;
    let taken = store.claim(&claim(&j, now - 2000, "b", now)).await.unwrap();
    assert_eq!(taken, ClaimOutcome::Taken);
    won(store.claim(&claim(&j, now - 1000, "b", now)).await.unwrap());
    assert_eq!(unpruned(&url, &store, &j).await, 0, "the 16th claim pruned");
    common::drop_schema(&url, store.schema()).await;
}

/// [B-37] A finish prunes only when more than `size / 8` (at most 15) won claims went by
/// since the job was last pruned, and then sets the count to 0: with `history_size` 16 the
/// job holds at most 18 runs after a finish, and reaches it, where pruning every finish kept
/// it at 16 (an ordered scan of the 16 newest keys on every finish).
#[tokio::test(flavor = "multi_thread")]
async fn b37_finish_prunes_once_in_size_by_8_finishes() {
    let Some(url) = common::url() else { return };
    let store = common::fresh_store(&url).await;
    let j = job("slack");
    store.prepare(&prep(&[&j])).await.unwrap();
    let keep = Retention {
        size: 16,
        ttl_ms: None,
    };
    let f = Finish {
        status: RunStatus::Succeeded,
        error: None,
        retention: keep,
    };
    let now = store.now().await.unwrap();
    let mut lengths = Vec::new();
    let mut counts = Vec::new();
    for i in 0..40 {
        let mut c = claim(&j, now - 100_000 + i * 1000, "a", now);
        c.retention = keep;
        let l = won(store.claim(&c).await.unwrap());
        assert_eq!(store.finish(&l, &f).await.unwrap(), OwnerWrite::Done);
        store.pruning_settled().await;
        lengths.push(store.history(&j, 1000).await.unwrap().len());
        counts.push(unpruned(&url, &store, &j).await);
    }
    assert!(lengths.iter().all(|&n| n <= 18), "{lengths:?}");
    assert_eq!(lengths.iter().max(), Some(&18), "{lengths:?}");
    // The count goes 1, 2, then a finish prunes and sets it to 0.
    assert!(counts.iter().all(|&n| n <= 2), "{counts:?}");
    assert_eq!(&counts[16..19], &[1, 2, 0], "{counts:?}");
    common::drop_schema(&url, store.schema()).await;
}

/// The rows `sql` answers for one text parameter, on a connection of its own.
async fn rows_for(url: &str, sql: &str, param: &str) -> Vec<tokio_postgres::Row> {
    let (client, task) = common::connect(url).await;
    let rows = client.query(sql, &[&param]).await.unwrap();
    drop(client);
    let _ = task.await;
    rows
}

/// The job's history keys as (slot, manual), newest first, read from the tables: its runs
/// and its manual runs.
async fn keys(url: &str, store: &PostgresStore, j: &JobName) -> Vec<(i64, bool)> {
    let schema = store.schema();
    let sql = format!(
        "SELECT slot, false FROM \"{schema}\".anarchon_runs WHERE job = $1
         UNION
         SELECT slot, true FROM \"{schema}\".anarchon_runs_attempts WHERE job = $1 AND manual
         ORDER BY 1 DESC, 2 DESC"
    );
    let rows = rows_for(url, &sql, j.as_str()).await;
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}

/// How many prunes found the job's cut upwards since it was last read from the top.
async fn fast_prunes(url: &str, store: &PostgresStore, j: &JobName) -> Option<i32> {
    let sql = format!(
        "SELECT fast_prunes FROM \"{}\".anarchon_runs_cuts WHERE job = $1",
        store.schema()
    );
    rows_for(url, &sql, j.as_str())
        .await
        .first()
        .map(|r| r.get(0))
}

/// Claims `slot` of `j` with retention `keep`, finishes it and waits for the prunes.
async fn run_once(store: &PostgresStore, j: &JobName, slot: i64, keep: Retention) -> Lease {
    let now = store.now().await.unwrap();
    let mut c = claim(j, slot, "a", now);
    c.retention = keep;
    let l = won(store.claim(&c).await.unwrap());
    let f = Finish {
        status: RunStatus::Succeeded,
        error: None,
        retention: keep,
    };
    assert_eq!(store.finish(&l, &f).await.unwrap(), OwnerWrite::Done);
    store.pruning_settled().await;
    l
}

/// [B-37] Pruning finds a job's cut upwards from the one it remembered (reading the keys it
/// deletes, not the job's `size` newest), and every 8th prune reads it from the top: over
/// 150 slots with manual runs among them, the `size` newest keys are always kept, and the
/// job never holds more than `size` plus the keys a prune leaves for later.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn b37_prunes_find_the_cut_upwards_and_keep_the_newest_keys() {
    let Some(url) = common::url() else { return };
    let store = common::fresh_store(&url).await;
    let j = job("upward");
    store.prepare(&prep(&[&j])).await.unwrap();
    let keep = Retention {
        size: 10,
        ttl_ms: None,
    };
    let now = store.now().await.unwrap();
    let mut model: Vec<(i64, bool)> = Vec::new();
    let mut fast_seen = 0;
    for i in 0..150 {
        let slot = now - 1_000_000 + i * 1000;
        if i % 7 == 3 {
            // A manual run between two slots: a key of its own, pruned like the others.
            let started = store.now().await.unwrap();
            let record = anarchon_core::history::RunRecord {
                job: j.clone(),
                slot: slot - 500,
                scheduled_at: slot - 500,
                instance_id: "a".into(),
                manual: true,
                attempt: 1,
                reason: Reason::Manual,
                status: RunStatus::Succeeded,
                fence: 0,
                started_at: started,
                finished_at: Some(started),
                error: None,
            };
            store.record_manual(&record, keep).await.unwrap();
            model.push((slot - 500, true));
        }
        run_once(&store, &j, slot, keep).await;
        model.push((slot, false));
        let kept = keys(&url, &store, &j).await;
        let newest: Vec<(i64, bool)> = model.iter().rev().take(10).copied().collect();
        assert_eq!(
            &kept[..10.min(kept.len())],
            &newest[..],
            "slot {i}: {kept:?}"
        );
        assert!(kept.len() <= 10 + 16, "slot {i}: {} keys kept", kept.len());
        fast_seen = fast_seen.max(fast_prunes(&url, &store, &j).await.unwrap_or(0));
    }
    // The cut was found upwards (up to 7 times in a row), then read from the top again.
    assert_eq!(fast_seen, 7);
    common::drop_schema(&url, store.schema()).await;
}

/// [B-37] Only a claim of the job's newest run counts as a key added above the remembered
/// cut: claims of older slots (a catch-up of slots long past) land below it, and counting
/// them would move the next cut up past keys that must stay (here one of the five newest).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn b37_a_claim_of_an_older_slot_is_not_counted_above_the_cut() {
    let Some(url) = common::url() else { return };
    let store = common::fresh_store(&url).await;
    let j = job("older");
    store.prepare(&prep(&[&j])).await.unwrap();
    let keep = Retention {
        size: 5,
        ttl_ms: None,
    };
    let now = store.now().await.unwrap();
    let slot = |i: i64| now - 1_000_000 + i * 1000;
    for i in (0..20).step_by(2) {
        run_once(&store, &j, slot(i), keep).await;
    }
    assert!(
        fast_prunes(&url, &store, &j).await.unwrap_or(0) > 0,
        "the cut is found upwards"
    );
    // Three slots below the cut, each claimed and finished (and pruned again).
    for i in [1, 3, 5] {
        run_once(&store, &j, slot(i), keep).await;
    }
    let newest: Vec<(i64, bool)> = [18, 16, 14, 12, 10].map(|i| (slot(i), false)).to_vec();
    let kept = keys(&url, &store, &j).await;
    assert_eq!(&kept[..5.min(kept.len())], &newest[..], "{kept:?}");
    common::drop_schema(&url, store.schema()).await;
}

/// [B-37] A prune reads a job's runs below its cut from the lowest slot one could still
/// have (the cut, or a run kept below it because it was running), not from the job's first
/// slot ever: the pages of the runs it deleted before stay in the index until a vacuum.
/// The runs it must still find there: one that was running when the cut passed it and
/// finished since, and one claimed since for a slot below the cut (a catch-up), which
/// makes the next prune read the whole range again. Each fails without its rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn b37_a_prune_finds_what_lies_below_its_last_cut() {
    let Some(url) = common::url() else { return };
    let store = common::fresh_store(&url).await;
    let j = job("floor");
    store.prepare(&prep(&[&j])).await.unwrap();
    let keep = Retention {
        size: 3,
        ttl_ms: None,
    };
    let now = store.now().await.unwrap();
    let slot = |i: i64| now - 1_000_000 + i * 1000;
    let done = Finish {
        status: RunStatus::Succeeded,
        error: None,
        retention: keep,
    };
    let claim_at = |i: i64| {
        let mut c = claim(&j, slot(i), "a", now);
        c.retention = keep;
        c.overlap = Overlap::Allow;
        c
    };
    let run = |i: i64| {
        let store = store.clone();
        let c = claim_at(i);
        let done = done.clone();
        async move {
            let l = won(store.claim(&c).await.unwrap());
            assert_eq!(store.finish(&l, &done).await.unwrap(), OwnerWrite::Done);
            store.pruning_settled().await;
        }
    };
    for i in 0..9 {
        run(i).await;
    }
    // Slot 9 runs on while the cut passes it.
    let long = won(store.claim(&claim_at(9)).await.unwrap());
    for i in 10..15 {
        run(i).await;
    }
    let newest: Vec<(i64, bool)> = [14, 13, 12].map(|i| (slot(i), false)).to_vec();
    assert_eq!(
        keys(&url, &store, &j).await,
        [newest.clone(), vec![(slot(9), false)]].concat()
    );
    assert_eq!(store.finish(&long, &done).await.unwrap(), OwnerWrite::Done);
    store.pruning_settled().await;
    assert_eq!(
        keys(&url, &store, &j).await,
        newest,
        "the run kept while running"
    );
    // A slot far below the cut, claimed and finished now.
    run(2).await;
    assert_eq!(
        keys(&url, &store, &j).await,
        newest,
        "the slot claimed below the cut"
    );
    common::drop_schema(&url, store.schema()).await;
}

/// [B-37] A prune of an older release neither reads nor moves the remembered cut; it can
/// only delete keys above it by deleting the cut's own key. A prune that finds its
/// remembered cut gone reads the cut from the top: here the remembered cut is set back to a
/// key that such a prune deleted (with keys above it gone too), and the next prune still
/// keeps the `size` newest keys (counting upwards from the stale cut would keep five).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn b37_a_remembered_cut_that_is_gone_is_read_from_the_top() {
    let Some(url) = common::url() else { return };
    let store = common::fresh_store(&url).await;
    let j = job("gone");
    store.prepare(&prep(&[&j])).await.unwrap();
    let keep = Retention {
        size: 10,
        ttl_ms: None,
    };
    let now = store.now().await.unwrap();
    let slot = |i: i64| now - 1_000_000 + i * 1000;
    let mut started = Vec::new();
    for i in 0..25 {
        let l = run_once(&store, &j, slot(i), keep).await;
        started.push((l.started_at, l.fence));
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let kept = keys(&url, &store, &j).await;
    assert_eq!(
        kept[..10],
        (15..25).rev().map(|i| (slot(i), false)).collect::<Vec<_>>()[..]
    );
    // As if the cut had been remembered at key 10 once keys 0..=19 existed (10 keys at or
    // above it, 20 claimed as their job's newest run), and a prune of an older release had
    // then deleted keys 0..=14, key 10 among them, as its cut (key 15) allowed once keys
    // 20..=24 came.
    let schema = store.schema();
    common::exec(
        &url,
        &format!(
            "DELETE FROM \"{schema}\".anarchon_runs_attempts WHERE job = '{j}' AND slot < {s};
             DELETE FROM \"{schema}\".anarchon_runs WHERE job = '{j}' AND slot < {s};
             UPDATE \"{schema}\".anarchon_runs_cuts SET cut_slot = {cut}, cut_manual = false,
                 cut_at = {at}, cut_added = 20, fast_prunes = 0 WHERE job = '{j}'",
            s = slot(15),
            cut = slot(10),
            at = started[19].0,
        ),
    )
    .await
    .unwrap();
    // Two more slots: the second's finish is due to prune (more than `size / 8` claims
    // since the last prune).
    for i in 25..27 {
        run_once(&store, &j, slot(i), keep).await;
    }
    let kept = keys(&url, &store, &j).await;
    assert_eq!(
        kept,
        (17..27).rev().map(|i| (slot(i), false)).collect::<Vec<_>>(),
        "the 10 newest, read from the top"
    );
    common::drop_schema(&url, store.schema()).await;
}

/// [B-37] A cut remembered for one retention size is not counted upwards from for another:
/// after the job's `history_size` grew from 3 to 6, its prunes keep every key (5 of at most
/// 6), where counting upwards from the cut of size 3 would keep 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn b37_a_cut_remembered_for_another_size_is_read_from_the_top() {
    let Some(url) = common::url() else { return };
    let store = common::fresh_store(&url).await;
    let j = job("resize");
    store.prepare(&prep(&[&j])).await.unwrap();
    let now = store.now().await.unwrap();
    let slot = |i: i64| now - 1_000_000 + i * 1000;
    for (range, size) in [(0..12, 3), (12..14, 6)] {
        for i in range {
            run_once(&store, &j, slot(i), Retention { size, ttl_ms: None }).await;
        }
    }
    assert_eq!(
        keys(&url, &store, &j).await,
        (9..14).rev().map(|i| (slot(i), false)).collect::<Vec<_>>()
    );
    common::drop_schema(&url, store.schema()).await;
}

/// A claim whose run exists is `Taken` without locking the job's row: the instances that
/// lose a slot do not queue behind a transaction that holds the job (here one left open
/// holding the row lock), and do not write a lock into its row.
#[tokio::test(flavor = "multi_thread")]
async fn a_taken_claim_does_not_lock_the_job() {
    let Some(url) = common::url() else { return };
    let store = common::fresh_store(&url).await;
    let j = job("nolock");
    store.prepare(&prep(&[&j])).await.unwrap();
    let now = store.now().await.unwrap();
    won(store.claim(&claim(&j, now - 1000, "a", now)).await.unwrap());
    let locks = common::RowLocks::jobs(&url, store.schema(), &[j.as_str()]).await;
    // A batch of the taken claim and a claim of another job: neither waits.
    let other = job("free");
    let started = Instant::now();
    let out = tokio::time::timeout(
        Duration::from_secs(3),
        store.claim_many(&[
            claim(&j, now - 1000, "b", now),
            claim(&other, now - 1000, "b", now),
        ]),
    )
    .await
    .expect("a taken claim waited for the job's lock")
    .unwrap();
    assert_eq!(out[0], ClaimOutcome::Taken);
    won(out[1].clone());
    assert!(started.elapsed() < Duration::from_secs(3));
    // A claim that may insert still waits for the lock (until it is released).
    let waiting = claim_that_waits(
        &store,
        claim(&j, now, "b", now),
        "a claim that may insert did not wait",
    )
    .await;
    locks.release().await;
    assert_eq!(
        waiting.await.unwrap().unwrap(),
        ClaimOutcome::Overlap {
            running_slot: now - 1000
        }
    );
    common::drop_schema(&url, store.schema()).await;
}

/// [B-16] A result batch, which has no deadline, waits for its jobs' locks only as long as
/// its caller waits for it (the scheduler's store timeout, shorter than the store's own
/// here): the server ends its wait and rolls it back at that moment, releasing the job
/// locks it already holds. (It used to wait on in the server until the store's own timeout
/// after its caller gave up, holding those locks for nobody: here the batch locks `free`,
/// then waits for `held`, and a claim of `free` was late behind it.) Nothing is written,
/// and once the locks are free the same results are done.
#[tokio::test(flavor = "multi_thread")]
async fn b16_a_result_batch_waits_for_its_job_locks_only_as_long_as_its_caller() {
    let Some(url) = common::url() else { return };
    let store = common::fresh_store(&url).await;
    // Jobs are locked in name order: `free-...` before `held-...`.
    let (free, held) = (job("free"), job("held"));
    store
        .prepare(&Prepare {
            call_timeout: Duration::from_millis(600),
            ..prep(&[&free, &held])
        })
        .await
        .unwrap();
    let now = store.now().await.unwrap();
    let mut results = Vec::new();
    for j in [&free, &held] {
        let lease = won(store.claim(&claim(j, now, "a", now + 5_000)).await.unwrap());
        let f = Finish {
            status: RunStatus::Succeeded,
            error: None,
            retention: Retention::default(),
        };
        results.push((lease, f));
    }
    let locks = common::RowLocks::jobs(&url, store.schema(), &[held.as_str()]).await;
    let started = Instant::now();
    let out = store.finish_many(&results).await;
    let waited = started.elapsed();
    assert!(
        matches!(out, Err(Error::Timeout { .. })),
        "expected a timeout, got {out:?}"
    );
    assert!(waited < Duration::from_secs(3), "answered after {waited:?}");
    // The next slot of `free`, whose row the abandoned batch had locked.
    let other = common::store_on(&url, store.schema());
    let now = other.now().await.unwrap();
    let next = other
        .claim(&LeaseClaim {
            overlap: Overlap::Allow,
            not_after: now + 1_500,
            ..claim(&free, now + 1_000, "b", now)
        })
        .await
        .unwrap();
    assert!(
        matches!(next, ClaimOutcome::Won(_)),
        "the abandoned result batch still held the job: {next:?}"
    );
    locks.release().await;
    let runs: Vec<RunKey> = results.iter().map(|(l, _)| l.run.clone()).collect();
    for view in store.runs(&runs).await.unwrap() {
        assert_eq!(view.status, RunStatus::Running, "the abandoned batch wrote");
    }
    assert_eq!(
        store.finish_many(&results).await.unwrap(),
        vec![OwnerWrite::Done; 2]
    );
    common::drop_schema(&url, store.schema()).await;
}

/// [B-10, S-11] A claim or takeover batch waits for its jobs' locks only until its deadline
/// (the latest `not_after` in it): a batch whose job is held by another transaction answers
/// every item `late` just past that moment, with nothing written, instead of waiting on the
/// server after its caller gave up (under overload such waits queued every batch behind the
/// ones already late). Once the lock is free the same claims win.
#[tokio::test(flavor = "multi_thread")]
async fn b10_a_batch_waits_for_its_job_locks_only_until_its_deadline() {
    let Some(url) = common::url() else { return };
    let store = common::fresh_store(&url).await;
    let (held, free, expired) = (job("held"), job("free"), job("expired"));
    store
        .prepare(&prep(&[&held, &free, &expired]))
        .await
        .unwrap();
    let now = store.now().await.unwrap();
    let crashed = won(store
        .claim(&LeaseClaim {
            lease_ms: 1,
            ..claim(&expired, now - 5_000, "a", now)
        })
        .await
        .unwrap());
    let locks =
        common::RowLocks::jobs(&url, store.schema(), &[held.as_str(), expired.as_str()]).await;
    let now = store.now().await.unwrap();
    let soon = |c: LeaseClaim| LeaseClaim {
        not_after: now + 400,
        ..c
    };
    let started = Instant::now();
    let out = store
        .claim_many(&[
            soon(claim(&held, now, "b", now)),
            soon(claim(&free, now, "b", now)),
        ])
        .await
        .unwrap();
    let waited = started.elapsed();
    for outcome in &out {
        match outcome {
            ClaimOutcome::Late { store_now } => assert!(*store_now > now + 400, "{out:?}"),
            other => panic!("expected late, got {other:?}"),
        }
    }
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(3),
        "answered after {waited:?}"
    );
    let takeover = Takeover {
        run: crashed.run.clone(),
        seen_attempt: 1,
        instance_id: "b".into(),
        lease_ms: 30_000,
        max_attempts: 3,
        superseded: false,
        not_after: store.now().await.unwrap() + 400,
    };
    let started = Instant::now();
    assert_eq!(
        store.take_over(&takeover).await.unwrap(),
        TakeoverOutcome::Late
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    // Nothing was written by the late batches.
    for j in [&held, &free] {
        assert!(store.history(j, 10).await.unwrap().is_empty(), "{j}");
    }
    let views = store
        .unfinished_runs(std::slice::from_ref(&expired))
        .await
        .unwrap();
    assert_eq!(views.len(), 1);
    assert_eq!(
        (views[0].attempt, views[0].owner.as_deref()),
        (1, Some("a"))
    );
    // Deadlines at the ends of time: far past is late at once, far future waits (no
    // overflow, no error).
    let far_past = LeaseClaim {
        not_after: i64::MIN,
        ..claim(&free, now, "b", now)
    };
    assert!(matches!(
        store.claim(&far_past).await.unwrap(),
        ClaimOutcome::Late { .. }
    ));
    let far_future = claim_that_waits(
        &store,
        LeaseClaim {
            not_after: i64::MAX,
            ..claim(&held, now, "b", now)
        },
        "a far deadline waits for the lock",
    )
    .await;
    locks.release().await;
    won(far_future.await.unwrap().unwrap());
    let now = store.now().await.unwrap();
    let takeover = Takeover {
        not_after: now + 60_000,
        ..takeover
    };
    assert!(matches!(
        store.take_over(&takeover).await.unwrap(),
        TakeoverOutcome::Won(_)
    ));
    common::drop_schema(&url, store.schema()).await;
}

/// [B-19] `unfinished_runs` over more jobs than one statement asks about (1024): every
/// running run of the jobs asked about is answered, whichever statement its job fell in,
/// finished runs and runs of other jobs are not, sorted by run.
#[tokio::test(flavor = "multi_thread")]
async fn b19_unfinished_runs_of_many_jobs_spans_statements() {
    let Some(url) = common::url() else { return };
    let store = common::fresh_store(&url).await;
    let jobs: Vec<JobName> = (0..2500).map(|i| job(&format!("many{i}"))).collect();
    let refs: Vec<&JobName> = jobs.iter().collect();
    store.prepare(&prep(&refs)).await.unwrap();
    let now = store.now().await.unwrap();
    // Running runs in the first, second and third statement's share of jobs, one finished.
    let picked = [0usize, 1023, 1024, 2047, 2048, 2499];
    let claims: Vec<LeaseClaim> = picked
        .iter()
        .map(|&i| claim(&jobs[i], now - 1000, "a", now))
        .collect();
    let leases: Vec<Lease> = store
        .claim_many(&claims)
        .await
        .unwrap()
        .into_iter()
        .map(won)
        .collect();
    let f = Finish {
        status: RunStatus::Succeeded,
        error: None,
        retention: Retention::default(),
    };
    assert_eq!(
        store.finish(&leases[2], &f).await.unwrap(),
        OwnerWrite::Done
    );
    // Asked about all but job 2499.
    let views = store.unfinished_runs(&jobs[..2499]).await.unwrap();
    let mut expected: Vec<RunKey> = [0usize, 1023, 2047, 2048]
        .iter()
        .map(|&i| RunKey::new(jobs[i].clone(), now - 1000))
        .collect();
    expected.sort();
    let got: Vec<RunKey> = views.iter().map(|v| v.run.clone()).collect();
    assert_eq!(got, expected);
    assert!(
        views
            .iter()
            .all(|v| v.status == RunStatus::Running && v.store_now >= now)
    );
    common::drop_schema(&url, store.schema()).await;
}

/// Runs `script` (simple protocol) and reads the plan its `EXPLAIN (ANALYZE, FORMAT JSON)`
/// answered (the row that holds a JSON array; other statements' rows, such as a setting's,
/// are passed over), with the rows each of its scans read (see [`rows_read`]).
async fn explained(
    client: &tokio_postgres::Client,
    script: &str,
) -> (serde_json::Value, Vec<(String, u64)>) {
    let answer = client.simple_query(script).await.unwrap();
    let text = answer
        .iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => {
                row.get(0).filter(|t| t.starts_with('[')).map(str::to_owned)
            }
            _ => None,
        })
        .expect("the script answered a JSON plan");
    let plan: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut read = Vec::new();
    rows_read(&plan, &mut read);
    (plan, read)
}

/// The rows each scan of a plan (EXPLAIN ANALYZE, JSON) read, by the index or table it read.
fn rows_read(plan: &serde_json::Value, out: &mut Vec<(String, u64)>) {
    if let Some(node) = plan.as_object() {
        if let Some(rows) = node.get("Actual Rows").and_then(|r| r.as_u64()) {
            let loops = node
                .get("Actual Loops")
                .and_then(|r| r.as_u64())
                .unwrap_or(1);
            let read = node.get("Rows Removed by Filter").and_then(|r| r.as_u64());
            let source = node
                .get("Index Name")
                .or_else(|| node.get("Relation Name"))
                .and_then(|n| n.as_str());
            if let Some(source) = source {
                out.push((source.to_owned(), (rows + read.unwrap_or(0)) * loops));
            }
        }
        for value in node.values() {
            rows_read(value, out);
        }
    } else if let Some(list) = plan.as_array() {
        for value in list {
            rows_read(value, out);
        }
    }
}

/// [B-14] The backups' poll (`newest_unfinished_runs`) over 100 jobs with 60 unfinished runs
/// each (a saturated store's backlog), 3 runs of one job handed over, answers each job's 4
/// newest and the 3 handed over, and reads about that many runs to do it: the newest
/// through the index of running runs, read backwards, the others through the index of runs
/// handed over. (When its statistics say a job has one or two unfinished runs, the planner
/// reads them with a bitmap scan and sorts them, which costs the same; a single job with 300
/// among 500 with one is read that way, all 300.) A table created before that index existed
/// answers the same.
#[tokio::test(flavor = "multi_thread")]
async fn b14_the_sweep_reads_each_jobs_newest_runs_and_those_handed_over() {
    let Some(url) = common::url() else { return };
    let store = common::fresh_store(&url).await;
    let jobs: Vec<JobName> = (0..100).map(|i| job(&format!("piled{i}"))).collect();
    let piled = jobs[0].clone();
    let refs: Vec<&JobName> = jobs.iter().collect();
    store.prepare(&prep(&refs)).await.unwrap();
    let now = store.now().await.unwrap();
    let mut leases = Vec::new();
    for i in 0..60 {
        let claims: Vec<LeaseClaim> = jobs
            .iter()
            .map(|j| LeaseClaim {
                overlap: Overlap::Allow,
                ..claim(j, now - (60 - i) * 1_000, "a", now)
            })
            .collect();
        let mut won_now: Vec<Lease> = store
            .claim_many(&claims)
            .await
            .unwrap()
            .into_iter()
            .map(won)
            .collect();
        leases.push(won_now.swap_remove(0));
    }
    for lease in &leases[10..13] {
        assert_eq!(store.release(lease).await.unwrap(), OwnerWrite::Done);
    }
    let mut expected: Vec<RunKey> = leases[10..13]
        .iter()
        .chain(&leases[56..])
        .map(|l| l.run.clone())
        .collect();
    expected.sort();
    let listed = |views: Vec<anarchon_core::store::RunView>| -> Vec<RunKey> {
        views.into_iter().map(|v| v.run).collect()
    };
    let views = store
        .newest_unfinished_runs(std::slice::from_ref(&piled), 4)
        .await
        .unwrap();
    assert_eq!(listed(views), expected);

    let (client, task) = common::connect(&url).await;
    client
        .batch_execute(&format!("ANALYZE \"{}\".anarchon_runs", store.schema()))
        .await
        .unwrap();
    // Prepared as the store prepares it; the simple protocol answers the plan as text.
    let list: Vec<String> = jobs.iter().map(|j| format!("'{j}'")).collect();
    let (plan, read) = explained(
        &client,
        &format!(
            "PREPARE sweep(text[], int8) AS {};
             EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE sweep(ARRAY[{}], 4);",
            store.sweep_statement(),
            list.join(",")
        ),
    )
    .await;
    let total: u64 = read.iter().map(|(_, n)| n).sum();
    assert!(total <= 100 * 5 + 3, "the sweep read {read:?}: {plan}");
    assert!(
        read.iter()
            .all(|(source, _)| source.ends_with("_running") || source.ends_with("_released")),
        "{read:?}"
    );

    // A table of an earlier release, without the index of runs handed over.
    client
        .batch_execute(&format!(
            "DROP INDEX \"{}\".anarchon_runs_released",
            store.schema()
        ))
        .await
        .unwrap();
    drop(client);
    let _ = task.await;
    let views = store
        .newest_unfinished_runs(std::slice::from_ref(&piled), 4)
        .await
        .unwrap();
    assert_eq!(listed(views), expected);
    common::drop_schema(&url, store.schema()).await;
}

/// [B-37] A prune is planned for the tables as they are when it runs, never by a plan
/// cached at the connection's first prune: a store's first prunes come at its first claims,
/// on tables of a few thousand runs, where reading the whole runs table is the cheaper
/// delete, and a connection that kept such a generic plan read every run at every prune
/// once the tables had grown (1.0 million runs per prune, 3 x 10,000 `every 1s`). Run
/// three times under the store's own settings, the prune's prepared statement has been
/// planned three times and has no generic plan.
#[tokio::test(flavor = "multi_thread")]
async fn b37_a_prune_is_planned_for_the_tables_as_they_are_now() {
    let Some(url) = common::url() else { return };
    let store = common::fresh_store(&url).await;
    let pruned: Vec<JobName> = (0..2).map(|i| job(&format!("grown{i}"))).collect();
    let refs: Vec<&JobName> = pruned.iter().collect();
    store.prepare(&prep(&refs)).await.unwrap();
    let now = store.now().await.unwrap();
    for j in &pruned {
        for i in 0..10 {
            let c = claim(j, now - (60 - i) * 1_000, "a", now);
            let lease = won(store.claim(&c).await.unwrap());
            let f = Finish {
                status: RunStatus::Succeeded,
                error: None,
                retention: Retention::default(),
            };
            assert_eq!(store.finish(&lease, &f).await.unwrap(), OwnerWrite::Done);
        }
    }
    store.pruning_settled().await;

    let (client, task) = common::connect(&url).await;
    // `pg_prepared_statements` counts plans from PostgreSQL 14 on.
    let counted = client
        .query_one(
            "SELECT current_setting('server_version_num')::int >= 140000",
            &[],
        )
        .await
        .unwrap()
        .get::<_, bool>(0);
    if !counted {
        eprintln!("skipped: the server counts no plans per prepared statement (before 14)");
        common::drop_schema(&url, store.schema()).await;
        return;
    }
    let [settings, prune] = store.prune_statements();
    let list: Vec<String> = pruned.iter().map(|j| format!("'{j}'")).collect();
    let jobs = format!("ARRAY[{}]::text[]", list.join(","));
    client
        .batch_execute(&format!("PREPARE p(text[], int8[], int8[]) AS {prune}"))
        .await
        .unwrap();
    for size in [8, 5, 3] {
        client
            .batch_execute(&format!(
                "BEGIN; {settings};
                 EXECUTE p({jobs}, ARRAY[{size}, {size}]::int8[], ARRAY[NULL, NULL]::int8[]);
                 COMMIT;"
            ))
            .await
            .unwrap();
    }
    let row = client
        .query_one(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = 'p'",
            &[],
        )
        .await
        .unwrap();
    let (generic, custom): (i64, i64) = (row.get(0), row.get(1));
    assert_eq!((generic, custom), (0, 3));
    drop(client);
    let _ = task.await;
    for j in &pruned {
        assert_eq!(store.history(j, 100).await.unwrap().len(), 3);
    }
    common::drop_schema(&url, store.schema()).await;
}

/// [B-37] A prune reads each job's rows through the history's index, never the whole
/// history table: it deletes the rows below each job's cut by their `ctid` and finds them
/// with a range scan per job. Planned by row estimates alone, the prune of 128 jobs read the
/// history table from end to end twice (to find the rows below the cuts and to delete them
/// by `ctid`), 1.1 million rows each time, once the tables had grown (3 x 10,000 `every 1s`
/// past the pruning point, autovacuum off: 1.4 s a prune, 72,000 buffers read, the server
/// saturated by three such prunes at all times); and it read every job's remembered cut.
/// 128 of 2,000 jobs with 150 finished runs each, pruned to 100, with and without the
/// tables' statistics.
#[tokio::test(flavor = "multi_thread")]
async fn b37_a_prune_reads_only_the_jobs_it_prunes() {
    let Some(url) = common::url() else { return };
    let store = common::fresh_store(&url).await;
    let schema = store.schema().to_owned();
    let (client, task) = common::connect(&url).await;
    // 2,000 jobs x 150 finished runs, each with its first attempt's row, as claims and
    // results leave them (written directly: 300,000 claims would take minutes).
    client
        .batch_execute(&format!(
            "INSERT INTO \"{schema}\".anarchon_runs_jobs (job, fence, registered_at)
             SELECT 'many' || j, 150, 0 FROM generate_series(0, 1999) j;
             INSERT INTO \"{schema}\".anarchon_runs
                 (job, slot, status, attempt, counted_starts, owner, expires_at,
                  scheduled_at, started_at)
             SELECT 'many' || j, s * 1000, 'succeeded', 1, 1, NULL, s * 1000 + 30000,
                    s * 1000, s * 1000
             FROM generate_series(1, 150) s, generate_series(0, 1999) j;
             INSERT INTO \"{schema}\".anarchon_runs_attempts
                 (job, slot, manual, attempt, instance_id, scheduled_at, reason, status,
                  fence, started_at, finished_at, error)
             SELECT 'many' || j, s * 1000, false, 1, 'a', s * 1000, 'scheduled', 'succeeded',
                    s, s * 1000, s * 1000 + 5, NULL
             FROM generate_series(1, 150) s, generate_series(0, 1999) j;
             INSERT INTO \"{schema}\".anarchon_runs_cuts (job)
             SELECT 'many' || j FROM generate_series(0, 19999) j;
             INSERT INTO \"{schema}\".anarchon_runs
                 (job, slot, status, attempt, counted_starts, owner, expires_at,
                  scheduled_at, started_at, instance_id, reason, fence)
             SELECT 'busy' || j, 1000, 'running', 1, 1, 'b', 9000000000000, 1000, 1000,
                    'b', 'scheduled', 1
             FROM generate_series(0, 9999) j;"
        ))
        .await
        .unwrap();
    let [settings, prune] = store.prune_statements();
    client
        .batch_execute(&format!("PREPARE p(text[], int8[], int8[]) AS {prune}"))
        .await
        .unwrap();
    for (round, analyzed) in [(0, false), (1, true)] {
        if analyzed {
            client
                .batch_execute(&format!(
                    "ANALYZE \"{schema}\".anarchon_runs; ANALYZE \"{schema}\".anarchon_runs_attempts"
                ))
                .await
                .unwrap();
        }
        let jobs: Vec<String> = (0..128)
            .map(|i| format!("'many{}'", round * 128 + i * 7))
            .collect();
        let (_, read) = explained(
            &client,
            &format!(
                "BEGIN; {settings};
                 EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE p(ARRAY[{}]::text[],
                     array_fill(100::int8, ARRAY[128]), array_fill(NULL::int8, ARRAY[128]));
                 COMMIT;",
                jobs.join(",")
            ),
        )
        .await;
        let total: u64 = read.iter().map(|(_, n)| n).sum();
        let cuts: u64 = read
            .iter()
            .filter(|(source, _)| source.starts_with("anarchon_runs_cuts"))
            .map(|(_, n)| n)
            .sum();
        // Each job's remembered cut, by key: not every job's (20,000 rows, as many jobs
        // as a large deployment has, most of them without runs here).
        assert!(
            cuts <= 128 * 4,
            "analyzed {analyzed}: the prune read {cuts} rows of the cuts: {read:?}"
        );
        // Whether a cut's own run is running: by its key, not by reading every running
        // run (10,000 of other jobs here, as many as a large deployment has in flight).
        let running: u64 = read
            .iter()
            .filter(|(source, _)| source == "anarchon_runs_running")
            .map(|(_, n)| n)
            .sum();
        assert!(
            running <= 128 * 4,
            "analyzed {analyzed}: the prune read {running} running runs: {read:?}"
        );
        // Per job: its 100 newest keys from the top, the 50 rows below the cut, their
        // runs, and both deleted by `ctid`: 350; each table holds 300,000 rows.
        assert!(
            total <= 128 * 2 * 350,
            "analyzed {analyzed}: the prune read {total} rows: {read:?}"
        );
        let kept = client
            .query_one(
                &format!(
                    "SELECT count(*) FROM \"{schema}\".anarchon_runs_attempts
                     WHERE job = ANY($1::text[])"
                ),
                &[&jobs
                    .iter()
                    .map(|j| j.trim_matches('\'').to_owned())
                    .collect::<Vec<_>>()],
            )
            .await
            .unwrap()
            .get::<_, i64>(0);
        assert_eq!(kept, 128 * 100, "analyzed {analyzed}");
    }
    drop(client);
    let _ = task.await;
    common::drop_schema(&url, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn b33_ten_concurrent_prepares_on_a_fresh_schema() {
    let Some(url) = common::url() else { return };
    let schema = common::fresh_schema();
    let j = job("boot");
    let tasks: Vec<_> = (0..10)
        .map(|i| {
            let store = common::store_on(&url, &schema);
            let p = Prepare {
                jobs: vec![j.clone()],
                instance_id: format!("i{i}"),
                call_timeout: std::time::Duration::from_secs(5),
            };
            tokio::spawn(async move { store.prepare(&p).await })
        })
        .collect();
    for t in tasks {
        t.await.unwrap().expect("every concurrent prepare succeeds");
    }
    let store = common::store_on(&url, &schema);
    assert_eq!(store.known_jobs().await.unwrap(), vec![j]);
    common::drop_schema(&url, &schema).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn b42_newer_schema_is_refused_and_left_untouched() {
    let Some(url) = common::url() else { return };
    let store = common::fresh_store(&url).await;
    let schema = store.schema().to_owned();
    common::exec(
        &url,
        &format!(
            "UPDATE \"{schema}\".anarchon_runs_meta SET value = '99' WHERE key = 'schema_version'"
        ),
    )
    .await
    .unwrap();
    let j = job("newer");
    let err = store.prepare(&prep(&[&j])).await.unwrap_err();
    match &err {
        Error::SchemaTooNew {
            found, supported, ..
        } => assert_eq!((*found, *supported), (99, 4)),
        other => panic!("expected SchemaTooNew, got {other:?}"),
    }
    assert!(err.to_string().contains("nothing was changed"), "{err}");
    // Nothing changed: the job was not registered.
    assert!(store.known_jobs().await.unwrap().is_empty());
    common::drop_schema(&url, &schema).await;
}

/// [B-42] What version `from` left behind is migrated in place: 1 lacks the jobs' count of
/// claims since pruning and the table of remembered cuts, 2 lacks the table, 3 the history
/// of a run's current attempt in the run's row (an older version wrote a history row for
/// every attempt, and the running run below has one).
async fn schema_is_migrated_in_place(from: u32) {
    let Some(url) = common::url() else { return };
    let store = common::fresh_store(&url).await;
    let schema = store.schema().to_owned();
    let j = job("old");
    store.prepare(&prep(&[&j])).await.unwrap();
    let now = store.now().await.unwrap();
    let l = won(store.claim(&claim(&j, now - 1000, "a", now)).await.unwrap());
    store.pruning_settled().await;
    let unpruned_column = if from < 2 {
        format!("ALTER TABLE \"{schema}\".anarchon_runs_jobs DROP COLUMN unpruned;")
    } else {
        String::new()
    };
    let cuts = if from < 3 {
        format!("DROP TABLE \"{schema}\".anarchon_runs_cuts;")
    } else {
        format!(
            "ALTER TABLE \"{schema}\".anarchon_runs_cuts DROP COLUMN cut_added,
                 DROP COLUMN cut_older, DROP COLUMN cut_floor;"
        )
    };
    common::exec(
        &url,
        &format!(
            "{unpruned_column}
             {cuts}
             INSERT INTO \"{schema}\".anarchon_runs_attempts
                 (job, slot, manual, attempt, instance_id, scheduled_at, reason, status, fence,
                  started_at)
                 SELECT job, slot, false, attempt, instance_id, scheduled_at, reason, status,
                        fence, started_at
                 FROM \"{schema}\".anarchon_runs;
             ALTER TABLE \"{schema}\".anarchon_runs DROP COLUMN instance_id, DROP COLUMN reason,
                 DROP COLUMN fence, DROP COLUMN finished_at, DROP COLUMN error;
             ALTER TABLE \"{schema}\".anarchon_runs_jobs DROP COLUMN keys_added,
                 DROP COLUMN keys_older;
             UPDATE \"{schema}\".anarchon_runs_meta SET value = '{from}'
                 WHERE key = 'schema_version'"
        ),
    )
    .await
    .unwrap();
    let newer = common::store_on(&url, &schema);
    newer
        .prepare(&prep(&[&j]))
        .await
        .unwrap_or_else(|e| panic!("version {from} is migrated: {e}"));
    assert_eq!(unpruned(&url, &newer, &j).await, 0);
    // The run and the fence survived; claims go on.
    let f = Finish {
        status: RunStatus::Succeeded,
        error: None,
        retention: Retention::default(),
    };
    assert_eq!(newer.finish(&l, &f).await.unwrap(), OwnerWrite::Done);
    // The older version's running attempt is finished in its own history row, read once.
    let h = newer.history(&j, 10).await.unwrap();
    assert_eq!(h.len(), 1, "{h:?}");
    assert_eq!(
        (h[0].attempt, h[0].status, h[0].finished_at.is_some()),
        (1, RunStatus::Succeeded, true)
    );
    let l2 = won(newer.claim(&claim(&j, now, "a", now)).await.unwrap());
    assert!(l2.fence > l.fence);
    assert_eq!(unpruned(&url, &newer, &j).await, 0, "a first claim prunes");
    // The prune after it remembered the job's cut in the table the migration created (a
    // prune that fails is only logged).
    newer.pruning_settled().await;
    assert!(
        fast_prunes(&url, &newer, &j).await.is_some(),
        "the prune ran on the migrated tables"
    );
    assert_eq!(newer.finish(&l2, &f).await.unwrap(), OwnerWrite::Done);
    won(newer.claim(&claim(&j, now + 1, "a", now)).await.unwrap());
    assert_eq!(unpruned(&url, &newer, &j).await, 1);
    let version = rows_for(
        &url,
        &format!("SELECT value FROM \"{schema}\".anarchon_runs_meta WHERE key = $1"),
        "schema_version",
    )
    .await;
    assert_eq!(version[0].get::<_, String>(0), "4");
    // The new claims' attempts are their runs' rows: three attempts in the history, one
    // history row (the older version's).
    assert_eq!(newer.history(&j, 10).await.unwrap().len(), 3);
    let rows = rows_for(
        &url,
        &format!("SELECT count(*) FROM \"{schema}\".anarchon_runs_attempts WHERE job = $1"),
        j.as_str(),
    )
    .await;
    assert_eq!(rows[0].get::<_, i64>(0), 1);
    common::drop_schema(&url, &schema).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn b42_version_1_schema_is_migrated_in_place() {
    schema_is_migrated_in_place(1).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn b42_version_2_schema_is_migrated_in_place() {
    schema_is_migrated_in_place(2).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn b42_version_3_schema_is_migrated_in_place() {
    schema_is_migrated_in_place(3).await;
}

/// The fill factor of each of the store's five tables (`None`: the server's default).
async fn fill_factors(url: &str, schema: &str) -> Vec<(String, Option<String>)> {
    let (client, task) = common::connect(url).await;
    let rows = client
        .query(
            "SELECT c.relname::text,
                    (SELECT o FROM unnest(c.reloptions) o WHERE o LIKE 'fillfactor=%')
             FROM pg_catalog.pg_class c
             JOIN pg_catalog.pg_namespace s ON s.oid = c.relnamespace
             WHERE s.nspname = $1 AND c.relkind = 'r' ORDER BY 1",
            &[&schema],
        )
        .await
        .unwrap();
    drop(client);
    let _ = task.await;
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}

/// The history and jobs tables leave half of each page free, so that a result (and a
/// claim's fence) is written beside its row without new index entries; tables created
/// before get it at the next `prepare`, a fill factor someone chose stays, and a table that
/// stays locked keeps its own without failing `prepare`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn history_and_jobs_tables_leave_room_for_updates_beside_their_rows() {
    let Some(url) = common::url() else { return };
    let store = common::fresh_store(&url).await;
    let schema = store.schema().to_owned();
    let j = job("ff");
    store.prepare(&prep(&[&j])).await.unwrap();
    let half = Some("fillfactor=50".to_owned());
    let created = vec![
        ("anarchon_runs".to_owned(), None),
        ("anarchon_runs_attempts".to_owned(), half.clone()),
        ("anarchon_runs_cuts".to_owned(), half.clone()),
        ("anarchon_runs_jobs".to_owned(), half.clone()),
        ("anarchon_runs_meta".to_owned(), None),
    ];
    assert_eq!(fill_factors(&url, &schema).await, created);

    // Tables of an older version have none; someone chose 70 for the jobs table.
    common::exec(
        &url,
        &format!(
            "ALTER TABLE \"{schema}\".anarchon_runs_attempts RESET (fillfactor);
             ALTER TABLE \"{schema}\".anarchon_runs_jobs SET (fillfactor = 70)"
        ),
    )
    .await
    .unwrap();
    // While another transaction holds the history table against DDL, `prepare` waits a
    // second for it, then goes on without it.
    let (holder, task) = common::connect(&url).await;
    holder
        .batch_execute(&format!(
            "BEGIN; LOCK TABLE \"{schema}\".anarchon_runs_attempts IN SHARE UPDATE EXCLUSIVE MODE"
        ))
        .await
        .unwrap();
    // (Without the lock timeout the statement would wait for the holder until `prepare`'s
    // own bound, twice the store timeout, and fail it.)
    common::store_on(&url, &schema)
        .prepare(&prep(&[&j]))
        .await
        .expect("a locked table does not fail prepare");
    let kept = fill_factors(&url, &schema).await;
    assert_eq!(kept[1], ("anarchon_runs_attempts".to_owned(), None));
    assert_eq!(
        kept[3],
        (
            "anarchon_runs_jobs".to_owned(),
            Some("fillfactor=70".to_owned())
        )
    );
    holder.batch_execute("ROLLBACK").await.unwrap();
    drop(holder);
    let _ = task.await;

    // Once it is free, the next start sets it; the one chosen stays.
    let newer = common::store_on(&url, &schema);
    newer.prepare(&prep(&[&j])).await.unwrap();
    let set = fill_factors(&url, &schema).await;
    assert_eq!(set[1], ("anarchon_runs_attempts".to_owned(), half));
    assert_eq!(set[3].1.as_deref(), Some("fillfactor=70"));
    // Claims and results go on as before.
    let now = newer.now().await.unwrap();
    let l = won(newer.claim(&claim(&j, now - 1000, "a", now)).await.unwrap());
    let f = Finish {
        status: RunStatus::Succeeded,
        error: None,
        retention: Retention::default(),
    };
    assert_eq!(newer.finish(&l, &f).await.unwrap(), OwnerWrite::Done);
    common::drop_schema(&url, &schema).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn synchronous_commit_is_on_unless_turned_off() {
    let Some(url) = common::url() else { return };
    let setting = |store: PostgresStore| async move {
        let client = store.pool().get().await.unwrap();
        let row = client
            .query_one("SELECT current_setting('synchronous_commit')", &[])
            .await
            .unwrap();
        row.get::<_, String>(0)
    };
    let default = PostgresStore::connect_with(&url, PostgresOptions::default())
        .await
        .unwrap();
    assert_eq!(setting(default).await, "on");
    let off =
        PostgresStore::connect_with(&url, PostgresOptions::default().synchronous_commit(false))
            .await
            .unwrap();
    assert_eq!(setting(off).await, "off");
    // Beside options the URL sets itself.
    let sep = if url.contains('?') { '&' } else { '?' };
    let with_options = format!("{url}{sep}options=-c%20work_mem%3D8MB");
    let off = PostgresStore::connect_with(
        &with_options,
        PostgresOptions::default().synchronous_commit(false),
    )
    .await
    .unwrap();
    assert_eq!(setting(off.clone()).await, "off");
    let client = off.pool().get().await.unwrap();
    let row = client
        .query_one("SELECT current_setting('work_mem')", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "8MB");
}

#[tokio::test(flavor = "multi_thread")]
async fn b42_table_of_another_shape_is_refused() {
    let Some(url) = common::url() else { return };
    let schema = common::fresh_schema();
    common::exec(
        &url,
        &format!(
            "CREATE SCHEMA \"{schema}\";
             CREATE TABLE \"{schema}\".anarchon_runs (id serial PRIMARY KEY, slot integer, note text);"
        ),
    )
    .await
    .unwrap();
    let store = common::store_on(&url, &schema);
    let err = store.prepare(&prep(&[])).await.unwrap_err();
    match &err {
        Error::Corrupt {
            location, reason, ..
        } => {
            assert!(
                location.contains(&format!("{schema}.anarchon_runs")),
                "{location}"
            );
            assert!(
                reason.contains("slot is integer, expected bigint"),
                "{reason}"
            );
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    // Nothing was created beside it.
    let err = store.known_jobs().await.unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
    common::drop_schema(&url, &schema).await;
}

#[tokio::test]
async fn bad_input_is_refused_at_construction() {
    let err = PostgresStore::unconnected("redis://nope", PostgresOptions::default()).unwrap_err();
    assert!(matches!(err, PostgresError::InvalidUrl { .. }), "{err:?}");
    let err = PostgresStore::unconnected(
        "postgres://u:hunter2@h:notaport/db",
        PostgresOptions::default(),
    )
    .unwrap_err();
    assert!(!err.to_string().contains("hunter2"), "{err}");
    let err = PostgresStore::unconnected(
        "postgres://localhost/db",
        PostgresOptions::default().table("Robert'); DROP TABLE students;--"),
    )
    .unwrap_err();
    assert!(matches!(err, PostgresError::InvalidTable { .. }), "{err:?}");
    let err = PostgresStore::unconnected(
        "postgres://localhost/db",
        PostgresOptions::default().schema(""),
    )
    .unwrap_err();
    assert!(
        matches!(err, PostgresError::InvalidSchema { .. }),
        "{err:?}"
    );
    let core: Error = err.into();
    assert!(matches!(
        core,
        Error::InvalidOption {
            option: "schema",
            ..
        }
    ));
}

#[tokio::test]
async fn refused_connection_fails_fast_and_redacts_the_password() {
    // Port 1 on localhost: nothing listens there.
    let started = Instant::now();
    let err = PostgresStore::connect_with(
        "postgres://app:hunter2@127.0.0.1:1/db",
        PostgresOptions::default().connect_timeout(Duration::from_secs(2)),
    )
    .await
    .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        !text.contains("hunter2") && text.contains("127.0.0.1:1"),
        "{text}"
    );
}

#[tokio::test]
async fn unroutable_host_fails_within_the_connect_timeout() {
    // TEST-NET-1 (RFC 5737): packets go nowhere, so only the timeout ends the attempt.
    let started = Instant::now();
    let err = PostgresStore::connect_with(
        "postgres://app@192.0.2.1:5432/db",
        PostgresOptions::default().connect_timeout(Duration::from_millis(500)),
    )
    .await
    .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(
        matches!(err, Error::Unavailable { .. } | Error::Timeout { .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn unknown_role_and_database_are_unavailable() {
    let Some(url) = common::url() else { return };
    let cfg: tokio_postgres::Config = url.parse().unwrap();
    let host = match &cfg.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(h) => h.clone(),
        #[allow(unreachable_patterns)] // Unix sockets exist only on Unix.
        _ => "localhost".into(),
    };
    let port = cfg.get_ports().first().copied().unwrap_or(5432);
    let bad_role = format!("postgres://no_such_role_anarchon:pw@{host}:{port}/postgres");
    let err = PostgresStore::connect_with(&bad_role, PostgresOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    assert!(!err.to_string().contains(":pw@"), "{err}");
    let user = cfg.get_user().unwrap_or("postgres");
    let bad_db = format!("postgres://{user}@{host}:{port}/no_such_db_anarchon");
    let err = PostgresStore::connect_with(&bad_db, PostgresOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_users_pool_stays_open_after_close() {
    let Some(url) = common::url() else { return };
    let cfg: tokio_postgres::Config = url.parse().unwrap();
    let manager = anarchon_postgres::deadpool_postgres::Manager::new(cfg, tokio_postgres::NoTls);
    let pool = anarchon_postgres::deadpool_postgres::Pool::builder(manager)
        .max_size(2)
        .build()
        .unwrap();
    let schema = common::fresh_schema();
    let store = PostgresStore::from_pool(pool.clone(), PostgresOptions::default().schema(&schema))
        .await
        .unwrap();
    store.prepare(&prep(&[])).await.unwrap();
    // Without a listen URL a user's pool gives no release stream: backups poll.
    assert!(store.subscribe_releases().is_none());
    store.close().await.unwrap();
    assert!(matches!(
        store.now().await.unwrap_err(),
        Error::Unavailable { .. }
    ));
    let client = pool.get().await.expect("the user's pool is still open");
    client.simple_query("SELECT 1").await.unwrap();
    drop(client);
    common::drop_schema(&url, &schema).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn statements_are_bounded_by_the_timeout() {
    let Some(url) = common::url() else { return };
    let store = common::fresh_store(&url).await;
    let schema = store.schema().to_owned();
    let slow = PostgresStore::connect_with(
        &url,
        PostgresOptions::default()
            .schema(&schema)
            .timeout(Duration::from_millis(300)),
    )
    .await
    .unwrap();
    // Hold the jobs table's lock so a claim has to wait for it.
    let (client, task) = common::connect(&url).await;
    client
        .batch_execute(&format!(
            "BEGIN; LOCK TABLE \"{schema}\".anarchon_runs_jobs IN ACCESS EXCLUSIVE MODE"
        ))
        .await
        .unwrap();
    let j = job("slow");
    let now = slow.now().await.unwrap();
    let started = Instant::now();
    let err = slow.claim(&claim(&j, now, "a", now)).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    client.batch_execute("ROLLBACK").await.unwrap();
    drop(client);
    let _ = task.await;
    // The store still works afterwards.
    won(slow.claim(&claim(&j, now, "a", now)).await.unwrap());
    drop(Arc::new(slow));
    common::drop_schema(&url, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn b35_racing_start_and_finish_records_of_a_manual_run_end_finished() {
    // The scheduler writes a manual run's start record and its finish record from two tasks,
    // so on a pool they can arrive in either order, or at the same moment.
    let Some(url) = common::url() else { return };
    let store = common::fresh_store(&url).await;
    let j = job("manualrace");
    let now = store.now().await.unwrap();
    for i in 0..40 {
        let start = anarchon_core::store::RunRecord {
            job: j.clone(),
            slot: now + i,
            scheduled_at: now + i,
            instance_id: "a".into(),
            manual: true,
            attempt: 1,
            reason: Reason::Manual,
            status: RunStatus::Running,
            fence: 0,
            started_at: now + i,
            finished_at: None,
            error: None,
        };
        let mut end = start.clone();
        end.status = RunStatus::Succeeded;
        end.finished_at = Some(now + i + 1);
        let (s1, s2) = (store.clone(), store.clone());
        let (r1, r2) = tokio::join!(
            tokio::spawn(async move { s1.record_manual(&start, Retention::default()).await }),
            tokio::spawn(async move { s2.record_manual(&end, Retention::default()).await }),
        );
        r1.unwrap().unwrap();
        r2.unwrap().unwrap();
    }
    let h = store.history(&j, 100).await.unwrap();
    assert_eq!(h.len(), 40);
    assert!(h.iter().all(|r| r.status == RunStatus::Succeeded), "{h:#?}");
    common::drop_schema(&url, store.schema()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn lost_connections_are_replaced_and_the_listener_reconnects() {
    // A server restart, seen from one store: its backends are terminated. Only this test's
    // own backends are touched (the server is shared).
    let Some(url) = common::url() else { return };
    let schema = common::fresh_schema();
    let store = PostgresStore::connect_with(
        &url,
        PostgresOptions::default().schema(&schema).pool_size(1),
    )
    .await
    .unwrap();
    let j = job("restart");
    store.prepare(&prep(&[&j])).await.unwrap();
    let mut releases = store.subscribe_releases().unwrap();
    let pid: i32 = {
        let client = store.pool().get().await.unwrap();
        client
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .unwrap()
            .get(0)
    };
    let listen = format!("LISTEN \"{}\"", store.channel());
    common::exec(
        &url,
        &format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE pid = {pid} OR query = '{}'",
            listen.replace('\'', "''")
        ),
    )
    .await
    .unwrap();
    // The pool notices the closed connection and opens another; at most one call may fail
    // with Unavailable before that.
    let now = match store.now().await {
        Ok(now) => now,
        Err(e) => {
            assert!(matches!(e, Error::Unavailable { .. }), "{e:?}");
            store
                .now()
                .await
                .expect("a new connection after the old one was lost")
        }
    };
    let lease = won(store.claim(&claim(&j, now, "a", now)).await.unwrap());
    // The listener reconnects after its backoff (100 ms first).
    let mut listening = false;
    for _ in 0..50 {
        let rows = {
            let client = store.pool().get().await.unwrap();
            client
                .query(
                    "SELECT 1 FROM pg_stat_activity WHERE query = $1",
                    &[&listen],
                )
                .await
                .unwrap()
        };
        if !rows.is_empty() {
            listening = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(listening, "the listener did not reconnect");
    assert_eq!(store.release(&lease).await.unwrap(), OwnerWrite::Done);
    let key = tokio::time::timeout(Duration::from_secs(2), releases.recv())
        .await
        .expect("notification after the listener reconnected")
        .unwrap();
    assert_eq!(key, lease.run);
    store.close().await.unwrap();
    common::drop_schema(&url, &schema).await;
}
