//! Direct tests of the Redis store beyond the conformance kit: lateness judged inside the
//! scripts, keys of the wrong type, many concurrent claimers, bad input, the user's own
//! client, and the strategy/server checks.

mod common;

use std::sync::Arc;
use std::time::Duration;

use anarchon_core::store::{
    ClaimOutcome, ClaimStore, Error, HistoryStore, LeaseClaim, LeaseStore, Overlap, Prepare,
    Reason, Retention, RunKey, SlotClaim, Store,
};
use anarchon_core::testkit::{server_url, unique_job};
use anarchon_redis::fred::prelude::*;
use anarchon_redis::{RedisClaimStore, RedisError, RedisOptions, RedisStore, Strategy};
use anarchon_test_support::OwnRedis;
use common::{admin, options};

fn claim(run: RunKey, instance: &str, now: i64) -> LeaseClaim {
    LeaseClaim {
        scheduled_at: run.slot,
        run,
        instance_id: instance.into(),
        lease_ms: 5_000,
        not_after: now + 60_000,
        overlap: Overlap::Skip,
        reason: Reason::Scheduled,
        retention: Retention::default(),
    }
}

/// Every server URL set: Redis and, where set, Valkey.
fn urls() -> Vec<String> {
    let mut v: Vec<String> = server_url("ANARCHON_REDIS_URL").into_iter().collect();
    if let Ok(u) = std::env::var("ANARCHON_VALKEY_URL")
        && !u.trim().is_empty()
    {
        v.push(u);
    }
    v
}

/// [B-10] A claim that reaches the server after its `not_after` (here: held back by
/// CLIENT PAUSE, as a command buffered during an outage would be) is refused by the script
/// on the server clock and writes nothing.
#[tokio::test]
async fn b10_delayed_claim_is_refused_inside_the_script() {
    let Some(server) = OwnRedis::start() else {
        return;
    };
    let store = RedisStore::connect_with(&server.url(), options())
        .await
        .unwrap();
    let job = unique_job("delayed");
    store
        .prepare(&Prepare {
            jobs: vec![job.clone()],
            instance_id: "a".into(),
            call_timeout: std::time::Duration::from_secs(5),
        })
        .await
        .unwrap();
    let t = store.now().await.unwrap();
    let run = RunKey::new(job.clone(), t);
    let mut c = claim(run.clone(), "a", t);
    c.not_after = t + 300;
    server.cli(&["CLIENT", "PAUSE", "1000"]);
    match store.claim(&c).await.unwrap() {
        ClaimOutcome::Late { store_now } => assert!(store_now > t + 300, "{store_now} vs {t}"),
        other => panic!("a delayed claim must be late, got {other:?}"),
    }
    assert!(
        store.history(&job, 10).await.unwrap().is_empty(),
        "a late claim wrote history"
    );
    let t2 = store.now().await.unwrap();
    assert!(matches!(
        store.claim(&claim(run, "b", t2)).await.unwrap(),
        ClaimOutcome::Won(_)
    ));
    store.close().await.unwrap();
}

/// [B-10] A claim the client gave up on (timeout) still reaches the server later; the
/// script compares its deadline with `TIME` and it has no effect, so it cannot start a run
/// nobody knows about.
#[tokio::test]
async fn b10_claim_abandoned_by_the_client_has_no_effect_when_it_arrives() {
    let Some(server) = OwnRedis::start() else {
        return;
    };
    let opts = options().command_timeout(Duration::from_millis(300));
    let store = RedisStore::connect_with(&server.url(), opts.clone())
        .await
        .unwrap();
    let job = unique_job("ghost");
    store
        .prepare(&Prepare {
            jobs: vec![job.clone()],
            instance_id: "a".into(),
            call_timeout: std::time::Duration::from_secs(5),
        })
        .await
        .unwrap();
    let t = store.now().await.unwrap();
    let run = RunKey::new(job.clone(), t);
    server.cli(&["CLIENT", "PAUSE", "1200"]);
    let err = store.claim(&claim(run.clone(), "a", t)).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Timeout {
                operation: "claim",
                ..
            }
        ),
        "{err}"
    );
    // Let the paused command run on the server.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(
        store.history(&job, 10).await.unwrap().is_empty(),
        "the abandoned claim took effect"
    );
    let other = RedisStore::connect_with(&server.url(), opts).await.unwrap();
    let t2 = other.now().await.unwrap();
    assert!(
        matches!(
            other.claim(&claim(run, "b", t2)).await.unwrap(),
            ClaimOutcome::Won(_)
        ),
        "the slot must still be free"
    );
}

