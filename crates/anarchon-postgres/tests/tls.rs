//! The store over TLS, against the TLS-only PostgreSQL that `cargo xtask test-servers --tls`
//! starts with a test CA: `ANARCHON_POSTGRES_TLS_URL`, `ANARCHON_TLS_CA` (the CA that signed
//! the server's certificate) and `ANARCHON_TLS_OTHER_CA` (a CA that signed nothing).
// The test-only `PostgresStore::unconnected` (feature `testkit`) parses a URL without
// connecting: what these tests need.
#![cfg(feature = "tls")]

use std::time::Duration;

use anarchon_core::store::{
    ClaimOutcome, Finish, HistoryStore, LeaseClaim, OwnerWrite, Prepare, Retention, RunKey, Store,
};
use anarchon_core::testkit::{server_url, unique_job};
use anarchon_core::{Error, LeaseStore, Overlap, Reason, RunStatus};
use anarchon_postgres::{PostgresOptions, PostgresStore};

/// The TLS server's URL without its query, and the two CA files; `None` after a SKIP line.
fn server() -> Option<(String, String, String)> {
    let url = server_url("ANARCHON_POSTGRES_TLS_URL")?;
    let ca = server_url("ANARCHON_TLS_CA")?;
    let other = server_url("ANARCHON_TLS_OTHER_CA")?;
    let base = url
        .split_once('?')
        .map_or(url.as_str(), |(b, _)| b)
        .to_owned();
    Some((base, ca, other))
}

/// A query value, percent-encoded where a path could break the URL.
fn enc(value: &str) -> String {
    value
        .replace('%', "%25")
        .replace(' ', "%20")
        .replace('&', "%26")
        .replace('#', "%23")
}

fn with(base: &str, query: &str) -> String {
    format!("{base}?{query}")
}

fn schema() -> String {
    format!("anarchon_tls_{:08x}", rand::random::<u32>())
}

fn options(schema: &str) -> PostgresOptions {
    PostgresOptions::default()
        .schema(schema)
        .pool_size(2)
        .connect_timeout(Duration::from_secs(3))
}

async fn prepared(url: &str, schema: &str, jobs: &[&anarchon_core::JobName]) -> PostgresStore {
    let store = PostgresStore::connect_with(url, options(schema))
        .await
        .expect("connect over TLS");
    store
        .prepare(&Prepare {
            jobs: jobs.iter().map(|j| (*j).clone()).collect(),
            instance_id: "tls".into(),
            call_timeout: std::time::Duration::from_secs(5),
        })
        .await
        .expect("prepare over TLS");
    store
}

/// Whether the store's pooled connection is encrypted, from the server's own view.
async fn encrypted(store: &PostgresStore) -> bool {
    let client = store.pool().get().await.expect("pooled connection");
    let row = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap();
    row.get(0)
}

async fn drop_schema(store: &PostgresStore) {
    let client = store.pool().get().await.expect("pooled connection");
    let _ = client
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS \"{}\" CASCADE",
            store.schema()
        ))
        .await;
}

fn claim(job: &anarchon_core::JobName, slot: i64, instance: &str, now: i64) -> LeaseClaim {
    LeaseClaim {
        run: RunKey::new(job.clone(), slot),
        scheduled_at: slot,
        instance_id: instance.into(),
        lease_ms: 30_000,
        not_after: now + 60_000,
        overlap: Overlap::Skip,
        reason: Reason::Scheduled,
        retention: Retention::default(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn claim_and_finish_round_trip_over_verify_full() {
    let Some((base, ca, _)) = server() else {
        return;
    };
    let url = with(
        &base,
        &format!("sslmode=verify-full&sslrootcert={}", enc(&ca)),
    );
    let job = unique_job("tls");
    let store = prepared(&url, &schema(), &[&job]).await;
    assert!(encrypted(&store).await, "the connection is not encrypted");
    let now = store.now().await.unwrap();
    let slot = now - now % 1000;
    let lease = match store.claim(&claim(&job, slot, "a", now)).await.unwrap() {
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
    drop_schema(&store).await;
    store.close().await.unwrap();
}

/// The LISTEN connection is a connection of its own: it goes over TLS too, and a release
/// reaches the backup through it.
#[tokio::test(flavor = "multi_thread")]
async fn release_notification_reaches_the_backup_over_tls() {
    let Some((base, ca, _)) = server() else {
        return;
    };
    let url = with(
        &base,
        &format!("sslmode=verify-full&sslrootcert={}", enc(&ca)),
    );
    let job = unique_job("tls-handover");
    let schema = schema();
    let owner = prepared(&url, &schema, &[&job]).await;
    // `prepare` returns once the backup's LISTEN connection listens.
    let backup = prepared(&url, &schema, &[&job]).await;
    let mut releases = backup.subscribe_releases().expect("a release stream");
    let now = owner.now().await.unwrap();
    let lease = match owner.claim(&claim(&job, now, "a", now)).await.unwrap() {
        ClaimOutcome::Won(lease) => lease,
        other => panic!("expected Won, got {other:?}"),
    };
    assert_eq!(owner.release(&lease).await.unwrap(), OwnerWrite::Done);
    let key = tokio::time::timeout(Duration::from_secs(5), releases.recv())
        .await
        .expect("a release notification within 5 s over the TLS LISTEN connection")
        .unwrap();
    assert_eq!(key, RunKey::new(job.clone(), now));
    drop_schema(&owner).await;
    backup.close().await.unwrap();
    owner.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn verify_full_against_the_wrong_ca_is_refused_and_says_why() {
    let Some((base, _, other)) = server() else {
        return;
    };
    let url = with(
        &base,
        &format!("sslmode=verify-full&sslrootcert={}", enc(&other)),
    );
    let err = PostgresStore::connect_with(&url, options(&schema()))
        .await
        .expect_err("a certificate signed by another CA must be refused");
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    let message = err.to_string();
    eprintln!("wrong CA: {message}");
    assert!(
        message.contains("TLS handshake failed")
            && message.contains("certificate")
            && message.contains("sslrootcert"),
        "{message}"
    );
}

/// `require` without a root CA encrypts without checking the certificate, as libpq does;
/// `disable` is refused by this TLS-only server.
#[tokio::test(flavor = "multi_thread")]
async fn require_encrypts_and_disable_is_refused_by_a_tls_only_server() {
    let Some((base, _, _)) = server() else {
        return;
    };
    let store = PostgresStore::connect_with(&with(&base, "sslmode=require"), options(&schema()))
        .await
        .expect("require connects without a CA");
    assert!(encrypted(&store).await);
    store.close().await.unwrap();
    let err = PostgresStore::connect_with(&with(&base, "sslmode=disable"), options(&schema()))
        .await
        .expect_err("the server takes TLS connections only");
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
}

/// A root CA file that cannot be read is refused when the store is built, naming the file.
#[test]
fn an_unreadable_root_ca_is_refused_at_construction() {
    let err = PostgresStore::unconnected(
        "postgres://u@127.0.0.1/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.crt",
        PostgresOptions::default(),
    )
    .expect_err("no such file");
    let message = err.to_string();
    assert!(message.contains("/nonexistent/ca.crt"), "{message}");
    assert!(matches!(Error::from(err), Error::InvalidOption { .. }));
}
