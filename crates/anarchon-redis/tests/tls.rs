//! `rediss://` against the TLS-only redis-server that `cargo xtask test-servers --tls` starts
//! with a test CA (`ANARCHON_REDIS_TLS_URL`, `ANARCHON_TLS_CA`, `ANARCHON_TLS_OTHER_CA`).
//!
//! A `rediss://` URL trusts the system's roots, read by rustls-native-certs, which takes
//! them from the file in `SSL_CERT_FILE` when that is set. Each test therefore runs its body
//! in a child process of this test binary with `SSL_CERT_FILE` pointing to the CA it needs:
//! the environment of this process is left as it is.
// The test-only `unconnected` constructors (feature `testkit`) build a store without
// connecting: what these tests need (a parse, or an error seen at the first call).

mod common;

use std::process::Command;
use std::time::Duration;

use anarchon_core::store::{
    ClaimOutcome, Finish, HistoryStore, LeaseClaim, OwnerWrite, Prepare, Retention, RunKey, Store,
};
use anarchon_core::testkit::{server_url, unique_job};
use anarchon_core::{Error, LeaseStore, Overlap, Reason, RunStatus};
use anarchon_redis::RedisStore;

const CHILD: &str = "ANARCHON_REDIS_TLS_CHILD";

/// In the parent: runs `test` again in a child process that trusts `ca_var`'s file, checks it
/// passed, and returns `None`. In that child: the server's URL.
fn in_child_trusting(test: &str, ca_var: &str) -> Option<String> {
    let url = server_url("ANARCHON_REDIS_TLS_URL")?;
    let ca = server_url(ca_var)?;
    if std::env::var(CHILD).is_ok_and(|v| v == test) {
        return Some(url);
    }
    let out = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD, test)
        .env("SSL_CERT_FILE", &ca)
        .env_remove("SSL_CERT_DIR")
        .output()
        .expect("run the test binary again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprint!("{stderr}");
    assert!(
        out.status.success(),
        "{test} failed in its child process:\n{stdout}"
    );
    // A filter that matched nothing would pass too: the child must have run this one test.
    assert!(
        stdout.contains("1 passed"),
        "{test} did not run in its child process:\n{stdout}"
    );
    None
}

#[tokio::test(flavor = "multi_thread")]
async fn rediss_url_lease_round_trip() {
    let Some(url) = in_child_trusting("rediss_url_lease_round_trip", "ANARCHON_TLS_CA") else {
        return;
    };
    assert!(url.starts_with("rediss://"), "{url}");
    let store = RedisStore::unconnected(&url, common::options()).unwrap();
    let job = unique_job("rediss");
    store
        .prepare(&Prepare {
            jobs: vec![job.clone()],
            instance_id: "tls".into(),
            call_timeout: std::time::Duration::from_secs(5),
        })
        .await
        .expect("prepare over TLS");
    let now = store.now().await.unwrap();
    let slot = now - now % 1000;
    let claim = LeaseClaim {
        run: RunKey::new(job.clone(), slot),
        scheduled_at: slot,
        instance_id: "a".into(),
        lease_ms: 30_000,
        not_after: now + 60_000,
        overlap: Overlap::Skip,
        reason: Reason::Scheduled,
        retention: Retention::default(),
    };
    let lease = match store.claim(&claim).await.unwrap() {
        ClaimOutcome::Won(lease) => lease,
        other => panic!("expected Won, got {other:?}"),
    };
    let finish = Finish {
        status: RunStatus::Succeeded,
        error: None,
        retention: Retention::default(),
    };
    assert_eq!(
        store.finish(&lease, &finish).await.unwrap(),
        OwnerWrite::Done
    );
    let history = store.history(&job, 10).await.unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].status, RunStatus::Succeeded);
    store.close().await.unwrap();
}

/// Trusting a CA that did not sign the server's certificate, the store cannot connect: a
/// typed `Unavailable` error, within the connect timeout.
#[tokio::test(flavor = "multi_thread")]
async fn rediss_url_with_the_wrong_ca_is_unavailable() {
    let Some(url) = in_child_trusting(
        "rediss_url_with_the_wrong_ca_is_unavailable",
        "ANARCHON_TLS_OTHER_CA",
    ) else {
        return;
    };
    let options = common::options().connect_timeout(Duration::from_secs(2));
    let store = RedisStore::unconnected(&url, options).unwrap();
    let err = store
        .prepare(&Prepare {
            jobs: vec![unique_job("rediss-wrong-ca")],
            instance_id: "tls".into(),
            call_timeout: std::time::Duration::from_secs(5),
        })
        .await
        .expect_err("a certificate signed by another CA must be refused");
    eprintln!("wrong CA: {err}");
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    store.close().await.unwrap();
}
