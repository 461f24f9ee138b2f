//! Store-level conformance tests for [`LeaseStore`]: each calls the trait directly and checks
//! one clause of the contract in [`crate::store`].

use std::sync::Arc;

use crate::history::{Reason, Retention, RunStatus};
use crate::store::{
    BatchLimits, ClaimOutcome, EpochMs, Finish, JobName, Lease, LeaseClaim, LeaseStore, Overlap,
    OwnerWrite, Prepare, Renewal, Takeover, TakeoverOutcome,
};
use crate::testkit::{key, sleep_ms, unique_job};

/// Lease length used by the store-level tests.
pub const LEASE_MS: u64 = 600;
/// Long enough for a [`LEASE_MS`] lease to have ended on any store's clock.
pub const PAST_LEASE_MS: u64 = 900;

#[doc(hidden)]
#[macro_export]
macro_rules! __lease_store_tests {
    ($factory:path, [$($mode:ident)?]) => {
        $crate::__kit_tests!($factory, [$($mode)?], lease,
            b10_claim_after_deadline_is_late_and_writes_nothing,
            b11_one_of_concurrent_claims_wins,
            b11_claim_of_a_claimed_slot_is_taken_even_after_finish,
            b11_claim_many_answers_each_claim_as_claim_would,
            b11_claim_many_mixes_every_outcome_in_the_order_given,
            b11_claim_many_takes_a_batch_larger_than_its_limit,
            b14_take_over_many_answers_each_takeover_as_take_over_would,
            b14_take_over_many_takes_a_batch_larger_than_its_limit,
            b11_single_calls_are_batches_of_one,
            b12_overlap_skip_refuses_while_an_earlier_lease_is_live,
            b12_overlap_allow_starts_beside_a_live_run,
            b13_batched_heartbeat_renews_only_current_owners,
            b14_takeover_after_expiry_starts_next_attempt_with_new_fence,
            b14_takeover_of_a_live_lease_is_refused,
            s11_takeover_after_its_deadline_is_late_and_writes_nothing,
            b14_crash_budget_is_exhausted_after_max_attempts,
            b15_next_slot_interrupts_an_expired_run,
            b15_superseded_takeover_marks_run_interrupted,
            b16_stale_owner_cannot_heartbeat_or_finish,
            b16_finish_many_answers_each_result_as_finish_would,
            b17_release_hands_over_without_counting_against_max_attempts,
            b19_unfinished_runs_lists_orphans_and_live_runs,
            b14_unfinished_runs_of_many_jobs_is_the_backup_sweep,
            b14_newest_unfinished_runs_lists_each_jobs_newest_and_every_run_handed_over,
            b20_store_clock_is_sane,
            b36_history_is_newest_first_with_every_field,
            b36_history_shows_each_attempt_once_as_it_ended,
            b37_retention_prunes_runs_beyond_history_size,
            b37_retention_prunes_runs_older_than_ttl,
            s11_fence_strictly_increases_per_job,
            manual_runs_are_recorded_and_replaced_by_key,
            known_jobs_lists_prepared_and_claimed_jobs,
        );
    };
}

async fn prepared(store: &Arc<dyn LeaseStore>, jobs: &[&JobName]) {
    store
        .prepare(&Prepare {
            jobs: jobs.iter().map(|j| (*j).clone()).collect(),
            instance_id: "kit".into(),
            call_timeout: std::time::Duration::from_secs(5),
        })
        .await
        .expect("prepare");
}

async fn now(store: &Arc<dyn LeaseStore>) -> EpochMs {
    store.now().await.expect("now")
}

/// A scheduled claim of `job` at `slot` by `instance`, deadline one minute after now.
pub fn claim(job: &JobName, slot: EpochMs, instance: &str, now: EpochMs) -> LeaseClaim {
    LeaseClaim {
        run: key(job, slot),
        scheduled_at: slot,
        instance_id: instance.into(),
        lease_ms: LEASE_MS,
        not_after: now + 60_000,
        overlap: Overlap::Skip,
        reason: Reason::Scheduled,
        retention: Retention::default(),
    }
}

async fn won(store: &Arc<dyn LeaseStore>, c: &LeaseClaim) -> Lease {
    match store.claim(c).await.expect("claim") {
        ClaimOutcome::Won(lease) => lease,
        other => panic!("expected to win {}, got {other:?}", c.run),
    }
}

fn done() -> Finish {
    Finish {
        status: RunStatus::Succeeded,
        error: None,
        retention: Retention::default(),
    }
}

fn takeover(lease: &Lease, instance: &str, max_attempts: u32) -> Takeover {
    Takeover {
        run: lease.run.clone(),
        seen_attempt: lease.attempt,
        instance_id: instance.into(),
        lease_ms: LEASE_MS,
        max_attempts,
        superseded: false,
        not_after: EpochMs::MAX,
    }
}

/// [B-10] A claim judged after `not_after` on the store's clock is `Late` and writes nothing.
pub async fn b10_claim_after_deadline_is_late_and_writes_nothing(store: Arc<dyn LeaseStore>) {
    let job = unique_job("late");
    prepared(&store, &[&job]).await;
    let t = now(&store).await;
    let mut c = claim(&job, t - 120_000, "a", t);
    c.not_after = t - 60_000;
    assert!(matches!(
        store.claim(&c).await.unwrap(),
        ClaimOutcome::Late { .. }
    ));
    assert!(
        store.history(&job, 10).await.unwrap().is_empty(),
        "a late claim wrote history"
    );
    c.not_after = t + 60_000;
    won(&store, &c).await;
}

