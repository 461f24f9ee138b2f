//! Claim and result batches on Redis (and a Redis Cluster where `ANARCHON_REDIS_CLUSTER_URL`
//! is set): one round trip per batch; one claim script call per batch of claims (per hash
//! slot on a cluster), the finish script once per result; runs read 512 per script call.

use std::time::Duration;

use anarchon_core::history::prunes_at;
use anarchon_core::store::{
    ClaimOutcome, EpochMs, Finish, HistoryStore, JobName, Lease, LeaseClaim, LeaseStore, Overlap,
    OwnerWrite, Prepare, Reason, Retention, RunStatus, Store,
};
use anarchon_core::testkit::lease::won_all;
use anarchon_core::testkit::{key, server_url, unique_job};
use anarchon_redis::fred::prelude::*;
use anarchon_redis::fred::types::InfoKind;
use anarchon_redis::{RedisOptions, RedisStore};

mod common;

fn claim(job: &JobName, slot: EpochMs, instance: &str, now: EpochMs) -> LeaseClaim {
    LeaseClaim {
        run: key(job, slot),
        scheduled_at: slot,
        instance_id: instance.into(),
        lease_ms: 30_000,
        not_after: now + 60_000,
        overlap: Overlap::Skip,
        reason: Reason::Scheduled,
        retention: Retention::default(),
    }
}

/// Calls of `command` a single server has run so far (`INFO commandstats`, scripts' own
/// commands included); `None` on a cluster, whose counters are per node.
async fn command_calls(url: &str, command: &str) -> Option<u64> {
    let config = Config::from_url(url).expect("url");
    let client = Builder::from_config(config).build().expect("client");
    client.init().await.expect("connect");
    if client.is_clustered() {
        let _ = client.quit().await;
        return None;
    }
    let info: String = client
        .info(Some(InfoKind::CommandStats))
        .await
        .expect("info");
    let _ = client.quit().await;
    let prefix = format!("cmdstat_{command}:calls=");
    Some(
        info.lines()
            .filter_map(|line| line.strip_prefix(prefix.as_str()))
            .filter_map(|rest| rest.split(',').next()?.parse::<u64>().ok())
            .sum(),
    )
}

/// `EVALSHA` calls a single server has run so far; `None` on a cluster.
async fn evalsha_calls(url: &str) -> Option<u64> {
    command_calls(url, "evalsha").await
}

/// The two instances that lose a slot stop at one read (`HLEN` of the run hash): they do not
/// read the job's earlier live runs, which the winner's claim already looked at. Counted on a
/// private server, where `INFO commandstats` counts this store's calls only.
#[tokio::test]
async fn b11_a_lost_claim_stops_at_one_read_of_the_run() {
    let Some(server) = anarchon_test_support::OwnRedis::start() else {
        return;
    };
    let url = server.url();
    let store = RedisStore::connect_with(&url, common::options())
        .await
        .expect("store");
    let jobs: Vec<JobName> = (0..50).map(|_| unique_job("lost")).collect();
    let t = store.now().await.unwrap();
    // Each job's previous slot is still running (its lease live) and the next is won:
    // the job has an earlier live run that a winning claim reads.
    let mut claims: Vec<LeaseClaim> = jobs.iter().map(|j| claim(j, t, "a", t)).collect();
    for o in store.claim_many(&claims).await.unwrap() {
        assert!(matches!(o, ClaimOutcome::Won(_)), "{o:?}");
    }
    for c in &mut claims {
        c.run.slot = t + 1_000;
        c.scheduled_at = t + 1_000;
        c.overlap = Overlap::Allow;
    }
    for o in store.claim_many(&claims).await.unwrap() {
        assert!(matches!(o, ClaimOutcome::Won(_)), "{o:?}");
    }
    let single = "a private single server";
    let ranges = command_calls(&url, "zrangebyscore").await.expect(single);
    let reads = command_calls(&url, "hmget").await.expect(single);
    for c in &mut claims {
        c.instance_id = "b".into();
    }
    let lost = store.claim_many(&claims).await.unwrap();
    assert!(lost.iter().all(|o| *o == ClaimOutcome::Taken), "{lost:?}");
    assert_eq!(
        command_calls(&url, "zrangebyscore").await.expect(single) - ranges,
        0,
        "a lost claim read the job's live runs"
    );
    assert_eq!(command_calls(&url, "hmget").await.expect(single) - reads, 0);
}

