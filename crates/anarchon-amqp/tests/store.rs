//! RabbitMQ store behaviour beyond the kit: a lost confirm, reconnecting after an outage,
//! bad input and the options a claim-only store refuses. [B-22, B-26, B-28, B-29, B-36]

use std::time::Duration;

use anarchon_amqp::amqprs::channel::{QueueDeclareArguments, QueueDeleteArguments};
use anarchon_amqp::amqprs::connection::{Connection, OpenConnectionArguments};
use anarchon_amqp::{AmqpError, AmqpOptions, AmqpStore};
use anarchon_core::claim_only::host_now;
use anarchon_core::store::RunRecord;
use anarchon_core::store::{
    HistoryStore, Prepare, Retention, RunKey, SlotClaim, SlotOutcome, Store,
};
use anarchon_core::testkit::{server_url, unique_job};
use anarchon_core::{ClaimStore, Error, JobConfig, JobName, Reason, RunStatus, Scheduler};
use anarchon_test_support::FaultProxy;

fn options() -> AmqpOptions {
    AmqpOptions::default()
        .prefix(format!("anarchon-test-{:016x}", rand::random::<u64>()))
        .slot_ttl(Duration::from_secs(120))
        .history_max_bytes(1024 * 1024)
}

fn claim(job: &JobName, slot: i64, instance: &str) -> SlotClaim {
    SlotClaim {
        run: RunKey::new(job.clone(), slot),
        instance_id: instance.into(),
        not_after: host_now() + 60_000,
    }
}

fn prep(job: &JobName) -> Prepare {
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

fn port_of(url: &str) -> u16 {
    let authority = url.split("://").nth(1).unwrap().split('/').next().unwrap();
    let hostport = authority.rsplit('@').next().unwrap();
    hostport
        .rsplit_once(':')
        .map(|(_, p)| p.parse().unwrap())
        .unwrap_or(5672)
}

/// `amqp://user:pass@127.0.0.1:<port>/...` with the port replaced.
fn via(url: &str, port: u16) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let (user, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (format!("{u}@"), h),
        None => (String::new(), authority),
    };
    let host = hostport.rsplit_once(':').map_or(hostport, |(h, _)| h);
    format!("{scheme}://{user}{host}:{port}/{path}")
}

/// Deletes the streams a test left (the job list and these jobs' history): every stream
/// holds files open on the shared server.
async fn cleanup(url: &str, prefix: &str, jobs: &[&JobName]) {
    let args = OpenConnectionArguments::new("127.0.0.1", port_of(url), "guest", "guest");
    let Ok(conn) = Connection::open(&args).await else {
        return;
    };
    if let Ok(ch) = conn.open_channel(None).await {
        let mut queues = vec![format!("{prefix}.jobs")];
        queues.extend(jobs.iter().map(|j| format!("{prefix}.history.{j}")));
        for q in queues {
            let _ = ch.queue_delete(QueueDeleteArguments::new(&q)).await;
        }
    }
    let _ = conn.close().await;
}

async fn until_won(store: &AmqpStore, job: &JobName, first_slot: i64) -> i64 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut slot = first_slot;
    loop {
        match store.claim_slot(&claim(job, slot, "a")).await {
            Ok(SlotOutcome::Won) => return slot,
            other => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "no claim won within 20 s: {other:?}"
                );
                slot += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// [B-29] The connection drops right after the claim's publish reached the server: the
/// claimer never sees the confirm and skips the slot (`Unknown`), while the gate queue holds
/// its message, so the slot is taken for everyone else. The next claim opens a new
/// connection and wins the next slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b29_lost_confirm_skips_the_slot_and_the_store_reconnects() {
    let Some(url) = server_url("ANARCHON_AMQP_URL") else {
        return;
    };
    let proxy = FaultProxy::start(port_of(&url)).await;
    let opts = options().operation_timeout(Duration::from_secs(2));
    let through = AmqpStore::connect_with(&via(&url, proxy.port), opts.clone())
        .await
        .unwrap();
    let direct = AmqpStore::connect_with(&url, opts).await.unwrap();
    let job = unique_job("lost");
    through.prepare(&prep(&job)).await.unwrap();

    let slot = host_now();
    let marker = format!("cut-here-{:08x}", rand::random::<u32>());
    proxy.arm(marker.as_bytes());
    let outcome = through.claim_slot(&claim(&job, slot, &marker)).await;
    assert_eq!(proxy.cuts(), 1, "the proxy cut the connection");
    assert!(
        matches!(outcome, Ok(SlotOutcome::Unknown)),
        "a lost confirm is Unknown, got {outcome:?}"
    );
    // The publish reached the gate queue: the slot is taken.
    assert_eq!(
        direct.claim_slot(&claim(&job, slot, "b")).await.unwrap(),
        SlotOutcome::Taken
    );
    until_won(&through, &job, slot + 1000).await;
    cleanup(&url, through.options().queue_prefix(), &[]).await;
}

