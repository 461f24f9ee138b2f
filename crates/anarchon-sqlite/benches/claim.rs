//! Claim throughput and latency of the SQLite store, beside an empty `BEGIN IMMEDIATE;
//! COMMIT` on the same file through the same connection thread (the baseline): what a
//! claim costs over just taking and releasing the write lock.
//!
//! `cargo bench -p anarchon-sqlite --bench claim [-- --json]`; `ANARCHON_BENCH_OPS` and
//! `ANARCHON_BENCH_WARMUP` change the counts. Rows:
//! - `empty tx`: `BEGIN IMMEDIATE; COMMIT` through the store's thread (the baseline);
//! - `claim`: a won claim of a new slot (one transaction: late check, one read for the
//!   taken/overlap/interrupt checks, fence, run and history rows; retention pruning at 100
//!   runs on every 16th claim), each run finished untimed after its claim (the finish
//!   prunes), as in a running service;
//! - `claim + finish`: both, timed together;
//! - `claim taken`: a claim of a slot that is already taken;
//! - `heartbeat`: a batched heartbeat of one lease;
//! - `empty tx, no thread`: the baseline on a plain rusqlite connection in this thread, to
//!   show what the hop to the connection's thread costs;
//! - `1-row update tx, no thread`: `BEGIN IMMEDIATE; UPDATE one row; COMMIT` on that plain
//!   connection: the floor of any transaction that writes (the empty one writes no page).

use std::time::{Duration, Instant};

use anarchon_core::bench::{BenchConfig, Measurement, json_requested, measure, report};
use anarchon_core::store::{
    ClaimOutcome, Finish, JobName, LeaseClaim, LeaseStore, Overlap, OwnerWrite, Reason, Retention,
    RunKey, RunStatus, Store,
};
use anarchon_sqlite::SqliteStore;

fn claim(job: &JobName, slot: i64, instance: &str) -> LeaseClaim {
    LeaseClaim {
        run: RunKey::new(job.clone(), slot),
        scheduled_at: slot,
        instance_id: instance.into(),
        lease_ms: 30_000,
        not_after: i64::MAX,
        overlap: Overlap::Skip,
        reason: Reason::Scheduled,
        retention: Retention::default(),
    }
}

fn done() -> Finish {
    Finish {
        status: RunStatus::Succeeded,
        error: None,
        retention: Retention::default(),
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run());
}

async fn run() {
    let json = json_requested();
    let cfg = BenchConfig::from_env(BenchConfig {
        warmup: 200,
        ops: 2_000,
    });
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("bench.db");
    let store = SqliteStore::connect(&path).await.expect("open");
    let job = JobName::new("bench").expect("job name");
    let base_slot = store.now().await.expect("now") - 1_000_000_000;

    let empty = measure("empty tx", &cfg, |_| async {
        store.empty_write().await.expect("empty transaction");
    })
    .await;

    // Each won run is finished right after its claim, outside the timing, so the job sits
    // at its steady state: 100 finished runs kept, one pruned per finish.
    let mut samples = Vec::with_capacity(cfg.ops);
    for i in 0..cfg.warmup + cfg.ops {
        let c = claim(&job, base_slot + i as i64 * 1000, "a");
        let started = Instant::now();
        let outcome = store.claim(&c).await.expect("claim");
        let took = started.elapsed();
        let ClaimOutcome::Won(lease) = outcome else {
            panic!("expected a won claim, got {outcome:?}")
        };
        if i >= cfg.warmup {
            samples.push(took);
        }
        store.finish(&lease, &done()).await.expect("finish");
    }
    let claims = Measurement::from_samples("claim", &samples);

    let finished = measure("claim + finish", &cfg, |i| {
        let c = claim(
            &job,
            base_slot + (cfg.warmup + cfg.ops + i) as i64 * 1000,
            "a",
        );
        let store = &store;
        async move {
            let ClaimOutcome::Won(lease) = store.claim(&c).await.expect("claim") else {
                panic!("expected a won claim")
            };
            store.finish(&lease, &done()).await.expect("finish");
        }
    })
    .await;

    let last = base_slot + (2 * (cfg.warmup + cfg.ops) - 1) as i64 * 1000;
    let taken = measure("claim taken", &cfg, |_| {
        let c = claim(&job, last, "b");
        let store = &store;
        async move {
            assert_eq!(store.claim(&c).await.expect("claim"), ClaimOutcome::Taken);
        }
    })
    .await;

    let hb_job = JobName::new("bench-hb").expect("job name");
    let ClaimOutcome::Won(lease) = store
        .claim(&claim(&hb_job, base_slot, "a"))
        .await
        .expect("claim")
    else {
        panic!("heartbeat lease")
    };
    let heartbeat = measure("heartbeat", &cfg, |_| {
        let leases = std::slice::from_ref(&lease);
        let store = &store;
        async move {
            store.heartbeat(leases, 30_000).await.expect("heartbeat");
        }
    })
    .await;

    let raw = rusqlite::Connection::open(&path).expect("raw connection");
    raw.busy_timeout(Duration::from_secs(5))
        .expect("busy timeout");
    let raw_empty = measure("empty tx, no thread", &cfg, |_| {
        raw.execute_batch("BEGIN IMMEDIATE; COMMIT")
            .expect("raw empty transaction");
        async {}
    })
    .await;

    raw.pragma_update(None, "synchronous", "NORMAL")
        .expect("synchronous");
    raw.execute_batch("CREATE TABLE IF NOT EXISTS bench_counter (id INTEGER PRIMARY KEY, n INTEGER); INSERT OR IGNORE INTO bench_counter VALUES (1, 0);")
        .expect("counter table");
    let raw_update = measure("1-row update tx, no thread", &cfg, |_| {
        raw.execute_batch(
            "BEGIN IMMEDIATE; UPDATE bench_counter SET n = n + 1 WHERE id = 1; COMMIT",
        )
        .expect("raw update transaction");
        async {}
    })
    .await;

    let [single, batched, single_finish, batched_finish] =
        batch_rows(&store, "batch", base_slot).await;
    let ratio = claims.p50.as_secs_f64() / empty.p50.as_secs_f64();
    let throughput = claims.ops_per_sec / empty.ops_per_sec;
    let rows = [
        empty,
        claims,
        finished,
        taken,
        heartbeat,
        raw_empty,
        raw_update,
        single,
        batched,
        single_finish,
        batched_finish,
    ];
    report("sqlite claim", &rows, "empty tx", json);
    if !json {
        println!(
            "claim / empty BEGIN IMMEDIATE; COMMIT: p50 {ratio:.2}x, throughput {throughput:.2}x \
             (target: a claim costs at most 2x the empty transaction)"
        );
        print_batch_ratios(&rows);
    }
    store.close().await.expect("close");
}

