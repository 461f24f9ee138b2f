//! The remote libSQL client and the bundled SQLite of `anarchon-sqlite` in one binary: it
//! links (no duplicate `sqlite3_*` symbols) and both stores work side by side. [B-43]

use std::time::Duration;

use anarchon_core::store::{Error, LeaseStore, Store};
use anarchon_libsql::LibsqlStore;
use anarchon_sqlite::SqliteStore;

#[tokio::test(flavor = "multi_thread")]
async fn b43_libsql_remote_links_and_runs_beside_bundled_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let local = SqliteStore::connect(dir.path().join("local.db"))
        .await
        .unwrap();
    assert_eq!(
        local.schema_version().await.unwrap(),
        Some(anarchon_sqlite::sql::schema::SCHEMA_VERSION)
    );
    assert!(local.subscribe_releases().is_some());
    // The remote client is built and used in the same process; nothing listens on port 9.
    let err = LibsqlStore::connect_with(
        "http://127.0.0.1:9",
        anarchon_libsql::LibsqlOptions::default().call_timeout(Duration::from_secs(5)),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, Error::Unavailable { .. } | Error::Timeout { .. }),
        "{err:?}"
    );
    // And the local store still works after the remote client ran.
    assert!(local.now().await.unwrap() > 0);
    local.close().await.unwrap();
}
