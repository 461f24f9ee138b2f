//! The core conformance kit on PostgreSQL, each test on a schema of its own
//! (`anarchon_test_<unix seconds>_<random>`), so the tests run in parallel. Test schemas
//! older than an hour are dropped when a new one is made. [B-44]

mod common;

use std::sync::Arc;

use anarchon_core::LeaseStore;

async fn postgres() -> Option<Arc<dyn LeaseStore>> {
    let url = common::url()?;
    common::drop_old_schemas(&url).await;
    Some(Arc::new(common::store_on(&url, &common::fresh_schema())))
}

anarchon_core::lease_store_suite!(postgres);
