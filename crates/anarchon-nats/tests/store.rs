//! NATS store behaviour beyond the kit: a lost answer, reconnecting, bad input and the
//! options a claim-only store refuses. [B-22, B-27, B-28, B-29, B-36]

use std::time::Duration;

use anarchon_core::claim_only::host_now;
use anarchon_core::store::RunRecord;
use anarchon_core::store::{
    HistoryStore, Prepare, Retention, RunKey, SlotClaim, SlotOutcome, Store,
};
use anarchon_core::testkit::{server_url, unique_job};
use anarchon_core::{ClaimStore, Error, JobConfig, Reason, RunStatus, Scheduler};
use anarchon_nats::{NatsError, NatsOptions, NatsStore, Storage};
use anarchon_test_support::{FaultProxy, OwnNats, spare_port};

fn options() -> NatsOptions {
    NatsOptions::default()
        .prefix(format!("anarchon-test-{:016x}", rand::random::<u64>()))
        .storage(Storage::Memory)
}

fn claim(job: &anarchon_core::JobName, slot: i64, instance: &str) -> SlotClaim {
    SlotClaim {
        run: RunKey::new(job.clone(), slot),
        instance_id: instance.into(),
        not_after: host_now() + 60_000,
    }
}

fn prep(job: &anarchon_core::JobName) -> Prepare {
    Prepare {
        jobs: vec![job.clone()],
        instance_id: "t".into(),
        call_timeout: std::time::Duration::from_secs(5),
    }
}

/// What a process that registered no jobs (an API server) prepares with.
fn prep_none() -> Prepare {
    Prepare {
        jobs: vec![],
        instance_id: "api".into(),
        call_timeout: std::time::Duration::from_secs(5),
    }
}