/// A finish that does not prune reads the run (`HMGET`) and writes it and two indexes: no
/// `TYPE` read (the writes themselves check their keys); a finish that prunes checks the
/// indexes it prunes first (3 `TYPE` reads). Counted on a private server.
#[tokio::test]
async fn a_finish_that_does_not_prune_makes_no_type_reads() {
    let Some(server) = anarchon_test_support::OwnRedis::start() else {
        return;
    };
    let url = server.url();
    let store = RedisStore::connect_with(&url, common::options())
        .await
        .expect("store");
    let jobs: Vec<JobName> = (0..50).map(|_| unique_job("fin")).collect();
    let t = store.now().await.unwrap();
    let claims: Vec<LeaseClaim> = jobs.iter().map(|j| claim(j, t, "a", t)).collect();
    let held = won_all(&store, &claims).await;
    let done = |size| Finish {
        status: RunStatus::Succeeded,
        error: None,
        retention: Retention { size, ttl_ms: None },
    };
    let single = "a private single server";
    let types = command_calls(&url, "type").await.expect(single);
    // `size` 100 prunes on one finish in 8 fences, at each job's own phase: these runs (fence
    // 1) of the jobs whose phase does not prune at fence 1.
    let batch: Vec<(Lease, Finish)> = held[..25]
        .iter()
        .filter(|l| !prunes_at(l.run.job.as_str(), l.fence, 8))
        .map(|l| (l.clone(), done(100)))
        .collect();
    assert!(
        batch.len() >= 10,
        "{} of 25 jobs prune at fence 1",
        25 - batch.len()
    );
    let out = store.finish_many(&batch).await.unwrap();
    assert!(out.iter().all(|o| *o == OwnerWrite::Done), "{out:?}");
    assert_eq!(
        command_calls(&url, "type").await.expect(single) - types,
        0,
        "a finish that does not prune read key types"
    );
    // `size` 1 prunes on every finish.
    let batch: Vec<(Lease, Finish)> = held[25..].iter().map(|l| (l.clone(), done(1))).collect();
    let types = command_calls(&url, "type").await.expect(single);
    let out = store.finish_many(&batch).await.unwrap();
    assert!(out.iter().all(|o| *o == OwnerWrite::Done), "{out:?}");
    assert_eq!(
        command_calls(&url, "type").await.expect(single) - types,
        3 * 25,
        "a pruning finish checks runs, hist and fin"
    );
}

async fn one_round_trip_per_batch(var: &str) {
    let Some(url) = server_url(var) else { return };
    let store = RedisStore::connect_with(
        &url,
        RedisOptions::default().prefix(format!("anarchon-test-{:016x}:", rand::random::<u64>())),
    )
    .await
    .expect("store");
    let jobs: Vec<JobName> = (0..300).map(|_| unique_job("rt")).collect();
    store
        .prepare(&Prepare {
            jobs: jobs.clone(),
            instance_id: "a".into(),
            call_timeout: Duration::from_secs(5),
        })
        .await
        .expect("prepare");
    let t = store.now().await.unwrap();
    // Warm-up: loads the script where needed.
    store.claim(&claim(&jobs[0], t, "a", t)).await.unwrap();
    let batch: Vec<LeaseClaim> = jobs[1..201].iter().map(|j| claim(j, t, "a", t)).collect();
    let calls_before = evalsha_calls(&url).await;
    let before = store.round_trips();
    let out = store.claim_many(&batch).await.unwrap();
    assert_eq!(
        store.round_trips() - before,
        1,
        "200 claims in one pipeline"
    );
    if let (Some(after), Some(before)) = (evalsha_calls(&url).await, calls_before) {
        // Other tests may share the server: at least the batch's script call ran (exactly
        // one per batch is counted on a private server below).
        assert!(after - before >= 1, "{} EVALSHA calls", after - before);
    }
    assert!(
        out.iter()
            .zip(&batch)
            .all(|(o, c)| matches!(o, ClaimOutcome::Won(l) if l.run == c.run)),
        "{out:?}"
    );
    // Again from another instance: all taken, still one round trip.
    let again: Vec<LeaseClaim> = jobs[1..201].iter().map(|j| claim(j, t, "b", t)).collect();
    let before = store.round_trips();
    let out = store.claim_many(&again).await.unwrap();
    assert_eq!(store.round_trips() - before, 1);
    assert!(out.iter().all(|o| *o == ClaimOutcome::Taken), "{out:?}");
    // Single claims: one round trip each.
    let before = store.round_trips();
    for j in &jobs[201..] {
        store.claim(&claim(j, t, "a", t)).await.unwrap();
    }
    assert_eq!(store.round_trips() - before, 99);
    store.close().await.unwrap();
}