/// [B-11] Sixteen instances, each on its own connection, claim one slot at once: one wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn b11_sixteen_concurrent_claimers_one_winner() {
    for url in urls() {
        let opts = options();
        let job = unique_job("sixteen");
        let mut stores = Vec::new();
        for _ in 0..16 {
            let s = RedisStore::connect_with(&url, opts.clone()).await.unwrap();
            s.prepare(&Prepare {
                jobs: vec![job.clone()],
                instance_id: "x".into(),
                call_timeout: std::time::Duration::from_secs(5),
            })
            .await
            .unwrap();
            stores.push(Arc::new(s));
        }
        let t = stores[0].now().await.unwrap();
        let barrier = Arc::new(tokio::sync::Barrier::new(16));
        let tasks: Vec<_> = stores
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let (s, b) = (s.clone(), barrier.clone());
                let c = claim(RunKey::new(job.clone(), t), &format!("i{i}"), t);
                tokio::spawn(async move {
                    b.wait().await;
                    s.claim(&c).await.unwrap()
                })
            })
            .collect();
        let mut won = Vec::new();
        for t in tasks {
            match t.await.unwrap() {
                ClaimOutcome::Won(l) => won.push(l),
                ClaimOutcome::Taken => {}
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(won.len(), 1, "{url}: {won:?}");
        assert_eq!(stores[0].history(&job, 10).await.unwrap().len(), 1);
        for s in stores {
            s.close().await.unwrap();
        }
    }
}

/// A key of the wrong type under the prefix is reported as `Corrupt` naming it, nothing is
/// written beside it, and the key itself is left as it was.
#[tokio::test]
async fn wrong_type_key_is_corrupt_and_left_alone() {
    for url in urls() {
        let opts = options();
        let prefix = opts.key_prefix().to_owned();
        let store = RedisStore::connect_with(&url, opts).await.unwrap();
        let job = unique_job("wrongtype");
        let t = store.now().await.unwrap();
        let admin = admin(&url).await;
        let run_key = format!("{prefix}{{{job}}}:run:{t}");
        let _: () = admin
            .set(&run_key, "not anarchon's", None, None, false)
            .await
            .unwrap();
        let err = store
            .claim(&claim(RunKey::new(job.clone(), t), "a", t))
            .await
            .unwrap_err();
        match &err {
            Error::Corrupt { location, .. } => assert!(location.contains(&run_key), "{err}"),
            other => panic!("expected Corrupt, got {other}"),
        }
        let v: String = admin.get(&run_key).await.unwrap();
        assert_eq!(v, "not anarchon's");
        let written: Vec<String> = admin
            .custom(
                anarchon_redis::fred::types::CustomCommand::new_static(
                    "KEYS",
                    anarchon_redis::fred::types::ClusterHash::Random,
                    false,
                ),
                vec![format!("{prefix}{{{job}}}:*")],
            )
            .await
            .unwrap();
        assert_eq!(
            written,
            vec![run_key.clone()],
            "the failed claim wrote keys"
        );

        // The history index of another job is a list: reading history says so.
        let job2 = unique_job("wronghist");
        let hist = format!("{prefix}{{{job2}}}:hist");
        let _: () = admin.rpush(&hist, "x").await.unwrap();
        let err = store.history(&job2, 5).await.unwrap_err();
        assert!(
            matches!(&err, Error::Corrupt { location, .. } if location.contains(&hist)),
            "{err}"
        );

        // The known-jobs set is a string.
        let _: () = admin
            .set(format!("{prefix}jobs"), "x", None, None, false)
            .await
            .unwrap();
        let err = store.known_jobs().await.unwrap_err();
        assert!(
            matches!(&err, Error::Corrupt { location, .. } if location.contains("jobs")),
            "{err}"
        );

        // Claim-only: the claim stream is a hash.
        let prefix = options().key_prefix().to_owned();
        let cs = RedisClaimStore::connect_with(
            &url,
            Strategy::StreamId,
            RedisOptions::default().prefix(prefix.clone()),
        )
        .await
        .unwrap();
        let job3 = unique_job("wrongstream");
        let stream = format!("{prefix}{{{job3}}}:claims");
        let _: () = admin.hset(&stream, ("a", "b")).await.unwrap();
        let sc = SlotClaim {
            run: RunKey::new(job3.clone(), t),
            instance_id: "a".into(),
            not_after: t + 60_000,
        };
        let err = cs.claim_slot(&sc).await.unwrap_err();
        assert!(
            matches!(&err, Error::Corrupt { location, .. } if location.contains(&stream)),
            "{err}"
        );
        let script = RedisClaimStore::connect_with(
            &url,
            Strategy::Script,
            RedisOptions::default().prefix(prefix.clone()),
        )
        .await
        .unwrap();
        let err = script.claim_slot(&sc).await.unwrap_err();
        assert!(
            matches!(&err, Error::Corrupt { location, .. } if location.contains(&stream)),
            "{err}"
        );
        store.close().await.unwrap();
    }
}