/// [B-29] A broker outage (played by the proxy: every connection closed, new ones refused
/// for 2 s): claims during it fail or are skipped, none is won; once the broker is back
/// the same store claims the next slots, without being built again. (Restarting a second
/// RabbitMQ node inside a test takes tens of seconds and an Erlang distribution setup of
/// its own, so the outage is played at the TCP level.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b29_after_an_outage_the_next_slots_are_claimed_again() {
    let Some(url) = server_url("ANARCHON_AMQP_URL") else {
        return;
    };
    let proxy = FaultProxy::start(port_of(&url)).await;
    let opts = options()
        .operation_timeout(Duration::from_secs(1))
        .connect_timeout(Duration::from_secs(1));
    let store = AmqpStore::connect_with(&via(&url, proxy.port), opts)
        .await
        .unwrap();
    let job = unique_job("outage");
    store.prepare(&prep(&job)).await.unwrap();
    let base = host_now();
    assert_eq!(
        store.claim_slot(&claim(&job, base, "a")).await.unwrap(),
        SlotOutcome::Won
    );

    proxy.set_down(true);
    tokio::time::sleep(Duration::from_millis(200)).await;
    for i in 1..4 {
        let r = store.claim_slot(&claim(&job, base + i, "a")).await;
        assert!(
            !matches!(r, Ok(SlotOutcome::Won)),
            "no claim is won while the broker is away: {r:?}"
        );
    }
    proxy.set_down(false);
    until_won(&store, &job, base + 10).await;
    // History works on the new connection too.
    let rec = record(&job, base + 10, "a");
    store.record(&rec, Retention::default()).await.unwrap();
    assert_eq!(store.history(&job, 5).await.unwrap(), vec![rec]);
    cleanup(&url, store.options().queue_prefix(), &[&job]).await;
}

fn record(job: &JobName, slot: i64, instance: &str) -> RunRecord {
    RunRecord {
        job: job.clone(),
        slot,
        scheduled_at: slot,
        instance_id: instance.into(),
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

/// [B-36] History written by one instance is read by a process that registered no jobs,
/// without consuming it: two reads see the same records.
#[tokio::test]
async fn b36_history_is_readable_from_a_process_without_jobs() {
    let Some(url) = server_url("ANARCHON_AMQP_URL") else {
        return;
    };
    let opts = options();
    let writer = AmqpStore::connect_with(&url, opts.clone()).await.unwrap();
    let job = unique_job("api");
    writer.prepare(&prep(&job)).await.unwrap();
    let slot = host_now();
    let mut rec = record(&job, slot, "w");
    rec.status = RunStatus::Running;
    rec.finished_at = None;
    writer.record(&rec, Retention::default()).await.unwrap();
    rec.status = RunStatus::Succeeded;
    rec.finished_at = Some(slot + 2);
    writer.record(&rec, Retention::default()).await.unwrap();

    let reader = AmqpStore::connect_with(&url, opts.clone()).await.unwrap();
    reader.prepare(&prep_none()).await.unwrap();
    assert_eq!(reader.history(&job, 10).await.unwrap(), vec![rec.clone()]);
    assert_eq!(reader.history(&job, 10).await.unwrap(), vec![rec.clone()]);
    assert_eq!(reader.last_run(&job).await.unwrap(), Some(rec));
    assert!(reader.known_jobs().await.unwrap().contains(&job));
    cleanup(&url, opts.queue_prefix(), &[&job]).await;
}

/// [B-26] A queue of the store's name with other settings is refused, naming it: a classic
/// queue where the job list stream belongs, and a gate queue declared with another
/// `slot_ttl`.
#[tokio::test]
async fn b26_existing_queue_with_other_settings_is_refused() {
    let Some(url) = server_url("ANARCHON_AMQP_URL") else {
        return;
    };
    let opts = options();
    // The test servers use RabbitMQ's default user on loopback.
    let args = OpenConnectionArguments::new("127.0.0.1", port_of(&url), "guest", "guest");
    let conn = Connection::open(&args).await.unwrap();
    let ch = conn.open_channel(None).await.unwrap();
    let jobs_queue = format!("{}.jobs", opts.queue_prefix());
    ch.queue_declare(QueueDeclareArguments::new(&jobs_queue))
        .await
        .unwrap();
    let store = AmqpStore::connect_with(&url, opts.clone()).await.unwrap();
    let err = store.prepare(&prep(&unique_job("q"))).await.unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains(&jobs_queue), "{err}");
    ch.queue_delete(QueueDeleteArguments::new(&jobs_queue))
        .await
        .unwrap();

    // Two instances with different slot TTLs meet on one gate queue.
    let job = unique_job("ttl");
    let slot = host_now();
    let a = AmqpStore::connect_with(&url, opts.clone()).await.unwrap();
    assert_eq!(
        a.claim_slot(&claim(&job, slot, "a")).await.unwrap(),
        SlotOutcome::Won
    );
    let b = AmqpStore::connect_with(&url, opts.clone().slot_ttl(Duration::from_secs(60)))
        .await
        .unwrap();
    let err = b.claim_slot(&claim(&job, slot, "b")).await.unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("gate"), "{err}");
    // The store opens a new channel and goes on with the next claim.
    let other = unique_job("ttl");
    assert_eq!(
        b.claim_slot(&claim(&other, slot, "b")).await.unwrap(),
        SlotOutcome::Won
    );

    // A store on the user's own connection leaves it open when it closes.
    let own = AmqpStore::from_connection(conn.clone(), options()).unwrap();
    let job = unique_job("own");
    own.prepare(&prep(&job)).await.unwrap();
    assert_eq!(
        own.claim_slot(&claim(&job, slot, "o")).await.unwrap(),
        SlotOutcome::Won
    );
    own.close().await.unwrap();
    assert!(conn.is_open());
    conn.close().await.unwrap();
    cleanup(&url, opts.queue_prefix(), &[]).await;
    cleanup(&url, own.options().queue_prefix(), &[]).await;
}