/// [B-29] The connection drops right after the claim's publish reached the server: the
/// claimer never sees the acknowledgement and skips the slot (`Unknown`), while the slot is
/// taken on the server. Once the client has reconnected (by itself), the next slot is
/// claimed as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b29_lost_answer_skips_the_slot_and_the_next_one_is_claimed() {
    let Some(url) = server_url("ANARCHON_NATS_URL") else {
        return;
    };
    let upstream: u16 = url
        .rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .expect("ANARCHON_NATS_URL ends with a port");
    let proxy = FaultProxy::start(upstream).await;
    let opts = options().operation_timeout(Duration::from_secs(2));
    let through =
        NatsStore::connect_with(&format!("nats://127.0.0.1:{}", proxy.port), opts.clone())
            .await
            .unwrap();
    let direct = NatsStore::connect_with(&url, opts.clone()).await.unwrap();
    let job = unique_job("lost");
    through.prepare(&prep(&job)).await.unwrap();
    direct.prepare(&prep(&job)).await.unwrap();

    let slot = host_now();
    proxy.arm(format!("{}.claim.{job}", opts.stream_name()).as_bytes());
    let outcome = through.claim_slot(&claim(&job, slot, "a")).await;
    assert_eq!(proxy.cuts(), 1, "the proxy cut the connection");
    assert!(
        matches!(outcome, Ok(SlotOutcome::Unknown)),
        "a lost answer is Unknown, got {outcome:?}"
    );
    // The publish did reach the stream: the slot is taken for everyone else.
    assert_eq!(
        direct.claim_slot(&claim(&job, slot, "b")).await.unwrap(),
        SlotOutcome::Taken
    );

    // The client reconnects through the proxy by itself; the next slot is claimed.
    let next = slot + 1000;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        match through.claim_slot(&claim(&job, next, "a")).await {
            Ok(SlotOutcome::Won) => break,
            other => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "no claim after reconnecting: {other:?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// [B-36] History written by one instance is read by a process that registered no jobs.
#[tokio::test]
async fn b36_history_is_readable_from_a_process_without_jobs() {
    let Some(url) = server_url("ANARCHON_NATS_URL") else {
        return;
    };
    let opts = options();
    let writer = NatsStore::connect_with(&url, opts.clone()).await.unwrap();
    let job = unique_job("api");
    writer.prepare(&prep(&job)).await.unwrap();
    let slot = host_now();
    assert_eq!(
        writer.claim_slot(&claim(&job, slot, "w")).await.unwrap(),
        SlotOutcome::Won
    );
    let rec = RunRecord {
        job: job.clone(),
        slot,
        scheduled_at: slot,
        instance_id: "w.with dots*>".into(),
        manual: false,
        attempt: 1,
        reason: Reason::Scheduled,
        status: RunStatus::Succeeded,
        fence: 0,
        started_at: slot + 1,
        finished_at: Some(slot + 2),
        error: None,
    };
    writer.record(&rec, Retention::default()).await.unwrap();

    let reader = NatsStore::connect_with(&url, opts).await.unwrap();
    reader.prepare(&prep_none()).await.unwrap();
    assert_eq!(reader.history(&job, 10).await.unwrap(), vec![rec.clone()]);
    assert_eq!(reader.last_run(&job).await.unwrap(), Some(rec));
    assert!(reader.known_jobs().await.unwrap().contains(&job));
}

/// [B-27] A stream of the same name with another duplicate window is refused by `prepare`,
/// naming the stream and both windows, and left as it was.
#[tokio::test]
async fn b27_existing_stream_with_another_window_is_refused() {
    let Some(url) = server_url("ANARCHON_NATS_URL") else {
        return;
    };
    let opts = options();
    let first = NatsStore::connect_with(&url, opts.clone()).await.unwrap();
    first.prepare(&prep(&unique_job("w"))).await.unwrap();
    let other =
        NatsStore::connect_with(&url, opts.clone().duplicate_window(Duration::from_secs(60)))
            .await
            .unwrap();
    let err = other.prepare(&prep(&unique_job("w"))).await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
    assert!(
        text.contains(opts.stream_name()) && text.contains("duplicate_window"),
        "{text}"
    );
    // The first store still works: nothing was changed.
    let job = unique_job("w");
    assert_eq!(
        first
            .claim_slot(&claim(&job, host_now(), "a"))
            .await
            .unwrap(),
        SlotOutcome::Won
    );
}

/// Bad URLs are refused before any connection, naming the URL without its password.
#[tokio::test]
async fn bad_urls_are_refused_without_echoing_secrets() {
    for url in [
        "http://127.0.0.1:4222",
        "127.0.0.1:4222",
        "nats://",
        "nats://user:hunter2@",
    ] {
        let err = NatsStore::connect(url).await.unwrap_err();
        assert!(
            matches!(err, NatsError::InvalidUrl { .. }),
            "{url}: {err:?}"
        );
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }
    let err = NatsStore::connect_with(
        "nats://127.0.0.1:4222",
        NatsOptions::default().prefix("has.dot"),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            err,
            NatsError::InvalidOption {
                option: "prefix",
                ..
            }
        ),
        "{err:?}"
    );
}

/// A refused connection is an error at once (the connection is eager), and nothing hangs.
#[tokio::test]
async fn refused_connection_is_an_error() {
    let port = spare_port();
    let began = std::time::Instant::now();
    let err = NatsStore::connect_with(
        &format!("nats://127.0.0.1:{port}"),
        NatsOptions::default().connect_timeout(Duration::from_secs(2)),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, NatsError::Connect { .. }), "{err:?}");
    assert!(began.elapsed() < Duration::from_secs(5));
    let core: Error = err.into();
    assert!(matches!(core, Error::Unavailable { .. }));
}

/// Wrong credentials are an error that does not echo the password.
#[tokio::test]
async fn wrong_credentials_are_refused_without_echoing_them() {
    let Some(server) = OwnNats::start(&["--user", "app", "--pass", "right-one"]) else {
        return;
    };
    let url = format!("nats://app:wrong-secret@127.0.0.1:{}", server.port);
    let err = NatsStore::connect(&url).await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, NatsError::Connect { .. }), "{err:?}");
    assert!(text.contains("credentials"), "{text}");
    assert!(
        !text.contains("wrong-secret") && !text.contains("right-one"),
        "{text}"
    );
    let ok = NatsStore::connect(&format!("nats://app:right-one@127.0.0.1:{}", server.port)).await;
    assert!(ok.is_ok(), "{:?}", ok.err());
}