/// [B-11] Of many concurrent claims of one slot exactly one wins; the others are `Taken`.
pub async fn b11_one_of_concurrent_claims_wins(store: Arc<dyn LeaseStore>) {
    let job = unique_job("race");
    prepared(&store, &[&job]).await;
    let t = now(&store).await;
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = store.clone();
        let c = claim(&job, t, &format!("i{i}"), t);
        tasks.push(tokio::spawn(async move {
            store.claim(&c).await.expect("claim")
        }));
    }
    let mut wins = 0;
    for t in tasks {
        match t.await.unwrap() {
            ClaimOutcome::Won(_) => wins += 1,
            ClaimOutcome::Taken => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(wins, 1, "exactly one claim must win");
}

/// [B-11] A slot that was claimed stays taken after its run finished.
pub async fn b11_claim_of_a_claimed_slot_is_taken_even_after_finish(store: Arc<dyn LeaseStore>) {
    let job = unique_job("taken");
    prepared(&store, &[&job]).await;
    let t = now(&store).await;
    let lease = won(&store, &claim(&job, t, "a", t)).await;
    assert_eq!(
        store.claim(&claim(&job, t, "b", t)).await.unwrap(),
        ClaimOutcome::Taken
    );
    assert_eq!(
        store.finish(&lease, &done()).await.unwrap(),
        OwnerWrite::Done
    );
    assert_eq!(
        store.claim(&claim(&job, t, "b", t)).await.unwrap(),
        ClaimOutcome::Taken
    );
}

/// [B-12] `overlap: skip` refuses a slot while an earlier run holds a live lease, and
/// writes nothing.
pub async fn b12_overlap_skip_refuses_while_an_earlier_lease_is_live(store: Arc<dyn LeaseStore>) {
    let job = unique_job("ovl");
    prepared(&store, &[&job]).await;
    let t = now(&store).await;
    won(&store, &claim(&job, t - 1000, "a", t)).await;
    match store.claim(&claim(&job, t, "b", t)).await.unwrap() {
        ClaimOutcome::Overlap { running_slot } => assert_eq!(running_slot, t - 1000),
        other => panic!("expected overlap, got {other:?}"),
    }
    assert_eq!(store.history(&job, 10).await.unwrap().len(), 1);
}

/// [B-12] `overlap: allow` starts a slot beside a live earlier run.
pub async fn b12_overlap_allow_starts_beside_a_live_run(store: Arc<dyn LeaseStore>) {
    let job = unique_job("allow");
    prepared(&store, &[&job]).await;
    let t = now(&store).await;
    won(&store, &claim(&job, t - 1000, "a", t)).await;
    let mut c = claim(&job, t, "b", t);
    c.overlap = Overlap::Allow;
    won(&store, &c).await;
    let runs = store
        .unfinished_runs(std::slice::from_ref(&job))
        .await
        .unwrap();
    assert_eq!(runs.len(), 2);
}

/// [B-13] One heartbeat call renews every lease of its owner and reports the others lost.
pub async fn b13_batched_heartbeat_renews_only_current_owners(store: Arc<dyn LeaseStore>) {
    let (j1, j2) = (unique_job("hb1"), unique_job("hb2"));
    prepared(&store, &[&j1, &j2]).await;
    let t = now(&store).await;
    let l1 = won(&store, &claim(&j1, t, "a", t)).await;
    let l2 = won(&store, &claim(&j2, t, "a", t)).await;
    let mut forged = l2.clone();
    forged.instance_id = "intruder".into();
    sleep_ms(100).await;
    let r = store
        .heartbeat(&[l1.clone(), forged.clone(), l2.clone()], 5_000)
        .await
        .unwrap();
    assert_eq!(r.len(), 3);
    let Renewal::Renewed { expires_at } = r[0] else {
        panic!("l1 not renewed: {r:?}")
    };
    assert!(
        expires_at >= l1.expires_at + 4_000,
        "renewed to now + lease_ms"
    );
    assert_eq!(r[1], Renewal::Lost);
    assert!(matches!(r[2], Renewal::Renewed { .. }));
    // Answered in the order given, whatever order the store writes in (PostgreSQL sorts).
    let r = store
        .heartbeat(&[l2.clone(), forged, l1.clone()], 5_000)
        .await
        .unwrap();
    assert!(
        matches!(
            r[..],
            [
                Renewal::Renewed { .. },
                Renewal::Lost,
                Renewal::Renewed { .. }
            ]
        ),
        "{r:?}"
    );
    // Renewed past the original lease: not takeable after it.
    sleep_ms(PAST_LEASE_MS).await;
    assert_eq!(
        store.take_over(&takeover(&l1, "b", 3)).await.unwrap(),
        TakeoverOutcome::Live
    );
}

/// [B-14] After the lease expired, one backup takes over: attempt + 1, a higher fence,
/// reason `takeover`; the old attempt's history row is `interrupted`.
pub async fn b14_takeover_after_expiry_starts_next_attempt_with_new_fence(
    store: Arc<dyn LeaseStore>,
) {
    let job = unique_job("tko");
    prepared(&store, &[&job]).await;
    let t = now(&store).await;
    let l1 = won(&store, &claim(&job, t, "a", t)).await;
    sleep_ms(PAST_LEASE_MS).await;
    let views = store.runs(std::slice::from_ref(&l1.run)).await.unwrap();
    assert!(
        views[0].is_takeable(),
        "expired run must be takeable: {views:?}"
    );
    let (b, c) = (store.clone(), store.clone());
    let (tb, tc) = (takeover(&l1, "b", 3), takeover(&l1, "c", 3));
    let (rb, rc) = tokio::join!(b.take_over(&tb), c.take_over(&tc));
    let outcomes = [rb.unwrap(), rc.unwrap()];
    let winners: Vec<&Lease> = outcomes
        .iter()
        .filter_map(|o| {
            if let TakeoverOutcome::Won(l) = o {
                Some(l)
            } else {
                None
            }
        })
        .collect();
    assert_eq!(winners.len(), 1, "exactly one backup wins: {outcomes:?}");
    let l2 = winners[0];
    assert_eq!(l2.attempt, 2);
    assert_eq!(l2.reason, Reason::Takeover);
    assert!(l2.fence > l1.fence);
    let h = store.history(&job, 10).await.unwrap();
    assert_eq!(h.len(), 2);
    assert_eq!(
        (h[0].attempt, h[0].status, h[0].reason),
        (2, RunStatus::Running, Reason::Takeover)
    );
    assert_eq!((h[1].attempt, h[1].status), (1, RunStatus::Interrupted));
}

/// [B-14] A live lease cannot be taken over.
pub async fn b14_takeover_of_a_live_lease_is_refused(store: Arc<dyn LeaseStore>) {
    let job = unique_job("live");
    prepared(&store, &[&job]).await;
    let t = now(&store).await;
    let l1 = won(&store, &claim(&job, t, "a", t)).await;
    assert_eq!(
        store.take_over(&takeover(&l1, "b", 3)).await.unwrap(),
        TakeoverOutcome::Live
    );
}

/// A takeover judged after its `not_after` (the moment its caller stopped waiting) writes
/// nothing and answers `Late`, so no attempt is recorded that nobody runs; a takeover in time
/// still wins afterwards.
pub async fn s11_takeover_after_its_deadline_is_late_and_writes_nothing(
    store: Arc<dyn LeaseStore>,
) {
    let job = unique_job("tkl");
    prepared(&store, &[&job]).await;
    let t = now(&store).await;
    let l1 = won(&store, &claim(&job, t, "a", t)).await;
    sleep_ms(PAST_LEASE_MS).await;
    let mut late = takeover(&l1, "b", 3);
    late.not_after = now(&store).await - 1_000;
    assert_eq!(store.take_over(&late).await.unwrap(), TakeoverOutcome::Late);
    let h = store.history(&job, 10).await.unwrap();
    assert_eq!(h.len(), 1, "nothing written: {h:?}");
    assert_eq!((h[0].attempt, h[0].status), (1, RunStatus::Running));
    let views = store.runs(std::slice::from_ref(&l1.run)).await.unwrap();
    assert_eq!(views[0].attempt, 1);
    let mut in_time = takeover(&l1, "b", 3);
    in_time.not_after = now(&store).await + 60_000;
    assert!(matches!(
        store.take_over(&in_time).await.unwrap(),
        TakeoverOutcome::Won(l) if l.attempt == 2
    ));
}

/// [B-11] A batch of claims answers each as a single claim would, in order: a won slot, the
/// same slot again (taken), a late one, and a slot of another job.
pub async fn b11_claim_many_answers_each_claim_as_claim_would(store: Arc<dyn LeaseStore>) {
    let (j1, j2) = (unique_job("batch"), unique_job("batch"));
    prepared(&store, &[&j1, &j2]).await;
    let t = now(&store).await;
    let mut late = claim(&j1, t - 120_000, "a", t);
    late.not_after = t - 60_000;
    let claims = vec![
        claim(&j1, t, "a", t),
        claim(&j1, t, "b", t),
        late,
        claim(&j2, t, "a", t),
    ];
    let out = store.claim_many(&claims).await.unwrap();
    assert_eq!(out.len(), 4, "{out:?}");
    assert!(
        matches!(&out[0], ClaimOutcome::Won(l) if l.run == claims[0].run),
        "{out:?}"
    );
    assert_eq!(out[1], ClaimOutcome::Taken);
    assert!(matches!(out[2], ClaimOutcome::Late { .. }), "{out:?}");
    assert!(
        matches!(&out[3], ClaimOutcome::Won(l) if l.run == claims[3].run),
        "{out:?}"
    );
    let h = store.history(&j1, 10).await.unwrap();
    assert_eq!(h.len(), 1, "one attempt recorded: {h:?}");
    assert_eq!(store.claim_many(&[]).await.unwrap(), vec![]);
}

/// [B-11, B-12, B-15] One batch holds every outcome, answered in the order given, each
/// claim judged after the ones before it: won; taken by another instance earlier; late;
/// overlap with a live run claimed earlier; the same slot twice (the second is taken); two
/// slots of one job (the second meets the first's live lease); an expired run interrupted by
/// the next slot.
pub async fn b11_claim_many_mixes_every_outcome_in_the_order_given(store: Arc<dyn LeaseStore>) {
    let jobs: Vec<JobName> = (0..6).map(|_| unique_job("mix")).collect();
    let refs: Vec<&JobName> = jobs.iter().collect();
    prepared(&store, &refs).await;
    let t = now(&store).await;
    // jobs[5]: a run whose lease will have ended when the batch claims the next slot.
    let expired = won(&store, &claim(&jobs[5], t - 2_000, "x", t)).await;
    sleep_ms(PAST_LEASE_MS).await;
    let t = now(&store).await;
    // jobs[1]: slot t already claimed by another instance.
    won(&store, &claim(&jobs[1], t, "b", t)).await;
    // jobs[2]: an earlier run holds a live lease.
    let live = won(&store, &claim(&jobs[2], t - 1_000, "b", t)).await;
    let mut late = claim(&jobs[3], t - 120_000, "a", t);
    late.not_after = t - 60_000;
    let claims = vec![
        claim(&jobs[0], t, "a", t),         // won
        claim(&jobs[1], t, "a", t),         // taken by b before the batch
        late,                               // late
        claim(&jobs[2], t, "a", t),         // overlap with b's live run
        claim(&jobs[0], t, "a", t),         // the same slot again in this batch: taken
        claim(&jobs[4], t, "a", t),         // won
        claim(&jobs[4], t + 1_000, "a", t), // overlap with the claim just before it
        claim(&jobs[5], t, "a", t),         // won, and interrupts the expired run
    ];
    let out = store.claim_many(&claims).await.unwrap();
    assert_eq!(out.len(), claims.len(), "{out:?}");
    assert!(
        matches!(&out[0], ClaimOutcome::Won(l) if l.run == claims[0].run && l.attempt == 1),
        "{out:?}"
    );
    assert_eq!(out[1], ClaimOutcome::Taken, "{out:?}");
    assert!(matches!(out[2], ClaimOutcome::Late { .. }), "{out:?}");
    assert_eq!(
        out[3],
        ClaimOutcome::Overlap {
            running_slot: live.run.slot
        },
        "{out:?}"
    );
    assert_eq!(out[4], ClaimOutcome::Taken, "{out:?}");
    let first = match &out[5] {
        ClaimOutcome::Won(l) if l.run == claims[5].run => l.clone(),
        other => panic!("expected to win {}: {other:?}", claims[5].run),
    };
    assert_eq!(
        out[6],
        ClaimOutcome::Overlap {
            running_slot: first.run.slot
        },
        "{out:?}"
    );
    assert!(
        matches!(&out[7], ClaimOutcome::Won(l) if l.run == claims[7].run && l.fence > expired.fence),
        "{out:?}"
    );
    // What the batch wrote: one attempt per won claim, nothing for the others.
    let h0 = store.history(&jobs[0], 10).await.unwrap();
    assert_eq!(h0.len(), 1, "{h0:?}");
    assert_eq!(
        (h0[0].instance_id.as_str(), h0[0].status),
        ("a", RunStatus::Running)
    );
    let h1 = store.history(&jobs[1], 10).await.unwrap();
    assert_eq!(h1.len(), 1, "{h1:?}");
    assert_eq!(h1[0].instance_id, "b");
    assert!(store.history(&jobs[3], 10).await.unwrap().is_empty());
    assert_eq!(store.history(&jobs[2], 10).await.unwrap().len(), 1);
    assert_eq!(store.history(&jobs[4], 10).await.unwrap().len(), 1);
    let old = store
        .runs(std::slice::from_ref(&expired.run))
        .await
        .unwrap();
    assert_eq!(old[0].status, RunStatus::Interrupted, "{old:?}");
}

/// [B-11] A batch longer than the store's [`BatchLimits::claims`] is still answered whole and
/// in order (the store splits it as it needs); claiming it again finds every slot taken.
pub async fn b11_claim_many_takes_a_batch_larger_than_its_limit(store: Arc<dyn LeaseStore>) {
    let limit = store.limits().claims;
    assert!(limit >= 1);
    let n = limit.min(1_024) + 3;
    let jobs: Vec<JobName> = (0..n).map(|_| unique_job("big")).collect();
    let refs: Vec<&JobName> = jobs.iter().collect();
    prepared(&store, &refs).await;
    let t = now(&store).await;
    let claims: Vec<LeaseClaim> = jobs.iter().map(|j| claim(j, t, "a", t)).collect();
    let out = store.claim_many(&claims).await.unwrap();
    assert_eq!(out.len(), n);
    for (c, o) in claims.iter().zip(&out) {
        assert!(
            matches!(o, ClaimOutcome::Won(l) if l.run == c.run),
            "{}: {o:?}",
            c.run
        );
    }
    let again: Vec<LeaseClaim> = jobs.iter().map(|j| claim(j, t, "b", t)).collect();
    let out = store.claim_many(&again).await.unwrap();
    assert_eq!(out.len(), n);
    assert!(out.iter().all(|o| *o == ClaimOutcome::Taken), "{out:?}");
}

/// [B-14, B-15] A batch of takeovers answers each as a single takeover would, in order: an
/// expired run (won), a live one, a finished one, the same expired run again (now live: the
/// first takeover holds it), a superseded one (interrupted), a late one; and an empty batch.
pub async fn b14_take_over_many_answers_each_takeover_as_take_over_would(
    store: Arc<dyn LeaseStore>,
) {
    let jobs: Vec<JobName> = (0..5).map(|_| unique_job("tkm")).collect();
    let refs: Vec<&JobName> = jobs.iter().collect();
    prepared(&store, &refs).await;
    let t = now(&store).await;
    let expired = won(&store, &claim(&jobs[0], t, "a", t)).await;
    let finished = won(&store, &claim(&jobs[2], t, "a", t)).await;
    assert_eq!(
        store.finish(&finished, &done()).await.unwrap(),
        OwnerWrite::Done
    );
    let superseded = won(&store, &claim(&jobs[3], t, "a", t)).await;
    let late = won(&store, &claim(&jobs[4], t, "a", t)).await;
    sleep_ms(PAST_LEASE_MS).await;
    let t = now(&store).await;
    let live = won(&store, &claim(&jobs[1], t, "a", t)).await;
    let mut sup = takeover(&superseded, "b", 3);
    sup.superseded = true;
    let mut too_late = takeover(&late, "b", 3);
    too_late.not_after = t - 1_000;
    let batch = vec![
        takeover(&expired, "b", 3),
        takeover(&live, "b", 3),
        takeover(&finished, "b", 3),
        takeover(&expired, "c", 3),
        sup,
        too_late,
    ];
    let out = store.take_over_many(&batch).await.unwrap();
    assert_eq!(out.len(), batch.len(), "{out:?}");
    assert!(
        matches!(&out[0], TakeoverOutcome::Won(l) if l.attempt == 2 && l.instance_id == "b" && l.fence > expired.fence),
        "{out:?}"
    );
    assert_eq!(out[1], TakeoverOutcome::Live, "{out:?}");
    assert_eq!(
        out[2],
        TakeoverOutcome::Finished(RunStatus::Succeeded),
        "{out:?}"
    );
    assert_eq!(out[3], TakeoverOutcome::Live, "{out:?}");
    assert_eq!(out[4], TakeoverOutcome::Interrupted, "{out:?}");
    assert_eq!(out[5], TakeoverOutcome::Late, "{out:?}");
    let h = store.history(&jobs[0], 10).await.unwrap();
    assert_eq!(h.len(), 2, "{h:?}");
    assert_eq!((h[0].attempt, h[0].status), (2, RunStatus::Running));
    assert_eq!((h[1].attempt, h[1].status), (1, RunStatus::Interrupted));
    let h = store.history(&jobs[4], 10).await.unwrap();
    assert_eq!((h.len(), h[0].status), (1, RunStatus::Running), "{h:?}");
    assert!(store.take_over_many(&[]).await.unwrap().is_empty());
}

/// [B-14] A batch of takeovers longer than the store's [`BatchLimits::takeovers`] is still
/// answered whole and in the order given (here the reverse of the runs' order, which a store
/// that sends them sorted must undo); taking the same runs over again finds each one live
/// (the first batch's leases hold them).
pub async fn b14_take_over_many_takes_a_batch_larger_than_its_limit(store: Arc<dyn LeaseStore>) {
    let limit = store.limits().takeovers;
    assert!(limit >= 1);
    let n = limit.min(300) + 2;
    let jobs: Vec<JobName> = (0..n).map(|_| unique_job("tkbig")).collect();
    let refs: Vec<&JobName> = jobs.iter().collect();
    prepared(&store, &refs).await;
    let t = now(&store).await;
    let claims: Vec<LeaseClaim> = jobs.iter().map(|j| claim(j, t, "a", t)).collect();
    let mut leases = won_all(store.as_ref(), &claims).await;
    sleep_ms(PAST_LEASE_MS).await;
    // In reverse run order: a store that sends them sorted must map its answers back.
    leases.sort_by(|a, b| (b.run.job.as_str(), b.run.slot).cmp(&(a.run.job.as_str(), a.run.slot)));
    let batch: Vec<Takeover> = leases.iter().map(|l| takeover(l, "b", 3)).collect();
    let out = store.take_over_many(&batch).await.unwrap();
    assert_eq!(out.len(), n);
    for (l, o) in leases.iter().zip(&out) {
        assert!(
            matches!(o, TakeoverOutcome::Won(w) if w.run == l.run && w.attempt == 2 && w.instance_id == "b"),
            "{}: {o:?}",
            l.run
        );
    }
    let again: Vec<Takeover> = leases.iter().map(|l| takeover(l, "c", 3)).collect();
    let out = store.take_over_many(&again).await.unwrap();
    assert_eq!(out, vec![TakeoverOutcome::Live; n]);
}

/// [B-11, B-14, B-16] The single calls are batches of one, through the same path as longer
/// batches: a claim, a takeover and a result answer the same whether sent alone or as a
/// batch of one item, each judged against what the other shape wrote before it; and every
/// limit is at least 1.
pub async fn b11_single_calls_are_batches_of_one(store: Arc<dyn LeaseStore>) {
    let limits: BatchLimits = store.limits();
    assert!(
        limits.claims >= 1 && limits.finishes >= 1 && limits.takeovers >= 1,
        "{limits:?}"
    );
    let (j1, j2) = (unique_job("one"), unique_job("one"));
    prepared(&store, &[&j1, &j2]).await;
    let t = now(&store).await;
    // Claims: a single claim wins, a batch of one for the same slot is taken, and the
    // other way round. Each lease is asked for live right after it was won (the kit's
    // leases are short: on a slow store four calls in a row can outlast one).
    let a = won(&store, &claim(&j1, t, "a", t)).await;
    // Takeovers of live leases: live either way.
    assert_eq!(
        store.take_over(&takeover(&a, "c", 3)).await.unwrap(),
        TakeoverOutcome::Live
    );
    assert_eq!(
        store.claim_many(&[claim(&j1, t, "b", t)]).await.unwrap(),
        vec![ClaimOutcome::Taken]
    );
    let b = match store
        .claim_many(&[claim(&j2, t, "b", t)])
        .await
        .unwrap()
        .as_slice()
    {
        [ClaimOutcome::Won(l)] => l.clone(),
        other => panic!("expected to win {j2} in a batch of one: {other:?}"),
    };
    assert_eq!(
        store.take_over_many(&[takeover(&b, "c", 3)]).await.unwrap(),
        vec![TakeoverOutcome::Live]
    );
    assert_eq!(
        store.claim(&claim(&j2, t, "a", t)).await.unwrap(),
        ClaimOutcome::Taken
    );
    // After the leases ended: a single takeover of one, a batch of one of the other, then
    // each shape finds the run the other took over live.
    sleep_ms(PAST_LEASE_MS).await;
    let a2 = match store.take_over(&takeover(&a, "c", 3)).await.unwrap() {
        TakeoverOutcome::Won(l) => l,
        other => panic!("expected to take over {}: {other:?}", a.run),
    };
    let b2 = match store
        .take_over_many(&[takeover(&b, "c", 3)])
        .await
        .unwrap()
        .as_slice()
    {
        [TakeoverOutcome::Won(l)] => l.clone(),
        other => panic!(
            "expected to take over {} in a batch of one: {other:?}",
            b.run
        ),
    };
    assert_eq!((a2.attempt, b2.attempt), (2, 2));
    assert_eq!(
        store.take_over_many(&[takeover(&a, "d", 3)]).await.unwrap(),
        vec![TakeoverOutcome::Live]
    );
    assert_eq!(
        store.take_over(&takeover(&b, "d", 3)).await.unwrap(),
        TakeoverOutcome::Live
    );
    // Results: the stale owners lose either way, the current ones are written once.
    assert_eq!(store.finish(&a, &done()).await.unwrap(), OwnerWrite::Lost);
    assert_eq!(
        store.finish_many(&[(b.clone(), done())]).await.unwrap(),
        vec![OwnerWrite::Lost]
    );
    assert_eq!(store.finish(&a2, &done()).await.unwrap(), OwnerWrite::Done);
    assert_eq!(
        store.finish_many(&[(b2.clone(), done())]).await.unwrap(),
        vec![OwnerWrite::Done]
    );
    assert_eq!(
        store.finish_many(&[(a2.clone(), done())]).await.unwrap(),
        vec![OwnerWrite::Lost]
    );
    assert_eq!(store.finish(&b2, &done()).await.unwrap(), OwnerWrite::Lost);
    for job in [&j1, &j2] {
        let h = store.history(job, 10).await.unwrap();
        assert_eq!(
            h.iter().map(|r| (r.attempt, r.status)).collect::<Vec<_>>(),
            vec![(2, RunStatus::Succeeded), (1, RunStatus::Interrupted)],
            "{job}: {h:?}"
        );
    }
}

/// [B-14] A crashed run starts at most `max_attempts` times, then it is `failed`.
pub async fn b14_crash_budget_is_exhausted_after_max_attempts(store: Arc<dyn LeaseStore>) {
    let job = unique_job("exh");
    prepared(&store, &[&job]).await;
    let t = now(&store).await;
    let mut lease = won(&store, &claim(&job, t, "a", t)).await;
    for n in 2..=3 {
        sleep_ms(PAST_LEASE_MS).await;
        match store
            .take_over(&takeover(&lease, &format!("i{n}"), 3))
            .await
            .unwrap()
        {
            TakeoverOutcome::Won(l) => lease = l,
            other => panic!("attempt {n}: {other:?}"),
        }
    }
    sleep_ms(PAST_LEASE_MS).await;
    assert_eq!(
        store.take_over(&takeover(&lease, "i4", 3)).await.unwrap(),
        TakeoverOutcome::Exhausted
    );
    let v = store.runs(std::slice::from_ref(&lease.run)).await.unwrap();
    assert_eq!(v[0].status, RunStatus::Failed);
    let h = store.history(&job, 10).await.unwrap();
    assert_eq!(h.len(), 3);
    assert!(
        h.iter().all(|r| r.status == RunStatus::Interrupted),
        "{h:?}"
    );
    assert!(
        store
            .unfinished_runs(std::slice::from_ref(&job))
            .await
            .unwrap()
            .is_empty()
    );
}

/// [B-15] Claiming the next slot marks an earlier run whose lease ended `interrupted`.
pub async fn b15_next_slot_interrupts_an_expired_run(store: Arc<dyn LeaseStore>) {
    let job = unique_job("repl");
    prepared(&store, &[&job]).await;
    let t = now(&store).await;
    let old = won(&store, &claim(&job, t - 1000, "a", t)).await;
    sleep_ms(PAST_LEASE_MS).await;
    won(&store, &claim(&job, t, "b", t)).await;
    let v = store.runs(std::slice::from_ref(&old.run)).await.unwrap();
    assert_eq!(v[0].status, RunStatus::Interrupted);
    let h = store.history(&job, 10).await.unwrap();
    let old_row = h.iter().find(|r| r.slot == t - 1000).unwrap();
    assert_eq!(old_row.status, RunStatus::Interrupted);
    assert!(old_row.finished_at.is_some());
}

/// [B-15] A takeover flagged `superseded` marks the expired run `interrupted`.
pub async fn b15_superseded_takeover_marks_run_interrupted(store: Arc<dyn LeaseStore>) {
    let job = unique_job("sup");
    prepared(&store, &[&job]).await;
    let t = now(&store).await;
    let l1 = won(&store, &claim(&job, t, "a", t)).await;
    sleep_ms(PAST_LEASE_MS).await;
    let mut tk = takeover(&l1, "b", 3);
    tk.superseded = true;
    assert_eq!(
        store.take_over(&tk).await.unwrap(),
        TakeoverOutcome::Interrupted
    );
    let v = store.runs(std::slice::from_ref(&l1.run)).await.unwrap();
    assert_eq!(v[0].status, RunStatus::Interrupted);
}

/// [B-16] After a takeover the old owner's heartbeat and finish are rejected and nothing
/// of it is recorded over the new owner's attempt.
pub async fn b16_stale_owner_cannot_heartbeat_or_finish(store: Arc<dyn LeaseStore>) {
    let job = unique_job("stale");
    prepared(&store, &[&job]).await;
    let t = now(&store).await;
    let l1 = won(&store, &claim(&job, t, "a", t)).await;
    sleep_ms(PAST_LEASE_MS).await;
    let TakeoverOutcome::Won(l2) = store.take_over(&takeover(&l1, "b", 3)).await.unwrap() else {
        panic!("takeover")
    };
    assert_eq!(
        store
            .heartbeat(std::slice::from_ref(&l1), LEASE_MS)
            .await
            .unwrap(),
        vec![Renewal::Lost]
    );
    assert_eq!(store.finish(&l1, &done()).await.unwrap(), OwnerWrite::Lost);
    assert_eq!(store.release(&l1).await.unwrap(), OwnerWrite::Lost);
    let v = store.runs(std::slice::from_ref(&l1.run)).await.unwrap();
    assert_eq!((v[0].status, v[0].attempt), (RunStatus::Running, 2));
    assert_eq!(v[0].owner.as_deref(), Some("b"));
    assert_eq!(store.finish(&l2, &done()).await.unwrap(), OwnerWrite::Done);
    let h = store.history(&job, 10).await.unwrap();
    assert_eq!(h[0].status, RunStatus::Succeeded);
    assert_eq!(h[1].status, RunStatus::Interrupted);
}

/// [B-16] `finish_many` writes each result as `finish` would, in order: a current owner's
/// result is `Done`, a stale owner's `Lost` (and changes nothing), and a failed run's error
/// is kept; a batch beyond [`BatchLimits::finishes`] and an empty batch work too.
pub async fn b16_finish_many_answers_each_result_as_finish_would(store: Arc<dyn LeaseStore>) {
    let jobs: Vec<JobName> = (0..3).map(|i| unique_job(&format!("fmany{i}"))).collect();
    let refs: Vec<&JobName> = jobs.iter().collect();
    prepared(&store, &refs).await;
    let t = now(&store).await;
    let a = won(&store, &claim(&jobs[0], t, "a", t)).await;
    let b = won(&store, &claim(&jobs[1], t, "a", t)).await;
    let stale = won(&store, &claim(&jobs[2], t, "a", t)).await;
    sleep_ms(PAST_LEASE_MS).await;
    let TakeoverOutcome::Won(current) = store.take_over(&takeover(&stale, "b", 3)).await.unwrap()
    else {
        panic!("takeover")
    };
    let failed = Finish {
        status: RunStatus::Failed,
        error: Some("boom".into()),
        retention: Retention::default(),
    };
    let out = store
        .finish_many(&[
            (a.clone(), done()),
            (stale.clone(), done()),
            (b.clone(), failed),
        ])
        .await
        .unwrap();
    assert_eq!(
        out,
        vec![OwnerWrite::Done, OwnerWrite::Lost, OwnerWrite::Done]
    );
    let h = store.history(&jobs[0], 10).await.unwrap();
    assert_eq!(h[0].status, RunStatus::Succeeded);
    let h = store.history(&jobs[1], 10).await.unwrap();
    assert_eq!(
        (h[0].status, h[0].error.as_deref()),
        (RunStatus::Failed, Some("boom"))
    );
    // The stale owner's result changed nothing: attempt 2 still runs, owned by `b`.
    let v = store
        .runs(std::slice::from_ref(&current.run))
        .await
        .unwrap();
    assert_eq!((v[0].status, v[0].attempt), (RunStatus::Running, 2));
    assert_eq!(v[0].owner.as_deref(), Some("b"));
    assert_eq!(store.finish_many(&[]).await.unwrap(), vec![]);

    // More results than one batch takes: every one is written.
    let n = store.limits().finishes.clamp(1, 300) + 2;
    let many: Vec<JobName> = (0..n).map(|i| unique_job(&format!("fbig{i}"))).collect();
    let refs: Vec<&JobName> = many.iter().collect();
    prepared(&store, &refs).await;
    let t = now(&store).await;
    let mut writes = Vec::new();
    for job in &many {
        writes.push((won(&store, &claim(job, t, "a", t)).await, done()));
    }
    let out = store.finish_many(&writes).await.unwrap();
    assert_eq!(out, vec![OwnerWrite::Done; n]);
    let last = store.history(&many[n - 1], 1).await.unwrap();
    assert_eq!(last[0].status, RunStatus::Succeeded);
}

/// [B-17] A released run is takeable at once, the takeover does not count against
/// `max_attempts`, and subscribers (where the store has them) hear of it.
pub async fn b17_release_hands_over_without_counting_against_max_attempts(
    store: Arc<dyn LeaseStore>,
) {
    let job = unique_job("hand");
    prepared(&store, &[&job]).await;
    let mut notes = store.subscribe_releases();
    let t = now(&store).await;
    let l1 = won(&store, &claim(&job, t, "a", t)).await;
    assert_eq!(store.release(&l1).await.unwrap(), OwnerWrite::Done);
    if let Some(rx) = notes.as_mut() {
        let got = tokio::time::timeout(std::time::Duration::from_secs(5), async {
            loop {
                match rx.recv().await {
                    Ok(k) if k == l1.run => break k,
                    Ok(_) => continue,
                    Err(e) => panic!("release notification: {e}"),
                }
            }
        })
        .await;
        assert!(got.is_ok(), "no release notification within 5 s");
    }
    let v = store.runs(std::slice::from_ref(&l1.run)).await.unwrap();
    assert!(v[0].is_takeable() && v[0].owner.is_none(), "{v:?}");
    // max_attempts 1: a counted takeover would be exhausted, a handover is not.
    let TakeoverOutcome::Won(l2) = store.take_over(&takeover(&l1, "b", 1)).await.unwrap() else {
        panic!("handover takeover must win with max_attempts 1")
    };
    assert_eq!(l2.attempt, 2);
    let h = store.history(&job, 10).await.unwrap();
    assert_eq!(h[1].status, RunStatus::Interrupted);
    assert_eq!(h[1].error.as_deref(), Some("handed over"));
}

/// [B-19] `unfinished_runs` lists every running run of the jobs asked for, live or expired.
pub async fn b19_unfinished_runs_lists_orphans_and_live_runs(store: Arc<dyn LeaseStore>) {
    let (j1, j2, other) = (unique_job("orph"), unique_job("orph2"), unique_job("other"));
    prepared(&store, &[&j1, &j2, &other]).await;
    let t = now(&store).await;
    let dead = won(&store, &claim(&j1, t - 1000, "a", t)).await;
    sleep_ms(PAST_LEASE_MS).await;
    let t2 = now(&store).await;
    won(&store, &claim(&j2, t2, "a", t2)).await;
    won(&store, &claim(&other, t2, "a", t2)).await;
    let fin = won(&store, &claim(&j2, t2 - 5000, "a", t2)).await;
    store.finish(&fin, &done()).await.unwrap();
    let mut runs = store
        .unfinished_runs(&[j1.clone(), j2.clone()])
        .await
        .unwrap();
    runs.sort_by_key(|r| r.run.job.clone());
    assert_eq!(runs.len(), 2, "{runs:?}");
    let d = runs.iter().find(|r| r.run == dead.run).unwrap();
    assert!(d.is_takeable());
    let live = runs.iter().find(|r| r.run.job == j2).unwrap();
    assert!(!live.is_takeable());
}

/// [B-14] The backups' poll: `unfinished_runs` over 600 jobs (more than one round trip on
/// stores that split long lists) lists exactly the runs still `running` — live, expired and
/// released ones — and none that ended, whatever the jobs' histories hold; unknown job names
/// are no error.
pub async fn b14_unfinished_runs_of_many_jobs_is_the_backup_sweep(store: Arc<dyn LeaseStore>) {
    let jobs: Vec<JobName> = (0..600).map(|_| unique_job("sweep")).collect();
    let refs: Vec<&JobName> = jobs.iter().collect();
    prepared(&store, &refs).await;
    let t = now(&store).await;
    // Two earlier runs per job, ended: history the sweep must not list.
    for back in [2_000, 1_000] {
        let claims: Vec<LeaseClaim> = jobs.iter().map(|j| claim(j, t - back, "a", t)).collect();
        let leases = won_all(store.as_ref(), &claims).await;
        finish_all(&store, &leases).await;
    }
    // The current slot: jobs 0..150 live, 150..200 released, 200..600 ended. A lease long
    // enough to stay live however slow the store is.
    let claims: Vec<LeaseClaim> = jobs
        .iter()
        .map(|j| LeaseClaim {
            lease_ms: 120_000,
            ..claim(j, t, "a", t)
        })
        .collect();
    let leases = won_all(store.as_ref(), &claims).await;
    for lease in &leases[150..200] {
        assert_eq!(store.release(lease).await.unwrap(), OwnerWrite::Done);
    }
    finish_all(&store, &leases[200..]).await;
    let mut asked = jobs.clone();
    asked.push(unique_job("never"));
    let views = store
        .unfinished_runs(&asked)
        .await
        .expect("unfinished_runs");
    let mut listed: Vec<&crate::store::RunKey> = views.iter().map(|v| &v.run).collect();
    listed.sort();
    let mut expected: Vec<&crate::store::RunKey> = leases[..200].iter().map(|l| &l.run).collect();
    expected.sort();
    assert_eq!(listed.len(), 200, "listed {} runs", listed.len());
    assert_eq!(listed, expected);
    for v in &views {
        assert_eq!(v.status, RunStatus::Running, "{v:?}");
        assert!(v.store_now >= t, "{v:?}");
        let released = leases[150..200].iter().any(|l| l.run == v.run);
        assert_eq!(v.is_takeable(), released, "{v:?}");
    }
}

/// [B-14] The backups' sweep, `newest_unfinished_runs`: of each job its newest unfinished
/// runs and every one handed over, however many older ones the job has unfinished, over
/// more jobs than one round trip asks about (1,030); the same answer as
/// [`crate::store::newest_of_each_job`] of `unfinished_runs`, for 0, 1, 4 and every run.
pub async fn b14_newest_unfinished_runs_lists_each_jobs_newest_and_every_run_handed_over(
    store: Arc<dyn LeaseStore>,
) {
    let piled: Vec<JobName> = (0..30).map(|_| unique_job("piled")).collect();
    let single: Vec<JobName> = (0..1_000).map(|_| unique_job("single")).collect();
    let jobs: Vec<JobName> = piled.iter().chain(&single).cloned().collect();
    let refs: Vec<&JobName> = jobs.iter().collect();
    prepared(&store, &refs).await;
    let t = now(&store).await;
    let overlapping = |job: &JobName, slot: EpochMs| LeaseClaim {
        lease_ms: 120_000,
        overlap: Overlap::Allow,
        ..claim(job, slot, "a", t)
    };
    // Seven runs of each piled job, all live (overlap allowed), one slot a round.
    let mut rounds = Vec::new();
    for back in (0..7).rev() {
        let claims: Vec<LeaseClaim> = piled
            .iter()
            .map(|j| overlapping(j, t - back * 1_000))
            .collect();
        rounds.push(won_all(store.as_ref(), &claims).await);
    }
    let singles: Vec<LeaseClaim> = single.iter().map(|j| overlapping(j, t)).collect();
    won_all(store.as_ref(), &singles).await;
    // Piled jobs 0..10: the oldest and third-oldest runs handed over; 10..20: the newest run
    // ended (the four newest unfinished are then rounds 2..6); 20..30 as they are.
    for round in [0, 2] {
        for lease in &rounds[round][..10] {
            assert_eq!(store.release(lease).await.unwrap(), OwnerWrite::Done);
        }
    }
    finish_all(&store, &rounds[6][10..20]).await;

    let views = store
        .newest_unfinished_runs(&jobs, 4)
        .await
        .expect("newest_unfinished_runs");
    let slots = |job: &JobName| -> Vec<EpochMs> {
        views
            .iter()
            .filter(|v| &v.run.job == job)
            .map(|v| (v.run.slot - t) / 1_000)
            .collect()
    };
    for job in &piled[..10] {
        assert_eq!(slots(job), [-6, -4, -3, -2, -1, 0], "{job}: {views:?}");
    }
    for job in &piled[10..20] {
        assert_eq!(slots(job), [-4, -3, -2, -1], "{job}");
    }
    for job in &piled[20..] {
        assert_eq!(slots(job), [-3, -2, -1, 0], "{job}");
    }
    for job in &single {
        assert_eq!(slots(job), [0], "{job}");
    }
    for v in &views {
        assert_eq!(v.status, RunStatus::Running, "{v:?}");
        assert!(v.store_now >= t, "{v:?}");
        assert_eq!(v.owner.is_none(), v.is_takeable(), "{v:?}");
    }
    let all = store.unfinished_runs(&jobs).await.expect("unfinished_runs");
    for newest in [0, 1, 4, usize::MAX] {
        let mut listed = store
            .newest_unfinished_runs(&jobs, newest)
            .await
            .expect("newest_unfinished_runs");
        listed.sort_by(|a, b| a.run.cmp(&b.run));
        let keys = |views: &[crate::store::RunView]| -> Vec<crate::store::RunKey> {
            views.iter().map(|v| v.run.clone()).collect()
        };
        let expected = crate::store::newest_of_each_job(all.clone(), newest);
        assert_eq!(keys(&listed), keys(&expected), "newest {newest}");
    }
    assert!(
        store
            .newest_unfinished_runs(&[], 4)
            .await
            .expect("no jobs")
            .is_empty()
    );
}

/// Wins every claim, in `claim_many` batches of the store's limit, and answers the leases in
/// order; panics unless every claim was won.
pub async fn won_all(store: &dyn LeaseStore, claims: &[LeaseClaim]) -> Vec<Lease> {
    let mut leases = Vec::new();
    for chunk in claims.chunks(store.limits().claims.max(1)) {
        for outcome in store.claim_many(chunk).await.expect("claim_many") {
            match outcome {
                ClaimOutcome::Won(lease) => leases.push(lease),
                other => panic!("expected to win, got {other:?}"),
            }
        }
    }
    leases
}

/// Records every lease's run as succeeded, in batches of the store's limit.
async fn finish_all(store: &Arc<dyn LeaseStore>, leases: &[Lease]) {
    let writes: Vec<(Lease, Finish)> = leases.iter().map(|l| (l.clone(), done())).collect();
    for chunk in writes.chunks(store.limits().finishes.max(1)) {
        store.finish_many(chunk).await.expect("finish_many");
    }
}

/// [B-20] The store's clock is within a minute of this host's (it is the clock leases use).
pub async fn b20_store_clock_is_sane(store: Arc<dyn LeaseStore>) {
    let t = now(&store).await;
    let host = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    assert!((t - host).abs() < 60_000, "store clock {t} vs host {host}");
    let t2 = now(&store).await;
    assert!(t2 >= t);
}

/// [B-36] History comes newest first with every field filled in.
pub async fn b36_history_is_newest_first_with_every_field(store: Arc<dyn LeaseStore>) {
    let job = unique_job("hist");
    prepared(&store, &[&job]).await;
    let t = now(&store).await;
    let l1 = won(&store, &claim(&job, t - 2000, "a", t)).await;
    let fail = Finish {
        status: RunStatus::Failed,
        error: Some("boom".into()),
        retention: Retention::default(),
    };
    assert_eq!(store.finish(&l1, &fail).await.unwrap(), OwnerWrite::Done);
    sleep_ms(20).await;
    let t2 = now(&store).await;
    let mut c = claim(&job, t - 1000, "b", t2);
    c.reason = Reason::CatchUp;
    let l2 = won(&store, &c).await;
    let h = store.history(&job, 10).await.unwrap();
    assert_eq!(h.len(), 2);
    let (newest, oldest) = (&h[0], &h[1]);
    assert_eq!((newest.slot, newest.instance_id.as_str()), (t - 1000, "b"));
    assert_eq!(
        (newest.reason, newest.status, newest.attempt),
        (Reason::CatchUp, RunStatus::Running, 1)
    );
    assert_eq!(newest.fence, l2.fence);
    assert!(!newest.manual && newest.finished_at.is_none());
    assert_eq!(
        (oldest.status, oldest.error.as_deref()),
        (RunStatus::Failed, Some("boom"))
    );
    assert_eq!(oldest.scheduled_at, t - 2000);
    assert!(oldest.finished_at.unwrap() >= oldest.started_at);
    assert_eq!(store.history(&job, 1).await.unwrap().len(), 1);
    assert_eq!(store.last_run(&job).await.unwrap().unwrap().slot, t - 1000);
    assert!(
        store
            .history(&unique_job("none"), 5)
            .await
            .unwrap()
            .is_empty()
    );
}

/// [B-36] Every attempt of a run is in the history once, as it ended, whichever row a store
/// keeps it in (a store may keep the current attempt's record in the run's own row and
/// write a record of its own only when a release or a takeover moves the run on): a run
/// that failed; then a run handed over, taken over, its lease ended and taken over again,
/// and finished, with the stale owner's result lost.
pub async fn b36_history_shows_each_attempt_once_as_it_ended(store: Arc<dyn LeaseStore>) {
    let job = unique_job("each");
    prepared(&store, &[&job]).await;
    let t = now(&store).await;
    let done = |status, error: Option<&str>| Finish {
        status,
        error: error.map(str::to_owned),
        retention: Retention::default(),
    };
    let first = won(&store, &claim(&job, t - 2000, "a", t)).await;
    let failed = done(RunStatus::Failed, Some("boom"));
    assert_eq!(
        store.finish(&first, &failed).await.unwrap(),
        OwnerWrite::Done
    );
    let second = won(&store, &claim(&job, t - 1000, "a", t)).await;
    assert_eq!(store.release(&second).await.unwrap(), OwnerWrite::Done);
    let TakeoverOutcome::Won(b) = store.take_over(&takeover(&second, "b", 5)).await.unwrap() else {
        panic!("the run handed over is taken")
    };
    sleep_ms(PAST_LEASE_MS).await;
    let TakeoverOutcome::Won(c) = store.take_over(&takeover(&b, "c", 5)).await.unwrap() else {
        panic!("the ended lease is taken over")
    };
    let ok = done(RunStatus::Succeeded, None);
    assert_eq!(store.finish(&c, &ok).await.unwrap(), OwnerWrite::Done);
    assert_eq!(store.finish(&b, &failed).await.unwrap(), OwnerWrite::Lost);
    let h = store.history(&job, 10).await.unwrap();
    let seen: Vec<_> = h
        .iter()
        .map(|r| {
            let ended = r.finished_at.is_some();
            let what = (
                r.instance_id.as_str(),
                r.reason,
                r.status,
                r.error.as_deref(),
            );
            (r.slot - t, r.attempt, what, r.fence, ended)
        })
        .collect();
    let interrupted = |who, reason, why| (who, reason, RunStatus::Interrupted, Some(why));
    assert_eq!(
        seen,
        vec![
            (
                -1000,
                3,
                ("c", Reason::Takeover, RunStatus::Succeeded, None),
                c.fence,
                true
            ),
            (
                -1000,
                2,
                interrupted("b", Reason::Takeover, "lease expired"),
                b.fence,
                true
            ),
            (
                -1000,
                1,
                interrupted("a", Reason::Scheduled, "handed over"),
                second.fence,
                true
            ),
            (
                -2000,
                1,
                ("a", Reason::Scheduled, RunStatus::Failed, Some("boom")),
                first.fence,
                true
            ),
        ]
    );
    assert!(h.windows(2).all(|w| w[0].started_at >= w[1].started_at));
}

/// A job's history once the store's pruning has caught up: a store may prune after its
/// calls returned (PostgreSQL prunes in the background), so this reads the history until
/// it holds at most `at_most` records, for up to 10 s, and returns the last reading.
async fn pruned_history(
    store: &Arc<dyn LeaseStore>,
    job: &JobName,
    at_most: usize,
) -> Vec<crate::history::RunRecord> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let h = store.history(job, 100).await.unwrap();
        if h.len() <= at_most || tokio::time::Instant::now() >= deadline {
            return h;
        }
        sleep_ms(10).await;
    }
}

