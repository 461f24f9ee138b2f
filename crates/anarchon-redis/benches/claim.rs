//! Claim benchmark of the Redis store: claims per second and p50/p99 of the `lease`
//! strategy and the claim-only strategies, beside `PING` on the same connection in the same
//! run, and the graceful-handover latency (release → another instance notified).
//!
//! `cargo xtask bench redis [--json]` (or `cargo bench -p anarchon-redis --bench claim`)
//! with `ANARCHON_REDIS_URL` (and `ANARCHON_VALKEY_URL`, `ANARCHON_REDIS86_URL` where set).
//! `ANARCHON_BENCH_OPS` / `ANARCHON_BENCH_WARMUP` shorten a run.

use std::time::{Duration, Instant};

use anarchon_core::bench::{
    BenchConfig, Measurement, batch_rows, json_requested, measure, print_batch_ratios, report,
};
use anarchon_core::store::{
    ClaimOutcome, ClaimStore, Finish, JobName, LeaseClaim, LeaseStore, Overlap, Prepare, Reason,
    Retention, RunKey, RunStatus, SlotClaim, Store,
};
use anarchon_redis::fred::interfaces::ClientLike;
use anarchon_redis::{RedisClaimStore, RedisOptions, RedisStore, Strategy};

/// The target of the issue: a lease claim's p50 at most twice a PING's.
const TARGET_RATIO: f64 = 2.0;

fn options() -> RedisOptions {
    RedisOptions::default().prefix(format!("anarchon-bench-{:08x}:", rand::random::<u32>()))
}

fn job(name: &str) -> JobName {
    JobName::new(format!("{name}-{:08x}", rand::random::<u32>())).unwrap()
}