/// Claims per round of the batch rows.
const BATCH: usize = 256;

/// "256 single claims: per claim", "batch of 256 claims: per claim", "256 single finishes:
/// per finish" and "batch of 256 finishes: per finish", measured in the same run on the same
/// store: `ANARCHON_BENCH_BATCH_ROUNDS` rounds (default 10, after one untimed round) of 256
/// won claims of new jobs each way, alternating which way goes first, then the results of
/// those runs each way (the singly claimed runs finished singly, the batch in a batch). A
/// sample is one round's time divided by 256.
async fn batch_rows(store: &dyn LeaseStore, prefix: &str, slot: i64) -> [Measurement; 4] {
    let rounds: usize = std::env::var("ANARCHON_BENCH_BATCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let claims = |kind: &str, round: usize| -> Vec<LeaseClaim> {
        (0..BATCH)
            .map(|i| {
                let job = JobName::new(format!("{prefix}-{kind}-{round}-{i}")).expect("job name");
                LeaseClaim {
                    run: RunKey::new(job, slot),
                    scheduled_at: slot,
                    instance_id: "a".into(),
                    lease_ms: 30_000,
                    not_after: i64::MAX,
                    overlap: Overlap::Allow,
                    reason: Reason::Scheduled,
                    retention: Retention::default(),
                }
            })
            .collect()
    };
    let won = |o: ClaimOutcome| match o {
        ClaimOutcome::Won(lease) => lease,
        other => panic!("expected to win, got {other:?}"),
    };
    let result = Finish {
        status: RunStatus::Succeeded,
        error: None,
        retention: Retention::default(),
    };
    let (mut single, mut batched) = (Vec::new(), Vec::new());
    let (mut single_finish, mut batched_finish) = (Vec::new(), Vec::new());
    for round in 0..=rounds {
        let (one, many) = (claims("one", round), claims("many", round));
        let (mut one_leases, mut many_writes) = (Vec::new(), Vec::new());
        for batch_first in [round % 2 == 1, round % 2 == 0] {
            let started = Instant::now();
            if batch_first {
                let out = store.claim_many(&many).await.expect("claim batch");
                if round > 0 {
                    batched.push(started.elapsed() / BATCH as u32);
                }
                many_writes = out.into_iter().map(|o| (won(o), result.clone())).collect();
            } else {
                for c in &one {
                    one_leases.push(won(store.claim(c).await.expect("claim")));
                }
                if round > 0 {
                    single.push(started.elapsed() / BATCH as u32);
                }
            }
        }
        for batch_first in [round % 2 == 1, round % 2 == 0] {
            let started = Instant::now();
            if batch_first {
                let out = store.finish_many(&many_writes).await.expect("finish batch");
                assert!(out.iter().all(|o| *o == OwnerWrite::Done));
                if round > 0 {
                    batched_finish.push(started.elapsed() / BATCH as u32);
                }
            } else {
                for lease in &one_leases {
                    let out = store.finish(lease, &result).await.expect("finish");
                    assert_eq!(out, OwnerWrite::Done);
                }
                if round > 0 {
                    single_finish.push(started.elapsed() / BATCH as u32);
                }
            }
        }
    }
    [
        Measurement::from_samples("256 single claims: per claim", &single),
        Measurement::from_samples("batch of 256 claims: per claim", &batched),
        Measurement::from_samples("256 single finishes: per finish", &single_finish),
        Measurement::from_samples("batch of 256 finishes: per finish", &batched_finish),
    ]
}

/// Prints the batch rows as "batch: x µs per claim, single: y µs per claim (p50; ratio)", for
/// claims and for results.
fn print_batch_ratios(rows: &[Measurement]) {
    let p50 = |name: &str| {
        rows.iter()
            .find(|r| r.name == name)
            .map_or(f64::NAN, |r| r.p50.as_secs_f64() * 1e6)
    };
    for (what, plural, single, batched) in [
        (
            "claim",
            "claims",
            "256 single claims: per claim",
            "batch of 256 claims: per claim",
        ),
        (
            "finish",
            "finishes",
            "256 single finishes: per finish",
            "batch of 256 finishes: per finish",
        ),
    ] {
        let (single, batched) = (p50(single), p50(batched));
        println!(
            "batch of 256 {plural}: {batched:.1} µs per {what}, 256 single {plural}: \
             {single:.1} µs per {what} (p50; {:.1}x)",
            single / batched.max(1e-3)
        );
    }
}