/// [B-37] Finished runs beyond `history_size` are pruned; running ones never are.
pub async fn b37_retention_prunes_runs_beyond_history_size(store: Arc<dyn LeaseStore>) {
    let job = unique_job("keep");
    prepared(&store, &[&job]).await;
    let t = now(&store).await;
    let keep = Retention {
        size: 3,
        ttl_ms: None,
    };
    for i in 0..6 {
        let mut c = claim(&job, t - 10_000 + i * 1000, "a", t);
        c.retention = keep;
        let l = won(&store, &c).await;
        let f = Finish {
            retention: keep,
            ..done()
        };
        store.finish(&l, &f).await.unwrap();
    }
    let h = pruned_history(&store, &job, 3).await;
    assert_eq!(h.len(), 3, "{h:?}");
    assert_eq!(h[0].slot, t - 5_000);
}

/// [B-37] Finished runs older than `history_ttl_ms` are pruned.
pub async fn b37_retention_prunes_runs_older_than_ttl(store: Arc<dyn LeaseStore>) {
    let job = unique_job("ttl");
    prepared(&store, &[&job]).await;
    let t = now(&store).await;
    let ttl = Retention {
        size: 100,
        ttl_ms: Some(300),
    };
    let l = won(&store, &claim(&job, t - 1000, "a", t)).await;
    store
        .finish(
            &l,
            &Finish {
                retention: ttl,
                ..done()
            },
        )
        .await
        .unwrap();
    sleep_ms(700).await;
    let t2 = now(&store).await;
    let mut c = claim(&job, t2, "a", t2);
    c.retention = ttl;
    let l2 = won(&store, &c).await;
    store
        .finish(
            &l2,
            &Finish {
                retention: ttl,
                ..done()
            },
        )
        .await
        .unwrap();
    let h = pruned_history(&store, &job, 1).await;
    assert_eq!(h.len(), 1, "{h:?}");
    assert_eq!(h[0].slot, t2);
}

