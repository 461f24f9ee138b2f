//! Tests of the lease store's key format (version 2: each attempt's history row inside its
//! run hash) beyond the conformance kit: the format check in `prepare`, retention of runs
//! that never finish, TTL pruning of single attempts, and keys of the wrong type on the
//! claim's fast path.

mod common;

use std::time::Duration;

use anarchon_core::history::prunes_at;
use anarchon_core::store::{
    ClaimOutcome, Error, Finish, HistoryStore, JobName, LeaseClaim, LeaseStore, Overlap,
    OwnerWrite, Prepare, Reason, Retention, RunKey, RunStatus, Store, Takeover, TakeoverOutcome,
};
use anarchon_core::testkit::{server_url, unique_job};
use anarchon_redis::RedisStore;
use anarchon_redis::fred::prelude::*;
use anarchon_redis::fred::types::{ClusterHash, CustomCommand};
use common::{admin, options};

/// Every server URL set: Redis and, where set, Valkey.
fn urls() -> Vec<String> {
    let mut v: Vec<String> = server_url("ANARCHON_REDIS_URL").into_iter().collect();
    if let Ok(u) = std::env::var("ANARCHON_VALKEY_URL")
        && !u.trim().is_empty()
    {
        v.push(u);
    }
    v
}

fn claim(job: &JobName, slot: i64, now: i64, lease_ms: u64, retention: Retention) -> LeaseClaim {
    LeaseClaim {
        run: RunKey::new(job.clone(), slot),
        scheduled_at: slot,
        instance_id: "a".into(),
        lease_ms,
        not_after: now + 60_000,
        overlap: Overlap::Skip,
        reason: Reason::Scheduled,
        retention,
    }
}

async fn won(store: &RedisStore, c: &LeaseClaim) -> anarchon_core::store::Lease {
    match store.claim(c).await.unwrap() {
        ClaimOutcome::Won(l) => l,
        other => panic!("expected to win {}, got {other:?}", c.run),
    }
}

fn done(retention: Retention) -> Finish {
    Finish {
        status: RunStatus::Succeeded,
        error: None,
        retention,
    }
}

async fn keys(admin: &Client, pattern: String) -> Vec<String> {
    let mut keys: Vec<String> = admin
        .custom(
            CustomCommand::new_static("KEYS", ClusterHash::Random, false),
            vec![pattern],
        )
        .await
        .unwrap();
    keys.sort();
    keys
}

fn prepare(job: &JobName) -> Prepare {
    Prepare {
        jobs: vec![job.clone()],
        instance_id: "a".into(),
        call_timeout: std::time::Duration::from_secs(5),
    }
}

/// [B-33] A prefix written in key format 1 is refused with an instruction to delete its
/// keys (format 1 is not migrated); a newer format is `SchemaTooNew`. Nothing is written.
#[tokio::test]
async fn b33_prepare_refuses_other_key_formats() {
    for url in urls() {
        let admin = admin(&url).await;
        for (format, newer) in [("1", false), ("3", true)] {
            let opts = options();
            let prefix = opts.key_prefix().to_owned();
            let meta = format!("{prefix}meta");
            let _: () = admin.hset(&meta, ("format", format)).await.unwrap();
            let store = RedisStore::connect_with(&url, opts).await.unwrap();
            let err = store
                .prepare(&prepare(&unique_job("fmt")))
                .await
                .unwrap_err();
            match (&err, newer) {
                (Error::SchemaTooNew { found, .. }, true) => assert_eq!(*found, 3),
                (
                    Error::Corrupt {
                        location, reason, ..
                    },
                    false,
                ) => {
                    assert!(location.contains(&meta), "{err}");
                    assert!(reason.contains("format 1"), "{err}");
                    assert!(reason.contains(&format!("'{prefix}*'")), "{err}");
                }
                _ => panic!("format {format}: unexpected {err}"),
            }
            assert_eq!(keys(&admin, format!("{prefix}*")).await, vec![meta.clone()]);
            let kept: Option<String> = admin.hget(&meta, "format").await.unwrap();
            assert_eq!(kept.as_deref(), Some(format));
            store.close().await.unwrap();
        }
        // A fresh prefix gets the current format.
        let opts = options();
        let prefix = opts.key_prefix().to_owned();
        let store = RedisStore::connect_with(&url, opts).await.unwrap();
        store.prepare(&prepare(&unique_job("fmt"))).await.unwrap();
        let f: Option<String> = admin.hget(format!("{prefix}meta"), "format").await.unwrap();
        assert_eq!(f.as_deref(), Some("2"));
        store.close().await.unwrap();
    }
}