#[tokio::test]
async fn a_batch_of_claims_is_one_pipeline_on_redis() {
    one_round_trip_per_batch("ANARCHON_REDIS_URL").await;
}

#[tokio::test]
async fn a_batch_of_claims_is_one_pipeline_on_a_cluster() {
    one_round_trip_per_batch("ANARCHON_REDIS_CLUSTER_URL").await;
}

async fn one_round_trip_per_result_batch(var: &str) {
    let Some(url) = server_url(var) else { return };
    let store = RedisStore::connect_with(
        &url,
        RedisOptions::default().prefix(format!("anarchon-test-{:016x}:", rand::random::<u64>())),
    )
    .await
    .expect("store");
    let jobs: Vec<JobName> = (0..300).map(|_| unique_job("fin")).collect();
    store
        .prepare(&Prepare {
            jobs: jobs.clone(),
            instance_id: "a".into(),
            call_timeout: Duration::from_secs(5),
        })
        .await
        .expect("prepare");
    let t = store.now().await.unwrap();
    let claims: Vec<LeaseClaim> = jobs.iter().map(|j| claim(j, t, "a", t)).collect();
    let held = won_all(&store, &claims).await;
    let finish = |n: usize| Finish {
        status: if n.is_multiple_of(2) {
            RunStatus::Succeeded
        } else {
            RunStatus::Failed
        },
        error: (n % 2 == 1).then(|| format!("boom {n}")),
        retention: Retention::default(),
    };
    // Warm-up: loads the finish script where needed.
    assert_eq!(
        store.finish(&held[0], &finish(0)).await.unwrap(),
        OwnerWrite::Done
    );
    // 200 results, every tenth from a stale owner (another instance, or an old attempt).
    let stale = |n: usize| n % 10 == 3 || n % 10 == 7;
    let batch: Vec<(Lease, Finish)> = held[1..201]
        .iter()
        .enumerate()
        .map(|(n, l)| {
            let mut l = l.clone();
            if n % 10 == 3 {
                l.instance_id = "not-the-owner".into();
            } else if n % 10 == 7 {
                l.attempt += 1;
            }
            (l, finish(n))
        })
        .collect();
    let before = store.round_trips();
    let out = store.finish_many(&batch).await.unwrap();
    assert_eq!(
        store.round_trips() - before,
        1,
        "200 results in one pipeline"
    );
    for (n, ((lease, f), answer)) in batch.iter().zip(&out).enumerate() {
        let history = store.history(&lease.run.job, 10).await.unwrap();
        assert_eq!(history.len(), 1, "{}", lease.run);
        if stale(n) {
            assert_eq!(*answer, OwnerWrite::Lost, "{}", lease.run);
            assert_eq!(history[0].status, RunStatus::Running, "nothing written");
        } else {
            assert_eq!(*answer, OwnerWrite::Done, "{}", lease.run);
            assert_eq!(history[0].status, f.status);
            assert_eq!(history[0].error, f.error);
        }
    }
    // Single finishes: one round trip each.
    let before = store.round_trips();
    for l in &held[201..] {
        store.finish(l, &finish(0)).await.unwrap();
    }
    assert_eq!(store.round_trips() - before, 99);
    store.close().await.unwrap();
}