/// [B-24] `idmp` on a server without stream idempotency fails in `prepare` naming it.
/// `connect` refuses it at once; a lazily built store refuses it in `prepare`.
#[tokio::test]
async fn b24_idmp_refuses_a_server_without_stream_idempotency() {
    for url in urls() {
        let eager = RedisClaimStore::connect_with(&url, Strategy::Idmp, options()).await;
        let store = RedisClaimStore::unconnected(&url, Strategy::Idmp, options()).unwrap();
        let server = store.server().await.unwrap();
        let is_new_redis = server.starts_with("Redis ")
            && server["Redis ".len()..]
                .split('.')
                .map(|p| p.parse::<u32>().unwrap_or(0))
                .collect::<Vec<_>>()
                >= vec![8, 6];
        if is_new_redis {
            assert!(eager.is_ok());
            continue;
        }
        assert!(
            matches!(eager, Err(Error::ServerTooOld { .. })),
            "connect must refuse idmp on {server}"
        );
        let err = store
            .prepare(&Prepare {
                jobs: vec![],
                instance_id: "a".into(),
                call_timeout: std::time::Duration::from_secs(5),
            })
            .await
            .unwrap_err();
        match &err {
            Error::ServerTooOld {
                found, required, ..
            } => {
                assert_eq!(found, &server);
                assert!(required.contains("8.6"), "{err}");
            }
            other => panic!("expected ServerTooOld, got {other}"),
        }
    }
}

/// Bad input: a wrong scheme, a prefix with braces, a refused connection, a failed AUTH:
/// each a clear error, and no password in any message.
// It checks the lazily connecting constructors: `connect` would refuse these stores at once.
#[tokio::test]
async fn bad_input_gives_clear_errors_without_passwords() {
    let e = RedisStore::unconnected("http://localhost:6379", RedisOptions::default()).unwrap_err();
    assert!(matches!(e, RedisError::InvalidUrl { .. }), "{e}");
    let e = RedisStore::unconnected("redis://localhost", RedisOptions::default().prefix("a{b}:"))
        .unwrap_err();
    assert!(matches!(e, RedisError::InvalidPrefix { .. }), "{e}");
    let core: Error = e.into();
    assert!(matches!(
        core,
        Error::InvalidOption {
            option: "prefix",
            ..
        }
    ));

    // Nobody listens on this port.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let opts = options().connect_timeout(Duration::from_secs(2));
    let store =
        RedisStore::unconnected(&format!("redis://:hunter2@127.0.0.1:{port}"), opts).unwrap();
    let started = std::time::Instant::now();
    let err = store.now().await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(matches!(err, Error::Unavailable { .. }), "{err}");
    assert!(!err.to_string().contains("hunter2"), "{err}");

    let Some(server) = OwnRedis::start_with(&["--requirepass", "right"]) else {
        return;
    };
    let url = format!("redis://:wrong-secret@127.0.0.1:{}", server.port());
    let store = RedisStore::unconnected(&url, options()).unwrap();
    let err = store
        .prepare(&Prepare {
            jobs: vec![],
            instance_id: "a".into(),
            call_timeout: std::time::Duration::from_secs(5),
        })
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err}");
    let msg = format!("{err} {err:?}");
    assert!(!msg.contains("wrong-secret"), "{msg}");
    let ok = RedisStore::unconnected(
        &format!("redis://:right@127.0.0.1:{}", server.port()),
        options(),
    )
    .unwrap();
    ok.now().await.unwrap();
}

