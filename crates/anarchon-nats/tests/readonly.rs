//! `NatsStore::open_read_only` against the real NATS server: it looks the stream up and
//! never creates it, publishes and purges nothing, and refuses every write; a prefix with
//! no stream is `NotAStore`, and the server then holds no stream of that name (asked with
//! the test's own stream info request).

use std::time::Duration;

use anarchon_core::store::{HistoryStore, Prepare, Retention, RunKey, RunRecord, SlotClaim, Store};
use anarchon_core::testkit::{server_url, unique_job};
use anarchon_core::{ClaimStore, Error, JobName, Reason, RunStatus};
use anarchon_nats::async_nats::jetstream;
use anarchon_nats::{NatsError, NatsOptions, NatsStore, Storage};

fn options() -> NatsOptions {
    NatsOptions::default()
        .prefix(format!("anarchon-ro-{:016x}", rand::random::<u64>()))
        .storage(Storage::Memory)
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

/// The stream's message count and last sequence, or `None` when it does not exist.
async fn stream_state(js: &jetstream::Context, name: &str) -> Option<(u64, u64)> {
    let mut stream = js.get_stream(name).await.ok()?;
    let info = stream.info().await.unwrap();
    Some((info.state.messages, info.state.last_sequence))
}

#[tokio::test]
async fn read_only_open_of_a_missing_prefix_is_not_a_store_and_creates_no_stream() {
    let Some(url) = server_url("ANARCHON_NATS_URL") else {
        return;
    };
    let opts = options();
    let prefix = opts.stream_name().to_owned();
    let err = NatsStore::open_read_only(&url, opts).await.unwrap_err();
    match &err {
        NatsError::NotAStore { stream, .. } => assert_eq!(stream, &prefix),
        other => panic!("{other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("nothing is recorded under the prefix")
            && text.contains(&prefix)
            && text.contains("Nothing was created"),
        "{text}"
    );
    let client = anarchon_nats::async_nats::connect(&url).await.unwrap();
    let js = jetstream::new(client);
    assert_eq!(
        stream_state(&js, &prefix).await,
        None,
        "a stream was created"
    );
}

#[tokio::test]
async fn read_only_store_reads_without_writing_and_refuses_writes() {
    let Some(url) = server_url("ANARCHON_NATS_URL") else {
        return;
    };
    let opts = options();
    let prefix = opts.stream_name().to_owned();
    let job = unique_job("ro");
    let never = unique_job("never");
    let writer = NatsStore::connect_with(&url, opts.clone()).await.unwrap();
    writer
        .prepare(&Prepare {
            jobs: vec![job.clone()],
            instance_id: "writer".into(),
            call_timeout: Duration::from_secs(5),
        })
        .await
        .unwrap();
    for slot in [1_000, 2_000, 3_000] {
        writer
            .record(&record(&job, slot), Retention::default())
            .await
            .unwrap();
    }
    let js = jetstream::new(writer.client().clone());
    let before = stream_state(&js, &prefix)
        .await
        .expect("the writer's stream");
    assert_eq!(before.0, 4, "a job note and three records");

    // Another duplicate window than the writer's: a reader does not depend on it.
    let reader = NatsStore::open_read_only(&url, opts.duplicate_window(Duration::from_secs(7)))
        .await
        .unwrap();
    assert!(reader.is_read_only());
    assert_eq!(reader.known_jobs().await.unwrap(), vec![job.clone()]);
    let slots: Vec<i64> = reader
        .history(&job, 10)
        .await
        .unwrap()
        .iter()
        .map(|r| r.slot)
        .collect();
    assert_eq!(slots, vec![3_000, 2_000, 1_000]);
    assert!(reader.history(&never, 10).await.unwrap().is_empty());
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
            .record(&record(&never, 4_000), Retention::default())
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
    assert_eq!(
        stream_state(&js, &prefix).await,
        Some(before),
        "the read-only store wrote to the stream"
    );
    let _ = js.delete_stream(&prefix).await;
    writer.close().await.unwrap();
}
