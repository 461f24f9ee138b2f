//! `AmqpStore::open_read_only` against the real RabbitMQ: it declares nothing, publishes
//! nothing (not even the marker an ordinary reader appends) and refuses every write; a
//! prefix with no store is `NotAStore`, and the broker then holds no queue of it. The
//! broker is asked with passive declares from the test itself.

use std::time::Duration;

use anarchon_amqp::amqprs::channel::{
    BasicAckArguments, BasicConsumeArguments, BasicQosArguments, QueueDeclareArguments,
    QueueDeleteArguments,
};
use anarchon_amqp::amqprs::connection::{Connection, OpenConnectionArguments};
use anarchon_amqp::amqprs::{FieldTable, FieldValue};
use anarchon_amqp::{AmqpError, AmqpOptions, AmqpStore};
use anarchon_core::store::{HistoryStore, Prepare, Retention, RunKey, RunRecord, SlotClaim, Store};
use anarchon_core::testkit::{server_url, unique_job};
use anarchon_core::{ClaimStore, Error, JobName, Reason, RunStatus};

fn options() -> AmqpOptions {
    AmqpOptions::default()
        .prefix(format!("anarchon-ro-{:016x}", rand::random::<u64>()))
        .slot_ttl(Duration::from_secs(120))
        .history_max_bytes(1024 * 1024)
}

fn port_of(url: &str) -> u16 {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap();
    let hostport = authority.rsplit('@').next().unwrap();
    hostport
        .rsplit_once(':')
        .map(|(_, p)| p.parse().unwrap())
        .unwrap_or(5672)
}

/// A connection of the test's own (the test servers use RabbitMQ's default user).
async fn connection(url: &str) -> Connection {
    let args = OpenConnectionArguments::new("127.0.0.1", port_of(url), "guest", "guest");
    Connection::open(&args).await.unwrap()
}

/// Whether `queue` exists, by a passive declare on a channel of its own (the server closes
/// the channel when it does not).
async fn exists(conn: &Connection, queue: &str) -> bool {
    let ch = conn.open_channel(None).await.unwrap();
    let found = ch
        .queue_declare(QueueDeclareArguments::new(queue).passive(true).finish())
        .await
        .is_ok();
    if found {
        let _ = ch.close().await;
    }
    found
}

/// The message types in a stream, read from its start until it is quiet for 1.5 s.
async fn types_in(conn: &Connection, queue: &str) -> Vec<String> {
    let ch = conn.open_channel(None).await.unwrap();
    ch.basic_qos(BasicQosArguments::new(0, 100, false))
        .await
        .unwrap();
    let mut args = FieldTable::new();
    args.insert(
        "x-stream-offset".try_into().unwrap(),
        FieldValue::from("first"),
    );
    let (_tag, mut rx) = ch
        .basic_consume_rx(
            BasicConsumeArguments::new(queue, "")
                .manual_ack(true)
                .arguments(args)
                .finish(),
        )
        .await
        .unwrap();
    let mut types = Vec::new();
    while let Ok(Some(message)) =
        tokio::time::timeout(Duration::from_millis(1_500), rx.recv()).await
    {
        types.push(
            message
                .basic_properties
                .as_ref()
                .and_then(|p| p.message_type().cloned())
                .unwrap_or_default(),
        );
        if let Some(d) = message.deliver.as_ref() {
            let _ = ch
                .basic_ack(BasicAckArguments::new(d.delivery_tag(), false))
                .await;
        }
    }
    let _ = ch.close().await;
    types
}

fn record(job: &JobName, slot: i64) -> RunRecord {
    RunRecord {
        job: job.clone(),
        slot,
        scheduled_at: slot,
        instance_id: "writer".into(),
        manual: false,
        attempt: 1,
        reason: Reason::Scheduled,
        status: RunStatus::Succeeded,
        fence: 0,
        started_at: slot + 1,
        finished_at: Some(slot + 2),
        error: None,
    }
}

