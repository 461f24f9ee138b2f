//! Claim benchmark of the RabbitMQ store: claims per second and p50/p99 of a won and a lost
//! claim, beside a plain publish with confirm of the same size on a connection of its own
//! in the same run, and the history write and read.
//!
//! `cargo xtask bench amqp [--json]` (or `cargo bench -p anarchon-amqp --bench claim`) with
//! `ANARCHON_AMQP_URL`. `ANARCHON_BENCH_OPS` / `ANARCHON_BENCH_WARMUP` shorten a run.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anarchon_amqp::amqprs::callbacks::ChannelCallback;
use anarchon_amqp::amqprs::channel::{
    BasicPublishArguments, Channel, ConfirmSelectArguments, QueueDeclareArguments,
    QueueDeleteArguments,
};
use anarchon_amqp::amqprs::connection::{Connection, OpenConnectionArguments};
use anarchon_amqp::amqprs::{
    Ack, BasicProperties, Cancel, CloseChannel, DELIVERY_MODE_PERSISTENT, FieldTable, FieldValue,
    Nack, Return,
};
use anarchon_amqp::{AmqpOptions, AmqpStore};
use anarchon_core::bench::{BenchConfig, Measurement, json_requested, measure, report};
use anarchon_core::store::RunRecord;
use anarchon_core::store::{
    HistoryStore, Prepare, Retention, RunKey, SlotClaim, SlotOutcome, Store,
};
use anarchon_core::{ClaimStore, JobName, Reason, RunStatus};
use tokio::sync::oneshot;

const INSTANCE: &str = "bench-instance";

fn host_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

type Pending = Arc<Mutex<(u64, BTreeMap<u64, oneshot::Sender<bool>>)>>;

struct Confirms(Pending);

#[async_trait::async_trait]
impl ChannelCallback for Confirms {
    async fn close(
        &mut self,
        _: &Channel,
        _: CloseChannel,
    ) -> Result<(), anarchon_amqp::amqprs::error::Error> {
        Ok(())
    }
    async fn cancel(
        &mut self,
        _: &Channel,
        _: Cancel,
    ) -> Result<(), anarchon_amqp::amqprs::error::Error> {
        Ok(())
    }
    async fn flow(
        &mut self,
        _: &Channel,
        active: bool,
    ) -> Result<bool, anarchon_amqp::amqprs::error::Error> {
        Ok(active)
    }
    async fn publish_ack(&mut self, _: &Channel, ack: Ack) {
        let mut p = self.0.lock().unwrap();
        let tags: Vec<u64> = if ack.mutiple() {
            p.1.range(..=ack.delivery_tag()).map(|(t, _)| *t).collect()
        } else {
            vec![ack.delivery_tag()]
        };
        for t in tags {
            if let Some(tx) = p.1.remove(&t) {
                let _ = tx.send(true);
            }
        }
    }
    async fn publish_nack(&mut self, _: &Channel, _: Nack) {}
    async fn publish_return(&mut self, _: &Channel, _: Return, _: BasicProperties, _: Vec<u8>) {}
}

/// Host, port, user and password of an `amqp://` URL (the test servers' form).
fn connection_args(url: &str) -> OpenConnectionArguments {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    let (user, pass, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => {
            let (u, p) = u.split_once(':').unwrap_or((u, ""));
            (u.to_string(), p.to_string(), h)
        }
        None => ("guest".into(), "guest".into(), authority),
    };
    let (host, port) = hostport
        .rsplit_once(':')
        .map_or((hostport, 5672), |(h, p)| (h, p.parse().unwrap_or(5672)));
    OpenConnectionArguments::new(host, port, &user, &pass)
}