#[tokio::test]
async fn b16_a_batch_of_results_is_one_pipeline_on_redis() {
    one_round_trip_per_result_batch("ANARCHON_REDIS_URL").await;
}

#[tokio::test]
async fn b16_a_batch_of_results_is_one_pipeline_on_a_cluster() {
    one_round_trip_per_result_batch("ANARCHON_REDIS_CLUSTER_URL").await;
}

/// 1,300 claims (and their results) are one script call per batch of 256 (not one per claim),
/// and a backup's
/// read of as many watched runs (and 20 that do not exist) is one round trip of short
/// script calls: 512 runs per `EVALSHA` at most, so one backup watching tens
/// of thousands of runs never blocks the server for long; its poll of the 1,300 jobs'
/// unfinished runs likewise, 512 jobs per call. Counted on a private server, where
/// `INFO commandstats` counts this store's calls only.
#[tokio::test]
async fn claim_and_result_batches_and_runs_reads_are_few_short_script_calls() {
    let Some(server) = anarchon_test_support::OwnRedis::start() else {
        return;
    };
    let url = server.url();
    let store = RedisStore::connect_with(&url, common::options())
        .await
        .expect("store");
    let jobs: Vec<JobName> = (0..1300).map(|_| unique_job("many-runs")).collect();
    store
        .prepare(&Prepare {
            jobs: jobs.clone(),
            instance_id: "a".into(),
            call_timeout: Duration::from_secs(5),
        })
        .await
        .expect("prepare");
    let t = store.now().await.unwrap();
    let claims: Vec<LeaseClaim> = jobs
        .iter()
        .enumerate()
        .map(|(n, j)| claim(j, t, if n % 2 == 0 { "a" } else { "b" }, t))
        .collect();
    let calls_before = evalsha_calls(&url).await.expect("a single server");
    let won = store.claim_many(&claims).await.unwrap();
    let calls = evalsha_calls(&url).await.expect("a single server") - calls_before;
    assert_eq!(
        calls,
        1300_u64.div_ceil(256),
        "one script call per batch of 256 claims"
    );
    assert!(
        won.iter().all(|o| matches!(o, ClaimOutcome::Won(_))),
        "{won:?}"
    );
    // The runs asked for: every claimed one, and 20 never claimed in between.
    let mut asked: Vec<_> = claims.iter().map(|c| c.run.clone()).collect();
    for (n, job) in jobs.iter().take(20).enumerate() {
        asked.insert(n * 50, key(job, t + 1000));
    }
    let calls_before = evalsha_calls(&url).await.expect("a single server");
    let before = store.round_trips();
    let views = store.runs(&asked).await.unwrap();
    assert_eq!(store.round_trips() - before, 1, "one round trip");
    let calls = evalsha_calls(&url).await.expect("a single server") - calls_before;
    assert_eq!(
        calls,
        1320_u64.div_ceil(512),
        "512 runs per script call at most"
    );
    assert_eq!(views.len(), 1300, "the 20 missing runs are left out");
    for (view, claim) in views.iter().zip(&claims) {
        assert_eq!(view.run, claim.run);
        assert_eq!(view.status, RunStatus::Running);
        assert_eq!(view.attempt, 1);
        assert_eq!(view.owner.as_deref(), Some(claim.instance_id.as_str()));
        assert!(view.expires_at > view.store_now, "{view:?}");
    }
    // Their results: one script call per batch of 256 too, each fenced as a single finish.
    let writes: Vec<(Lease, Finish)> = won
        .into_iter()
        .enumerate()
        .map(|(n, o)| {
            let ClaimOutcome::Won(mut lease) = o else {
                unreachable!()
            };
            if n % 7 == 3 {
                lease.instance_id = "not-the-owner".into();
            }
            let finish = Finish {
                status: RunStatus::Succeeded,
                error: None,
                retention: Retention::default(),
            };
            (lease, finish)
        })
        .collect();
    let calls_before = evalsha_calls(&url).await.expect("a single server");
    let written = store.finish_many(&writes).await.unwrap();
    let calls = evalsha_calls(&url).await.expect("a single server") - calls_before;
    assert_eq!(
        calls,
        1300_u64.div_ceil(256),
        "one script call per batch of 256 results"
    );
    for (n, answer) in written.iter().enumerate() {
        let expected = if n % 7 == 3 {
            OwnerWrite::Lost
        } else {
            OwnerWrite::Done
        };
        assert_eq!(*answer, expected, "result {n}");
    }
    let views = store.runs(&asked).await.unwrap();
    for (n, view) in views.iter().enumerate() {
        let expected = if n % 7 == 3 {
            RunStatus::Running
        } else {
            RunStatus::Succeeded
        };
        assert_eq!(view.status, expected, "{view:?}");
    }
    // A backup's poll of every job's unfinished runs: one round trip of script calls of 512
    // jobs at most, exactly the runs still running (the results that were lost).
    let calls_before = evalsha_calls(&url).await.expect("a single server");
    let before = store.round_trips();
    let mut unfinished = store.unfinished_runs(&jobs).await.unwrap();
    assert_eq!(store.round_trips() - before, 1, "one round trip");
    let calls = evalsha_calls(&url).await.expect("a single server") - calls_before;
    assert_eq!(
        calls,
        1300_u64.div_ceil(512),
        "512 jobs per script call at most"
    );
    unfinished.sort_by(|a, b| a.run.cmp(&b.run));
    let mut running: Vec<_> = claims
        .iter()
        .enumerate()
        .filter(|(n, _)| n % 7 == 3)
        .map(|(_, c)| c.run.clone())
        .collect();
    running.sort();
    assert_eq!(
        unfinished.iter().map(|v| v.run.clone()).collect::<Vec<_>>(),
        running
    );
    assert!(unfinished.iter().all(|v| v.status == RunStatus::Running));
    store.close().await.unwrap();
}

