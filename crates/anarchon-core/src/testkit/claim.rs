//! Store-level conformance tests for [`ClaimStore`] (claim-only stores). [B-22..B-29]

use std::sync::Arc;

use crate::claim_only::host_now;
use crate::history::{Reason, Retention, RunRecord, RunStatus};
use crate::store::{ClaimStore, EpochMs, JobName, Prepare, SlotClaim, SlotOutcome};
use crate::testkit::{key, unique_job};

#[doc(hidden)]
#[macro_export]
macro_rules! __claim_store_tests {
    ($factory:path, [$($mode:ident)?]) => {
        $crate::__kit_tests!($factory, [$($mode)?], claim,
            claim_b10_late_claim_has_no_effect,
            claim_b11_one_of_concurrent_claims_wins,
            claim_b11_each_slot_is_claimed_separately,
            claim_b28_history_is_kept_by_count,
        );
    };
}

async fn prepared(store: &Arc<dyn ClaimStore>, job: &JobName) {
    store
        .prepare(&Prepare {
            jobs: vec![job.clone()],
            instance_id: "kit".into(),
            call_timeout: std::time::Duration::from_secs(5),
        })
        .await
        .expect("prepare");
}

fn slot_claim(job: &JobName, slot: EpochMs, instance: &str) -> SlotClaim {
    SlotClaim {
        run: key(job, slot),
        instance_id: instance.into(),
        not_after: host_now() + 60_000,
    }
}

/// [B-10] A claim past its deadline is `Late` and does not take the slot.
pub async fn claim_b10_late_claim_has_no_effect(store: Arc<dyn ClaimStore>) {
    let job = unique_job("clate");
    prepared(&store, &job).await;
    let slot = host_now() - 120_000;
    let mut c = slot_claim(&job, slot, "a");
    c.not_after = host_now() - 60_000;
    assert_eq!(store.claim_slot(&c).await.unwrap(), SlotOutcome::Late);
    assert_eq!(
        store
            .claim_slot(&slot_claim(&job, slot, "b"))
            .await
            .unwrap(),
        SlotOutcome::Won
    );
}

/// [B-11] Of concurrent claims of one slot exactly one wins.
pub async fn claim_b11_one_of_concurrent_claims_wins(store: Arc<dyn ClaimStore>) {
    let job = unique_job("crace");
    prepared(&store, &job).await;
    let slot = host_now();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = store.clone();
        let c = slot_claim(&job, slot, &format!("i{i}"));
        tasks.push(tokio::spawn(async move {
            store.claim_slot(&c).await.expect("claim")
        }));
    }
    let mut wins = 0;
    for t in tasks {
        match t.await.unwrap() {
            SlotOutcome::Won => wins += 1,
            SlotOutcome::Taken => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(wins, 1);
}

/// [B-11] A second claim of a claimed slot is `Taken`; consecutive slots are claimed one
/// after another, each by its first claimer.
pub async fn claim_b11_each_slot_is_claimed_separately(store: Arc<dyn ClaimStore>) {
    let job = unique_job("cseq");
    prepared(&store, &job).await;
    let base = host_now() - 5_000;
    for i in 0..4 {
        let slot = base + i * 1000;
        assert_eq!(
            store
                .claim_slot(&slot_claim(&job, slot, "a"))
                .await
                .unwrap(),
            SlotOutcome::Won
        );
        assert_eq!(
            store
                .claim_slot(&slot_claim(&job, slot, "b"))
                .await
                .unwrap(),
            SlotOutcome::Taken
        );
    }
}

/// [B-28] History on a claim-only store is kept by count, newest first.
pub async fn claim_b28_history_is_kept_by_count(store: Arc<dyn ClaimStore>) {
    let job = unique_job("chist");
    prepared(&store, &job).await;
    let base = host_now() - 10_000;
    let keep = Retention {
        size: 3,
        ttl_ms: None,
    };
    for i in 0..5 {
        let slot = base + i * 1000;
        let mut rec = RunRecord {
            job: job.clone(),
            slot,
            scheduled_at: slot,
            instance_id: "a".into(),
            manual: false,
            attempt: 1,
            reason: Reason::Scheduled,
            status: RunStatus::Running,
            fence: 0,
            started_at: slot + 5,
            finished_at: None,
            error: None,
        };
        store.record(&rec, keep).await.unwrap();
        rec.status = RunStatus::Succeeded;
        rec.finished_at = Some(slot + 10);
        store.record(&rec, keep).await.unwrap();
    }
    let h = store.history(&job, 100).await.unwrap();
    assert_eq!(h.len(), 3, "{h:?}");
    assert_eq!(h[0].slot, base + 4000);
    assert_eq!(h[0].status, RunStatus::Succeeded);
}
