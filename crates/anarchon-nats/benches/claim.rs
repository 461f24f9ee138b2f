//! Claim benchmark of the NATS store: claims per second and p50/p99 of a won and a lost
//! claim, beside a plain JetStream publish of the same size (payload and `Nats-Msg-Id`
//! header) on the same connection in the same run, and the history write and read. The
//! body is the brokers' shared one (`anarchon_core::claim_only::bench`).
//!
//! `cargo xtask bench nats [--json]` (or `cargo bench -p anarchon-nats --bench claim`) with
//! `ANARCHON_NATS_URL`. `ANARCHON_BENCH_OPS` / `ANARCHON_BENCH_WARMUP` shorten a run.

use anarchon_core::bench::{BenchConfig, json_requested};
use anarchon_core::claim_only::bench::{self, INSTANCE, Rows};
use anarchon_core::store::Store;
use anarchon_nats::async_nats::jetstream::{self, message::PublishMessage};
use anarchon_nats::{NatsOptions, NatsStore, Storage};

async fn run(url: &str, cfg: &BenchConfig, json: bool) {
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
    let js = jetstream::new(store.client().clone());
    let rows = Rows {
        title: format!("anarchon-nats claim bench ({})", store.server()),
        baseline: "jetstream publish (baseline)",
        record: "record (write + prune to 100)",
        history: "history (100 records)".into(),
        history_ops: 200,
        ratio_note: "",
    };
    bench::run(&store, rows, cfg, json, |slot, job| {
        // The same payload and a message id of the same length as the claim's.
        let id = format!("{}:{}", "x".repeat(job.as_str().len()), slot);
        let subject = format!("{stream}.bench.{job}");
        let js = &js;
        async move {
            js.send_publish(
                subject,
                PublishMessage::build()
                    .message_id(id)
                    .payload(INSTANCE.as_bytes().to_vec().into()),
            )
            .await
            .unwrap()
            .await
            .unwrap();
        }
    })
    .await;
    store.close().await.unwrap();
}

fn main() {
    let cfg = BenchConfig::from_env(BenchConfig {
        warmup: 200,
        ops: 2_000,
    });
    let json = json_requested();
    let Some(url) = bench::url("ANARCHON_NATS_URL", "nats") else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run(&url, &cfg, json));
}