/// A start lists the unfinished runs of every job: 100,000 jobs are 196 script calls. The
/// store has one connection, so had they gone in one pipeline, a claim sent meanwhile would
/// have waited behind all of them; they go four calls to a pipeline, one pipeline after
/// another (49 round trips), and a claim sent meanwhile is answered while the listing runs.
#[tokio::test(flavor = "multi_thread")]
async fn a_listing_of_100_000_jobs_goes_in_short_pipelines() {
    let Some(server) = anarchon_test_support::OwnRedis::start() else {
        return;
    };
    let store = RedisStore::connect_with(&server.url(), common::options())
        .await
        .expect("store");
    let prefix = unique_job("listing");
    let jobs: Vec<JobName> = (0..100_000)
        .map(|i| JobName::new(format!("{prefix}-{i}")).unwrap())
        .collect();
    let t = store.now().await.unwrap();
    let before = store.round_trips();
    let listing = tokio::spawn({
        let store = store.clone();
        async move { store.unfinished_runs(&jobs).await }
    });
    while store.round_trips() == before {
        tokio::task::yield_now().await;
    }
    let won = store
        .claim_many(&[claim(&unique_job("due"), t, "a", t)])
        .await
        .unwrap();
    assert!(matches!(won[..], [ClaimOutcome::Won(_)]), "{won:?}");
    assert!(
        !listing.is_finished(),
        "the claim was answered only after the whole listing"
    );
    let listed = listing.await.unwrap().unwrap();
    assert!(listed.is_empty(), "{listed:?}");
    assert!(
        store.round_trips() - before >= 196_u64.div_ceil(4),
        "{} round trips",
        store.round_trips() - before
    );
    store.close().await.unwrap();
}