/// [B-37] Runs that never finish (each handed over and replaced by the next slot) are still
/// pruned by the claims, lazily: the job never holds more than `size` + 16 runs, and the
/// next finish prunes it to exactly `size`. Pruned runs leave no key behind.
#[tokio::test]
async fn b37_claims_bound_the_runs_that_never_finish() {
    for url in urls() {
        let opts = options();
        let prefix = opts.key_prefix().to_owned();
        let store = RedisStore::connect_with(&url, opts).await.unwrap();
        let admin = admin(&url).await;
        let job = unique_job("unfinished");
        store.prepare(&prepare(&job)).await.unwrap();
        let keep = Retention {
            size: 3,
            ttl_ms: None,
        };
        let t = store.now().await.unwrap();
        let mut most = 0;
        let mut last = None;
        for i in 0..40 {
            let l = won(&store, &claim(&job, t - 100_000 + i * 1000, t, 5_000, keep)).await;
            let n = store.history(&job, 1000).await.unwrap().len();
            most = most.max(n);
            if i < 39 {
                // Released: the next slot's claim marks it interrupted [B-15].
                assert_eq!(store.release(&l).await.unwrap(), OwnerWrite::Done);
            }
            last = Some(l);
        }
        assert!((3..=3 + 16).contains(&most), "{most} rows at most");
        let h = store.history(&job, 1000).await.unwrap();
        assert!(h[1..].iter().all(|r| r.status == RunStatus::Interrupted));
        let l = last.unwrap();
        assert_eq!(
            store.finish(&l, &done(keep)).await.unwrap(),
            OwnerWrite::Done
        );
        let h = store.history(&job, 1000).await.unwrap();
        let slots: Vec<i64> = h.iter().map(|r| r.slot).collect();
        assert_eq!(slots, vec![t - 61_000, t - 62_000, t - 63_000]);
        let runs = keys(&admin, format!("{prefix}{{{job}}}:run:*")).await;
        assert_eq!(runs.len(), 3, "{runs:?}");
        let indexed: i64 = admin
            .zcard(format!("{prefix}{{{job}}}:runs"))
            .await
            .unwrap();
        assert_eq!(indexed, 3);
        store.close().await.unwrap();
    }
}

