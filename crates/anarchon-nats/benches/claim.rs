//! Claim benchmark of the NATS store: claims per second and p50/p99 of a won and a lost
//! claim, beside a plain JetStream publish of the same size (payload and `Nats-Msg-Id`
//! header) on the same connection in the same run, and the history write and read.
//!
//! `cargo xtask bench nats [--json]` (or `cargo bench -p anarchon-nats --bench claim`) with
//! `ANARCHON_NATS_URL`. `ANARCHON_BENCH_OPS` / `ANARCHON_BENCH_WARMUP` shorten a run.

use std::time::Instant;

use anarchon_core::bench::{BenchConfig, Measurement, json_requested, measure, report};
use anarchon_core::store::RunRecord;
use anarchon_core::store::{
    HistoryStore, Prepare, Retention, RunKey, SlotClaim, SlotOutcome, Store,
};
use anarchon_core::{ClaimStore, JobName, Reason, RunStatus};
use anarchon_nats::async_nats::jetstream::{self, message::PublishMessage};
use anarchon_nats::{NatsOptions, NatsStore, Storage};

const INSTANCE: &str = "bench-instance";

fn host_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

async fn bench(url: &str, cfg: &BenchConfig, json: bool) {
    let opts = NatsOptions::default()
        .prefix(format!("anarchon-bench-{:08x}", rand::random::<u32>()))
        .storage(Storage::Memory);
    let stream = opts.stream_name().to_string();
    let store = match NatsStore::connect_with(url, opts).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("SKIP nats: {e}");
            return;
        }
    };
    let job = JobName::new(format!("bench-{:08x}", rand::random::<u32>())).unwrap();
    store
        .prepare(&Prepare {
            jobs: vec![job.clone()],
            instance_id: "bench".into(),
            call_timeout: std::time::Duration::from_secs(5),
        })
        .await
        .expect("prepare");
    let js = jetstream::new(store.client().clone());
    let base = host_ms() - 10_000_000;
    let claim = |slot: i64, instance: &str| SlotClaim {
        run: RunKey::new(job.clone(), slot),
        instance_id: instance.into(),
        not_after: host_ms() + 3_600_000,
    };

    // A plain publish and a won claim alternate in one loop, so both see the same load.
    let (mut plain, mut won) = (Vec::with_capacity(cfg.ops), Vec::with_capacity(cfg.ops));
    for i in 0..cfg.warmup + cfg.ops {
        let slot = base + i as i64;
        // The same payload and a message id of the same length as the claim's.
        let id = format!("{}:{}", "x".repeat(job.as_str().len()), slot);
        let started = Instant::now();
        js.send_publish(
            format!("{stream}.bench.{job}"),
            PublishMessage::build()
                .message_id(id)
                .payload(INSTANCE.as_bytes().to_vec().into()),
        )
        .await
        .unwrap()
        .await
        .unwrap();
        let plain_took = started.elapsed();
        let started = Instant::now();
        let outcome = store.claim_slot(&claim(slot, INSTANCE)).await.unwrap();
        let won_took = started.elapsed();
        assert_eq!(outcome, SlotOutcome::Won);
        if i >= cfg.warmup {
            plain.push(plain_took);
            won.push(won_took);
        }
    }
    let mut rows = vec![
        Measurement::from_samples("jetstream publish (baseline)", &plain),
        Measurement::from_samples("claim (won)", &won),
    ];
    let taken = base;
    rows.push(
        measure("claim (taken)", cfg, |_| {
            let c = claim(taken, "other");
            let store = &store;
            async move {
                assert_eq!(store.claim_slot(&c).await.unwrap(), SlotOutcome::Taken);
            }
        })
        .await,
    );
    let keep = Retention {
        size: 100,
        ttl_ms: None,
    };
    rows.push(
        measure("record (write + prune to 100)", cfg, |i| {
            let rec = RunRecord {
                job: job.clone(),
                slot: base + i as i64,
                scheduled_at: base + i as i64,
                instance_id: INSTANCE.into(),
                manual: false,
                attempt: 1,
                reason: Reason::Scheduled,
                status: RunStatus::Succeeded,
                fence: 0,
                started_at: base + i as i64,
                finished_at: Some(base + i as i64 + 1),
                error: None,
            };
            let store = &store;
            async move { store.record(&rec, keep).await.unwrap() }
        })
        .await,
    );
    let small = BenchConfig {
        warmup: cfg.warmup.min(10),
        ops: cfg.ops.min(200),
    };
    rows.push(
        measure("history (100 records)", &small, |_| {
            let (store, job) = (&store, &job);
            async move {
                assert_eq!(store.history(job, 100).await.unwrap().len(), 100);
            }
        })
        .await,
    );
    let title = format!("anarchon-nats claim bench ({})", store.server());
    report(&title, &rows, "jetstream publish (baseline)", json);
    if !json {
        let p50 = |name: &str| rows.iter().find(|r| r.name == name).map(|r| r.p50);
        if let (Some(c), Some(b)) = (p50("claim (won)"), p50("jetstream publish (baseline)")) {
            println!(
                "claim (won) p50 / jetstream publish p50 = {:.2}",
                c.as_secs_f64() / b.as_secs_f64()
            );
        }
        println!();
    }
    store.close().await.unwrap();
}

fn main() {
    let cfg = BenchConfig::from_env(BenchConfig {
        warmup: 200,
        ops: 2_000,
    });
    let json = json_requested();
    let Some(url) = std::env::var("ANARCHON_NATS_URL")
        .ok()
        .filter(|v| !v.trim().is_empty())
    else {
        eprintln!(
            "SKIP ANARCHON_NATS_URL is not set: nothing to bench (cargo xtask test-servers --brokers, then cargo xtask bench nats)"
        );
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(bench(&url, &cfg, json));
}