#[tokio::test]
async fn read_only_open_of_a_missing_prefix_is_not_a_store_and_declares_nothing() {
    let Some(url) = server_url("ANARCHON_AMQP_URL") else {
        return;
    };
    let opts = options();
    let prefix = opts.queue_prefix().to_owned();
    let err = AmqpStore::open_read_only(&url, opts).await.unwrap_err();
    match &err {
        AmqpError::NotAStore {
            prefix: p, queue, ..
        } => {
            assert_eq!(p, &prefix);
            assert_eq!(queue, &format!("{prefix}.jobs"));
        }
        other => panic!("{other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("nothing is recorded under the prefix")
            && text.contains(&prefix)
            && text.contains("Nothing was created"),
        "{text}"
    );
    assert!(!text.contains("guest:guest"), "{text}");
    let conn = connection(&url).await;
    assert!(
        !exists(&conn, &format!("{prefix}.jobs")).await,
        "the read-only open declared {prefix}.jobs"
    );
    let _ = conn.close().await;
}

#[tokio::test]
async fn read_only_store_reads_history_without_writing_and_refuses_writes() {
    let Some(url) = server_url("ANARCHON_AMQP_URL") else {
        return;
    };
    let opts = options();
    let prefix = opts.queue_prefix().to_owned();
    let job = unique_job("ro");
    let never = unique_job("never");
    let writer = AmqpStore::connect_with(&url, opts.clone()).await.unwrap();
    writer
        .prepare(&Prepare {
            jobs: vec![job.clone()],
            instance_id: "writer".into(),
            call_timeout: Duration::from_secs(5),
        })
        .await
        .unwrap();
    let retention = Retention::default();
    for slot in [1_000, 2_000, 3_000] {
        writer.record(&record(&job, slot), retention).await.unwrap();
    }
    writer.close().await.unwrap();

    let reader = AmqpStore::open_read_only(&url, opts).await.unwrap();
    assert!(reader.is_read_only());
    assert_eq!(reader.known_jobs().await.unwrap(), vec![job.clone()]);
    let history = reader.history(&job, 10).await.unwrap();
    let slots: Vec<i64> = history.iter().map(|r| r.slot).collect();
    assert_eq!(slots, vec![3_000, 2_000, 1_000]);
    // A job with no history queue has an empty history, and gets no queue.
    assert!(reader.history(&never, 10).await.unwrap().is_empty());

    // Every write is refused before it reaches the broker.
    let refused = [
        reader
            .prepare(&Prepare {
                jobs: vec![never.clone()],
                instance_id: "reader".into(),
                call_timeout: Duration::from_secs(5),
            })
            .await
            .unwrap_err(),
        reader
            .record(&record(&never, 4_000), retention)
            .await
            .unwrap_err(),
        reader
            .claim_slot(&SlotClaim {
                run: RunKey::new(never.clone(), 5_000),
                instance_id: "reader".into(),
                not_after: i64::MAX,
            })
            .await
            .unwrap_err(),
    ];
    for err in refused {
        assert!(matches!(err, Error::Store { .. }), "{err:?}");
        assert!(err.to_string().contains("read-only"), "{err}");
    }
    reader.close().await.unwrap();

    let conn = connection(&url).await;
    for queue in [
        format!("{prefix}.history.{never}"),
        format!("{prefix}.gate.{never}.5000"),
    ] {
        assert!(!exists(&conn, &queue).await, "{queue} was declared");
    }
    // The streams hold what the writer wrote and no reader's marker.
    let history_types = types_in(&conn, &format!("{prefix}.history.{job}")).await;
    assert_eq!(history_types, vec!["record"; 3], "{history_types:?}");
    let jobs_types = types_in(&conn, &format!("{prefix}.jobs")).await;
    assert_eq!(jobs_types, vec!["job"], "{jobs_types:?}");

    // The checks can see what they look for: the queues exist, and an ordinary reader's
    // marker shows.
    assert!(exists(&conn, &format!("{prefix}.jobs")).await);
    assert!(exists(&conn, &format!("{prefix}.history.{job}")).await);
    let ordinary = AmqpStore::connect_with(&url, options().prefix(prefix.clone()))
        .await
        .unwrap();
    assert_eq!(ordinary.history(&job, 10).await.unwrap().len(), 3);
    ordinary.close().await.unwrap();
    let after = types_in(&conn, &format!("{prefix}.history.{job}")).await;
    assert_eq!(
        after.iter().filter(|t| *t == "marker").count(),
        1,
        "{after:?}"
    );

    let ch = conn.open_channel(None).await.unwrap();
    for queue in [format!("{prefix}.jobs"), format!("{prefix}.history.{job}")] {
        let _ = ch.queue_delete(QueueDeleteArguments::new(&queue)).await;
    }
    let _ = conn.close().await;
}