/// [B-37] TTL retention drops an attempt's row on its own when a later attempt of the run
/// is still young, and the whole run (its hash) once its last attempt expired.
#[tokio::test]
async fn b37_ttl_prunes_single_attempts_then_the_run() {
    for url in urls() {
        let opts = options();
        let prefix = opts.key_prefix().to_owned();
        let store = RedisStore::connect_with(&url, opts).await.unwrap();
        let admin = admin(&url).await;
        let job = unique_job("ttlatt");
        store.prepare(&prepare(&job)).await.unwrap();
        let ttl = Retention {
            size: 100,
            ttl_ms: Some(300),
        };
        let t = store.now().await.unwrap();
        let l1 = won(&store, &claim(&job, t, t, 100, ttl)).await;
        tokio::time::sleep(Duration::from_millis(150)).await;
        let take = Takeover {
            run: l1.run.clone(),
            seen_attempt: 1,
            instance_id: "b".into(),
            lease_ms: 60_000,
            max_attempts: 3,
            superseded: false,
            not_after: i64::MAX,
        };
        let TakeoverOutcome::Won(l2) = store.take_over(&take).await.unwrap() else {
            panic!("takeover")
        };
        assert_eq!(store.history(&job, 10).await.unwrap().len(), 2);
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(
            store.finish(&l2, &done(ttl)).await.unwrap(),
            OwnerWrite::Done
        );
        let h = store.history(&job, 10).await.unwrap();
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!((h[0].attempt, h[0].instance_id.as_str()), (2, "b"));
        assert_eq!(h[0].reason, Reason::Takeover);
        let run_key = format!("{prefix}{{{job}}}:run:{t}");
        let gone: bool = admin.hexists(&run_key, "1i").await.unwrap();
        assert!(!gone, "attempt 1's row is still in the run hash");

        tokio::time::sleep(Duration::from_millis(400)).await;
        let t2 = store.now().await.unwrap();
        let l3 = won(&store, &claim(&job, t2, t2, 60_000, ttl)).await;
        store.finish(&l3, &done(ttl)).await.unwrap();
        let h = store.history(&job, 10).await.unwrap();
        assert_eq!(h.iter().map(|r| r.slot).collect::<Vec<_>>(), vec![t2]);
        let exists: i64 = admin.exists(&run_key).await.unwrap();
        assert_eq!(exists, 0, "the expired run's hash is left");
        store.close().await.unwrap();
    }
}

/// A key of the wrong type among the job's indexes stops a claim with `Corrupt` naming it:
/// the run is not written and no index names it (only the fence may have moved on).
#[tokio::test]
async fn claim_with_an_index_of_the_wrong_type_writes_no_run() {
    for url in urls() {
        let admin = admin(&url).await;
        for index in ["live", "runs", "hist", "fence"] {
            let opts = options();
            let prefix = opts.key_prefix().to_owned();
            let store = RedisStore::connect_with(&url, opts).await.unwrap();
            let job = unique_job("wrongidx");
            let base = format!("{prefix}{{{job}}}:");
            let bad = format!("{base}{index}");
            let _: () = admin.rpush(&bad, "not anarchon's").await.unwrap();
            let t = store.now().await.unwrap();
            let err = store
                .claim(&claim(&job, t, t, 5_000, Retention::default()))
                .await
                .unwrap_err();
            assert!(
                matches!(&err, Error::Corrupt { location, .. } if location.contains(&bad)),
                "{index}: {err}"
            );
            let mut written = keys(&admin, format!("{base}*")).await;
            written.retain(|k| k != &bad && k != &format!("{base}fence"));
            assert_eq!(written, Vec::<String>::new(), "{index}: keys written");
            let len: i64 = admin.llen(&bad).await.unwrap();
            assert_eq!(len, 1, "{index}: the foreign key was changed");
            store.close().await.unwrap();
        }
    }
}

