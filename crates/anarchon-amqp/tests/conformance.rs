//! The core conformance kit's claim-only part on RabbitMQ. [B-44]

use std::sync::Arc;

use anarchon_amqp::{AmqpOptions, AmqpStore};
use anarchon_core::ClaimStore;
use anarchon_core::testkit::server_url;

/// Every kit test works on jobs of its own (`unique_job`), so the stores share one queue
/// prefix: a prefix per store would leave a job-list stream per test on the server, and
/// every stream holds files open on it.
async fn amqp() -> Option<Arc<dyn ClaimStore>> {
    let url = server_url("ANARCHON_AMQP_URL")?;
    let opts = AmqpOptions::default()
        .prefix("anarchon-kit")
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
