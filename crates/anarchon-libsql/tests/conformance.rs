//! The store conformance kit of `anarchon-core` on a remote libSQL server, each test on
//! fresh tables. Runs where `ANARCHON_LIBSQL_URL` is set (and `ANARCHON_LIBSQL_AUTH_TOKEN`
//! where the server wants one); prints a SKIP line otherwise. [B-44]

use std::sync::Arc;

use anarchon_core::LeaseStore;
use anarchon_libsql::LibsqlStore;

async fn fresh() -> Option<Arc<dyn LeaseStore>> {
    let url = anarchon_core::testkit::server_url("ANARCHON_LIBSQL_URL")?;
    let token = std::env::var("ANARCHON_LIBSQL_AUTH_TOKEN").unwrap_or_default();
    let prefix = format!("kit_{:016x}", rand::random::<u64>());
    let store = LibsqlStore::builder(url, token)
        .table(prefix)
        .open()
        .await
        .expect("open libSQL store");
    Some(Arc::new(store))
}

anarchon_core::lease_store_suite!(fresh);
