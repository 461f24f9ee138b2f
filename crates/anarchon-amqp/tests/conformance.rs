//! The core conformance kit's claim-only part on RabbitMQ. [B-44]

use std::sync::Arc;

use anarchon_amqp::{AmqpOptions, AmqpStore};
use anarchon_core::ClaimStore;
use anarchon_core::testkit::server_url;

/// A fresh queue prefix per store, so tests sharing a server never see each other's queues.
async fn amqp() -> Option<Arc<dyn ClaimStore>> {
    let url = server_url("ANARCHON_AMQP_URL")?;
    let opts = AmqpOptions::default()
        .prefix(format!("anarchon-test-{:016x}", rand::random::<u64>()))
        // Short-lived gate queues: the tests leave nothing behind for long.
        .slot_ttl(std::time::Duration::from_secs(120))
        .history_max_bytes(1024 * 1024);
    Some(Arc::new(
        AmqpStore::connect_with(&url, opts).await.expect("connect"),
    ))
}

mod amqp {
    anarchon_core::claim_store_suite!(super::amqp);
}