fn lease_claim(job: &JobName, slot: i64, instance: &str, now: i64) -> LeaseClaim {
    LeaseClaim {
        run: RunKey::new(job.clone(), slot),
        scheduled_at: slot,
        instance_id: instance.into(),
        lease_ms: 30_000,
        not_after: now + 3_600_000,
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

async fn ping(store: &RedisStore) {
    let _: String = store.client().ping(None).await.expect("PING");
}

async fn bench_server(label: &str, url: &str, idmp: Option<&str>, cfg: &BenchConfig, json: bool) {
    let opts = options();
    let store = RedisStore::connect_with(url, opts.clone())
        .await
        .expect("store");
    let server = match store.server().await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("SKIP {label}: {e}");
            return;
        }
    };
    let lease_job = job("bench-lease");
    let prep = Prepare {
        jobs: vec![lease_job.clone()],
        instance_id: "bench".into(),
        call_timeout: std::time::Duration::from_secs(5),
    };
    store.prepare(&prep).await.expect("prepare");
    let now = store.now().await.unwrap();
    let base = now - 10_000_000;
    let mut rows = Vec::new();

    // PING and the won claim alternate in one loop, so both see the same machine load (the
    // ratio of their p50s is the figure that matters). Each claim takes the next slot; the
    // previous run was finished (untimed), as between two slots of a real job, and
    // retention prunes beyond 100 runs as it goes.
    let (mut pings, mut claims) = (Vec::with_capacity(cfg.ops), Vec::with_capacity(cfg.ops));
    for i in 0..cfg.warmup + cfg.ops {
        let started = Instant::now();
        ping(&store).await;
        let ping_took = started.elapsed();
        let started = Instant::now();
        let outcome = store
            .claim(&lease_claim(&lease_job, base + i as i64, "a", now))
            .await
            .unwrap();
        let claim_took = started.elapsed();
        let ClaimOutcome::Won(lease) = outcome else {
            panic!("{outcome:?}")
        };
        store.finish(&lease, &done()).await.unwrap();
        if i >= cfg.warmup {
            pings.push(ping_took);
            claims.push(claim_took);
        }
    }
    rows.push(Measurement::from_samples("PING", &pings));
    rows.push(Measurement::from_samples("lease claim (won)", &claims));

    // Lost claims: the slot is already taken (what every other instance sees).
    let taken_slot = base - 1;
    store
        .claim(&lease_claim(&lease_job, taken_slot, "a", now))
        .await
        .unwrap();
    rows.push(
        measure("lease claim (taken)", cfg, |_| async {
            let r = store
                .claim(&lease_claim(&lease_job, taken_slot, "b", now))
                .await
                .unwrap();
            assert_eq!(r, ClaimOutcome::Taken);
        })
        .await,
    );

    // One heartbeat call renewing ten leases of ten jobs.
    let mut leases = Vec::new();
    for n in 0..10 {
        let j = job(&format!("bench-hb{n}"));
        if let ClaimOutcome::Won(l) = store.claim(&lease_claim(&j, now, "a", now)).await.unwrap() {
            leases.push(l);
        }
    }
    rows.push(
        measure("lease heartbeat (10 leases)", cfg, |_| async {
            store.heartbeat(&leases, 30_000).await.unwrap();
        })
        .await,
    );

    // Claim-only strategies, each op a new slot.
    let mut strategies = vec![(Strategy::StreamId, url), (Strategy::Script, url)];
    if let Some(u) = idmp {
        strategies.push((Strategy::Idmp, u));
    }
    for (strategy, u) in strategies {
        let cs = RedisClaimStore::connect_with(u, strategy, options())
            .await
            .expect("store");
        let j = job("bench-claim");
        if let Err(e) = cs
            .prepare(&Prepare {
                jobs: vec![j.clone()],
                instance_id: "bench".into(),
                call_timeout: std::time::Duration::from_secs(5),
            })
            .await
        {
            eprintln!("SKIP {strategy} on {label}: {e}");
            continue;
        }
        let cs = &cs;
        let j = &j;
        rows.push(
            measure(&format!("{strategy} claim"), cfg, |i| async move {
                let c = SlotClaim {
                    run: RunKey::new(j.clone(), base + i as i64),
                    instance_id: "a".into(),
                    not_after: now + 3_600_000,
                };
                cs.claim_slot(&c).await.unwrap();
            })
            .await,
        );
        cs.close().await.unwrap();
    }

    // Graceful handover: A releases, B's subscriber (its own connection) hears of it.
    let b = RedisStore::connect_with(url, opts).await.expect("store");
    b.prepare(&prep).await.expect("prepare");
    let mut rx = b.subscribe_releases().unwrap();
    let hand_job = job("bench-hand");
    let hand_cfg = BenchConfig {
        warmup: cfg.warmup.min(20),
        ops: cfg.ops.min(300),
    };
    let mut samples = Vec::with_capacity(hand_cfg.ops);
    for i in 0..hand_cfg.warmup + hand_cfg.ops {
        // Claim untimed; time from the release call to the backup's notification.
        let ClaimOutcome::Won(l) = store
            .claim(&lease_claim(&hand_job, base + i as i64, "a", now))
            .await
            .unwrap()
        else {
            panic!("claim")
        };
        let started = Instant::now();
        store.release(&l).await.unwrap();
        loop {
            let k = tokio::time::timeout(Duration::from_secs(2), rx.recv())
                .await
                .expect("no release notification within 2 s")
                .unwrap();
            if k == l.run {
                break;
            }
        }
        if i >= hand_cfg.warmup {
            samples.push(started.elapsed());
        }
        // Ends the released run, so the next claim is not held back by it.
        let _ = store
            .take_over(&anarchon_core::store::Takeover {
                run: l.run.clone(),
                seen_attempt: l.attempt,
                instance_id: "b".into(),
                lease_ms: 30_000,
                max_attempts: 3,
                superseded: true,
                not_after: i64::MAX,
            })
            .await;
    }
    rows.push(Measurement::from_samples(
        "handover (release -> backup notified)",
        &samples,
    ));

    let [single, batched, single_finish, batched_finish] = batch_rows(&store, "batch", base).await;
    rows.extend([single, batched, single_finish, batched_finish]);
    let title = format!("anarchon-redis claim bench on {label} ({server})");
    report(&title, &rows, "PING", json);
    if !json {
        print_batch_ratios(&rows);
        let p50 = |name: &str| {
            rows.iter()
                .find(|r| r.name == name)
                .map(|r| r.p50.as_secs_f64())
        };
        if let (Some(claim), Some(ping)) = (p50("lease claim (won)"), p50("PING")) {
            let ratio = claim / ping;
            println!(
                "lease claim p50 / PING p50 = {ratio:.2} (target <= {TARGET_RATIO:.1}): {}",
                if ratio <= TARGET_RATIO {
                    "met"
                } else {
                    "NOT met"
                }
            );
        }
        if let Some(h) = p50("handover (release -> backup notified)") {
            println!("handover p50 = {:.2} ms (target < 100 ms)", h * 1e3);
        }
        println!();
    }
    b.close().await.unwrap();
    store.close().await.unwrap();
}

fn main() {
    let cfg = BenchConfig::from_env(BenchConfig {
        warmup: 200,
        ops: 2_000,
    });
    let json = json_requested();
    let url = |var: &str| std::env::var(var).ok().filter(|v| !v.trim().is_empty());
    let servers: Vec<(&str, String)> = [
        ("Redis", "ANARCHON_REDIS_URL"),
        ("Valkey", "ANARCHON_VALKEY_URL"),
    ]
    .into_iter()
    .filter_map(|(label, var)| url(var).map(|u| (label, u)))
    .collect();
    if servers.is_empty() {
        eprintln!(
            "SKIP ANARCHON_REDIS_URL is not set: nothing to bench (cargo xtask test-servers, then cargo xtask bench redis)"
        );
        return;
    }
    let redis86 = url("ANARCHON_REDIS86_URL");
    if redis86.is_none() && !json {
        eprintln!("note: ANARCHON_REDIS86_URL is not set: the idmp strategy is not measured");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        for (label, u) in &servers {
            let idmp = if *label == "Redis" {
                redis86.as_deref()
            } else {
                None
            };
            bench_server(label, u, idmp, &cfg, json).await;
        }
    });
}
