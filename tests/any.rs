//! `anarchon::any` against the real servers: each URL scheme opens its store, which then
//! answers a read and tells its kind. A server that is not configured is skipped with a
//! message (a failure under `ANARCHON_REQUIRE_SERVERS=1`).

use anarchon::any::{self, AnyOptions, AnyStore, StoreKind};

use anarchon_test_support::server_url as url;

/// Opens `url`, checks the shape and kind, reads the job list, closes.
#[allow(dead_code)]
async fn opens(url: &str, options: AnyOptions, kind: &str, leases: bool) {
    let store = any::open_with(url, options)
        .await
        .unwrap_or_else(|e| panic!("{kind}: {e}"));
    assert_eq!(store.kind(), kind, "{store:?}");
    assert_eq!(matches!(store, AnyStore::Lease(_)), leases, "{store:?}");
    assert_eq!(StoreKind::of(url).unwrap().has_leases(), leases);
    // Connecting checks the server; the scheduler's `start` creates the schema (`prepare`).
    let prepare = anarchon::store::Prepare {
        jobs: vec![],
        instance_id: "any-test".into(),
        call_timeout: std::time::Duration::from_secs(5),
    };
    store.history().prepare(&prepare).await.unwrap();
    assert!(store.history().known_jobs().await.unwrap().is_empty());
    if leases {
        let lease = store.clone().into_lease().unwrap();
        assert!(lease.now().await.unwrap() > 0);
    } else {
        let err = store
            .clone()
            .into_lease()
            .err()
            .expect("claim-only")
            .to_string();
        assert!(err.contains("claim-only"), "{err}");
    }
    store.close().await.unwrap();
}

fn unique(prefix: &str) -> String {
    format!("{prefix}{:08x}", std::process::id() ^ rand_part())
}

fn rand_part() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn a_sqlite_path_and_url_open_the_sqlite_store() {
    let dir = std::env::temp_dir().join(unique("anarchon-any-"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("jobs.db");
    let path = path.to_str().unwrap();
    opens(path, AnyOptions::default(), "sqlite", true).await;
    opens(
        &format!("sqlite:{path}"),
        AnyOptions::default().table("other"),
        "sqlite",
        true,
    )
    .await;
    let err = any::open_with(path, AnyOptions::default().prefix("p"))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("prefix"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn a_postgres_url_opens_the_postgres_store() {
    let Some(url) = url("ANARCHON_POSTGRES_URL") else {
        return;
    };
    opens(
        &url,
        AnyOptions::default().schema(unique("any_")),
        "postgres",
        true,
    )
    .await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn redis_and_cluster_urls_open_the_redis_store() {
    for var in ["ANARCHON_REDIS_URL", "ANARCHON_REDIS_CLUSTER_URL"] {
        let Some(url) = url(var) else {
            continue;
        };
        opens(
            &url,
            AnyOptions::default().prefix(unique("any:")),
            "redis",
            true,
        )
        .await;
    }
}

#[cfg(feature = "amqp")]
#[tokio::test]
async fn an_amqp_url_opens_the_claim_only_rabbitmq_store() {
    let Some(url) = url("ANARCHON_AMQP_URL") else {
        return;
    };
    opens(
        &url,
        AnyOptions::default().prefix(unique("any-")),
        "rabbitmq",
        false,
    )
    .await;
}

#[cfg(feature = "nats")]
#[tokio::test]
async fn a_nats_url_opens_the_claim_only_nats_store() {
    let Some(url) = url("ANARCHON_NATS_URL") else {
        return;
    };
    opens(
        &url,
        AnyOptions::default().prefix(unique("any-")),
        "nats",
        false,
    )
    .await;
}

/// [B-36] A reader opens the store an application prepared and lists its jobs; a namespace
/// under which no store lives is refused naming `option`, and the broker stores refuse a
/// claim.
#[allow(dead_code)]
async fn reads(url: &str, store: AnyOptions, missing: AnyOptions, option: &str) {
    use anarchon::store::{RunKey, SlotClaim};
    let job = anarchon::JobName::new(unique("read-")).unwrap();
    let writer = any::open_with(url, store.clone()).await.unwrap();
    writer
        .history()
        .prepare(&anarchon::store::Prepare {
            jobs: vec![job.clone()],
            instance_id: "any-test".into(),
            call_timeout: std::time::Duration::from_secs(5),
        })
        .await
        .unwrap();
    let reader = any::open_read_only(url, store).await.unwrap();
    assert_eq!(
        reader.history().known_jobs().await.unwrap(),
        vec![job.clone()]
    );
    if let AnyStore::Claim(claims) = &reader {
        let claim = SlotClaim {
            run: RunKey::new(job, 0),
            instance_id: "any-test".into(),
            not_after: i64::MAX,
        };
        let err = claims.claim_slot(&claim).await.unwrap_err().to_string();
        assert!(err.contains("read-only"), "{err}");
    }
    reader.close().await.unwrap();
    writer.close().await.unwrap();
    match any::open_read_only(url, missing).await {
        Err(anarchon::Error::InvalidOption { option: o, reason }) => {
            assert_eq!(o, option, "{reason}");
        }
        other => panic!("a namespace with no store opened: {other:?}"),
    }
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn a_sqlite_file_is_not_opened_read_only_by_any() {
    let err = any::open_read_only("jobs.db", AnyOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, anarchon::Error::StoreUrl { .. }), "{err}");
    assert!(!std::path::Path::new("jobs.db").exists());
}

/// [`reads`] on the server in `var`, the store under a fresh `namespace` (`table` or
/// `prefix`), the missing one under a name nothing uses.
#[allow(dead_code)]
async fn reads_fresh(var: &str, namespace: &str) {
    let Some(url) = url(var) else {
        return;
    };
    let (name, typo) = match namespace {
        "table" => (unique("any_ro_"), "_typo"),
        _ if var.contains("REDIS") => (unique("any-ro:"), "typo:"),
        _ => (unique("any-ro-"), "-typo"),
    };
    let options = |name: String| match namespace {
        "table" => AnyOptions::default().table(name),
        _ => AnyOptions::default().prefix(name),
    };
    let missing = options(format!("{name}{typo}"));
    reads(&url, options(name), missing, namespace).await;
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn b36_postgres_opens_read_only_and_names_a_missing_table() {
    reads_fresh("ANARCHON_POSTGRES_URL", "table").await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn b36_redis_opens_read_only_and_refuses_a_missing_prefix() {
    reads_fresh("ANARCHON_REDIS_URL", "prefix").await;
}

#[cfg(feature = "amqp")]
#[tokio::test]
async fn b36_rabbitmq_opens_read_only_refuses_claims_and_a_missing_prefix() {
    reads_fresh("ANARCHON_AMQP_URL", "prefix").await;
}

#[cfg(feature = "nats")]
#[tokio::test]
async fn b36_nats_opens_read_only_refuses_claims_and_a_missing_prefix() {
    reads_fresh("ANARCHON_NATS_URL", "prefix").await;
}