/// A server without JetStream is refused by `prepare` with an error that says to enable it.
#[tokio::test]
async fn jetstream_disabled_is_a_clear_error() {
    let Some(server) = OwnNats::start(&[]) else {
        return;
    };
    let store = NatsStore::connect(&server.url()).await.unwrap();
    let err = store.prepare(&prep(&unique_job("nojs"))).await.unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    assert!(err.to_string().contains("-js"), "{err}");
    // A claim says the same, it does not hang or pretend.
    let err = store
        .claim_slot(&claim(&unique_job("nojs"), host_now(), "a"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("JetStream"), "{err}");
}

/// [B-22, B-28] On a claim-only store lease-only options and `history_ttl` from
/// configuration are errors naming them, `jitter_ms + max_late_ms` must stay below the
/// duplicate window, and a bad job name is refused.
#[tokio::test]
async fn b28_options_a_claim_only_store_refuses() {
    let Some(url) = server_url("ANARCHON_NATS_URL") else {
        return;
    };
    let store = NatsStore::connect_with(&url, options().duplicate_window(Duration::from_secs(30)))
        .await
        .unwrap();
    let scheduler = Scheduler::claim_only(store).build().unwrap();
    let noop = |_ctx| async { Ok(()) };

    for (cfg, name) in [
        (
            JobConfig {
                overlap: Some(anarchon_core::Overlap::Allow),
                ..Default::default()
            },
            "overlap",
        ),
        (
            JobConfig {
                max_attempts: Some(2),
                ..Default::default()
            },
            "max_attempts",
        ),
        (
            JobConfig {
                catch_up_window: Some(Duration::from_secs(1)),
                ..Default::default()
            },
            "catch_up_window",
        ),
        (
            JobConfig {
                lease: Some(Duration::from_secs(1)),
                ..Default::default()
            },
            "lease",
        ),
        (
            JobConfig {
                heartbeat: Some(Duration::from_millis(100)),
                ..Default::default()
            },
            "heartbeat",
        ),
        (
            JobConfig {
                history_ttl: Some(Duration::from_secs(1)),
                ..Default::default()
            },
            "history_ttl",
        ),
    ] {
        let err = scheduler
            .every("cfg", "1s")
            .config(cfg)
            .handler(noop)
            .unwrap_err();
        assert!(
            matches!(&err, Error::InvalidOption { option, .. } if *option == name),
            "{name}: {err:?}"
        );
        assert!(err.to_string().contains("claim-only"), "{err}");
    }

    // 2 s jitter (default) + 30 s late reaches the 30 s window.
    let err = scheduler
        .every("late", "1s")
        .max_late(Duration::from_secs(28))
        .handler(noop)
        .unwrap_err();
    assert!(
        matches!(
            &err,
            Error::InvalidOption {
                option: "max_late_ms",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("30000 ms"), "{err}");
    scheduler
        .every("fits", "1s")
        .max_late(Duration::from_secs(27))
        .handler(noop)
        .unwrap();

    let err = scheduler
        .every("bad name!", "1s")
        .handler(noop)
        .unwrap_err();
    assert!(matches!(err, Error::InvalidJobName { .. }), "{err:?}");
}

/// Many instances start at once: their `prepare` calls create the same stream at the same
/// moment, and all succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b33_concurrent_prepare_is_safe() {
    let Some(url) = server_url("ANARCHON_NATS_URL") else {
        return;
    };
    let opts = options();
    let job = unique_job("many");
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let (url, opts, job) = (url.clone(), opts.clone(), job.clone());
        tasks.push(tokio::spawn(async move {
            let store = NatsStore::connect_with(&url, opts).await.unwrap();
            store.prepare(&prep(&job)).await
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
}
