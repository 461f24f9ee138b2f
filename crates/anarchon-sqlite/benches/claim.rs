//! Claim throughput and latency of the SQLite store, beside an empty `BEGIN IMMEDIATE;
//! COMMIT` on the same file through the same connection thread (the baseline): what a
//! claim costs over just taking and releasing the write lock.
//!
//! `cargo bench -p anarchon-sqlite --bench claim [-- --json]`; `ANARCHON_BENCH_OPS` and
//! `ANARCHON_BENCH_WARMUP` change the counts. Rows:
//! - `empty tx`: `BEGIN IMMEDIATE; COMMIT` through the store's thread (the baseline);
//! - `claim`: a won claim of a new slot (one transaction: late check, one read for the
//!   taken/overlap/interrupt checks, fence, run and history rows; retention pruning at 100
//!   runs on one claim in 16), each run finished untimed after its claim (the finish
//!   prunes), as in a running service;
//! - `claim + finish`: both, timed together;
//! - `claim taken`: a claim of a slot that is already taken;
//! - `heartbeat`: a batched heartbeat of one lease;
//! - `empty tx, no thread`: the baseline on a plain rusqlite connection in this thread, to
//!   show what the hop to the connection's thread costs;
//! - `1-row update tx, no thread`: `BEGIN IMMEDIATE; UPDATE one row; COMMIT` on that plain
//!   connection: the floor of any transaction that writes (the empty one writes no page).

use std::time::{Duration, Instant};

use anarchon_core::bench::{
    BenchConfig, Measurement, batch_rows, json_requested, measure, print_batch_ratios, report,
};
use anarchon_core::store::{
    ClaimOutcome, Finish, JobName, LeaseClaim, LeaseStore, Overlap, Reason, Retention, RunKey,
    RunStatus, Store,
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