async fn bench(url: &str, cfg: &BenchConfig, json: bool) {
    let opts = AmqpOptions::default()
        .prefix(format!("anarchon-bench-{:08x}", rand::random::<u32>()))
        .slot_ttl(std::time::Duration::from_secs(60))
        .history_max_bytes(4 * 1024 * 1024);
    let store = match AmqpStore::connect_with(url, opts.clone()).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("SKIP amqp: {e}");
            return;
        }
    };
    let server = store.server().await.unwrap();
    let job = JobName::new(format!("bench-{:08x}", rand::random::<u32>())).unwrap();
    store
        .prepare(&Prepare {
            jobs: vec![job.clone()],
            instance_id: "bench".into(),
            call_timeout: std::time::Duration::from_secs(5),
        })
        .await
        .expect("prepare");

    // The baseline: a persistent publish with confirm of the same payload to a queue that
    // keeps the last 1000 messages, on a connection and channel of its own.
    let conn = Connection::open(&connection_args(url)).await.unwrap();
    let ch = conn.open_channel(None).await.unwrap();
    let pending: Pending = Arc::default();
    ch.register_callback(Confirms(pending.clone()))
        .await
        .unwrap();
    ch.confirm_select(ConfirmSelectArguments::default())
        .await
        .unwrap();
    let plain_queue = format!("{}.bench-plain", opts.queue_prefix());
    let mut args = FieldTable::new();
    args.insert("x-max-length".try_into().unwrap(), FieldValue::l(1000));
    ch.queue_declare(
        QueueDeclareArguments::durable_client_named(&plain_queue)
            .arguments(args)
            .finish(),
    )
    .await
    .unwrap();

    let base = host_ms() - 10_000_000;
    let claim = |slot: i64, instance: &str| SlotClaim {
        run: RunKey::new(job.clone(), slot),
        instance_id: instance.into(),
        not_after: host_ms() + 3_600_000,
    };
    let (mut plain, mut won) = (Vec::with_capacity(cfg.ops), Vec::with_capacity(cfg.ops));
    for i in 0..cfg.warmup + cfg.ops {
        let started = Instant::now();
        let rx = {
            let (tx, rx) = oneshot::channel();
            let mut p = pending.lock().unwrap();
            p.0 += 1;
            let tag = p.0;
            p.1.insert(tag, tx);
            rx
        };
        ch.basic_publish(
            BasicProperties::default()
                .with_delivery_mode(DELIVERY_MODE_PERSISTENT)
                .finish(),
            INSTANCE.as_bytes().to_vec(),
            BasicPublishArguments::new("", &plain_queue),
        )
        .await
        .unwrap();
        assert!(rx.await.unwrap());
        let plain_took = started.elapsed();
        let started = Instant::now();
        let outcome = store
            .claim_slot(&claim(base + i as i64, INSTANCE))
            .await
            .unwrap();
        let won_took = started.elapsed();
        assert_eq!(
            outcome,
            SlotOutcome::Won,
            "claim {i} of slot {}",
            base + i as i64
        );
        if i >= cfg.warmup {
            plain.push(plain_took);
            won.push(won_took);
        }
    }
    let mut rows = vec![
        Measurement::from_samples("publish + confirm (baseline)", &plain),
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
        measure("record (append)", cfg, |i| {
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
        ops: cfg.ops.min(100),
    };
    let stream_len = cfg.warmup + cfg.ops;
    rows.push(
        measure(
            &format!("history (stream of {stream_len} records)"),
            &small,
            |_| {
                let (store, job) = (&store, &job);
                async move {
                    assert_eq!(store.history(job, 100).await.unwrap().len(), 100);
                }
            },
        )
        .await,
    );
    let title = format!("anarchon-amqp claim bench ({server})");
    report(&title, &rows, "publish + confirm (baseline)", json);
    if !json {
        let p50 = |name: &str| rows.iter().find(|r| r.name == name).map(|r| r.p50);
        if let (Some(c), Some(b)) = (p50("claim (won)"), p50("publish + confirm (baseline)")) {
            println!(
                "claim (won) p50 / publish + confirm p50 = {:.2} (a claim also declares its gate queue)",
                c.as_secs_f64() / b.as_secs_f64()
            );
        }
        println!();
    }
    let _ = ch
        .queue_delete(QueueDeleteArguments::new(&plain_queue))
        .await;
    let _ = conn.close().await;
    store.close().await.unwrap();
}

fn main() {
    let cfg = BenchConfig::from_env(BenchConfig {
        warmup: 200,
        ops: 2_000,
    });
    let json = json_requested();
    let Some(url) = std::env::var("ANARCHON_AMQP_URL")
        .ok()
        .filter(|v| !v.trim().is_empty())
    else {
        eprintln!(
            "SKIP ANARCHON_AMQP_URL is not set: nothing to bench (cargo xtask test-servers --brokers, then cargo xtask bench amqp)"
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