/// [G-01] Every attempt of a job gets a strictly higher fence than the one before.
pub async fn s11_fence_strictly_increases_per_job(store: Arc<dyn LeaseStore>) {
    let job = unique_job("fence");
    prepared(&store, &[&job]).await;
    let t = now(&store).await;
    let mut last = 0;
    for i in 0..3 {
        let mut c = claim(&job, t - 3000 + i * 1000, "a", t);
        c.overlap = Overlap::Allow;
        let l = won(&store, &c).await;
        assert!(l.fence > last, "fence {} after {last}", l.fence);
        last = l.fence;
    }
    let mut c = claim(&job, t + 1, "a", t);
    c.overlap = Overlap::Allow;
    let l = won(&store, &c).await;
    sleep_ms(PAST_LEASE_MS).await;
    let TakeoverOutcome::Won(l2) = store.take_over(&takeover(&l, "b", 3)).await.unwrap() else {
        panic!("takeover")
    };
    assert!(l2.fence > l.fence && l.fence > last);
}

/// Manual runs are recorded at start and replaced at finish, keyed by (job, slot, instance).
pub async fn manual_runs_are_recorded_and_replaced_by_key(store: Arc<dyn LeaseStore>) {
    let job = unique_job("man");
    prepared(&store, &[&job]).await;
    let t = now(&store).await;
    let mut rec = crate::history::RunRecord {
        job: job.clone(),
        slot: t,
        scheduled_at: t,
        instance_id: "a".into(),
        manual: true,
        attempt: 1,
        reason: Reason::Manual,
        status: RunStatus::Running,
        fence: 0,
        started_at: t,
        finished_at: None,
        error: None,
    };
    store
        .record_manual(&rec, Retention::default())
        .await
        .unwrap();
    rec.status = RunStatus::Succeeded;
    rec.finished_at = Some(t + 5);
    store
        .record_manual(&rec, Retention::default())
        .await
        .unwrap();
    let h = store.history(&job, 10).await.unwrap();
    assert_eq!(h, vec![rec]);
    // A manual run never blocks a scheduled claim of the same slot.
    won(&store, &claim(&job, t, "b", t)).await;
}

/// `known_jobs` lists the jobs given to `prepare` and the jobs claimed.
pub async fn known_jobs_lists_prepared_and_claimed_jobs(store: Arc<dyn LeaseStore>) {
    let (a, b) = (unique_job("kja"), unique_job("kjb"));
    prepared(&store, &[&a]).await;
    let t = now(&store).await;
    won(&store, &claim(&b, t, "x", t)).await;
    let jobs = store.known_jobs().await.unwrap();
    assert!(jobs.contains(&a) && jobs.contains(&b), "{jobs:?}");
}
