//! The store conformance kit of `anarchon-core` on a remote libSQL server, each test on
//! fresh tables. [B-44]
//!
//! Where `ANARCHON_LIBSQL_URL` is set (and `ANARCHON_LIBSQL_AUTH_TOKEN` where the server
//! wants one) the kit runs against that server. No libSQL server is packaged for these
//! machines, so otherwise the kit runs against `tests/hrana_double.py`, a Hrana-over-HTTP
//! test double on Python's sqlite3 that this test starts itself: that checks the store's
//! client side (requests, statements, transactions) through the real `libsql` client, not
//! sqld itself, and says so. Both halves of the kit run there: the store contract and the
//! runtime behaviours. Without python3 the tests print a SKIP line (a failure under
//! `ANARCHON_REQUIRE_SERVERS=1`). A real libSQL server is optional (like Redis 8.6).

use std::sync::Arc;

use anarchon_core::LeaseStore;
use anarchon_libsql::LibsqlStore;

mod common;
use common::double_url;

async fn open(url: String, token: String) -> Arc<dyn LeaseStore> {
    let prefix = format!("kit_{:016x}", rand::random::<u64>());
    let store = LibsqlStore::connect_with(
        url,
        anarchon_libsql::LibsqlOptions::default()
            .auth_token(token)
            .table(prefix),
    )
    .await
    .expect("open libSQL store");
    Arc::new(store)
}

fn real_server() -> Option<(String, String)> {
    match std::env::var("ANARCHON_LIBSQL_URL") {
        Ok(url) if !url.trim().is_empty() => Some((
            url,
            std::env::var("ANARCHON_LIBSQL_AUTH_TOKEN").unwrap_or_default(),
        )),
        _ => None,
    }
}

/// The store contract: on the real server where given, else on the Hrana test double.
async fn fresh() -> Option<Arc<dyn LeaseStore>> {
    let (url, token) = match real_server() {
        Some(server) => server,
        None => (
            tokio::task::spawn_blocking(double_url).await.ok()??,
            String::new(),
        ),
    };
    Some(open(url, token).await)
}

anarchon_core::lease_store_contract!(fresh);

/// The runtime half (several schedulers, 1 s leases, 200 ms heartbeats) on the same server:
/// the real one where given, else the Hrana test double.
mod runtime {
    use super::*;
    anarchon_core::lease_runtime_suite!(fresh);
}

/// A store on the user's own `libsql::Database` works like one built from a URL: the tables
/// are created and the store answers.
#[tokio::test]
async fn from_database_takes_the_users_database() {
    let (url, token) = match real_server() {
        Some(server) => server,
        None => match tokio::task::spawn_blocking(double_url).await.ok().flatten() {
            Some(url) => (url, String::new()),
            None => return,
        },
    };
    let db = libsql::Builder::new_remote(url, token)
        .build()
        .await
        .expect("database");
    let prefix = format!("own_{:016x}", rand::random::<u64>());
    let store =
        LibsqlStore::from_database(db, anarchon_libsql::LibsqlOptions::default().table(prefix))
            .await
            .expect("store on the user's database");
    assert!(store.schema_version().await.unwrap().is_some());
    assert!(anarchon_core::store::Store::now(&store).await.unwrap() > 1_600_000_000_000);
    assert!(!format!("{store:?}").contains("http://"), "{store:?}");
}