/// A key of the wrong type among the job's indexes stops a finish with `Corrupt` naming it,
/// and the finish writes nothing: the run stays `running` under its owner and stays listed
/// as unfinished. `live` and `fin` are written by every finish (checked by the writes
/// themselves on a finish that does not prune: `live` is put back when `fin` fails); `runs`,
/// `hist` and `fin` by one that prunes (every finish at `size` 1), which checks them before
/// its first write.
#[tokio::test]
async fn finish_with_an_index_of_the_wrong_type_writes_nothing() {
    for url in urls() {
        let admin = admin(&url).await;
        for (index, size) in [
            ("live", 100),
            ("fin", 100),
            ("fin", 1),
            ("runs", 1),
            ("hist", 1),
        ] {
            let opts = options();
            let prefix = opts.key_prefix().to_owned();
            let store = RedisStore::connect_with(&url, opts).await.unwrap();
            let job = unique_job("wrongfin");
            let base = format!("{prefix}{{{job}}}:");
            let keep = Retention { size, ttl_ms: None };
            let t = store.now().await.unwrap();
            let lease = won(&store, &claim(&job, t, t, 60_000, keep)).await;
            let bad = format!("{base}{index}");
            let _: () = admin.del(&bad).await.unwrap();
            let _: () = admin.rpush(&bad, "not anarchon's").await.unwrap();
            let err = store.finish(&lease, &done(keep)).await.unwrap_err();
            assert!(
                matches!(&err, Error::Corrupt { location, .. } if location.contains(&bad)),
                "{index}: {err}"
            );
            let run_key = format!("{base}run:{t}");
            let (st, own): (String, String) = admin.hmget(&run_key, ("st", "own")).await.unwrap();
            assert_eq!((st.as_str(), own.as_str()), ("running", "a"), "{index}");
            if index != "live" {
                let live: Option<f64> = admin.zscore(format!("{base}live"), t).await.unwrap();
                assert_eq!(live, Some(t as f64), "{index}: the run left `live`");
            }
            if index != "fin" {
                let fin: i64 = admin.exists(format!("{base}fin")).await.unwrap();
                assert_eq!(fin, 0, "{index}: a finished row was indexed");
            }
            let len: i64 = admin.llen(&bad).await.unwrap();
            assert_eq!(len, 1, "{index}: the foreign key was changed");
            store.close().await.unwrap();
        }
    }
}

/// [B-37] A job at its steady state (every slot claimed and finished, `size` 40): a finish
/// prunes by count on one finish in 4 (`size / 8` rounded down to a power of two; which one
/// is the job's phase, `anarchon_core::history::prunes_at`), removing
/// the runs beyond `size` together, so the job holds between 40 and 40 + 15 runs; every
/// run indexed in `runs` has its hash and its rows in `hist` and `fin`, and no pruned run
/// leaves a key or an index entry behind.
#[tokio::test]
async fn b37_a_full_history_stays_within_size_and_size_plus_16_and_its_indexes_agree() {
    for url in urls() {
        let opts = options();
        let prefix = opts.key_prefix().to_owned();
        let store = RedisStore::connect_with(&url, opts).await.unwrap();
        let admin = admin(&url).await;
        let job = unique_job("steady");
        store.prepare(&prepare(&job)).await.unwrap();
        let keep = Retention {
            size: 40,
            ttl_ms: None,
        };
        let base = format!("{prefix}{{{job}}}:");
        let t = store.now().await.unwrap();
        let (mut least, mut most) = (usize::MAX, 0);
        for i in 0..120 {
            let l = won(
                &store,
                &claim(&job, t - 200_000 + i * 1000, t, 60_000, keep),
            )
            .await;
            assert_eq!(
                store.finish(&l, &done(keep)).await.unwrap(),
                OwnerWrite::Done
            );
            let runs: i64 = admin.zcard(format!("{base}runs")).await.unwrap();
            let hist: i64 = admin.zcard(format!("{base}hist")).await.unwrap();
            let fin: i64 = admin.zcard(format!("{base}fin")).await.unwrap();
            assert_eq!((hist, fin), (runs, runs), "finish {i}: one row per run");
            let n = usize::try_from(runs).unwrap();
            if i >= 60 {
                least = least.min(n);
                most = most.max(n);
            }
            if prunes_at(job.as_str(), l.fence, 4) && i >= 40 {
                assert_eq!(n, 40, "finish {i} (fence {}) prunes to size", l.fence);
            }
        }
        assert_eq!(least, 40);
        assert!((41..40 + 16).contains(&most), "{most} runs at most");
        let hashes = keys(&admin, format!("{base}run:*")).await;
        let indexed: Vec<String> = admin
            .zrange(format!("{base}runs"), 0, -1, None, false, None, false)
            .await
            .unwrap();
        assert_eq!(hashes.len(), indexed.len(), "{hashes:?}");
        let newest = store.history(&job, 1).await.unwrap();
        assert_eq!(newest[0].slot, t - 200_000 + 119 * 1000);
        store.close().await.unwrap();
    }
}