/// [B-34] A store on the user's own client leaves it open on close.
#[tokio::test]
async fn b34_close_leaves_the_users_client_open() {
    for url in urls() {
        let client = admin(&url).await;
        let store = RedisStore::from_client(client.clone(), options())
            .await
            .unwrap();
        let job = unique_job("own");
        store
            .prepare(&Prepare {
                jobs: vec![job.clone()],
                instance_id: "a".into(),
                call_timeout: std::time::Duration::from_secs(5),
            })
            .await
            .unwrap();
        let t = store.now().await.unwrap();
        assert!(matches!(
            store
                .claim(&claim(RunKey::new(job, t), "a", t))
                .await
                .unwrap(),
            ClaimOutcome::Won(_)
        ));
        store.close().await.unwrap();
        let pong: String = client.ping(None).await.unwrap();
        assert_eq!(pong, "PONG");
        assert!(store.now().await.is_err(), "a closed store must not send");
    }
}

/// [B-17] A release reaches a subscriber of another store on the same prefix within
/// milliseconds (fast handover).
#[tokio::test]
async fn b17_release_notifies_other_instances() {
    for url in urls() {
        let opts = options();
        let (a, b) = (
            RedisStore::connect_with(&url, opts.clone()).await.unwrap(),
            RedisStore::connect_with(&url, opts).await.unwrap(),
        );
        let job = unique_job("notify");
        let p = Prepare {
            jobs: vec![job.clone()],
            instance_id: "x".into(),
            call_timeout: std::time::Duration::from_secs(5),
        };
        a.prepare(&p).await.unwrap();
        b.prepare(&p).await.unwrap();
        let mut rx = b.subscribe_releases().unwrap();
        let t = a.now().await.unwrap();
        let ClaimOutcome::Won(lease) = a.claim(&claim(RunKey::new(job, t), "a", t)).await.unwrap()
        else {
            panic!("claim")
        };
        let sent = std::time::Instant::now();
        a.release(&lease).await.unwrap();
        let got = tokio::time::timeout(Duration::from_secs(2), rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got, lease.run);
        assert!(
            sent.elapsed() < Duration::from_millis(500),
            "{:?}",
            sent.elapsed()
        );
        a.close().await.unwrap();
        b.close().await.unwrap();
    }
}

/// History rows round-trip every field, including manual ones on the claim-only store.
#[tokio::test]
async fn claim_only_history_round_trips() {
    for url in urls() {
        let store = RedisClaimStore::connect_with(&url, Strategy::Script, options())
            .await
            .unwrap();
        let job = unique_job("chrt");
        let t = store.now().await.unwrap();
        let rec = anarchon_core::store::RunRecord {
            job: job.clone(),
            slot: t,
            scheduled_at: t,
            instance_id: "a:b|c".into(),
            manual: false,
            attempt: 1,
            reason: Reason::Scheduled,
            status: anarchon_core::RunStatus::Failed,
            fence: 0,
            started_at: t + 1,
            finished_at: Some(t + 9),
            error: Some("boom: with spaces".into()),
        };
        store.record(&rec, Retention::default()).await.unwrap();
        assert_eq!(store.history(&job, 5).await.unwrap(), vec![rec]);
    }
}
