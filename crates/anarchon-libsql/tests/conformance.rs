//! The store conformance kit of `anarchon-core` on a remote libSQL server, each test on
//! fresh tables. [B-44]
//!
//! Where `ANARCHON_LIBSQL_URL` is set (and `ANARCHON_LIBSQL_AUTH_TOKEN` where the server
//! wants one) the kit runs against that server. No libSQL server is packaged for these
//! machines, so otherwise the kit runs against `tests/hrana_double.py`, a Hrana-over-HTTP
//! test double on Python's sqlite3 that this test starts itself: that checks the store's
//! client side (requests, statements, transactions) through the real `libsql` client, not
//! sqld itself, and says so. Without python3 the tests print a SKIP line. A libSQL server is
//! optional (like Redis 8.6): `ANARCHON_REQUIRE_SERVERS=1` does not make its absence fail.

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

/// The runtime half (short leases, several schedulers) only on a real server: the Python
/// double answers too slowly under load for 200 ms heartbeats, and the runtime half tests
/// the scheduler, which the other stores' suites cover; the store's own code is covered by
/// the contract half above.
async fn fresh_real() -> Option<Arc<dyn LeaseStore>> {
    match real_server() {
        Some((url, token)) => Some(open(url, token).await),
        None => {
            eprintln!(
                "SKIP libSQL runtime kit: ANARCHON_LIBSQL_URL is not set (a real sqld is optional; the contract half ran on the Hrana test double)"
            );
            None
        }
    }
}

anarchon_core::lease_store_contract!(fresh);

mod runtime {
    use super::*;
    anarchon_core::lease_runtime_suite!(fresh_real);
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