/// Bad URLs and options are refused before any connection, without the password.
#[tokio::test]
async fn bad_urls_are_refused_without_echoing_secrets() {
    for url in [
        "http://127.0.0.1:5672",
        "127.0.0.1:5672",
        "amqp://",
        "amqp://user:hunter2@",
        "amqp://user:hunter2@host:notaport/",
        "amqps://user:hunter2@host/",
    ] {
        let err = AmqpStore::connect(url).await.unwrap_err();
        assert!(
            matches!(err, AmqpError::InvalidUrl { .. }),
            "{url}: {err:?}"
        );
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }
    let err = AmqpStore::connect_with("amqp://127.0.0.1", AmqpOptions::default().prefix("a.b"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            AmqpError::InvalidOption {
                option: "prefix",
                ..
            }
        ),
        "{err:?}"
    );
}

/// A refused connection is an error at once, and nothing hangs.
#[tokio::test]
async fn refused_connection_is_an_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let began = std::time::Instant::now();
    let err = AmqpStore::connect_with(
        &format!("amqp://guest:guest@127.0.0.1:{port}/"),
        AmqpOptions::default().connect_timeout(Duration::from_secs(2)),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, AmqpError::Connect { .. }), "{err:?}");
    assert!(began.elapsed() < Duration::from_secs(5));
    let core: Error = err.into();
    assert!(matches!(core, Error::Unavailable { .. }));
}

/// Wrong credentials and an unknown virtual host are errors that do not echo the password.
#[tokio::test]
async fn wrong_credentials_are_refused_without_echoing_them() {
    let Some(url) = server_url("ANARCHON_AMQP_URL") else {
        return;
    };
    let port = port_of(&url);
    let began = std::time::Instant::now();
    let err = AmqpStore::connect(&format!("amqp://guest:wrong-secret-42@127.0.0.1:{port}/"))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, AmqpError::Connect { .. }), "{err:?}");
    assert!(!text.contains("wrong-secret-42"), "{text}");
    assert!(text.contains("password is wrong"), "{text}");
    assert!(began.elapsed() < Duration::from_secs(10));
}

/// [B-22, B-28] Lease-only options and `history_ttl` from configuration are errors
/// naming them; `jitter_ms + max_late_ms` must stay below the slot TTL; a bad job name is
/// refused.
#[tokio::test]
async fn b28_options_a_claim_only_store_refuses() {
    let Some(url) = server_url("ANARCHON_AMQP_URL") else {
        return;
    };
    let store = AmqpStore::connect_with(&url, options().slot_ttl(Duration::from_secs(30)))
        .await
        .unwrap();
    let scheduler = Scheduler::claim_only(store).build().unwrap();
    let noop = |_ctx| async { Ok(()) };
    for (cfg, name) in [
        (
            JobConfig {
                max_attempts: Some(2),
                ..Default::default()
            },
            "max_attempts",
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
    }
    let err = scheduler
        .every("late", "1s")
        .jitter(Duration::from_secs(5))
        .max_late(Duration::from_secs(25))
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
    let err = scheduler
        .every("bad name!", "1s")
        .handler(noop)
        .unwrap_err();
    assert!(matches!(err, Error::InvalidJobName { .. }), "{err:?}");
}

/// Many instances start at once: their `prepare` calls declare the same streams at the
/// same moment, and all succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b33_concurrent_prepare_is_safe() {
    let Some(url) = server_url("ANARCHON_AMQP_URL") else {
        return;
    };
    let opts = options();
    let job = unique_job("many");
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let (url, opts, job) = (url.clone(), opts.clone(), job.clone());
        tasks.push(tokio::spawn(async move {
            let store = AmqpStore::connect_with(&url, opts).await.unwrap();
            store.prepare(&prep(&job)).await
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    cleanup(&url, opts.queue_prefix(), &[]).await;
}
