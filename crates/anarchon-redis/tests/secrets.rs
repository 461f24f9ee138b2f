//! Secrets never leave the Redis stores: with a TRACE subscriber capturing every log line
//! (fred's `log` records too), a password holding `/ @ % # ? :` in every URL shape (raw,
//! percent-encoded, with and without a user, wrong, on a wrong port, `rediss://` to a plain
//! server, unsupported schemes) appears in no log line, no error's `Display` or `Debug` and
//! no store `Debug`, whether the connect fails or succeeds.

mod common;

use std::time::Duration;

use anarchon_core::store::{
    ClaimStore, Error, HistoryStore, Prepare, RunKey, SlotClaim, SlotOutcome, Store,
};
use anarchon_core::testkit::unique_job;
use anarchon_redis::{RedisClaimStore, RedisOptions, RedisStore, Strategy};
use anarchon_test_support::{CapturedLogs, OwnRedis};

/// The halves of the secret on both sides of URL delimiters: either one found anywhere
/// means some of it leaked, even cut at a delimiter.
const HALVES: [&str; 2] = ["sEcr3tA", "sEcr3tB"];

fn secret() -> String {
    format!("{}/@%#?:{}", HALVES[0], HALVES[1])
}

fn encoded(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn leaks(text: &str) -> bool {
    HALVES.iter().any(|h| text.contains(h))
}

fn opts() -> RedisOptions {
    common::options()
        .connect_timeout(Duration::from_secs(2))
        .command_timeout(Duration::from_secs(2))
}

fn prep(job: &anarchon_core::JobName) -> Prepare {
    Prepare {
        jobs: vec![job.clone()],
        instance_id: "i".into(),
        call_timeout: Duration::from_secs(5),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_stay_out_of_logs_errors_and_debug_in_every_url_shape() {
    let logs = CapturedLogs::install();
    let (raw, enc) = (secret(), encoded(&secret()));
    let acl = format!(">{raw}");
    let Some(server) = OwnRedis::start_with(&[
        "--requirepass",
        &raw,
        "--user",
        "app",
        "on",
        &acl,
        "~*",
        "&*",
        "+@all",
    ]) else {
        return;
    };
    let (port, free) = (server.port(), {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    });
    let mut shown = Vec::new();
    for url in [
        format!("redis://:{raw}@127.0.0.1:{port}"),
        format!("redis://:{enc}@127.0.0.1:{port}/0"),
        format!("redis://default:{raw}@127.0.0.1:{port}"),
        format!("redis://app:{raw}@127.0.0.1:{port}/0"),
        format!("valkey://app:{enc}@127.0.0.1:{port}"),
    ] {
        let store = match RedisStore::connect_with(&url, opts()).await {
            Ok(store) => store,
            Err(e) => panic!("{url} did not connect: {e}"),
        };
        let job = unique_job("secret");
        store.prepare(&prep(&job)).await.unwrap();
        store.history(&job, 5).await.unwrap();
        shown.push(format!("{store:?}"));
        store.close().await.unwrap();
        let claims = RedisClaimStore::connect_with(&url, Strategy::StreamId, opts())
            .await
            .unwrap();
        claims.prepare(&prep(&job)).await.unwrap();
        let now = claims.now().await.unwrap();
        let won = claims
            .claim_slot(&SlotClaim {
                run: RunKey::new(job.clone(), now),
                instance_id: "i".into(),
                not_after: now + 60_000,
            })
            .await
            .unwrap();
        assert_eq!(won, SlotOutcome::Won);
        shown.push(format!("{claims:?}"));
        claims.close().await.unwrap();
    }
    let failing = [
        format!("redis://:{raw}x@127.0.0.1:{port}"),
        format!("redis://app:{raw}x@127.0.0.1:{port}"),
        format!("redis://:{raw}@127.0.0.1:{free}"),
        format!("rediss://:{raw}@127.0.0.1:{port}"),
        format!("rediss://app:{enc}@127.0.0.1:{port}/0"),
        format!("redis://:{raw}@127.0.0.1:notaport"),
        format!("redis://:{raw}%ff@127.0.0.1:{port}"),
        format!("redis+unix://:{raw}@/tmp/redis.sock"),
        format!("http://:{raw}@127.0.0.1:{port}"),
        format!("redis-cluster://:{raw}@127.0.0.1:{free}?node=127.0.0.1:{free}"),
    ];
    for url in &failing {
        let err = match RedisStore::connect_with(url, opts()).await {
            Ok(store) => panic!("{url} connected: {store:?}"),
            Err(e) => e,
        };
        shown.push(format!("{err}"));
        shown.push(format!("{err:?}"));
        let claim_err: Error = RedisClaimStore::connect_with(url, Strategy::Script, opts())
            .await
            .unwrap_err();
        shown.push(format!("{claim_err}"));
        shown.push(format!("{claim_err:?}"));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    tracing::trace!("capture check");
    let captured = logs.text();
    assert!(captured.contains("capture check"), "nothing was captured");
    assert!(
        captured.contains("fred"),
        "fred logged nothing: the test would not see a secret it logged"
    );
    for text in &shown {
        assert!(!leaks(text), "a secret in: {text}");
    }
    let line = captured.lines().find(|l| leaks(l));
    assert!(line.is_none(), "a secret in the log: {line:?}");
}
