//! Claim benchmark of the RabbitMQ store: claims per second and p50/p99 of a won and a lost
//! claim, beside a plain publish with confirm of the same size on a connection of its own
//! in the same run, and the history write and read. The body is the brokers' shared one
//! (`anarchon_core::claim_only::bench`).
//!
//! `cargo xtask bench amqp [--json]` (or `cargo bench -p anarchon-amqp --bench claim`) with
//! `ANARCHON_AMQP_URL`. `ANARCHON_BENCH_OPS` / `ANARCHON_BENCH_WARMUP` shorten a run.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

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
use anarchon_core::bench::{BenchConfig, json_requested};
use anarchon_core::claim_only::bench::{self, INSTANCE, Rows};
use anarchon_core::store::Store;
use tokio::sync::oneshot;

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

async fn run(url: &str, cfg: &BenchConfig, json: bool) {
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

    let rows = Rows {
        title: format!("anarchon-amqp claim bench ({server})"),
        baseline: "publish + confirm (baseline)",
        record: "record (append)",
        history: format!("history (stream of {} records)", cfg.warmup + cfg.ops),
        history_ops: 100,
        ratio_note: " (a claim also declares its gate queue)",
    };
    bench::run(&store, rows, cfg, json, |_, _| {
        let rx = {
            let (tx, rx) = oneshot::channel();
            let mut p = pending.lock().unwrap();
            p.0 += 1;
            let tag = p.0;
            p.1.insert(tag, tx);
            rx
        };
        let (ch, queue) = (&ch, &plain_queue);
        async move {
            ch.basic_publish(
                BasicProperties::default()
                    .with_delivery_mode(DELIVERY_MODE_PERSISTENT)
                    .finish(),
                INSTANCE.as_bytes().to_vec(),
                BasicPublishArguments::new("", queue),
            )
            .await
            .unwrap();
            assert!(rx.await.unwrap());
        }
    })
    .await;
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
    let Some(url) = bench::url("ANARCHON_AMQP_URL", "amqp") else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run(&url, &cfg, json));
}
