//! The core conformance kit's claim-only part on NATS JetStream. [B-44]

use std::sync::Arc;

use anarchon_core::ClaimStore;
use anarchon_core::testkit::server_url;
use anarchon_nats::{NatsOptions, NatsStore, Storage};

/// A fresh stream per store (in memory, so test runs leave nothing on the server's disk).
async fn nats() -> Option<Arc<dyn ClaimStore>> {
    let url = server_url("ANARCHON_NATS_URL")?;
    let opts = NatsOptions::default()
        .prefix(format!("anarchon-test-{:016x}", rand::random::<u64>()))
        .storage(Storage::Memory);
    Some(Arc::new(
        NatsStore::connect_with(&url, opts).await.expect("connect"),
    ))
}

mod nats {
    anarchon_core::claim_store_suite!(super::nats);
}
